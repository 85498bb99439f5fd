"""The report's section on sharded cells: collectives, communication time, scaling.

One row per sharded cell (devices > 1): the collectives of its optimized HLO (instructions,
the logical collectives they carry, operand bytes per device per step), and on a GPU with
profiling the time in communication kernels per step, the part of it that compute kernels
overlapped, and the scaling against the one-device cell of the same workload, global batch
(overrides) and variant: one device's step time over N devices' (device time where profiled,
else the wall-clock median), and that over N (the efficiency).
"""

from __future__ import annotations

from collections.abc import Sequence

from xlafuse.measure.collectives import scaling
from xlafuse.models.names import workload_label
from xlafuse.results.records import CellResult

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
        lines.append("| " + " | ".join(_row(r, _one_device(records, r))) + " |")
    return [*lines, ""]


def _one_device(records: Sequence[CellResult], r: CellResult) -> CellResult | None:
    for other in records:
        same = (other.workload, other.size, other.mode, other.dtype, dict(other.overrides))
        if (
            other.ok
            and other.devices == 1
            and other.variant == r.variant
            and same == (r.workload, r.size, r.mode, r.dtype, dict(r.overrides))
        ):
            return other
    return None


def step_time(r: CellResult) -> tuple[float | None, str]:
    """A cell's time per step and its basis: device time where profiled, else the median."""
    if r.device.time_s:
        return r.device.time_s, "device_time_s"
    return r.timing.median_s, "time_median_s"


def _row(r: CellResult, one: CellResult | None) -> list[str]:
    name = workload_label(r.workload, r.size, r.mode, r.overrides)
    own, basis = step_time(r)
    result = None
    if one is not None:
        base, base_basis = step_time(one)
        if base_basis == basis:
            result = scaling(base, own, r.devices, basis)
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
