"""Before and after fusion, measured: each kernel group of `xlafuse diff` with its traced times.

`xlafuse.hlo.diff` puts every kernel of A and every kernel of B in exactly one `KernelGroup`
(kernels holding the same instructions of the program). Joining each kernel to its measured
time (`xlafuse.measurement.kernels`) gives each group the time of A's kernels and of B's kernels: for
A fused and B unfused, `saved_s` (B's time - A's time) is what that fusion saved, measured, not
modeled. The groups' times add up, with each side's unattributed time, to the side's total.

A group's change has its noise: from the per-call times of its kernels in each traced call,
the interval of B's mean minus A's and a verdict (`xlafuse.measurement.stats.difference_interval`:
`faster` where B gains, `slower` where it loses, `same` within the noise or under 3%). The
record lists the groups where B gains and where it loses, each largest first, and the sums of
the decided and the `same` groups beside the total difference.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from xlafuse.compiler.jit import compile_workload, unoptimized_hlo
from xlafuse.compiler.variants import get as get_variant
from xlafuse.errors import XlafuseError
from xlafuse.hlo.diff import FusionDiff, KernelGroup, diff_modules
from xlafuse.hlo.parse import parse_hlo
from xlafuse.kinds import Mode, Verdict
from xlafuse.measurement import timing
from xlafuse.measurement.kernels import KernelTimes, find_trace, join_trace, trace_events
from xlafuse.measurement.profile import trace_calls
from xlafuse.measurement.stats import VERDICTS, Difference, difference_interval
from xlafuse.models.names import Cell

if TYPE_CHECKING:
    from xlafuse.compiler.jit import CompiledVariant
    from xlafuse.models.workload import Workload

SCHEMA = "xlafuse.kernel_diff/1"
TOP = 10
NAMES_KEPT = 4  # kernel names kept per side in a record (the count is kept too)


@dataclasses.dataclass(frozen=True)
class TimedGroup:
    """A KernelGroup with the measured seconds per call of each side.

    Attributes:
      group: the kernels of A and B that hold the same instructions.
      time_a_s: seconds per call of A's kernels of the group.
      time_b_s: seconds per call of B's kernels of the group.
      change: B - A with its interval and verdict; None without per-call times.
    """

    group: KernelGroup
    time_a_s: float
    time_b_s: float
    change: Difference | None = None

    @property
    def saved_s(self) -> float:
        """B's time - A's time: what A's grouping saves per call (negative: A is slower)."""
        return self.time_b_s - self.time_a_s

    def to_dict(self, *, names: int | None = None) -> dict[str, Any]:
        """JSON-able form (`names`: keep at most this many kernel names per side)."""
        g = self.group
        return {
            "kind": g.kind,
            "kernels_a": list(g.kernels_a[:names]),
            "kernels_b": list(g.kernels_b[:names]),
            "n_a": len(g.kernels_a),
            "n_b": len(g.kernels_b),
            "time_a_s": self.time_a_s,
            "time_b_s": self.time_b_s,
            "saved_s": self.saved_s,
            "bytes_a": g.bytes_a,
            "bytes_b": g.bytes_b,
            **(
                {"ci_s": list(self.change.ci), "verdict": self.change.verdict}
                if self.change is not None
                else {}
            ),
        }


def time_groups(
    diff: FusionDiff,
    times_a: Mapping[str, float],
    times_b: Mapping[str, float],
    *,
    samples_a: Mapping[str, Sequence[float]] | None = None,
    samples_b: Mapping[str, Sequence[float]] | None = None,
) -> tuple[TimedGroup, ...]:
    """Each group of `diff` with its measured times, the largest saving first.

    Args:
      diff: the FusionDiff from A to B.
      times_a: A's HLO kernel name -> seconds per call (`KernelTimes.times_by_kernel()`).
      times_b: the same for B.
      samples_a: A's HLO kernel name -> seconds in each traced call
        (`KernelTimes.samples_by_kernel()`); with `samples_b`, each group's change gets its
        interval and verdict.
      samples_b: the same for B.
    """
    timed = [
        TimedGroup(
            g,
            sum(times_a.get(k, 0.0) for k in g.kernels_a),
            sum(times_b.get(k, 0.0) for k in g.kernels_b),
            _change(g, samples_a, samples_b),
        )
        for g in diff.groups
    ]
    timed.sort(key=lambda t: (-t.saved_s, (t.group.kernels_a or t.group.kernels_b)[0]))
    return tuple(timed)


