"""One-line summaries of a record: its label, the figure its speedup divides, the runner's
progress line per cell, a speedup with its verdict."""

from __future__ import annotations

from xlafuse.models.names import workload_label
from xlafuse.results.records import CellResult

LINE_WIDTH = 100  # a console line per cell stays within this many columns
# The figures a speedup can divide, by the record's `speedup.lead`, and their short names.
FIGURES = {"latency": "latency", "pipelined": "pipelined"}


def speedup_text(speedup: float | None, verdict: str | None) -> str:
    """`0.98x (same)`; without a verdict just `0.98x`; `-` without a speedup."""
    if speedup is None:
        return "-"
    return f"{speedup:.2f}x" + (f" ({verdict})" if verdict else "")


def cell_label(record: CellResult) -> str:
    """`chain[ops=16]/tiny/forward`: the overrides stay, they tell two chains apart."""
    return workload_label(record.workload, record.size, record.mode, record.overrides)


def lead(record: CellResult) -> str:
    """The figure a record leads with: its speedup's (`speedup.lead`), else pipelined for a
    train step and latency for a forward call; a record written before `lead` existed:
    latency, the figure its speedup was computed on."""
    if record.speedup.lead in FIGURES:
        return record.speedup.lead
    if record.speedup.basis is not None:
        return "latency"
    pipelined = record.mode == "train" and record.timing.pipelined_s_per_call
    return "pipelined" if pipelined else "latency"


def lead_time(record: CellResult, figure: str | None = None) -> float | None:
    """The cell's own seconds per call on `figure` (its lead when None)."""
    figure = figure or lead(record)
    t = record.timing
    return t.pipelined_s_per_call if figure == "pipelined" else t.median_s


def reference_time(record: CellResult, figure: str | None = None) -> float | None:
    """The reference's seconds per call on `figure` over the rounds this cell's speedup was
    measured in (paired), or the reference cell's own (timed apart); None when not recorded."""
    figure = figure or lead(record)
    s = record.speedup
    return s.reference_pipelined_s if figure == "pipelined" else s.reference_median_s


def cell_line(record: CellResult, reference: CellResult | None = None) -> str:
    """One line per cell, within LINE_WIDTH columns where the label allows:
    `mlp/tiny/train  no-fusion  kernels 219 (+170)  pipelined 0.52 ms  0.58x (slower)  ok`."""
    mesh = f"{record.parallelism}{record.devices}" if record.devices > 1 else None
    name = workload_label(record.workload, record.size, record.mode, record.overrides, mesh=mesh)
    if not record.ok:
        return _fit(f"{name}  {record.variant}  ERROR {record.error_type}: {record.error}")
    kernels = f"kernels {record.fusion.kernels}"
    ref_kernels = reference.fusion.kernels if reference is not None else None
    if ref_kernels is not None and record.fusion.kernels is not None:
        kernels += f" ({record.fusion.kernels - ref_kernels:+d})"
    figure = lead(record)
    parts = [name, record.variant, kernels, f"{figure} {_ms(lead_time(record, figure))}"]
    collectives = record.collectives
    if collectives.count is not None:
        parts.append(f"collectives {collectives.count}")
    speedup = record.speedup
    if record.variant != record.reference and speedup.vs_reference is not None:
        parts.append(speedup_text(speedup.vs_reference, speedup.verdict))
    if record.device.speedup is not None:
        parts.append(f"device {speedup_text(record.device.speedup, None)}")
    if record.rates.host_bound:
        parts.append("HOST-BOUND")
    if record.numerics.within_tolerance is False:
        parts.append("numerics FLAGGED")
    parts.append("ok")
    return "  ".join(parts)


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds is not None else "- ms"


def _fit(line: str) -> str:
    """An error line cut to LINE_WIDTH columns (the whole message is in the record)."""
    return line if len(line) <= LINE_WIDTH else line[: LINE_WIDTH - 3] + "..."
