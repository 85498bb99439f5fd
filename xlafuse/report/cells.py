"""A workload's cells as two markdown tables: their times and speedups, then their work.

Times (one statistic per column, each named): latency is the median synchronized call,
pipelined the median seconds per call of back-to-back bursts, device the profiled kernel time
per call. A variant's time cell also shows, in brackets, the reference's time over the same
rounds: its speedup is exactly the one over the other, so a row never shows a time and a
speedup that disagree. A train step, and every cell on a CPU, leads with the pipelined figure,
a forward call on a GPU with latency (`xlafuse.measurement.timing.leading_figure`): the columns
are in the same order in every table (latency, pipelined), and the figure a cell leads with is
in bold (`**0.187**`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xlafuse.kinds import Figure
from xlafuse.report.format import markdown_table
from xlafuse.report.lines import lead, lead_time, reference_time, speedup_text
from xlafuse.results.records import CellResult

# One order in every table, whatever a workload's cells lead with (the lead is in bold).
_FIGURE_COLUMNS = {Figure.LATENCY: "latency ms", Figure.PIPELINED: "pipelined ms"}
_WORK_COLUMNS = (
    "variant", "kernels", "launches/call", "real fusions", "modeled MB/call", "GB/s",
    "% copy ceiling", "TFLOP/s", "throughput", "compile s", "numerics",
)  # fmt: skip


def cell_tables(group: Sequence[CellResult]) -> list[str]:
    """The time table and the work table of one workload's cells."""
    figures = tuple(_FIGURE_COLUMNS)
    time_columns = (
        "variant",
        *(_FIGURE_COLUMNS[f] for f in figures),
        "device ms",
        "speedup",
        "95% CI (this run)",
        "basis",
        "device speedup",
        "host ms/call",
    )
    reference = next((r for r in group if r.ok and r.variant == r.reference), None)
    rows = [_time_row(r, figures, reference) for r in group]
    work = [_work_row(r) for r in group]
    return [*markdown_table(time_columns, rows), "", *markdown_table(_WORK_COLUMNS, work)]


def _time_row(r: CellResult, figures: Sequence[str], reference: CellResult | None) -> list[str]:
    if not r.ok:
        return [r.variant, r.status, *[""] * (len(figures) + 5)]
    is_reference = r.variant == r.reference
    times = [_time(r, figure, None if is_reference else reference) for figure in figures]
    speedup = r.speedup
    return [
        f"{r.variant} (interpreted)" if r.interpreted else r.variant,
        *times,
        fmt(r.device.time_s, scale=1e3, spec=".3g")
        + (" TRACE-PERTURBED" if r.rates.trace_perturbed else ""),
        "1.00x" if is_reference else speedup_text(speedup.vs_reference, speedup.verdict),
        "-" if is_reference else _interval(speedup.ci),
        "reference" if is_reference else _basis(r),
        speedup_text(r.device.speedup, r.device.speedup_verdict),
        fmt(r.timing.host_s_per_call, scale=1e3, spec=".3g")
        + (" HOST-BOUND" if r.rates.host_bound else ""),
    ]


def _time(r: CellResult, figure: str, reference: CellResult | None) -> str:
    """`0.0353 (ref 0.0244)`: the cell's time, and the reference's over the same rounds (no
    reference: the reference's own row); in bold when it is the figure the cell leads with."""
    own = fmt(lead_time(r, figure=figure), scale=1e3, spec=".3g")
    ref = None if reference is None else reference_time(r, figure=figure, reference=reference)
    text = own if ref is None or own == "-" else f"{own} (ref {ref * 1e3:.3g})"
    return f"**{text}**" if figure == lead(r) and own != "-" else text


def _basis(r: CellResult) -> str:
    """The figure the speedup divides and how it was timed, in a few words."""
    basis = r.speedup.basis
    if basis is not None and basis.startswith("not compared"):  # an interpreted program
        return "not compared: interpreted"
    if basis is None:
        return "-"
    timed = "paired" if "paired" in basis else "apart"
    legacy = r.speedup.lead is None and "fastest call" in basis
    return f"{'fastest call per round' if legacy else lead(r)}, {timed}"


def _work_row(r: CellResult) -> list[str]:
    if not r.ok:
        return [r.variant, r.status, *[""] * (len(_WORK_COLUMNS) - 2)]
    pct = fmt(r.rates.pct_of_copy_ceiling, scale=1, spec=".1f", suffix="%")
    if r.rates.cache_resident:
        pct = "cache-resident"
    return [
        r.variant,
        fmt(r.fusion.kernels),
        _launches(r),
        fmt(r.fusion.real_fusions),
        _bytes_per_call(r),
        fmt(r.rates.achieved_bytes_per_s, scale=1e-9),
        pct,
        fmt(r.rates.tflops, scale=1, spec=".3g"),
        throughput_text(r.rates.items_per_s, r.model.items_unit),
        "cached" if r.compile.compile_cached else fmt(r.compile.compile_s, scale=1, spec=".2f"),
        _numerics(r),
    ]


def _launches(r: CellResult) -> str:
    """Launches per call; the kernels where the record predates the figure (or is a torch
    cell's); "?" where a loop's trip count is unknown."""
    if r.fusion.per_call_basis is None:
        return fmt(r.fusion.kernels)
    return fmt(r.fusion.launches_per_call) if r.fusion.launches_per_call is not None else "?"


def _bytes_per_call(r: CellResult) -> str:
    """Modeled MB per call; where a trip count is unknown, one iteration's, said so."""
    if r.fusion.per_call_basis is not None and r.fusion.modeled_bytes_per_call is None:
        return f"{fmt(r.fusion.modeled_bytes, scale=1e-6)} ({r.fusion.per_call_basis})"
    return fmt(r.fusion.bytes_per_call, scale=1e-6)


def _interval(ci: Sequence[float] | None) -> str:
    return f"{ci[0]:.2f}-{ci[1]:.2f}" if ci else "-"


def _numerics(r: CellResult) -> str:
    """The numerics verdict, with the precision that judged it ("ok at tf32", "FLAGGED at
    float32 (5.2e-05 in params)"; a record from before precisions were recorded: "ok")."""
    if r.variant == r.reference:
        return "reference"
    if r.numerics.reference_error:
        return f"not checked: {r.numerics.reference_error}"
    if r.numerics.within_tolerance is None:
        return "-"
    judged = f" at {r.numerics.precision}" if r.numerics.precision else ""
    if r.numerics.within_tolerance:
        return f"ok{judged}"
    part = f" in {r.numerics.worst_part}" if r.numerics.worst_part else ""
    return f"FLAGGED{judged} ({r.numerics.max_abs_diff:.2g}{part})"


def throughput_text(items_per_s: float | None, unit: str | None) -> str:
    """`51.2M env-steps/s`: items per second in the workload's unit (`-` when unknown)."""
    if not items_per_s:
        return "-"
    scaled, prefix = items_per_s, ""
    for step in ("k", "M", "G", "T"):
        if scaled < 1000:
            break
        scaled, prefix = scaled / 1000, step
    return f"{scaled:.3g}{prefix} {unit or 'items'}/s"


def fmt(value: Any, *, scale: float = 1, spec: str = "", suffix: str = "") -> str:
    """Scaled and formatted; without a spec, large numbers get thousands separators."""
    if value is None:
        return "-"
    scaled = value * scale
    if not spec:
        spec = ",.0f" if abs(scaled) >= 100 else ".3g"
    return f"{scaled:{spec}}{suffix}"
