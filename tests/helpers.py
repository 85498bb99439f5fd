"""What several test files share: fast timing settings, a small calibration, and a check
script run in a child with N host devices.

Imported as `from helpers import FAST_TIMING, small_calibration` (pytest puts tests/ on the path,
as it does for `mutations`).
"""

import json
import subprocess
import sys
from pathlib import Path

from xlafuse.compile.devices import host_devices_env
from xlafuse.measure.calibrate import calibrate

REPO = Path(__file__).resolve().parents[1]

# A config's [timing]: one warm-up call, then one round of 3 timed calls (and its burst).
FAST_TIMING = {"warmup": 1, "min_time_s": 0, "min_iters": 3, "max_iters": 3, "repeats": 1}


def small_calibration(backend=None):
    """What the runner's `calibrate` gives, on a 1 MiB copy and a 64 x 64 matmul: fast."""
    return calibrate(backend, copy_bytes=1 << 20, matmul_size=64)


def run_on_host_devices(script: str, folder: Path, devices: int, result: str) -> dict:
    """Run `tests/scripts/<script>` in a child with `devices` host devices and read the JSON
    `result` it writes into `folder`: JAX reads the host device count once, at backend start,
    and this pytest process started its backend with one device. The child uses the CPU
    backend wherever it runs."""
    env = host_devices_env(devices)
    env["JAX_PLATFORMS"] = "cpu"  # host devices are the CPU's, also on a machine with a GPU
    env["PYTHONPATH"] = str(REPO) + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    command = [sys.executable, str(REPO / "tests" / "scripts" / script), str(folder)]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((folder / result).read_text())
