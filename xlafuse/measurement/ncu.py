"""Nsight Compute (`ncu`): the command line xlafuse runs it with, and its CSV read back per kernel.

xlafuse asks ncu for three metrics per kernel launch: `dram__bytes_read.sum` and
`dram__bytes_write.sum` (bytes that crossed the HBM interface: what the traffic model predicts,
less what L2 kept) and `gpu__time_duration.sum` (the kernel's duration). With `--csv`, ncu prints
one row per (launch, metric) after the profiled process exits::

    "ID","Process ID",...,"Kernel Name",...,"Metric Name","Metric Unit","Metric Value"
    "0","5129",...,"loop_add_fusion",...,"dram__bytes_read.sum","byte","1,073,828,864"

on the same stdout as the profiled process's own prints and ncu's `==PROF==`/`==WARNING==` lines,
so the reader starts at the CSV header and skips everything before it. Values carry thousands
separators; units may be scaled ("Kbyte", "usecond", ...): the reader converts to bytes and seconds.

With `detail` (`xlafuse validate --detail`), ncu is asked for five more metrics per launch, to see
why a kernel takes the time it takes (`DETAIL_METRICS`, field -> metric; more replay passes, so
slower): `sm_pct`, `sm__throughput.avg.pct_of_peak_sustained_elapsed` (compute throughput, % of
peak); `memory_pct`, `gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed` (memory
throughput, % of peak); `occupancy_pct`, `sm__warps_active.avg.pct_of_peak_sustained_active`
(achieved occupancy, %); `l2_hit_pct`, `lts__t_sector_hit_rate.pct` (L2 sector hit rate, %);
`grid_size`, `launch__grid_size` (blocks). Their unit is "%", or none ("") or "block" for the
grid; they are read as plain numbers into `NcuKernel.detail`, and a launch without them just has
fewer (or no) entries. On the H200 (ncu of CUDA 13) the grid's unit is none.
"""

from __future__ import annotations

import csv
import dataclasses
import os
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

from xlafuse.errors import XlafuseError

DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
DURATION = "gpu__time_duration.sum"
METRICS = (DRAM_READ, DRAM_WRITE, DURATION)
DETAIL_METRICS = {
    "sm_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "memory_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "l2_hit_pct": "lts__t_sector_hit_rate.pct",
    "grid_size": "launch__grid_size",
}


def ncu_flags(*, detail: bool = False) -> tuple[str, ...]:
    """ncu's flags: the metrics (`METRICS`, plus `DETAIL_METRICS` with `detail`), CSV output,
    profiling only between cuProfilerStart/Stop, and the clocks left as they run (the profiler's
    device time, which ncu's durations are compared with, is measured at those clocks too)."""
    metrics = METRICS + (tuple(DETAIL_METRICS.values()) if detail else ())
    return (
        "--profile-from-start", "off",
        "--clock-control", "none",
        "--target-processes", "all",
        "--metrics", ",".join(metrics),
        "--csv",
    )  # fmt: skip


_BYTE_UNITS = {"byte": 1, "Kbyte": 10**3, "Mbyte": 10**6, "Gbyte": 10**9, "Tbyte": 10**12}
_BYTE_UNITS |= {"Kibyte": 2**10, "Mibyte": 2**20, "Gibyte": 2**30, "Tibyte": 2**40}
_SECOND_UNITS = {
    "ns": 1e-9, "nsecond": 1e-9, "us": 1e-6, "usecond": 1e-6,
    "ms": 1e-3, "msecond": 1e-3, "s": 1.0, "second": 1.0,
}  # fmt: skip
# The detail metrics: percents, and the grid's block count (no unit; "block" accepted too).
_PLAIN_UNITS = {"%": 1.0, "": 1.0, "block": 1.0}
_HEADER_START = '"ID",'
_REQUIRED_COLUMNS = (
    "ID",
    "Process ID",
    "Kernel Name",
    "Metric Name",
    "Metric Unit",
    "Metric Value",
)


