"""One-line summaries of a record: the runner's progress line per cell, a speedup with its verdict."""

from __future__ import annotations

from xlafuse.models.workload import workload_label
from xlafuse.results.records import CellResult


def speedup_text(speedup: float | None, verdict: str | None) -> str:
    """`0.98x (same)`; without a verdict just `0.98x`; `-` without a speedup."""
    if speedup is None:
        return "-"
    return f"{speedup:.2f}x" + (f" ({verdict})" if verdict else "")


def cell_line(record: CellResult, reference: CellResult | None = None) -> str:
    """One concise line per cell: `mlp/tiny/forward  no-fusion  kernels 9 (+5)  0.12 ms  0.61x  ok`."""
    mesh = f"{record.parallelism}{record.devices}" if record.devices > 1 else None
    name = workload_label(record.workload, record.size, record.mode, record.overrides, mesh=mesh)
    if not record.ok:
        return f"{name}  {record.variant}  ERROR {record.error_type}: {record.error}"
    kernels = f"kernels {record.kernels}"
    if reference is not None and reference.kernels is not None and record.kernels is not None:
        kernels += f" ({record.kernels - reference.kernels:+d})"
    parts = [name, record.variant, kernels, f"{record.time_median_s * 1e3:.3g} ms"]
    if record.collectives is not None:
        parts.append(f"collectives {record.collectives} ({record.logical_collectives} logical)")
    if record.variant != record.reference and record.speedup_vs_reference is not None:
        parts.append(speedup_text(record.speedup_vs_reference, record.speedup_verdict))
    if record.device_speedup is not None:
        device = speedup_text(record.device_speedup, record.device_speedup_verdict)
        parts.append(f"device {device}")
    if record.host_bound:
        parts.append("HOST-BOUND")
    if record.within_tolerance is False:
        parts.append(f"numerics FLAGGED (max abs diff {record.max_abs_diff:.2g})")
    parts.append("ok")
    return "  ".join(parts)
