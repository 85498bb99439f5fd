"""GPU device time from a `jax.profiler` trace: kernel durations, summed per call.

Wall-clock time includes Python dispatch and the host sync; the profiler's device plane shows what
the GPU itself spent in kernels. The trace is read back with `jax.profiler.ProfileData` from the
`*.xplane.pb` file: planes named "/device:GPU:N", lines whose name contains "Stream" (e.g.
"Stream #13(Compute)"), one event per kernel with its duration. On a CPU there is no device plane:
the functions return None.

A sharded program runs on several GPUs, one plane each. Every device runs the same SPMD program,
so the per-call figures are those of one device: the lowest-numbered GPU plane that has kernel
events (GPU 0), not a sum over devices. Its communication kernels (NCCL) and their overlap with
compute are summarized by `xlafuse.measurement.collectives`.
"""

from __future__ import annotations

import dataclasses
import tempfile
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import jax
from jax.profiler import ProfileData

from xlafuse.kinds import Backend
from xlafuse.measurement.collectives import comm_profile, is_comm_kernel
from xlafuse.measurement.stats import Speedup, speedup_interval
from xlafuse.measurement.timing import Advance, same_args

GPU_PLANE_PREFIX = "/device:GPU:"


@dataclasses.dataclass(frozen=True)
class DeviceProfile:
    """Kernels the device ran during traced calls.

    Attributes:
      device_time_s: seconds of kernel execution per call (sum of kernel durations / calls).
      device_kernels_per_call: kernels launched per call.
      calls: calls traced.
      top_kernels: (name, seconds per call) of the longest kernels, longest first.
      per_call_s: kernel seconds of each traced call, in order (empty when the kernels could
        not be split into calls: their count is not a multiple of `calls`).
      devices: GPU planes with kernel events in the trace (the figures are the first one's).
      comm: `xlafuse.measurement.collectives.CommProfile.to_dict()` of that device (communication
        kernel time, overlap with compute), or None when it ran no communication kernel.
    """

    device_time_s: float
    device_kernels_per_call: float
    calls: int
    top_kernels: tuple[tuple[str, float], ...] = ()
    per_call_s: tuple[float, ...] = ()
    devices: int = 1
    comm: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeviceProfile:
        """From `to_dict()` output (JSON turns tuples into lists)."""
        return cls(
            device_time_s=data["device_time_s"],
            device_kernels_per_call=data["device_kernels_per_call"],
            calls=data["calls"],
            top_kernels=tuple((str(n), float(t)) for n, t in data.get("top_kernels", ())),
            per_call_s=tuple(data.get("per_call_s", ())),
            devices=data.get("devices", 1),
            comm=data.get("comm"),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return dataclasses.asdict(self)


def profile_device_time(
    fn: Callable,
    args: tuple,
    *,
    calls: int = 10,
    advance: Advance = same_args,
    log_dir: str | Path | None = None,
) -> DeviceProfile | None:
    """Trace `calls` calls of an already warmed-up `fn` and sum their GPU kernel time.

    Args:
      fn: the compiled function (call it once before, so compilation is not traced).
      args: its arguments.
      calls: calls to trace.
      advance: `(args, out) -> next args` (`timing.thread_state` for train steps).
      log_dir: where the trace goes (kept); a temporary folder (deleted) when None.

    Returns:
      The DeviceProfile, or None on a backend without GPU device planes (the CPU: there the
      calls are traced into `log_dir` when one is given, for their host-side op events).
    """
    if jax.default_backend() != Backend.GPU:
        if log_dir is not None:
            trace_calls(fn, args, calls, advance, log_dir)
        return None
    if log_dir is None:
        with tempfile.TemporaryDirectory(prefix="xlafuse-trace-") as tmp:
            return _trace_and_read(fn, args, calls, advance, Path(tmp))
    return _trace_and_read(fn, args, calls, advance, Path(log_dir))


def trace_calls(
    fn: Callable, args: tuple, calls: int, advance: Advance, folder: str | Path
) -> Path | None:
    """One untraced warm-up call, then `calls` calls under `jax.profiler.trace(folder)`.

    Returns:
      The newest `*.xplane.pb` the profiler wrote under `folder`, or None if it wrote none.
    """
    folder = Path(folder)
    out = jax.block_until_ready(fn(*args))
    args = advance(args, out)  # a train step donated its state: go on with the new one
    with jax.profiler.trace(str(folder)):
        out = None
        for _ in range(calls):
            out = fn(*args)
            args = advance(args, out)
        jax.block_until_ready(out)
    files = sorted(folder.rglob("*.xplane.pb"), key=lambda p: p.stat().st_mtime)
    return files[-1] if files else None


def _trace_and_read(fn, args, calls, advance, folder: Path) -> DeviceProfile | None:
    path = trace_calls(fn, args, calls, advance, folder)
    return read_trace(path, calls) if path is not None else None


def read_trace(path: str | Path, calls: int) -> DeviceProfile | None:
    """Sum the kernel events of GPU stream lines in an `*.xplane.pb` file.

    Returns:
      The DeviceProfile, or None when the trace has no GPU plane.
    """
    data = ProfileData.from_file(str(path))
    by_device = device_kernel_events(data.planes)
    if not by_device:
        return None
    first = min(by_device, key=_plane_number)
    return summarize_device(by_device[first], calls, devices=len(by_device))


def summarize_device(
    kernels: list[tuple[str, int, int]], calls: int, *, devices: int = 1
) -> DeviceProfile:
    """`summarize_kernels` of one device, with its communication summary and device count."""
    profile = summarize_kernels(kernels, calls)
    comm = None
    if any(is_comm_kernel(name) for name, _, _ in kernels):
        comm = comm_profile(kernels, calls).to_dict()
    return dataclasses.replace(profile, devices=devices, comm=comm)


def device_kernel_events(planes: Iterable[Any]) -> dict[str, list[tuple[str, int, int]]]:
    """GPU plane name -> its (name, start_ns, duration_ns) kernel events; planes without any
    are left out."""
    out: dict[str, list[tuple[str, int, int]]] = {}
    for plane in planes:
        events = list(gpu_kernel_events([plane]))
        if events:
            out[plane.name] = events
    return out


def _plane_number(name: str) -> int:
    tail = name[len(GPU_PLANE_PREFIX) :]
    return int(tail) if tail.isdigit() else 1 << 30


def summarize_kernels(kernels: list[tuple[str, int, int]], calls: int) -> DeviceProfile:
    """The DeviceProfile of (name, start_ns, duration_ns) kernel events from `calls` calls.

    Every call of one program launches the same kernels, so the events, in start order, split
    into `calls` equal groups: one per call.
    """
    by_name: dict[str, int] = {}
    for name, _, duration_ns in kernels:
        by_name[name] = by_name.get(name, 0) + duration_ns
    total_ns = sum(by_name.values())
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:10]
    per_call: tuple[float, ...] = ()
    if calls and len(kernels) % calls == 0:
        ordered = sorted(kernels, key=lambda k: k[1])
        size = len(kernels) // calls
        groups = [ordered[i * size : (i + 1) * size] for i in range(calls)]
        per_call = tuple(sum(k[2] for k in group) * 1e-9 for group in groups)
    return DeviceProfile(
        device_time_s=total_ns * 1e-9 / calls,
        device_kernels_per_call=len(kernels) / calls,
        calls=calls,
        top_kernels=tuple((name, ns * 1e-9 / calls) for name, ns in top),
        per_call_s=per_call,
    )


