"""Time the README's quickstart command and check the README's claim about it.

    python benchmarks/bench_quickstart.py [--keep DIR]

Runs `xlafuse run configs/quickstart.toml --fresh` in a new process (interpreter start, imports,
calibration, 14 cells, report and plots: what a user waits for after the install), prints the
wall time, and compares it with the "about N s" that README.md's "Start here" states. Exit 1
when the claim is off by more than a quarter either way: then the README sentence needs the new
figure. Times on a shared 2-core machine are noisy; run it on a quiet one before editing README.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "quickstart.toml"
CLAIM = re.compile(r"\(about (\d+(?:\.\d+)?) s on 2 cores")
TOLERANCE = 0.25


def readme_claim_s(readme: Path = ROOT / "README.md") -> float:
    """The quickstart seconds README.md claims ("about N s on 2 cores")."""
    found = CLAIM.search(readme.read_text(encoding="utf-8"))
    if found is None:
        raise SystemExit("README.md states no quickstart time ('about N s on 2 cores')")
    return float(found.group(1))


def time_quickstart(out: Path) -> float:
    """Wall seconds of `xlafuse run configs/quickstart.toml --fresh` in a new process."""
    command = [sys.executable, "-m", "xlafuse", "run", str(CONFIG), "--out", str(out)]
    start = time.perf_counter()
    subprocess.run([*command, "--fresh", "--no-progress"], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="write the results here instead of a temp dir")
    args = parser.parse_args()
    claim = readme_claim_s()
    if args.keep:
        wall_s = time_quickstart(args.keep)
    else:
        with tempfile.TemporaryDirectory(prefix="xlafuse-bench-") as out:
            wall_s = time_quickstart(Path(out))
    verdict = "holds" if abs(wall_s - claim) <= TOLERANCE * claim else "is OFF: update README.md"
    print(f"quickstart: {wall_s:.1f} s wall in a new process; README claims about {claim:g} s")
    print(f"README claim {verdict}")
    return 0 if verdict == "holds" else 1


if __name__ == "__main__":
    sys.exit(main())