def _change(group: KernelGroup, samples_a, samples_b) -> Difference | None:
    """B - A of one group from its kernels' per-call times (None without them)."""
    if not samples_a or not samples_b:
        return None
    a = _group_samples(group.kernels_a, samples_a)
    b = _group_samples(group.kernels_b, samples_b)
    return difference_interval(a, b)


def _group_samples(kernels: Sequence[str], samples: Mapping[str, Sequence[float]]) -> np.ndarray:
    """Per call, the seconds of a group's kernels on one side (zeros: the side has none)."""
    calls = len(next(iter(samples.values())))
    return np.sum([samples.get(k, (0.0,) * calls) for k in kernels] or [[0.0] * calls], axis=0)


def timed_groups(
    diff: FusionDiff, times_a: KernelTimes, times_b: KernelTimes
) -> tuple[TimedGroup, ...]:
    """`time_groups` of `diff` with both sides' times and per-call samples."""
    return time_groups(
        diff,
        times_a.times_by_kernel(),
        times_b.times_by_kernel(),
        samples_a=times_a.samples_by_kernel(),
        samples_b=times_b.samples_by_kernel(),
    )


def kernel_diff_record(
    diff: FusionDiff,
    times_a: KernelTimes,
    times_b: KernelTimes,
    *,
    top: int = TOP,
    timed: Sequence[TimedGroup] | None = None,
) -> dict[str, Any]:
    """The compact record of A vs B (`CellResult.trace.kernel_diff`): totals, the top savings,
    and with per-call times the groups where B gains and loses with their sums (`changes`).
    `timed`: the groups already timed (`timed_groups`), else timed here."""
    if timed is None:
        timed = timed_groups(diff, times_a, times_b)
    return {
        "schema": SCHEMA,
        "a": diff.label_a,
        "b": diff.label_b,
        "basis": times_a.basis,
        "time_a_s": times_a.time_s,
        "time_b_s": times_b.time_s,
        "unattributed_a_s": times_a.unattributed_s,
        "unattributed_b_s": times_b.unattributed_s,
        "kernels_a": diff.kernels_a,
        "kernels_b": diff.kernels_b,
        "groups": len(timed),
        "instructions": len(diff.lineage_a.traces),  # traced on each side: the lost shares' base
        "lost_by_opcode": {
            "a": diff.lineage_a.lost_by_opcode(),
            "b": diff.lineage_b.lost_by_opcode(),
        },
        "unlinked_dots": list(diff.unlinked_dots),
        "top": [t.to_dict(names=NAMES_KEPT) for t in timed[:top]],
        **changes(timed, top=top),
    }


def changes(timed: Sequence[TimedGroup], *, top: int = TOP) -> dict[str, Any]:
    """Where B gains (`gains`: groups B runs faster, the largest gain first) and loses
    (`losses`), and the sums of the groups' differences by verdict (`changed_s`: "faster",
    "slower", "same"; they add up to the groups' total B - A); {} without intervals."""
    decided = [t for t in timed if t.change is not None]
    if not decided:
        return {}
    by = {v: [t for t in decided if t.change.verdict == v] for v in VERDICTS}
    gains = sorted(by[Verdict.FASTER], key=lambda t: t.change.delta_s)
    losses = sorted(by[Verdict.SLOWER], key=lambda t: -t.change.delta_s)
    return {
        "gains": [t.to_dict(names=NAMES_KEPT) for t in gains[:top]],
        "losses": [t.to_dict(names=NAMES_KEPT) for t in losses[:top]],
        "changed_s": {v: sum(t.change.delta_s for t in by[v]) for v in VERDICTS},
        "changed_groups": {v: len(by[v]) for v in VERDICTS},
    }