def gpu_kernel_events(planes: Iterable[Any], *, ops: bool = False) -> Iterator[tuple]:
    """(name, start_ns, duration_ns) of every event on a "Stream" line of a GPU plane; with
    `ops`, also its `hlo_op` stat (None without one): the HLO instruction the runtime launched
    it for, the kernel's own name outside a command buffer, `command_buffer_N` inside one."""
    for plane in planes:
        if not plane.name.startswith(GPU_PLANE_PREFIX):
            continue
        for line in plane.lines:
            if "Stream" not in line.name:
                continue
            for event in line.events:
                if ops:
                    op = event_stat(event, "hlo_op")
                    yield event.name, int(event.start_ns), int(event.duration_ns), op
                else:
                    yield event.name, int(event.start_ns), int(event.duration_ns)


def event_stat(event: Any, name: str) -> str | None:
    """An event's stat `name` as text (None without it).

    Reading `event.stats` warns (DeprecationWarning: "builtin type event_stats has no
    __module__ attribute", jax 0.11.2 on Python 3.12) from inside the profiler's C++ iterator;
    a warning turned into an error there aborts the process (pytest's `error` filter did, on
    the H200), so it is silenced here, for this read only.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return next((str(v) for k, v in event.stats if k == name), None)


def device_speedup(profile: DeviceProfile, reference: DeviceProfile | None) -> Speedup | None:
    """The speedup of a profiled cell over the reference's profile from per-call kernel times
    (unpaired), with its interval and verdict; None when either lacks per-call times."""
    if reference is None:
        return None
    ref, own = reference.per_call_s, profile.per_call_s
    if not (ref and own and min(ref) > 0 and min(own) > 0):
        return None
    return speedup_interval(ref, own)


def device_speedup_fields(
    profile: DeviceProfile, reference: DeviceProfile | None
) -> dict[str, Any]:
    """`device_speedup` as a torch cell's flat record keys; {} without one."""
    result = device_speedup(profile, reference)
    if result is None:
        return {}
    return {
        "device_speedup": result.speedup,
        "device_speedup_ci": list(result.ci),
        "device_speedup_verdict": result.verdict,
    }
