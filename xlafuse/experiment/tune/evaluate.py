"""How `xlafuse tune` measures one candidate: built, compiled on the one compile path, judged
against the default program's answer, timed untraced.

Each candidate's program is built with its knobs (`models.build`: a zoo override, a user
FUNCTION's keyword) and compiled with its options once (`compile_workload`); later rounds only
time it again, longer. The figure ranked is the one the user chose (`--figure`), else the one
a cell leads with (`ranked_figure`), untraced: tracing changes a launch-bound program.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import jax

from xlafuse import models
from xlafuse.compiler.jit import compile_workload
from xlafuse.errors import XlafuseError, error_line
from xlafuse.experiment.tune.search import OK, Score
from xlafuse.experiment.tune.space import Candidate
from xlafuse.kinds import Mode
from xlafuse.measurement import timing
from xlafuse.measurement.numerics import computed_precision, host_outputs, judge_workload
from xlafuse.models import implementations, registry, user

if TYPE_CHECKING:
    from xlafuse.models.workload import Workload

BASE_TIMING = timing.TimingSettings(
    warmup=2, min_time_s=0.05, min_iters=3, max_iters=200, repeats=2
)


def ranked_figure(chosen: str | None, train: bool, backend: str) -> str:
    """The figure candidates are ranked and proved on: the one chosen (`--figure`, a [tune]
    table's `figure`: "latency" or "pipelined"), else the one a cell leads with
    (`timing.leading_figure`: pipelined for a train step and on a CPU, latency for a forward call
    on a GPU). Pipelined time is what a loop of calls sees (a rollout run back to back), latency
    what one call waits for."""
    return chosen or timing.leading_figure(train, backend)


@dataclasses.dataclass(frozen=True)
class Target:
    """What is tuned: a zoo workload or a user program, with its fixed settings.

    Attributes:
      name: the workload's name or the entry (`FILE.py:FUNCTION`).
      settings: `models.build`'s other arguments (size, mode, dtype, devices, ...).
      overrides: overrides every candidate has (the knobs come on top).
      figure: the time it is tuned for, "latency" or "pipelined" (`ranked_figure`); None: the
        one a cell of it leads with.
    """

    name: str
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    figure: str | None = None

    def build(self, candidate: Candidate) -> Workload:
        return models.build(
            self.name, **self.settings, **{**self.overrides, **dict(candidate.knobs)}
        )

    def implementations(self) -> tuple[str, ...]:
        """Its implementations that run here (`registry.implementation_problem`), its own
        first: what the implementation family searches; a program of the user's: its own."""
        if user.is_entry(self.name):
            return (implementations.OWN,)
        settings = {k: self.settings.get(k) for k in ("mode", "dtype", "devices")}
        settings = {k: v for k, v in settings.items() if v is not None}
        return tuple(
            name
            for name in registry.implementation_names(self.name)
            if registry.implementation_problem(self.name, name, **settings) is None
        )

    def defaults(self) -> dict[str, Any]:
        """The value of every override the target takes when none is given: a zoo workload's
        size table and options at its size, a user FUNCTION's keyword defaults; with the
        target's own overrides on top."""
        if user.is_entry(self.name):
            function = user.load_function(user.parse_entry(self.name))
            parameters = inspect.signature(function).parameters.values()
            own = {p.name: p.default for p in parameters if p.default is not p.empty}
        else:
            own = registry.spec(self.name).config(self.settings.get("size", "tiny"))
        return {**own, **self.overrides}


class Evaluator:
    """`evaluate(candidate, effort) -> Score` for the searches, on the running backend.

    Every candidate's outputs are judged against the default program's (`default`): where the
    first candidate evaluated is another (a resumed search, whose default was measured by an
    earlier process), the default program is built, compiled and run once first for its
    answer. Without `default`, the first candidate evaluated is taken to be it.
    """

    def __init__(
        self,
        target: Target,
        *,
        base: timing.TimingSettings = BASE_TIMING,
        default: Candidate | None = None,
    ):
        self.target = target
        self.base = base
        self.default = default
        self.backend = jax.default_backend()
        self._compiled: dict[Candidate, tuple[Any, Any]] = {}
        self._answer: Any = None
        self.lead: str | None = None

    def __call__(self, candidate: Candidate, effort: int) -> Score:
        compile_s = None
        if candidate not in self._compiled:
            try:  # refused knobs or options, or a first call that fails (out of memory)
                work = self.target.build(candidate)
                compiled = compile_workload(work, candidate.variant())
                verdict = self._judge(candidate, work, compiled)
            except (XlafuseError, ValueError, TypeError, RuntimeError) as err:
                return Score("rejected", detail=error_line(err))
            if verdict is not None:
                return verdict
            self._compiled[candidate] = (work, compiled)
            compile_s = compiled.compile_s
        work, compiled = self._compiled[candidate]
        train = work.mode == Mode.TRAIN
        self.lead = ranked_figure(self.target.figure, train, self.backend)
        advance = timing.thread_state if train else timing.same_args
        measured = timing.measure(
            compiled, work.fresh_args(), settings=self.settings(effort), advance=advance
        )
        seconds = (
            measured.pipelined_s_per_call
            if self.lead == timing.PIPELINED and measured.pipelined_s_per_call
            else measured.time_median_s
        )
        return Score(OK, seconds, "", compile_s)

    def keep(self, candidates: Sequence[Candidate]) -> None:
        """Lets go of the compiled programs (and their arguments) of every other candidate."""
        wanted = set(candidates)
        self._compiled = {c: v for c, v in self._compiled.items() if c in wanted}

    def settings(self, effort: int) -> timing.TimingSettings:
        """The base settings made `effort` times longer."""
        b = self.base
        return dataclasses.replace(
            b,
            min_time_s=b.min_time_s * effort,
            min_iters=b.min_iters * effort,
            max_iters=max(b.max_iters, b.min_iters * effort),
            repeats=b.repeats * effort,
        )

    def _default_answer(self) -> Any:
        """The default program's outputs (built, compiled and run once; not timed)."""
        work = self.target.build(self.default)
        compiled = compile_workload(work, self.default.variant())
        return host_outputs(work, compiled(*work.fresh_args()))

    def _judge(self, candidate: Candidate, work, compiled) -> Score | None:
        """None when the candidate's answer is the default's (within the one rule)."""
        outputs = host_outputs(work, compiled(*work.fresh_args()))
        if self._answer is None:
            if self.default is None or candidate == self.default:
                self._answer = outputs
                return None
            self._answer = self._default_answer()
        try:
            precision = computed_precision(compiled)  # TF32 on a GPU at default precision
            diff = judge_workload(work, self._answer, outputs, precision=precision)
        except (ValueError, TypeError) as err:  # another structure or shape of outputs
            return Score("numerics", detail=f"outputs unlike the default's: {error_line(err)}")
        if not diff.within_tolerance:
            part = f" ({diff.worst_part})" if diff.worst_part else ""
            return Score("numerics", detail=f"max rel diff {diff.max_rel_diff:.3g}{part}")
        return None