@dataclasses.dataclass(frozen=True)
class MeasuredDiff:
    """`xlafuse diff --measure`: the diff, each side's kernel times, and the timed groups.

    Attributes:
      diff: the FusionDiff from A to B.
      times_a: A's KernelTimes.
      times_b: B's KernelTimes.
      timed: every group with its times, the largest saving first.
      traces: variant -> the trace folder (None when the traces were not kept).
    """

    diff: FusionDiff
    times_a: KernelTimes
    times_b: KernelTimes
    timed: tuple[TimedGroup, ...]
    traces: Mapping[str, str | None]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form: the diff's, plus both sides' kernel times and every timed group."""
        out = self.diff.to_dict()
        out["measured"] = {
            "a": self.times_a.summary(),
            "b": self.times_b.summary(),
            "groups": [t.to_dict() for t in self.timed],
            "traces": dict(self.traces),
            **changes(self.timed),
        }
        return out


def measure_workload_diff(
    cell: Cell,
    variants: tuple[str, str],
    *,
    calls: int = 10,
    trace_dir: str | Path | None = None,
) -> MeasuredDiff:
    """Compile a cell's workload under two variants, trace both, and time every kernel group.

    The programs are compiled on the one compile path (`compile_workload`) and traced after a
    warm-up call (`xlafuse.measurement.kernels.trace_calls`); both are traced to the workload's
    unoptimized module for the diff.

    Args:
      cell: the workload (a zoo workload or a program of the user's), its size, mode,
        overrides and devices.
      variants: (A, B), e.g. ("default", "no-fusion").
      calls: calls traced per variant.
      trace_dir: keep the traces under `trace_dir/<variant>/`; None: temporary, deleted.

    Raises:
      UnknownNameError: an unknown workload, size, mode or variant.
      XlafuseError: a trace without events (nothing ran).
    """

    work = cell.build()
    chosen = [get_variant(v) for v in variants]
    unoptimized = unoptimized_hlo(work)
    texts, times, traces = [unoptimized], [], {}
    for variant in chosen:
        compiled = compile_workload(work, variant)
        with tempfile.TemporaryDirectory(prefix="xlafuse-diff-") as tmp:
            folder = Path(trace_dir) / variant.name if trace_dir is not None else Path(tmp)
            times.append(trace_kernel_times(compiled, work, calls, folder))
        texts.append(compiled.hlo_text)
        traces[variant.name] = str(folder) if trace_dir is not None else None
    label = f"workload {cell.name} ({work.size}, {work.mode})"
    ref, a, b = (parse_hlo(t, source=label) for t in texts)
    diff = diff_modules(a, b, labels=tuple(variants), reference=ref, texts=tuple(texts))
    timed = time_groups(
        diff,
        times[0].times_by_kernel(),
        times[1].times_by_kernel(),
        samples_a=times[0].samples_by_kernel(),
        samples_b=times[1].samples_by_kernel(),
    )
    return MeasuredDiff(diff, times[0], times[1], timed, traces)


def trace_kernel_times(
    compiled: CompiledVariant,
    work: Workload,
    calls: int,
    folder: Path,
    *,
    ceiling: float | None = None,
) -> KernelTimes:
    """Trace `calls` calls of a compiled workload into `folder` and join the kernels.

    Raises:
      XlafuseError: the trace holds no kernel or thunk event.
    """
    advance = timing.thread_state if work.mode == Mode.TRAIN else timing.same_args
    trace_calls(compiled, work.fresh_args(), calls, advance, folder)
    path = find_trace(folder)
    basis, events = trace_events(path) if path is not None else ("", [])
    if not events:
        raise XlafuseError(f"the trace in {folder} holds no kernel or thunk event")
    return join_trace(compiled.report, events, calls, basis=basis, copy_ceiling_bytes_per_s=ceiling)
