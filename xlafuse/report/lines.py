"""One-line summaries of a record: its label, the runner's progress line per cell, a speedup with its
verdict."""

from __future__ import annotations

from xlafuse.models.names import workload_label
from xlafuse.results.records import CellResult


def speedup_text(speedup: float | None, verdict: str | None) -> str:
    """`0.98x (same)`; without a verdict just `0.98x`; `-` without a speedup."""
    if speedup is None:
        return "-"
    return f"{speedup:.2f}x" + (f" ({verdict})" if verdict else "")


def cell_label(record: CellResult) -> str:
    """`chain[ops=16]/tiny/forward`: the overrides stay, they tell two chains apart."""
    return workload_label(record.workload, record.size, record.mode, record.overrides)


def cell_line(record: CellResult, reference: CellResult | None = None) -> str:
    """One concise line per cell: `mlp/tiny/forward  no-fusion  kernels 9 (+5)  0.12 ms  0.61x  ok`."""
    mesh = f"{record.parallelism}{record.devices}" if record.devices > 1 else None
    name = workload_label(record.workload, record.size, record.mode, record.overrides, mesh=mesh)
    if not record.ok:
        return f"{name}  {record.variant}  ERROR {record.error_type}: {record.error}"
    kernels = f"kernels {record.fusion.kernels}"
    ref_kernels = reference.fusion.kernels if reference is not None else None
    if ref_kernels is not None and record.fusion.kernels is not None:
        kernels += f" ({record.fusion.kernels - ref_kernels:+d})"
    parts = [name, record.variant, kernels, f"{record.timing.median_s * 1e3:.3g} ms"]
    collectives = record.collectives
    if collectives.count is not None:
        parts.append(f"collectives {collectives.count} ({collectives.logical} logical)")
    speedup = record.speedup
    if record.variant != record.reference and speedup.vs_reference is not None:
        parts.append(speedup_text(speedup.vs_reference, speedup.verdict))
    if record.device.speedup is not None:
        device = speedup_text(record.device.speedup, record.device.speedup_verdict)
        parts.append(f"device {device}")
    if record.rates.host_bound:
        parts.append("HOST-BOUND")
    if record.numerics.within_tolerance is False:
        parts.append(f"numerics FLAGGED (max abs diff {record.numerics.max_abs_diff:.2g})")
    parts.append("ok")
    return "  ".join(parts)
