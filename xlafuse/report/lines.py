"""One-line summaries of a record: its label, the figure its speedup divides, the runner's
progress line per cell, a speedup with its verdict."""

from __future__ import annotations

from xlafuse.kinds import Figure
from xlafuse.models.names import Cell
from xlafuse.report.format import LINE_WIDTH
from xlafuse.results.records import CellResult

FIGURES = tuple(Figure)  # what a record's `speedup.lead` may name


def speedup_text(speedup: float | None, verdict: str | None) -> str:
    """`0.98x (same)`; without a verdict just `0.98x`; `-` without a speedup."""
    if speedup is None:
        return "-"
    return f"{speedup:.2f}x" + (f" ({verdict})" if verdict else "")


def record_cell(record: CellResult) -> Cell:
    """The cell a record names (its dtype as the config asked for it, `dtype_requested`)."""
    return Cell(
        record.workload,
        record.size,
        record.mode,
        record.dtype_requested,
        record.overrides,
        record.devices,
        record.parallelism or "data",
        record.entry,
    )


def cell_label(record: CellResult) -> str:
    """`chain[ops=16]/tiny/forward`: what the report's tables group a workload's cells by (the
    overrides stay, they tell two chains apart; `Cell.short_label`)."""
    return record_cell(record).short_label


def lead(record: CellResult) -> str:
    """The figure a record leads with (`speedup.lead`: `xlafuse.measurement.timing.leading_figure`);
    a record written before `lead` existed: latency, the figure its speedup was computed on."""
    return record.speedup.lead if record.speedup.lead in FIGURES else Figure.LATENCY


def lead_time(record: CellResult, *, figure: str | None = None) -> float | None:
    """The cell's own seconds per call on `figure` (its lead when None)."""
    figure = figure or lead(record)
    t = record.timing
    return t.pipelined_s_per_call if figure == Figure.PIPELINED else t.median_s


def reference_time(
    record: CellResult, *, figure: str | None = None, reference: CellResult | None = None
) -> float | None:
    """The reference's seconds per call on `figure` over the rounds this cell's speedup was
    measured in (paired), or the reference cell's own (timed apart). Records older than the
    speedup's basis hold neither: their speedup is the ratio of the two cells' own medians, so
    the reference cell's (`reference`) is the one. None when none is known."""
    figure = figure or lead(record)
    s = record.speedup
    kept = s.reference_pipelined_s if figure == Figure.PIPELINED else s.reference_median_s
    if kept is None and s.basis is None and figure == Figure.LATENCY and reference is not None:
        return lead_time(reference, figure=figure)
    return kept


def cell_line(record: CellResult, *, reference: CellResult | None = None) -> str:
    """One line per cell, within LINE_WIDTH columns (what does not fit goes on an indented
    continuation line):
    `mlp/tiny/train  no-fusion  219 kernels (+170)  pipelined 0.519 vs 0.187 ms  0.36x slower`;
    a cell that failed: `... ERROR TypeName: message`.

    A variant's time is shown beside the reference's over the same rounds: the speedup is the
    one over the other, whatever the reference's own cell measured earlier."""
    head = f"{record_cell(record).label}  {record.variant}"
    if not record.ok:
        return _fit(f"{head}  ERROR {record.error_type}: {record.error}")
    lines = [head]
    for part in _figures(record, reference):
        if len(lines[-1]) + 2 + len(part) > LINE_WIDTH:
            lines.append("")  # an indented continuation line
        lines[-1] += f"  {part}"
    return "\n".join(lines)


def _figures(record: CellResult, reference: CellResult | None) -> list[str]:
    kernels = f"{record.fusion.kernels} kernels"
    ref_kernels = reference.fusion.kernels if reference is not None else None
    if ref_kernels is not None and record.fusion.kernels is not None:
        kernels += f" ({record.fusion.kernels - ref_kernels:+d})"
    figure = lead(record)
    own, ref = (
        lead_time(record, figure=figure),
        reference_time(record, figure=figure, reference=reference),
    )
    shown = f"{figure} {_ms(own)}"
    if own is not None and ref is not None:
        shown = f"{figure} {own * 1e3:.3g} vs {_ms(ref)}"
    parts = [kernels, shown]
    if record.collectives.count is not None:
        parts.append(f"{record.collectives.count} collectives")
    speedup = record.speedup
    if record.variant != record.reference and speedup.vs_reference is not None:
        parts.append(f"{speedup.vs_reference:.2f}x {speedup.verdict or ''}".rstrip())
    if record.device.speedup is not None:
        parts.append(f"device {record.device.speedup:.2f}x")
    if record.rates.host_bound:
        parts.append("HOST-BOUND")
    if record.rates.trace_perturbed:
        parts.append("TRACE-PERTURBED")
    if record.numerics.within_tolerance is False:
        parts.append("numerics FLAGGED")
    if record.interpreted:
        parts.append("INTERPRETED (Pallas in interpret mode: times not compared)")
    return parts


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds is not None else "- ms"


def _fit(line: str) -> str:
    """An error line cut to LINE_WIDTH columns (the whole message is in the record)."""
    return line if len(line) <= LINE_WIDTH else line[: LINE_WIDTH - 3] + "..."
