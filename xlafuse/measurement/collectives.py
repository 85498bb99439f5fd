"""Time in communication kernels, and how much of it overlaps compute, from a profiler trace.

On a GPU, a collective runs as a communication kernel (NCCL's `ncclDevKernel_AllReduce_...`,
`ncclDevKernel_SendRecv`, or XLA's own collective kernels), usually on its own stream so that
the scheduler can overlap it with compute kernels. From the kernel events of one device's
trace (name, start, duration), per traced call:

- `comm_time_s`: the summed duration of communication kernels (recognized by name: any of
  `COMM_KERNEL_MARKERS`, case-insensitive). A kernel that waits for its peer counts its waiting
  time too: that is time the collective held the device's communication stream.
- `overlap_s`: the part of that time during which at least one compute kernel (any other
  kernel) was also running on the device (interval intersection with the union of compute
  kernels' intervals). `overlap_fraction` = overlap_s / comm_time_s.
- `exposed_s` = comm_time_s - overlap_s: communication nothing hid.

Scaling against one device is a comparison of two cells (same workload, global batch and
variant; devices 1 and N), derived from their records: `xlafuse.results.scaling`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

COMM_KERNEL_MARKERS = (
    "nccl",
    "allreduce",
    "all_reduce",
    "allgather",
    "all_gather",
    "reducescatter",
    "reduce_scatter",
    "alltoall",
    "all_to_all",
    "sendrecv",
    "collectivepermute",
    "collective_permute",
)

Event = tuple[str, int, int]  # (kernel name, start ns, duration ns)


def is_comm_kernel(name: str) -> bool:
    """Whether a kernel name is a communication kernel (see `COMM_KERNEL_MARKERS`)."""
    lowered = name.lower()
    return any(marker in lowered for marker in COMM_KERNEL_MARKERS)


@dataclasses.dataclass(frozen=True)
class CommProfile:
    """Communication kernels of one device over `calls` traced calls, per call.

    Attributes:
      comm_time_s: seconds in communication kernels per call.
      overlap_s: of them, seconds during which a compute kernel also ran.
      comm_kernels_per_call: communication kernels launched per call.
      calls: calls traced.
    """

    comm_time_s: float
    overlap_s: float
    comm_kernels_per_call: float
    calls: int

    @property
    def exposed_s(self) -> float:
        """Communication seconds per call that no compute kernel overlapped."""
        return self.comm_time_s - self.overlap_s

    @property
    def overlap_fraction(self) -> float | None:
        """overlap_s / comm_time_s; None without communication."""
        return self.overlap_s / self.comm_time_s if self.comm_time_s > 0 else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, derived figures included."""
        data = dataclasses.asdict(self)
        data["exposed_s"] = self.exposed_s
        data["overlap_fraction"] = self.overlap_fraction
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CommProfile:
        """From `to_dict`'s form (a device profile carries it as JSON); derived figures dropped."""
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls)})


def comm_profile(events: Iterable[Event], calls: int) -> CommProfile:
    """The CommProfile of one device's kernel events from `calls` calls.

    Raises:
      ValueError: `calls` < 1.
    """
    if calls < 1:
        raise ValueError(f"calls must be at least 1, got {calls}")
    comm, compute = [], []
    for name, start, duration in events:
        (comm if is_comm_kernel(name) else compute).append((start, start + duration))
    busy = _union(compute)
    overlap = sum(_covered(interval, busy) for interval in comm)
    total = sum(end - start for start, end in comm)
    return CommProfile(
        comm_time_s=total * 1e-9 / calls,
        overlap_s=overlap * 1e-9 / calls,
        comm_kernels_per_call=len(comm) / calls,
        calls=calls,
    )


def _union(intervals: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, disjoint intervals covering the same time."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _covered(interval: tuple[int, int], busy: list[tuple[int, int]]) -> int:
    """Nanoseconds of `interval` inside the disjoint sorted `busy` intervals."""
    start, end = interval
    return sum(max(0, min(end, b) - max(start, a)) for a, b in busy if a < end and b > start)
