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
        f"{r.parallelism} x{r.devices}"
        + (f" on {r.processes} processes" if r.processes > 1 else ""),
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


PROCESS_COLUMNS = (
    "workload", "layout", "variant", "processes x devices", "figure", "slowest ms", "fastest ms",
    "spread",
)  # fmt: skip

PROCESS_NOTES = (
    "Cells of several `jax.distributed` processes (docs/distributed.md): every process timed the "
    "same rounds in lock-step and a cell's time is, round by round, the slowest process's. Here "
    "each process's own figure (the one the cell leads with): the slowest and fastest process, "
    "and their spread (slowest / fastest - 1)."
)


def processes_section(records: Sequence[CellResult]) -> list[str]:
    """Markdown lines of the section on cells of several processes; [] when there is none."""
    several = [r for r in records if r.ok and r.processes > 1 and r.per_process.times_s]
    if not several:
        return []
    lines = ["## Several processes: each process's time", "", PROCESS_NOTES, ""]
    lines += ["| " + " | ".join(PROCESS_COLUMNS) + " |", "|" + "---|" * len(PROCESS_COLUMNS)]
    for r in several:
        p = r.per_process
        row = [
            cell_label(r),
            f"{r.parallelism} x{r.devices}",
            r.variant,
            f"{r.processes} x {r.process_devices}",
            p.figure or "",
            _fmt(p.slowest_s, 1e3, ".3g"),
            _fmt(p.fastest_s, 1e3, ".3g"),
            f"{p.spread * 100:.1f}%" if p.spread is not None else "",
        ]
        lines.append("| " + " | ".join(row) + " |")
    return [*lines, ""]


def _fmt(value, scale: float = 1, spec: str = "") -> str:
    return "" if value is None else format(value * scale, spec) if spec else str(value)
