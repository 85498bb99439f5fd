"""The hand-fused study's findings from its records (issue 46): per workload cell, every
implementation's device time, kernels, launches, modeled bytes, % of the copy ceiling,
TFLOP/s and numerics; then whether XLA's own fusion ("default") is faster than the best
hand-fused implementation, within 10% of it or slower, with the kernels and bytes that differ
and the longest kernels of both programs.

Usage, from the repository root: PYTHONPATH=. python3 experiments/h100/hand_fused/summarize.py OUT
(OUT holds a folder per study, each with its results.jsonl; the markdown goes to stdout).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from xlafuse.report.lines import cell_label
from xlafuse.results import records

STUDIES = ("attention", "layernorm", "swiglu", "gpt2")
WITHIN = 1.10  # XLA "within 10%" of the best hand-fused device time
TOP = 3  # the longest kernels shown per program


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def _mb(count: int | None) -> str:
    return "-" if count is None else f"{count / 1e6:.1f}"


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _time(r: records.CellResult) -> float | None:
    """Device time per call (the study is traced), else the figure the cell leads with."""
    return r.device.time_s or r.timing.pipelined_s_per_call or r.timing.median_s


def _row(r: records.CellResult) -> str:
    if not r.ok:
        return f"| {r.variant} | {r.implementation} | ERROR {r.error_type}: {r.error} |" + " |" * 8
    numerics = "reference" if r.variant == r.reference else (
        f"{_number(r.numerics.max_abs_diff, '.2e')} "
        f"({'ok' if r.numerics.within_tolerance else 'FLAGGED'})"
    )  # fmt: skip
    return (
        f"| {r.variant} | {r.implementation} | {_ms(_time(r))}{_perturbed(r)} | "
        f"{r.fusion.kernels} | {r.fusion.launches_per_call} | {_mb(r.fusion.bytes_per_call)} | "
        f"{_number(r.rates.pct_of_copy_ceiling, '.0f')} | {_number(r.rates.tflops, '.1f')} | "
        f"{numerics} | {_speedup(r)} |"
    )


def _perturbed(r: records.CellResult) -> str:
    """Where tracing changed the program's time (records: `rates.trace_perturbed`), its device
    time is of the traced program: said beside it."""
    return " TRACE-PERTURBED" if r.rates.trace_perturbed else ""


def _speedup(r: records.CellResult) -> str:
    """`1.23x [1.20, 1.26] faster`: the record's timed speedup against the reference (its lead
    figure), with its interval and verdict; `-` for the reference itself."""
    sp = r.speedup
    if sp.vs_reference is None or r.variant == r.reference:
        return "-"
    ci = f" [{sp.ci[0]:.2f}, {sp.ci[1]:.2f}]" if sp.ci else ""
    return f"{sp.vs_reference:.2f}x{ci} {sp.verdict or ''}".rstrip()


def _top(r: records.CellResult) -> str:
    """`name 0.123 ms (12.3 MB)` of its longest traced kernels."""
    rows = (r.trace.kernel_times or {}).get("top", [])[:TOP]
    return (
        "; ".join(
            f"`{k['name']}` {_ms(k['time_s'])} ms ({_mb(k['modeled_bytes'])} MB)" for k in rows
        )
        or "-"
    )


def verdict(cells: Sequence[records.CellResult]) -> str:
    """Where XLA's own program stands against the best hand-fused implementation."""
    ok = [r for r in cells if r.ok and _time(r)]
    own = next((r for r in ok if r.implementation == "xla" and r.variant == r.reference), None)
    fused = [r for r in ok if r.implementation not in (None, "xla")]
    if own is None or not fused:
        return "no verdict: XLA's own cell or every hand-fused cell is missing"
    best = min(fused, key=_time)
    ratio = _time(own) / _time(best)
    if ratio < 1 / WITHIN:
        head = (
            f"XLA's own fusion is faster than every hand-fused implementation: "
            f"{ratio:.2f}x the device time of the best ({best.variant})"
        )
    elif ratio <= WITHIN:
        head = (
            f"XLA's own fusion is within 10% of the best hand-fused ({best.variant}): "
            f"{ratio:.2f}x its device time"
        )
    else:
        head = f"XLA's own fusion takes {ratio:.2f}x the device time of {best.variant}"
    kernels = f"kernels {own.fusion.kernels} vs {best.fusion.kernels}"
    moved = f"modeled {_mb(own.fusion.bytes_per_call)} vs {_mb(best.fusion.bytes_per_call)} MB"
    timed = f"timed (wall clock, {best.speedup.lead}): {_speedup(best)}"
    device_says = "faster" if ratio > 1 else "slower"  # the best against XLA's own, traced
    if best.speedup.verdict in ("faster", "slower") and best.speedup.verdict != device_says:
        timed += (
            f", which disagrees with the device times ({best.variant} {device_says} there: "
            "traced kernels, against the whole call timed untraced)"
        )
    perturbed = [r.variant for r in (own, best) if r.rates.trace_perturbed]
    if perturbed:
        timed += (
            f"; {' and '.join(perturbed)} TRACE-PERTURBED: the device time is of the traced "
            "program, the timed figure of the one that runs"
        )
    return (
        f"{head}; {kernels}, {moved} per call; {timed}.\n  XLA's longest: {_top(own)}\n"
        f"  {best.variant}'s longest: {_top(best)}"
    )


def study_section(folder: Path) -> list[str]:
    path = folder / records.RESULTS_FILE
    if not path.exists():
        return [f"## {folder.name}", "", "(not run)", ""]
    latest = records.latest_per_cell(records.read_results(path).records)
    lines = [f"## {folder.name}", ""]
    by_cell: dict[str, list[records.CellResult]] = {}
    for r in latest:  # a cell per dtype too: float32 and bfloat16 are two programs
        by_cell.setdefault(f"{cell_label(r)}/{r.dtype}", []).append(r)
    for label, cells in by_cell.items():
        lines += [
            f"### {label}",
            "",
            "| variant | implementation | device ms | kernels | launches/call | modeled MB/call "
            "| % copy ceiling | TFLOP/s | numerics vs default | timed speedup vs default |",
            "|---|---|---|---|---|---|---|---|---|---|",
            *map(_row, cells),
            "",
            verdict(cells),
            "",
        ]
    return lines


def main(out: Path) -> None:
    found = [
        r
        for study in STUDIES
        if (out / study / records.RESULTS_FILE).exists()
        for r in records.read_results(out / study / records.RESULTS_FILE).records
    ]
    head = ["# Hand-fused beside compiler-fused: the findings", ""]
    if found:
        first = found[0]
        versions = (r.settings.get("variant", {}).get("tokamax") for r in found)
        tokamax = next((v for v in versions if v), "-")
        ceilings = [
            round(r.ceilings.copy_bytes_per_s / 1e9) for r in found if r.ceilings.copy_bytes_per_s
        ]
        low, high = (min(ceilings), max(ceilings)) if ceilings else ("-", "-")
        ceiling = f"{low}" if low == high else f"{low}-{high}"
        head += [
            f"{first.device_kind}, jax {first.env.get('jax')}, tokamax {tokamax}; copy "
            f"ceiling {ceiling} GB/s (each run calibrates its own). Times are device time per "
            "call (traced kernels).",
            "",
        ]
    body = [line for study in STUDIES for line in study_section(out / study)]
    print("\n".join(head + body))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "experiments/h100/hand_fused"))
