"""Run configs/quickstart.toml into a temporary folder and print its wall time.

python benchmarks/bench_quickstart.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from xlafuse.runner import run_experiment

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "quickstart.toml"


def main() -> None:
    """Time one fresh quickstart run (calibration, compiles, timing, report)."""
    with tempfile.TemporaryDirectory(prefix="xlafuse-bench-") as out:
        start = time.perf_counter()
        records = run_experiment(CONFIG, out=out, progress=False)
        wall_s = time.perf_counter() - start
    ok = sum(r.ok for r in records)
    print(f"quickstart: {len(records)} cells ({ok} ok) in {wall_s:.1f} s wall")


if __name__ == "__main__":
    main()
