"""Every kernel's time, joined to the HLO kernel that launched it (issue 17).

A `jax.profiler` trace of `calls` calls is read back (`trace_events`) and each event is matched to
a kernel of the optimized HLO (`join_trace`), giving per HLO kernel: time per call, launches per
call, modeled bytes, achieved bandwidth, % of the copy ceiling, kind and source lines, plus the
time no HLO kernel could be given ("unattributed").

What the trace holds, and so what the join can say:

* GPU ("device kernels"): the device plane's "Stream" lines, one event per kernel with its
  duration on the GPU. A launch outside a command buffer carries its HLO instruction in its
  `hlo_op` stat, and that decides (a library call's kernels, whatever their names). The others,
  in a program whose kernels are all in one computation, are aligned with the kernels in
  program order (`xlafuse.measurement.align`: names say what may pair, the order which twin or
  library call). In a program with a loop or a branch, names follow the HLO: the join is the
  one `xlafuse validate` uses
  against Nsight Compute (`xlafuse.measurement.validate.join_kernels`: names with "." written "_",
  suffixes, reused kernels of identical fusions, cuBLAS/cuDNN launches attributed to their
  custom-call in launch order). It is made on the first call's launches; every call launches
  the same kernels in the same order, so the other calls are paired by position (a call whose
  names differ is joined on its own). In a loop program the join is made on the launches of
  each loop's first iteration: a block of launches that repeats the block just before it, name
  for name, and holds a loop body kernel's name, is the loop's next iteration, and each of its
  launches is the kernel the same launch of the block before it was (`loop_iterations`); by
  names alone, an iteration's launches went to other kernels of the same base name, and its
  GEMMs to calls that launch the same cuBLAS kernel. A launch whose name was already paired
  and that is in no such block counts as another launch of the same kernel. When the events do
  not split into equal calls, the whole trace is joined at once: a library kernel name that
  several custom-calls launch is then given to one of them (the time stays attributed, to a
  kernel of the same kind, but the split between those calls is lost).
* CPU ("host thunks"): there is no device plane. XLA:CPU's thunk executor records one host
  event per executed thunk, carrying the HLO instruction's exact name in its `hlo_op` stat: the
  join is by that name. These are host wall times with the profiler on (it adds microseconds
  per op), thunks run on several threads may overlap (their sum can exceed the call's time),
  and work an op hands to the Eigen thread pool is inside its thunk's time. They rank ops; they
  are not device times, and no bandwidth ceiling applies to cache-resident data.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate
from pathlib import Path
from typing import Any, NamedTuple

from jax.profiler import ProfileData

from xlafuse.hlo import analyze_hlo
from xlafuse.hlo.ir import portable_source
from xlafuse.measurement.align import align_launches, fits
from xlafuse.measurement.kernel_table import (
    SCHEMA,
    TABLE_COLUMNS,
    TABLE_SCHEMA,
)
from xlafuse.measurement.profile import event_stat, gpu_kernel_events
from xlafuse.measurement.validate import BY_OP, ModeledKernel, is_memcpy, join_kernels, mangle

GPU_BASIS = "device kernels"
CPU_BASIS = "host thunks"
TOP = 10
REPEATED = "repeated launch"


class Event(NamedTuple):
    """One traced event: a GPU kernel or a CPU thunk (times in nanoseconds).

    `op`: a GPU kernel's `hlo_op` stat, the HLO instruction its thunk ran (None without one).
    """

    name: str
    start_ns: int
    duration_ns: int
    line: str = ""
    op: str | None = None


@dataclasses.dataclass(frozen=True)
class KernelTime:
    """One HLO kernel's measured time.

    Attributes:
      name: the HLO kernel (instruction) name.
      kind: its kind (`kLoop`, `kInput`, `kCustom`, `custom-call`, ...).
      time_s: seconds per call (all its launches).
      launches_per_call: launches per call (0 when no event was joined to it).
      modeled_bytes: the traffic model's bytes of one run (inputs + outputs).
      achieved_bytes_per_s: its bytes per call / time_s; None without time. Its bytes per call
        are modeled_bytes times the runs of its computation per call (a loop body's trip
        count), or, where that is unknown, times its launches.
      pct_of_copy_ceiling: achieved bandwidth as % of the measured copy ceiling; None without one.
      source_lines: `file:line` of the Python that made its instructions, without the
        machine's folders (`xlafuse.hlo.ir.portable_source`).
      match: how its events were joined ("name", "name + suffix", "reused kernel", "library",
        "memcpy", "hlo_op" (the event's own stat), "-" when none was).
      per_call_s: its seconds in each traced call, when the events split into equal calls
        (else empty); kept in memory for intervals, not written into records.
      flops: its FLOPs per launch from the HLO (`xlafuse.hlo.flops`; None: not countable).
      bound_s: the least time its work can take per call at the measured ceilings: the larger
        of bytes / copy ceiling and FLOPs / matmul ceiling, times its launches (None without
        the ceilings or a count).
      bound: "memory" or "compute": which of the two `bound_s` is.
      pct_of_bound: 100 x bound_s / time_s: how close the kernel runs to its roofline.
    """

    name: str
    kind: str
    time_s: float
    launches_per_call: float
    modeled_bytes: int
    achieved_bytes_per_s: float | None
    pct_of_copy_ceiling: float | None
    source_lines: tuple[str, ...]
    match: str
    per_call_s: tuple[float, ...] = ()
    flops: int | None = None
    bound_s: float | None = None
    bound: str | None = None
    pct_of_bound: float | None = None

    @property
    def headroom_s(self) -> float | None:
        """Seconds per call above the kernel's bound: what running at the roofline would save."""
        return None if self.bound_s is None else max(0.0, self.time_s - self.bound_s)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (without `per_call_s`)."""
        out = dataclasses.asdict(self)
        out["source_lines"] = list(self.source_lines)
        del out["per_call_s"]
        return out


@dataclasses.dataclass(frozen=True)
class KernelTimes:
    """A traced cell's time, kernel by kernel.

    Attributes:
      basis: "device kernels" (GPU) or "host thunks" (CPU; see the module docstring).
      calls: calls traced.
      time_s: seconds per call of every event (for the GPU: the device time).
      kernels: every HLO kernel, longest first (those no event was joined to last, at 0 s).
      unattributed: (trace name, seconds per call) of events joined to no HLO kernel.
      copy_ceiling_bytes_per_s: the ceiling the percentages use; None when not measured.
    """

    basis: str
    calls: int
    time_s: float
    kernels: tuple[KernelTime, ...]
    unattributed: tuple[tuple[str, float], ...] = ()
    copy_ceiling_bytes_per_s: float | None = None
    matmul_ceiling_flops_per_s: float | None = None

    @property
    def attributed_s(self) -> float:
        """Seconds per call joined to an HLO kernel."""
        return sum(k.time_s for k in self.kernels)

    @property
    def unattributed_s(self) -> float:
        """Seconds per call joined to no HLO kernel."""
        return sum(t for _, t in self.unattributed)

    @property
    def unattributed_share(self) -> float:
        """unattributed_s / time_s (0 when nothing was traced)."""
        return self.unattributed_s / self.time_s if self.time_s else 0.0

    @property
    def launches_per_call(self) -> float:
        """Events per call joined to HLO kernels."""
        return sum(k.launches_per_call for k in self.kernels)

    def times_by_kernel(self) -> dict[str, float]:
        """HLO kernel name -> seconds per call (every kernel, 0 for those not seen)."""
        return {k.name: k.time_s for k in self.kernels}

    def headroom(self) -> list[KernelTime]:
        """The kernels with a bound, the most time above it first."""
        bounded = [k for k in self.kernels if k.headroom_s is not None]
        return sorted(bounded, key=lambda k: -k.headroom_s)

    def samples_by_kernel(self) -> dict[str, tuple[float, ...]]:
        """HLO kernel name -> its seconds in each traced call ({} when the events did not split
        into equal calls)."""
        if not any(k.per_call_s for k in self.kernels):
            return {}
        zeros = (0.0,) * self.calls
        return {k.name: k.per_call_s or zeros for k in self.kernels}

    def summary(
        self, *, top: int = TOP, producers: Mapping[str, Sequence[str]] | None = None
    ) -> dict[str, Any]:
        """The compact record of a cell (`CellResult.trace.kernel_times`): totals and the top
        kernels; given each kernel's producers (kernel name -> the names of the kernels whose
        outputs it reads, `xlafuse.hlo.dataflow.producer_names`), also every kernel, longest
        first, as its `kernel_table` (`kernel_table`)."""
        out = {
            "schema": SCHEMA,
            "basis": self.basis,
            "calls": self.calls,
            "time_s": self.time_s,
            "attributed_s": self.attributed_s,
            "unattributed_s": self.unattributed_s,
            "unattributed_share": self.unattributed_share,
            "kernels": len(self.kernels),
            "kernels_seen": sum(1 for k in self.kernels if k.launches_per_call),
            "launches_per_call": self.launches_per_call,
            "copy_ceiling_bytes_per_s": self.copy_ceiling_bytes_per_s,
            "matmul_ceiling_flops_per_s": self.matmul_ceiling_flops_per_s,
            "top": [k.to_dict() for k in self.kernels[:top]],
            "headroom_top": [
                {**k.to_dict(), "headroom_s": k.headroom_s} for k in self.headroom()[:top]
            ],
            "unattributed_top": [[n, t] for n, t in self.unattributed[:5]],
        }
        if producers is not None:
            out["kernel_table"] = kernel_table([_traced_row(k, producers) for k in self.kernels])
        return out


def kernel_table(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Every kernel of a cell as one compact table: the column names once, a list per kernel.

    Args:
      rows: one mapping per kernel with TABLE_COLUMNS' keys (a missing key is None): its
        `source` the first source line, its `producers` the names of the kernels whose outputs
        it reads.

    Returns:
      {"schema": TABLE_SCHEMA, "columns": TABLE_COLUMNS, "sources": each source line once,
      "rows": [[value per column]]}: a row's `source` the index of its line in `sources`, its
      `producers` the indices of those kernels' rows (names not among the rows dropped).
    """
    index = {row["name"]: i for i, row in enumerate(rows)}
    sources = list(dict.fromkeys(row["source"] for row in rows if row.get("source")))
    source_index = {line: i for i, line in enumerate(sources)}
    out = []
    for row in rows:
        values = {**row, "source": source_index.get(row.get("source"))}
        values["producers"] = sorted({index[p] for p in row.get("producers", ()) if p in index})
        out.append([values.get(c) for c in TABLE_COLUMNS])
    return {"schema": TABLE_SCHEMA, "columns": list(TABLE_COLUMNS), "sources": sources,
            "rows": out}  # fmt: skip


def hlo_kernel_table(report: Any, producers: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """The kernel table of an untraced program, from its HLO alone (program order): no time,
    bound, headroom or match; launches per call the runs of the kernel's computation per call
    (a loop body's trip count; None where unknown)."""
    return kernel_table([
        {"name": k.name, "kind": k.kind, "launches_per_call": report.runs_of(k),
         "modeled_bytes": k.bytes_in + k.bytes_out, "flops": k.flops,
         "source": _first_source(k.source_lines), "producers": producers.get(k.name, ())}
        for k in report.kernel_details
    ])  # fmt: skip


def _traced_row(k: KernelTime, producers: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    return {
        **{c: getattr(k, c) for c in TABLE_COLUMNS if c not in ("source", "producers")},
        "source": _first_source(k.source_lines),
        "producers": producers.get(k.name, ()),
    }


def _first_source(lines: Sequence[str]) -> str | None:
    return portable_source(lines[0]) if lines else None


def trace_events(path: str | Path) -> tuple[str, list[Event]]:
    """(basis, events) of an `*.xplane.pb` file: GPU kernels if it has a device plane, else the
    CPU thunks carrying an `hlo_op` stat (a thunk holding others gives way to them)."""

    data = ProfileData.from_file(str(path))
    gpu = [Event(n, s, d, "", op) for n, s, d, op in gpu_kernel_events(data.planes, ops=True)]
    if gpu:
        return GPU_BASIS, gpu
    return CPU_BASIS, _innermost(_cpu_thunk_events(data.planes))


def find_trace(folder: str | Path) -> Path | None:
    """The newest `*.xplane.pb` under a trace folder (None when there is none)."""
    files = sorted(Path(folder).rglob("*.xplane.pb"), key=lambda p: p.stat().st_mtime)
    return files[-1] if files else None


def join_trace(
    report: Any,
    events: Sequence[Event | tuple],
    calls: int,
    *,
    basis: str = GPU_BASIS,
    copy_ceiling_bytes_per_s: float | None = None,
    matmul_ceiling_flops_per_s: float | None = None,
) -> KernelTimes:
    """Join traced events to the HLO kernels of `report` (a FusionReport, or HLO text).

    Args:
      report: the cell's FusionReport (`analyze_hlo` of its optimized HLO), or the HLO text.
      events: (name, start_ns, duration_ns) per event, from `trace_events`.
      calls: calls traced (times are divided by it).
      basis: GPU_BASIS (join by kernel name) or CPU_BASIS (exact `hlo_op` names).
      copy_ceiling_bytes_per_s: the measured copy ceiling, for `pct_of_copy_ceiling`.
      matmul_ceiling_flops_per_s: the measured matmul ceiling; with the copy ceiling, each
        kernel's bound (`KernelTime.bound_s`).

    Returns:
      The KernelTimes.

    Raises:
      ValueError: `calls` is not positive.
    """
    if calls < 1:
        raise ValueError(f"calls must be a positive number of traced calls, not {calls!r}")
    if not hasattr(report, "kernel_details"):
        report = analyze_hlo(report)
    details = list(report.kernel_details)
    modeled = [ModeledKernel.from_kernel_info(k, runs=report.runs_of(k)) for k in details]
    events = sorted((Event(*e) for e in events), key=lambda e: e.start_ns)
    if basis == GPU_BASIS:
        owner, how = _join_gpu(modeled, events, calls)
    else:
        owner, how = _join_cpu(modeled, events)
    ns, launches, per_call, lost = _sum_events(events, owner, calls)
    ceilings = (copy_ceiling_bytes_per_s, matmul_ceiling_flops_per_s)
    rows = [
        _kernel_time(info, ns[i] * 1e-9 / calls, launches[i] / calls, how.get(i, "-"),
                     ceilings, tuple(t * 1e-9 for t in per_call[i]) if per_call else (),
                     report.runs.get(info.computation))
        for i, info in enumerate(details)
    ]  # fmt: skip
    rows.sort(key=lambda r: (-r.time_s, -r.launches_per_call))
    unattributed = sorted(((n, t * 1e-9 / calls) for n, t in lost.items()), key=lambda x: -x[1])
    total = sum(e.duration_ns for e in events) * 1e-9 / calls
    return KernelTimes(basis, calls, total, tuple(rows), tuple(unattributed), *ceilings)


def _sum_events(events: Sequence[Event], owner: Mapping[int, int], calls: int):
    """(ns, launches, per-call ns by kernel index, lost ns by event name): `per_call` is {}
    unless the events split into equal calls (every call launches the same kernels)."""
    ns, launches = defaultdict(int), defaultdict(int)
    lost: dict[str, int] = defaultdict(int)
    size = len(events) // calls if events and len(events) % calls == 0 else 0
    per_call: dict[int, list[int]] = defaultdict(lambda: [0] * calls)
    for j, event in enumerate(events):
        i = owner.get(j)
        if i is None:
            lost[event.name] += event.duration_ns
            continue
        ns[i] += event.duration_ns
        launches[i] += 1
        if size:
            per_call[i][j // size] += event.duration_ns
    return ns, launches, per_call if size else {}, lost


def _kernel_time(info, time_s, launches, match, ceilings, per_call_s, runs) -> KernelTime:
    """One kernel's row. Its bound is its work per call at the ceilings: the HLO's work times
    the runs of its computation per call (`runs`: a loop body's trip count), or, where that is
    unknown, times its launches (one library call may launch several kernels, e.g. cuBLAS's
    split-K GEMM and its reduction: their launches are not repeated work)."""
    copy, matmul = ceilings
    times = launches if runs is None else runs
    modeled = info.bytes_in + info.bytes_out  # one launch
    achieved = modeled * times / time_s if time_s and modeled else None
    pct = 100.0 * achieved / copy if achieved and copy else None
    flops = getattr(info, "flops", None)
    bound_s = bound = pct_of_bound = None
    if copy and matmul and flops is not None and launches:
        memory_s, compute_s = modeled * times / copy, flops * times / matmul
        bound = "compute" if compute_s > memory_s else "memory"
        bound_s = max(memory_s, compute_s)
        pct_of_bound = 100.0 * bound_s / time_s if time_s else None
    return KernelTime(
        info.name, info.kind, time_s, launches, modeled, achieved, pct,
        tuple(portable_source(s) for s in info.source_lines), match, per_call_s,
        flops, bound_s, bound, pct_of_bound,
    )  # fmt: skip


def _join_gpu(modeled, events, calls) -> tuple[dict[int, int], dict[int, str]]:
    """Event index -> HLO kernel index, and how each kernel was matched."""
    owner: dict[int, int] = {}
    how: dict[int, str] = {}
    size = len(events) // calls if len(events) % calls == 0 else len(events)
    parts = [range(s, min(s + size, len(events))) for s in range(0, len(events), size or 1)]
    first: list[tuple[str, str | None]] | None = None
    first_owner: dict[int, int] = {}
    index = {k.name: i for i, k in enumerate(modeled)}
    for part in parts:
        names = [(events[j].name, events[j].op) for j in part]
        if first is not None and names == first:
            owner.update({part[k]: i for k, i in first_owner.items()})
            continue
        local, local_how = _join_names(modeled, names, index)
        owner.update({part[k]: i for k, i in local.items()})
        for i, h in local_how.items():
            how.setdefault(i, h)
        if first is None:
            first, first_owner = names, local
    return owner, how


def _join_names(modeled, launched, index) -> tuple[dict[int, int], dict[int, str]]:
    """One call's launches, (name, hlo_op) each, joined: a launch whose `hlo_op` is an HLO
    kernel's name is that kernel's (the runtime says so: a library call's GEMM and split-K
    kernels, a fusion's memset); the others aligned with the kernels in program order
    (`xlafuse.measurement.align`) or, for a call of many more launches than kernels (a loop), by
    the validate join on their names; then repeated launches of a paired name."""
    names = [name for name, _ in launched]
    known = {j: index[op] for j, (_, op) in enumerate(launched) if op in index}
    if fits(len(names), modeled):
        owner, how = align_launches(modeled, names)
        owner.update(known)
        how.update(dict.fromkeys(known.values(), BY_OP))
    else:
        repeat_of = loop_iterations(names, {mangle(k.name) for k in modeled if k.in_loop})
        owner, how = _join_iterations(modeled, names, known, repeat_of)
        # a block whose launch repeats one of a kernel outside any loop was not an iteration
        wrong = {j for j in repeat_of if j in owner and not modeled[owner[j]].in_loop}
        if wrong:
            repeat_of = {j: e for j, e in repeat_of.items() if j not in wrong}
            owner, how = _join_iterations(modeled, names, known, repeat_of)
    by_name = {names[j]: i for j, i in sorted(owner.items())}
    _pair_repeats(names, by_name, owner, how, memcpys=False)
    _place_memcpys(modeled, names, owner)
    _pair_repeats(names, by_name, owner, how, memcpys=True)  # a memcpy left: by its name
    return owner, how


def _join_iterations(modeled, names, known, repeat_of) -> tuple[dict[int, int], dict[int, str]]:
    """The validate join of the launches that repeat none before them (`repeat_of`: launch ->
    the same launch one loop iteration before), each repeat then the kernel its earlier launch
    was; launches with a known `hlo_op` are its kernel's."""
    firsts = [j for j in range(len(names)) if j not in repeat_of]
    first_known = {k: known[j] for k, j in enumerate(firsts) if j in known}
    owner: dict[int, int] = {}
    how: dict[int, str] = {}
    launches = [_Launch(names[j]) for j in firsts]
    for i, js, match in join_kernels(modeled, launches, known=first_known):
        if i is not None:
            how[i] = match
            owner.update({firsts[k]: i for k in js})
    for j, earlier in sorted(repeat_of.items()):  # an earlier one is paired by now
        if earlier in owner:
            owner[j] = owner[earlier]
    owner.update(known)
    for i in known.values():
        how.setdefault(i, BY_OP)
    return owner, how


def loop_iterations(names: Sequence[str], body_names: set[str]) -> dict[int, int]:
    """Launch index -> the index of the same launch one iteration before, for the launches of
    every loop iteration after a loop's first: a block of launches that repeats, name for name,
    the block just before it, and holds a name in `body_names` (the launch names of loop body
    kernels; two GEMMs in a row launching the same cuBLAS kernel are not a loop). The block
    ends before the launch of the same name as its first that starts it again (of the last
    `_LOOKBACK` such launches, the nearest that repeats: a body may launch a name twice); a
    nested loop's iterations are found inside its outer loop's first iteration, and the outer
    loop's later iterations repeat them whole."""
    repeat_of: dict[int, int] = {}
    seen: dict[str, list[int]] = defaultdict(list)  # name -> its launches so far
    in_body = list(accumulate((name in body_names for name in names), initial=0))
    j = 0
    while j < len(names):
        period = next(
            (
                j - o
                for o in reversed(seen[names[j]][-_LOOKBACK:])
                if in_body[j] > in_body[o] and _repeats(names, j, j - o)
            ),
            0,
        )
        if period:
            for k in range(j, j + period):
                repeat_of[k] = k - period
                seen[names[k]].append(k)
            j += period
            continue
        seen[names[j]].append(j)
        j += 1
    return repeat_of


_LOOKBACK = 8


def _repeats(names: Sequence[str], j: int, period: int) -> bool:
    """Whether the `period` launches from `j` repeat the `period` before it, name for name."""
    return j + period <= len(names) and all(
        names[j + k] == names[j - period + k] for k in range(period)
    )


def _pair_repeats(
    names: list[str],
    by_name: dict[str, int],
    owner: dict[int, int],
    how: dict[int, str],
    *,
    memcpys: bool,
) -> None:
    """Pairs each launch not yet paired whose name is a paired kernel's (another launch of it:
    a loop body's, once per iteration) with that kernel; memcpy launches only if `memcpys`.
    In place in `owner` and `how`."""
    for j, name in enumerate(names):
        if j not in owner and name in by_name and (memcpys or not is_memcpy(name)):
            owner[j] = by_name[name]
            how.setdefault(by_name[name], REPEATED)


def _place_memcpys(
    modeled: Sequence[ModeledKernel], names: list[str], owner: dict[int, int]
) -> None:
    """Pairs each memcpy launch not yet paired (a loop body's copies after its first iteration:
    their launches carry no name) with the copy at its place in the program: the first copy
    after the kernel of the launch before it, in that kernel's computation and before the
    kernel of the next paired launch; across the body's back edge, the first copy of the next
    launch's computation before its kernel. In place in `owner`."""
    copies = [i for i, k in enumerate(modeled) if k.copy]
    following: list[int | None] = [None] * len(names)  # the kernel of the next paired launch
    upcoming = None
    for j in range(len(names) - 1, -1, -1):
        following[j] = upcoming
        upcoming = owner.get(j, upcoming)
    before = None
    for j, name in enumerate(names):
        if j not in owner and is_memcpy(name) and before is not None:
            home, after = modeled[before].computation, following[j]
            end = after if after is not None and after > before else len(modeled)
            here = [i for i in copies if before < i < end and modeled[i].computation == home]
            if not here and after is not None and after <= before:  # the back edge
                home = modeled[after].computation
                here = [i for i in copies if i < after and modeled[i].computation == home]
            if here:
                owner[j] = here[0]
        before = owner.get(j, before)


class _Launch(NamedTuple):
    name: str


def _join_cpu(modeled, events) -> tuple[dict[int, int], dict[int, str]]:
    index = {k.name: i for i, k in enumerate(modeled)}
    owner = {j: index[e.name] for j, e in enumerate(events) if e.name in index}
    return owner, {i: "hlo_op" for i in owner.values()}


def _cpu_thunk_events(planes: Iterable[Any]) -> list[Event]:
    """Host events that carry an `hlo_op` stat (XLA:CPU thunks), named by it."""
    out = []
    for plane in planes:
        if not plane.name.startswith("/host:"):
            continue
        for line in plane.lines:
            for event in line.events:
                op = event_stat(event, "hlo_op")
                if op is not None:
                    out.append(
                        Event(str(op), int(event.start_ns), int(event.duration_ns), line.name)
                    )
    return out


def _innermost(events: list[Event]) -> list[Event]:
    """Drop events that hold another event of the same thread: a loop or call thunk holds its
    body's thunks, which are the kernels (the holder's own overhead is not counted)."""
    by_line: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        by_line[e.line].append(e)
    out = []
    for line_events in by_line.values():
        ordered = sorted(line_events, key=lambda e: (e.start_ns, -e.duration_ns))
        for k, e in enumerate(ordered):
            nxt = ordered[k + 1] if k + 1 < len(ordered) else None
            if nxt is not None and nxt.start_ns + nxt.duration_ns <= e.start_ns + e.duration_ns:
                continue
            out.append(e)
    return out


def times_from_summary(summary: Mapping[str, Any] | None) -> dict[str, float]:
    """HLO kernel name -> seconds per call of a recorded summary's top kernels."""
    return {row["name"]: row["time_s"] for row in (summary or {}).get("top", ())}
