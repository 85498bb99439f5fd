"""What several test files share: fast timing settings, a small calibration, a check script
run in a child with N host devices, config files, the command line run in this process, and the
H200 recordings of tests/data (`tests/data/record_kernel_trace.py`).

Imported as `from helpers import FAST_TIMING, small_calibration` (pytest puts tests/ on the path,
as it does for `mutations`).
"""

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from xlafuse.cli import main
from xlafuse.compiler.devices import host_devices_env
from xlafuse.errors import XlafuseError
from xlafuse.experiment import runner
from xlafuse.measurement.calibrate import calibrate

REPO = Path(__file__).resolve().parents[1]
# Steps recorded on the H200 (jax 0.11.2): optimized HLO and kernel events per variant.
GPT2_TRAIN = REPO / "tests" / "data" / "trace-gpt2-train"
GPT2_FORWARD = REPO / "tests" / "data" / "trace-gpt2-fwd"
GPT2_SMALL_TRAIN = REPO / "tests" / "data" / "trace-gpt2-small-train"
RESNET50_TRAIN = REPO / "tests" / "data" / "trace-resnet50-train"
# A loop program recorded on an H100 (jax 0.11.2): the zoo's cart-pole at full size, one call.
CARTPOLE_FULL = REPO / "tests" / "data" / "trace-cartpole-full"


def recorded_hlo(folder: Path, names) -> dict:
    """{name: (text, parsed module)} of a recording's `<name>.hlo.txt.gz` files."""
    from xlafuse.hlo.parse import parse_hlo

    out = {}
    for name in names:
        text = gzip.decompress((folder / f"{name}.hlo.txt.gz").read_bytes()).decode()
        out[name] = (text, parse_hlo(text))
    return out


# A config's [timing]: one warm-up call, then one round of 3 timed calls (and its burst).
FAST_TIMING = {"warmup": 1, "min_time_s": 0, "min_iters": 3, "max_iters": 3, "repeats": 1}


def recorded_kernel_times(folder: Path, variant: str, ceilings=(4.0e12, 1.0e12)):
    """(KernelTimes, its record summary with every kernel and its producers, FusionReport, HLO
    text) of a recording's `<variant>` events joined to its HLO, at round ceilings."""
    from xlafuse.hlo import analyze_hlo
    from xlafuse.hlo.dataflow import producer_names
    from xlafuse.measurement.kernels import GPU_BASIS, Event, join_trace

    payload = json.loads(gzip.decompress((folder / f"{variant}.events.json.gz").read_bytes()))
    text = gzip.decompress((folder / f"{variant}.hlo.txt.gz").read_bytes()).decode()
    report = analyze_hlo(text)
    events = [Event(*e) for e in payload["events"]]
    times = join_trace(
        report,
        events,
        payload["calls"],
        basis=GPU_BASIS,
        copy_ceiling_bytes_per_s=ceilings[0],
        matmul_ceiling_flops_per_s=ceilings[1],
    )
    summary = times.summary(producers=producer_names(text, report.kernel_details))
    return times, summary, report, text


def with_recorded_table(records, *, variant: str = "default") -> list:
    """`records` with GPT-2 full train's `variant` cell given the kernel times of the recorded
    H200 trace (`GPT2_TRAIN`, 840 kernels) at its own ceilings: `xlafuse.kernel_times/2`, every
    kernel in its table with its producers, as a run records them now."""
    import dataclasses

    out = []
    for r in records:
        if (r.workload, r.size, r.mode, r.variant) == ("gpt2", "full", "train", variant):
            ceilings = (r.ceilings.copy_bytes_per_s, r.ceilings.matmul_flops_per_s)
            summary = recorded_kernel_times(GPT2_TRAIN, variant, ceilings)[1]
            r = dataclasses.replace(r, trace=dataclasses.replace(r.trace, kernel_times=summary))
        out.append(r)
    return out


def small_calibration(backend=None):
    """What the runner's `calibrate` gives, on a 1 MiB copy and a 64 x 64 matmul: fast."""
    return calibrate(backend=backend, copy_bytes=1 << 20, matmul_size=64)


def run_in_new_folder(tmp_path_factory, name: str, config_for) -> tuple[Path, list]:
    """A module-scoped fixture's run: `config_for(folder)` run into a new folder `name`, without
    a progress bar, under `small_calibration` (the function-scoped `monkeypatch` cannot set
    it). Returns the folder and the records."""
    out = tmp_path_factory.mktemp(name)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runner, "calibrate", small_calibration)
        return out, runner.run_experiment(config_for(out), progress=False)


def copy_results(out: Path, folder: Path) -> Path:
    """Makes `folder` with a copy of `out/results.jsonl` in it (a run to resume); returns it."""
    folder.mkdir()
    (folder / "results.jsonl").write_text((out / "results.jsonl").read_text())
    return folder


def config_file(folder: Path, text: str) -> Path:
    """Writes the TOML `text` to `folder/c.toml`; returns that path."""
    path = folder / "c.toml"
    path.write_text(text)
    return path


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    """`xlafuse ARGV` in this process (each argument str()-ed): exit status, stdout, stderr."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def usage_error(capsys, *argv) -> str:
    """The one line `xlafuse ARGV` answers bad input with: exit 2, nothing on stdout, on stderr
    `xlafuse COMMAND: error: ...` alone, no traceback. Returns the line without that prefix."""
    code, out, err = run_cli(capsys, *argv)
    prefix = f"xlafuse {argv[0]}: error: "
    assert (code, out) == (2, "") and err.startswith(prefix) and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err[len(prefix) :]


FIRST_COLD_START_STEP = "cold start: new process, empty cache (import, build, compile, calls)"


def stop_cold_start_after_one_step(monkeypatch) -> None:
    """`measure_cold_start` says its first step (FIRST_COLD_START_STEP), then fails: what a
    command shows of a child's progress, without starting one."""
    from xlafuse.measurement import coldstart

    def measure(*args, on_step=None, **kwargs):
        on_step(FIRST_COLD_START_STEP)
        raise XlafuseError("stopped after the first step")

    monkeypatch.setattr(coldstart, "measure_cold_start", measure)


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
