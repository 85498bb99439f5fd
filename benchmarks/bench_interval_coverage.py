"""How often does a run's 95% speedup interval cover another run's speedup? (issue 26)

    python benchmarks/bench_interval_coverage.py [--runs 5] [--out DIR]

Runs the quickstart (`xlafuse run configs/quickstart.toml`) RUNS times, each in a new process
and a fresh folder, then for every variant cell and every ordered pair of runs (i, j), i != j,
asks whether run i's interval contains run j's point estimate. A within-run interval that also
held between runs would cover about 95% of them; on a shared machine it covers fewer, and that
figure is what the report's reading notes point to. Prints a table per cell and the overall
share, and writes `coverage.json` (and each run's results) under --out.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "quickstart.toml"


def run_quickstart(out: Path) -> list[dict]:
    """The variant records of one quickstart run in a new process."""
    command = [sys.executable, "-m", "xlafuse", "run", str(CONFIG), "--out", str(out), "--fresh"]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    lines = (out / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    return [r for r in records if r["variant"] != r["reference"] and r["status"] == "ok"]


def coverage(runs: list[list[dict]]) -> dict[str, dict]:
    """Per cell: each run's speedup and interval, and how many other runs' points it covers."""
    cells: dict[str, dict] = {}
    for index, records in enumerate(runs):
        for r in records:
            cell = cells.setdefault(r["cell_id"], {"speedups": {}, "intervals": {}})
            cell["speedups"][index] = r["speedup_vs_reference"]
            cell["intervals"][index] = r["speedup_ci"]
    for cell in cells.values():
        pairs = [
            (i, j) for i in cell["intervals"] for j in cell["speedups"] if i != j
        ]  # ordered pairs of runs
        covered = [
            cell["intervals"][i][0] <= cell["speedups"][j] <= cell["intervals"][i][1]
            for i, j in pairs
        ]
        cell["covered"], cell["pairs"] = sum(covered), len(pairs)
    return cells


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="quickstart runs (default: 5)")
    parser.add_argument("--out", type=Path, help="keep the runs and coverage.json here")
    args = parser.parse_args()
    if args.runs < 2:
        parser.error(f"--runs must be at least 2, not {args.runs}")
    out = args.out or Path(tempfile.mkdtemp(prefix="xlafuse-coverage-"))
    runs = []
    for index in range(args.runs):
        runs.append(run_quickstart(out / f"run-{index + 1}"))
        print(f"run {index + 1} of {args.runs}: {len(runs[-1])} variant cells", flush=True)
    cells = coverage(runs)
    print(f"\n{'cell':<52} {'speedups':<40} covered")
    for name, cell in cells.items():
        points = " ".join(f"{cell['speedups'][i]:.2f}" for i in sorted(cell["speedups"]))
        print(f"{name[:52]:<52} {points:<40} {cell['covered']}/{cell['pairs']}")
    covered = sum(c["covered"] for c in cells.values())
    pairs = sum(c["pairs"] for c in cells.values())
    print(f"\nall cells: {covered}/{pairs} = {covered / pairs:.0%} of other runs' points covered")
    summary = {"runs": args.runs, "covered": covered, "pairs": pairs, "cells": cells}
    (out / "coverage.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"written: {out / 'coverage.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
