"""How long `xlafuse inspect` takes on the sample --xla_dump_to folder (102 modules).

Prints the wall-clock seconds of `inspect_target(folder)` (parse + analyze every optimized
module, read the thunk sequence) plus rendering, best and median of several runs, and the
module count; then the whole command in a fresh process. The budget is < 3 s on a 2-core CPU machine.

    python benchmarks/bench_inspect.py [FOLDER] [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from xlafuse.inspect.targets import inspect_target
from xlafuse.report.inspect_text import render_text

DEFAULT_FOLDER = Path(__file__).parent.parent / "tests/data/h200-jax0.11.2/dump_block_fwd"


def time_inspect(folder: Path) -> tuple[float, int]:
    """Seconds to inspect and render `folder`, and the number of modules listed."""
    start = time.perf_counter()
    result = inspect_target(path=folder)
    render_text(result)
    return time.perf_counter() - start, len(result.modules)


def time_cli(folder: Path) -> float:
    """Seconds for `python -m xlafuse inspect FOLDER` in a fresh process (imports included)."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "xlafuse", "inspect", str(folder)], check=True, capture_output=True
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path, default=DEFAULT_FOLDER)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    runs = [time_inspect(args.folder) for _ in range(args.repeat)]
    times = [t for t, _ in runs]
    print(
        f"inspect {args.folder.name}: {runs[0][1]} modules, "
        f"best {min(times):.3f} s, median {statistics.median(times):.3f} s "
        f"over {args.repeat} runs (budget 3 s)"
    )
    print(
        f"xlafuse inspect {args.folder.name} (fresh process, imports included): {time_cli(args.folder):.3f} s"
    )


if __name__ == "__main__":
    main()
