"""The report's section on sharded cells: collectives, communication time, scaling.

One row per sharded cell (devices > 1): the collectives of its optimized HLO (instructions,
the logical collectives they carry, operand bytes per device per step), and on a GPU with
profiling the time in communication kernels per step, the part of it that compute kernels
overlapped, and the scaling against the one-device cell of the same workload, global batch
(overrides) and variant, derived from the two records by `xlafuse.results.scaling`: this
module only formats it.
"""

from __future__ import annotations

from collections.abc import Sequence

from xlafuse.report.lines import cell_label
from xlafuse.results.records import CellResult
from xlafuse.results.scaling import Scaling, cell_scaling, step_time

COLUMNS = (
    "workload", "layout", "variant", "collectives", "logical", "async", "coll. MB/step",
    "step ms", "comm ms", "overlap", "vs 1 device", "efficiency",
)  # fmt: skip

NOTES = (
    "Collectives are counted in the optimized HLO, per device and step (`xlafuse.hlo."
    "collectives`): a combined collective counts once and carries `logical` ones; MB are its "
    "operands' bytes. `comm ms` is the time one device spent in communication kernels (NCCL) "
    "per step and `overlap` the share of it during which a compute kernel also ran (profiler "
    "trace, GPU only). `vs 1 device` is the one-device cell's step time over this one's, at "
    "the same global batch; `efficiency` divides it by the device count."
)


def sharded_section(records: Sequence[CellResult]) -> list[str]:
    """Markdown lines of the section; [] when no cell is sharded."""
    sharded = [r for r in records if r.ok and r.devices > 1]
    if not sharded:
        return []
    lines = ["## Sharded programs: collectives and scaling", "", NOTES, ""]
    lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in sharded:
        lines.append("| " + " | ".join(_row(r, cell_scaling(records, r))) + " |")
    return [*lines, ""]


def _row(r: CellResult, result: Scaling | None) -> list[str]:
    name = cell_label(r)
    own, basis = step_time(r)
    overlap = r.comm.overlap_fraction
    return [
        name,
        f"{r.parallelism} x{r.devices}",
        r.variant,
        _fmt(r.collectives.count),
        _fmt(r.collectives.logical),
        _fmt(r.collectives.async_pairs),
        _fmt(r.collectives.operand_bytes, 1e-6, ".3g"),
        _fmt(own, 1e3, ".3g") + (" (device)" if basis == "device_time_s" else ""),
        _fmt(r.comm.time_s, 1e3, ".3g"),
        f"{overlap * 100:.0f}%" if overlap is not None else "",
        f"{result.speedup:.2f}x" if result else "",
        f"{result.efficiency * 100:.0f}%" if result else "",
    ]


def _fmt(value, scale: float = 1, spec: str = "") -> str:
    return "" if value is None else format(value * scale, spec) if spec else str(value)
