"""Scaling against one device: a figure derived from two records, not measured by either.

A sharded cell (devices N > 1) is compared with the cell of the same workload, size, mode,
dtype, overrides (the global batch) and variant on one device: one device's step time over N
devices' (device time where both were profiled, else the wall-clock median), and that over N
(the efficiency). The report formats what `cell_scaling` returns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from xlafuse.results.records import CellResult


@dataclasses.dataclass(frozen=True)
class Scaling:
    """N devices against one at the same global batch.

    Attributes:
      devices: N.
      speedup: one device's time per step / N devices' time per step.
      efficiency: speedup / N (1.0: perfect scaling).
      basis: which time was compared ("device_time_s" or "time_median_s").
    """

    devices: int
    speedup: float
    efficiency: float
    basis: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return dataclasses.asdict(self)


def scaling(
    one_device_s: float | None, n_devices_s: float | None, devices: int, basis: str
) -> Scaling | None:
    """The Scaling of a step time on `devices` devices against one; None without both times."""
    if not one_device_s or not n_devices_s or devices < 1:
        return None
    speedup = one_device_s / n_devices_s
    return Scaling(devices, speedup, speedup / devices, basis)


def step_time(r: CellResult) -> tuple[float | None, str]:
    """A cell's time per step and its basis: device time where profiled, else the median."""
    if r.device.time_s:
        return r.device.time_s, "device_time_s"
    return r.timing.median_s, "time_median_s"


def one_device_cell(records: Sequence[CellResult], r: CellResult) -> CellResult | None:
    """The ok one-device record of `r`'s workload, global batch and variant; None if absent."""
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


def cell_scaling(records: Sequence[CellResult], r: CellResult) -> Scaling | None:
    """`r`'s Scaling against its one-device cell among `records` (`one_device_cell`).

    Returns:
      None without a one-device cell, when the two step times have different bases (one
      profiled, the other not), or without both times.
    """
    one = one_device_cell(records, r)
    if one is None:
        return None
    own, basis = step_time(r)
    base, base_basis = step_time(one)
    return scaling(base, own, r.devices, basis) if base_basis == basis else None
