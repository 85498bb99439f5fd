"""The tables of experiments/h200/tune/README.md, from the study's tune.jsonl files.

    python3 experiments/h200/tune/summarize.py experiments/h200/tune

Prints one row per tuned target (its search, winner and proof), then, for each target also
searched as an exhaustive grid (`<target>-grid/`), the search's winner against the grid's best
on the grid's own measurements, and the time each took.
"""

import json
import sys
from pathlib import Path


def read(folder: Path) -> tuple[list[dict], dict]:
    """(trials, summary) of a tune.jsonl: the journal of today's tune (a header, trials, the
    proof, a conclusion, each with its `kind`), or the older file (trials, then the summary)."""
    lines = [json.loads(line) for line in (folder / "tune.jsonl").read_text().splitlines()]
    if lines and lines[0].get("kind") == "tune":
        trials = [line for line in lines if line.get("kind") == "trial"]
        return trials, [line for line in lines if line.get("kind") == "conclusion"][-1]
    return lines[:-1], lines[-1]


def name(candidate: dict) -> str:
    return candidate["name"]


def proof_cells(summary: dict) -> list[str]:
    proof = summary["proof"]
    if proof is None:
        return ["-"] * 4
    lo, hi = proof["ci"]
    wall = f"{proof['speedup']:.2f}x [{lo:.2f}, {hi:.2f}] {proof['verdict']}"
    times = (
        f"{proof['winner_s'] * 1e3:.3g} vs {proof['default_s'] * 1e3:.3g} ms ({proof['figure']})"
    )
    evidence = proof.get("evidence")
    device = kernels = "-"
    if evidence:
        d_lo, d_hi = evidence["device_ci"] or (float("nan"),) * 2
        device = (
            f"{evidence['device_speedup']:.2f}x [{d_lo:.2f}, {d_hi:.2f}] {evidence['device_verdict']}"
            if evidence["device_speedup"] is not None
            else "-"
        )
        kernels = f"{evidence['kernels_per_call'][1]:.0f} vs {evidence['kernels_per_call'][0]:.0f}"
    compile_s = f"{proof['compile_s'][1]:.1f} vs {proof['compile_s'][0]:.1f} s"
    return [f"{wall}; {times}", device, kernels, compile_s]


def targets_table(root: Path) -> list[str]:
    rows = [
        "| target | candidates | search (s) | fastest in the search | rerun: wall clock | "
        "device time | kernels per call | compile |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for folder in sorted(p for p in root.iterdir() if (p / "tune.jsonl").exists()):
        if folder.name.endswith("-grid"):
            continue
        trials, summary = read(folder)
        count = len({json.dumps(t["candidate"], sort_keys=True) for t in trials})
        best = name(summary["best"]) if summary["best"] else "-"
        verdict = "winner" if summary["confirmed"] else "not confirmed"
        budget = summary.get("budget_s")
        spent = f"{summary.get('search_s', 0):.0f} of {budget:g}" if budget else "-"
        rows.append(
            f"| {folder.name} | {count} | {spent} | {best} ({verdict}) | "
            + " | ".join(proof_cells(summary))
            + " |"
        )
    return rows


def searches_of(root: Path, grid: Path) -> list[Path]:
    """The searches judged by `grid` (`<target>-grid/`): `<target>/` and its later runs
    `<target>-N/`."""
    target = grid.name.removesuffix("-grid")
    named = [root / target, *sorted(root.glob(f"{target}-[0-9]*"))]
    return [p for p in named if (p / "tune.jsonl").exists()]


def grid_lines(root: Path) -> list[str]:
    out = []
    for grid in sorted(root.glob("*-grid")):
        for search in searches_of(root, grid):
            out.append(grid_line(grid, search))
    return out


def grid_line(grid: Path, search: Path) -> str:
    """The search's fastest against the grid's best, on the grid's measurements."""
    grid_trials, grid_summary = read(grid)
    _, search_summary = read(search)
    times = {
        json.dumps(t["candidate"], sort_keys=True): t["time_s"] for t in grid_trials if t["time_s"]
    }
    best_key = min(times, key=times.get)
    winner_key = json.dumps(search_summary["best"], sort_keys=True)
    ratio = times[winner_key] / times[best_key]
    share = search_summary["search_s"] / grid_summary["search_s"]
    return (
        f"- {search.name}: the search's fastest ({name(search_summary['best'])}) is "
        f"{(ratio - 1) * 100:.1f}% slower than the grid's best ({name(json.loads(best_key))}) "
        f"on the grid's measurements ({times[winner_key] * 1e3:.3g} vs "
        f"{times[best_key] * 1e3:.3g} ms); search {search_summary['search_s']:.0f} s, grid "
        f"{grid_summary['search_s']:.0f} s ({share:.2f} of it)."
    )


def main() -> None:
    root = Path(sys.argv[1])
    print("\n".join(targets_table(root)))
    print()
    print("\n".join(grid_lines(root)))


if __name__ == "__main__":
    main()