@dataclasses.dataclass(frozen=True)
class NcuKernel:
    """One kernel launch as ncu measured it.

    Attributes:
      launch_id: ncu's "ID" of the launch (launch order within the profiled range).
      process_id: the process that launched it.
      name: the kernel's name (for XLA's own kernels, the fusion's name with "." mangled to "_";
        for cuBLAS/cuDNN, the library's kernel name).
      dram_read_bytes: `dram__bytes_read.sum`, in bytes.
      dram_write_bytes: `dram__bytes_write.sum`, in bytes.
      time_s: `gpu__time_duration.sum`, in seconds.
      detail: the `DETAIL_METRICS` ncu measured for it, by field (`sm_pct`, `memory_pct`,
        `occupancy_pct`, `l2_hit_pct`: percent; `grid_size`: blocks); empty without `--detail`.
        Left out of the hash, so a launch stays hashable.
    """

    launch_id: int
    process_id: int
    name: str
    dram_read_bytes: int
    dram_write_bytes: int
    time_s: float
    detail: Mapping[str, float] = dataclasses.field(default_factory=dict, hash=False)

    @property
    def dram_bytes(self) -> int:
        """DRAM bytes read plus written."""
        return self.dram_read_bytes + self.dram_write_bytes

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, with `dram_bytes`."""
        return {**dataclasses.asdict(self), "dram_bytes": self.dram_bytes}


def find_ncu(*, path: str | None = None) -> str:
    """The ncu executable: `path` if given, else $XLAFUSE_NCU, else `ncu` on PATH.

    Raises:
      XlafuseError: none found (the message says where it looked).
    """
    candidate = path or os.environ.get("XLAFUSE_NCU") or "ncu"
    found = shutil.which(candidate)
    if found is None:
        raise XlafuseError(
            f"Nsight Compute is missing: {candidate!r} is not an executable on PATH "
            "(install Nsight Compute, put `ncu` on PATH or set XLAFUSE_NCU)"
        )
    return found


def ncu_command(ncu: str, program: Sequence[str], *, detail: bool = False) -> list[str]:
    """The argv that runs `program` under ncu with xlafuse's metrics and flags (`ncu_flags`);
    `detail` asks for `DETAIL_METRICS` too."""
    return [ncu, *ncu_flags(detail=detail), *program]


def parse_ncu_csv(text: str) -> tuple[NcuKernel, ...]:
    """Read ncu's `--csv` output (mixed with other lines) into one NcuKernel per launch.

    Args:
      text: ncu's stdout: anything, then the CSV header line (`"ID","Process ID",...`), then one
        row per launch and metric. Lines after the header that are not CSV rows are skipped.

    Returns:
      The launches in ncu's order (process, then ID); empty when the header is followed by no rows.

    Raises:
      XlafuseError: no CSV header, a missing column, a launch without one of the three metrics,
        a unit that is not a byte or time unit (for a detail metric: not "%", "block" or none), or a value
        that is not a number.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(_HEADER_START)), None)
    if start is None:
        raise XlafuseError(
            "no ncu CSV in the output: no header line starting with "
            f"{_HEADER_START!r} (was ncu run with --csv, and did it profile any kernel?)"
        )
    rows = [lines[start], *(line for line in lines[start + 1 :] if line.startswith('"'))]
    reader = csv.DictReader(rows)
    missing = [c for c in _REQUIRED_COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise XlafuseError(f"ncu CSV header lacks the column(s) {', '.join(missing)}")
    launches: dict[tuple[int, int], dict[str, Any]] = {}
    for row in reader:
        key = (_integer(row["Process ID"], "Process ID"), _integer(row["ID"], "ID"))
        launch = launches.setdefault(key, {"name": row["Kernel Name"]})
        launch[row["Metric Name"]] = (row["Metric Value"], row["Metric Unit"])
    return tuple(_kernel(pid, lid, values) for (pid, lid), values in launches.items())


def _kernel(process_id: int, launch_id: int, values: dict[str, Any]) -> NcuKernel:
    where = f"launch {launch_id} ({values['name']})"
    absent = [m for m in METRICS if m not in values]
    if absent:
        raise XlafuseError(f"ncu CSV: {where} has no {', '.join(absent)}")
    return NcuKernel(
        launch_id=launch_id,
        process_id=process_id,
        name=values["name"],
        dram_read_bytes=round(to_bytes(*values[DRAM_READ], where=where)),
        dram_write_bytes=round(to_bytes(*values[DRAM_WRITE], where=where)),
        time_s=to_seconds(*values[DURATION], where=where),
        detail={
            field: _scaled(*values[metric], _PLAIN_UNITS, f"{where}, {metric}")
            for field, metric in DETAIL_METRICS.items()
            if metric in values
        },
    )


def to_bytes(value: str, unit: str, *, where: str = "") -> float:
    """An ncu value ("1,073,828,864") in `unit` ("byte", "Kbyte", "Mbyte", ...) as bytes.

    Raises:
      XlafuseError: not a byte unit, or not a number.
    """
    return _scaled(value, unit, _BYTE_UNITS, where)


def to_seconds(value: str, unit: str, *, where: str = "") -> float:
    """An ncu value ("501,088") in `unit` ("ns", "nsecond", "usecond", "msecond", ...) as seconds.

    Raises:
      XlafuseError: not a time unit, or not a number.
    """
    return _scaled(value, unit, _SECOND_UNITS, where)


def _scaled(value: str, unit: str, scales: dict[str, float], where: str) -> float:
    at = f"{where}: " if where else ""
    if unit not in scales:
        known = ", ".join(u or "''" for u in scales)  # '' : no unit
        raise XlafuseError(f"ncu CSV: {at}unit {unit!r} is not one of {known} (value {value!r})")
    try:
        number = float(value.replace(",", ""))
    except ValueError:
        raise XlafuseError(f"ncu CSV: {at}value {value!r} ({unit}) is not a number") from None
    return number * scales[unit]


def _integer(value: str, column: str) -> int:
    try:
        return int(value.replace(",", ""))
    except ValueError:
        raise XlafuseError(f"ncu CSV: column {column!r} holds {value!r}, not an integer") from None
