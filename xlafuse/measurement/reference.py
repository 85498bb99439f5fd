"""A workload's reference as its other cells see it, and the one rule a cell is timed by.

Every cell of a workload other than its reference variant's is judged against the reference:
its outputs against the reference's (numerics), its time against the reference's (speedups),
its device time and kernel groups against the reference's profile and trace. `Reference` holds
what that takes, frozen: the runner makes it once per workload (from the reference cell it has
just measured, or from compiling a recorded reference again) and hands the same value to the
XLA cells and to the PyTorch twins (`xlafuse.torch.measure`).

`time_against` is the pairing rule, written once: a cell is timed in alternating rounds with
the reference's program when that program is compiled in this process (paired speedups,
`timing.measure_pair`), and otherwise alone, its speedups then the ratio of its samples to the
reference cell's own (`timing.compare_apart`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

from xlafuse.measurement import timing
from xlafuse.measurement.cell_kernels import Baseline
from xlafuse.measurement.numerics import NumericDiff, computed_precision, judge_workload
from xlafuse.measurement.profile import DeviceProfile


@dataclasses.dataclass(frozen=True, kw_only=True)
class Reference:
    """What the other cells of a workload need from its reference variant.

    Attributes:
      compiled: its compiled program (a `CompiledVariant`), or None when it could not be
        compiled again on resume; timed in alternation with each other cell when it runs in
        this process (`measured` is None).
      fresh_args: arguments for one more of its calls (copies of what it donates).
      outputs: its outputs on the host (`numerics.host_outputs`), for the numerics check.
      timing: its own Timing (for speedups timed apart); None when not measured in this run.
      profile: its DeviceProfile (for device-time speedups).
      error: why it could not be compiled again on resume (None when it could).
      kernels: its traced kernels (for the other cells' kernel groups); None when not traced.
      interpreted: its program holds a Pallas kernel run in interpret mode: a cell is timed
        against it only when that is so of the cell's too (`timed_against`).
    """

    compiled: Any = None
    fresh_args: Callable[[], Sequence[Any]] | None = None
    outputs: Any = None
    timing: timing.Timing | None = None
    profile: DeviceProfile | None = None
    error: str | None = None
    kernels: Baseline | None = None
    interpreted: bool = False

    @property
    def pairs(self) -> bool:
        """Whether a cell is timed in alternation with this reference: its program is compiled
        in this process (not measured in a child process of its own)."""
        return self.compiled is not None and self.compiled.measured is None


INTERPRETED_BASIS = "not compared: one of the two runs a Pallas kernel in interpret mode"


def timed_against(reference: Reference | None, interpreted: bool) -> Reference | None:
    """The reference a cell's times (speedups, device time, kernel groups) are compared with:
    `reference`, unless one of the two runs a Pallas kernel in interpret mode and the other
    does not (an interpreted time is the interpreter's, never a compiled kernel's rival);
    then None, and the cell is timed alone (its numerics are still judged against it)."""
    if reference is None or reference.interpreted == interpreted:
        return reference
    return None


def time_against(
    reference: Reference | None,
    fn: Callable,
    args: Sequence[Any],
    settings: timing.TimingSettings,
    *,
    advance: timing.Advance = timing.same_args,
    lead: str = timing.LATENCY,
    clock: timing.Clock = time.perf_counter,
) -> tuple[timing.Timing, timing.Comparison | None]:
    """Time `fn(*args)` against a workload's reference.

    Args:
      reference: the workload's Reference; None for the reference cell itself.
      fn, args: the cell's program and its arguments (copies of what it donates).
      settings, advance, lead, clock: as `timing.measure_pair` takes them.

    Returns:
      (the cell's Timing, its Comparison with the reference): paired over the same rounds when
      the reference `pairs`, else timed alone and compared with the reference's own samples
      (`compared_apart`; None without a reference or its samples).
    """
    if reference is not None and reference.pairs:
        ref_args = reference.fresh_args()
        return timing.measure_pair(
            reference.compiled,
            ref_args,
            fn,
            args,
            settings=settings,
            advance=advance,
            clock=clock,
            lead=lead,
        )
    measured = timing.measure(fn, args, settings=settings, advance=advance, clock=clock)
    return measured, compared_apart(reference, measured)


def compared_apart(
    reference: Reference | None, measured: timing.Timing
) -> timing.Comparison | None:
    """The speedups of a cell timed apart from its reference (in a child process, or after
    the reference could not be compiled again): against the reference cell's own samples, when
    this run measured them; None otherwise."""
    own = reference.timing if reference is not None else None
    if own is None or not own.samples_s:
        return None
    return timing.compare_apart(own, measured)


def judge_against(
    reference: Reference | None, workload: Any, outputs: Any, *, compiled: Any = None
) -> NumericDiff | None:
    """The numerics of a cell's first call against the reference's (`judge_workload`); None
    for the reference cell itself, or when the reference's outputs are not known.

    Args:
      reference: the workload's Reference.
      workload: the workload.
      outputs: the cell's first outputs (`numerics.host_outputs`).
      compiled: the cell's own compiled program (a `CompiledVariant`), None for a PyTorch
        twin: judged at the lowest precision the float32 dots of it or the reference's
        program ran at (`numerics.computed_precision`: TF32 on an NVIDIA GPU at default
        precision). Without it, the reference's program alone says.
    """
    if reference is None or reference.outputs is None:
        return None
    precision = computed_precision(reference.compiled, compiled)
    return judge_workload(workload, reference.outputs, outputs, precision=precision)
