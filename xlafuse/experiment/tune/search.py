"""The searches of a tuning space, within a time budget: coordinate descent (the default),
successive halving, and the exhaustive grid they are judged against.

Successive halving: every candidate is measured with a small effort; the faster half (1 /
`eta`) goes on to a measurement `eta` times longer; and so on until one is left or the budget
is spent. It compiles every candidate of the space in its first round, so where compiling
dominates it costs nearly what the grid does.

Coordinate descent: from the default program's point of the space's grid (`space.SpaceGrid`),
each axis in turn (a knob, an option family) is swept: every value of it measured with the
other axes held at the current point, and the descent moves to the fastest value only where it
is faster than the current point by more than `MOVE_MARGIN` (both at the same effort, so the
move is not the noise of a short measurement). Sweeps repeat until one moves nothing or the
budget is spent; a candidate is measured once at that effort (a cache). A sweep measures at
most the sum of the axes' sizes, not their product: 6 + 2 + 2 + 3 points of a 6x2x2x3 space,
of which 6 + 1 + 1 + 2 new. A short successive halving over the `FINALISTS` fastest seen then
measures them longer, so the ranking ends on long measurements as halving's does. Before it,
the near ties are combined: on each axis's last line, the values within `MOVE_MARGIN` of the
line's fastest (at most `TIES_PER_AXIS`), and every point of their product not measured yet, at
most `COMBINED` of them, those with the most axes at their line's fastest first. Gains each
under the margin may add up, and a short measurement may rank two near-equal values either way
(cartpole's case: experiments/README.md, "Figures behind the code"). Its limit: it
follows one axis at a time, so an optimum that is only faster with two axes changed together
(each change alone slower) is missed; `grid` finds it, at the whole space's cost.

A candidate that failed (its options rejected, its answer changed beyond tolerance) never goes
on and never becomes the descent's point. How a candidate is measured is the caller's
(`evaluate`), and so is the clock: the searches themselves are plain bookkeeping, tested on a
fake clock.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

OK = "ok"
DESCENT_EFFORT = 1  # every point of the descent measured as long as halving's first round
# A move needs the new point faster than the current one by more than this share (2%), at the
# same effort: a short measurement's noise is not a move. A point the margin passes over is
# still ranked in the finish if it is among the fastest seen.
MOVE_MARGIN = 0.02
FINALISTS = 4  # the fastest candidates of the descent that the finish measures longer
TIES_PER_AXIS = 2  # the values of an axis's last line that its near ties may combine
COMBINED = 4  # new candidates the combination of near ties measures, at most
FINISH_EFFORT = 4  # the finish's first round (then `eta` times more: 8, the grid's, for two)


@dataclasses.dataclass(frozen=True)
class Score:
    """One measurement of one candidate.

    Attributes:
      status: "ok", or why it cannot win ("rejected": XLA refused its options or the target
        its knobs; "numerics": its answer differs from the default program's beyond tolerance).
      time_s: seconds per call on the figure the search ranks by (None unless ok).
      detail: the reason, one line, or a note (the numerics' worst part).
      compile_s: seconds XLA took to compile it (first measurement only).
    """

    status: str
    time_s: float | None = None
    detail: str = ""
    compile_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == OK


@dataclasses.dataclass(frozen=True)
class Trial:
    """A candidate measured in one round of the search."""

    candidate: Any
    round: int
    effort: int
    score: Score


@dataclasses.dataclass(frozen=True)
class SearchResult:
    """Every trial, the candidates of the last round ranked (fastest first), whether the
    budget ended the search before one candidate was left, and the seconds it took."""

    trials: tuple[Trial, ...]
    ranked: tuple[Any, ...]
    budget_spent: bool
    seconds: float = 0.0

    def last_score(self, candidate: Any) -> Score | None:
        """The candidate's latest score (its most effortful measurement)."""
        for trial in reversed(self.trials):
            if trial.candidate == candidate:
                return trial.score
        return None


def successive_halving(
    candidates: Sequence[Any],
    evaluate: Callable[[Any, int], Score],
    budget_s: float,
    *,
    eta: int = 2,
    clock: Callable[[], float] = time.monotonic,
    on_trial: Callable[[Trial], None] | None = None,
    keep: Callable[[Sequence[Any]], None] | None = None,
    effort: int = 1,
    first_round: int = 0,
) -> SearchResult:
    """Ranks `candidates` by successive halving.

    Args:
      candidates: the space, the default program first (it is always measured: the others'
        numerics and speedups are against it).
      evaluate: `(candidate, effort) -> Score`; `effort`, then `eta` times more each round.
      budget_s: seconds of `clock` the search may take; a round it runs out in is cut short,
        and the ranking is of what that round measured.
      eta: how many times fewer candidates each round keeps (and how much longer it measures).
      clock: seconds (injectable).
      on_trial: called after each trial (a live leaderboard).
      keep: called with the candidates of each next round (the others may be let go).
      effort: the first round's (1; more for a finish of candidates measured shorter already).
      first_round: the number its first round's trials carry (after another search's rounds).

    Returns:
      The SearchResult.
    """
    start = clock()
    alive, trials, round_ = list(candidates), [], first_round
    deadline = _Deadline(clock, start, budget_s)
    while True:
        scores = _measure_round(alive, evaluate, effort, round_, deadline, on_trial, trials)
        ranked = _ranked(scores)
        elapsed = clock() - start
        spent = elapsed >= budget_s
        if len(ranked) <= 1 or spent:
            return SearchResult(tuple(trials), tuple(ranked), spent and len(ranked) > 1, elapsed)
        alive = ranked[: max(1, math.ceil(len(ranked) / eta))]
        if len(alive) == 1:
            return SearchResult(tuple(trials), tuple(ranked), False, elapsed)
        if keep is not None:
            keep(alive)
        effort *= eta
        round_ += 1


@dataclasses.dataclass(frozen=True)
class _Deadline:
    """When `budget_s` seconds of `clock` from `start` have passed."""

    clock: Callable[[], float]
    start: float
    budget_s: float

    def passed(self) -> bool:
        return self.clock() - self.start >= self.budget_s


def _measure_round(alive, evaluate, effort, round_, deadline, on_trial, trials) -> dict:
    """One round: each candidate of `alive` measured at `effort` (at least one, then until the
    deadline passes), its trial appended to `trials`; returns candidate -> Score."""
    scores: dict[Any, Score] = {}
    for candidate in alive:
        if scores and deadline.passed():
            break
        trial = Trial(candidate, round_, effort, evaluate(candidate, effort))
        trials.append(trial)
        scores[candidate] = trial.score
        if on_trial is not None:
            on_trial(trial)
    return scores


def grid(
    candidates: Sequence[Any],
    evaluate: Callable[[Any, int], Score],
    effort: int,
    *,
    clock: Callable[[], float] = time.monotonic,
    on_trial: Callable[[Trial], None] | None = None,
) -> SearchResult:
    """Every candidate measured once at `effort`, with no budget: the exhaustive grid that a
    search's winner and time are judged against."""
    start = clock()
    trials, scores = [], {}
    for candidate in candidates:
        trial = Trial(candidate, 0, effort, evaluate(candidate, effort))
        trials.append(trial)
        scores[candidate] = trial.score
        if on_trial is not None:
            on_trial(trial)
    return SearchResult(tuple(trials), tuple(_ranked(scores)), False, clock() - start)


def _ranked(scores: dict[Any, Score]) -> list[Any]:
    """The candidates measured ok, fastest first."""
    return sorted((c for c, s in scores.items() if s.ok), key=lambda c: scores[c].time_s)


def coordinate_descent(
    space: Any,
    evaluate: Callable[[Any, int], Score],
    budget_s: float,
    *,
    eta: int = 2,
    clock: Callable[[], float] = time.monotonic,
    on_trial: Callable[[Trial], None] | None = None,
    keep: Callable[[Sequence[Any]], None] | None = None,
    finish_effort: int = FINISH_EFFORT,
) -> SearchResult:
    """Ranks the candidates of `space` by coordinate descent, then a successive halving of the
    `FINALISTS` fastest it measured (this module's docstring says how, and what it can miss).

    Args:
      space: the space as coordinates (`space.SpaceGrid`): `axes`, `start` point, `default`
        program (measured first: the others are judged against it) and `candidate(point)`.
      evaluate: `(candidate, effort) -> Score`; the descent's effort is `DESCENT_EFFORT`.
      budget_s: seconds of `clock` the search may take (the finish gets what the descent left);
        when it runs out the ranking is of every candidate measured, and budget_spent is True.
      eta: the finish's halving factor. clock: seconds (injectable).
      on_trial: called after each trial; a trial's round is its sweep, then the finish's.
      keep: called with the candidates still worth keeping compiled (the others may be let go).
      finish_effort: the effort of the finish's first round.

    Returns the SearchResult.
    """
    walk = _Walk(evaluate, budget_s, clock, on_trial)
    walk.score(space.default)
    _combine(space, walk, _descend(space, walk, keep))
    ranked = _ranked(walk.scores)
    finalists = ranked[:FINALISTS]
    left = budget_s - walk.elapsed()
    if walk.spent or left <= 0 or len(finalists) <= 1:
        spent = walk.spent or (left <= 0 and len(finalists) > 1)
        return SearchResult(tuple(walk.trials), tuple(ranked), spent, walk.elapsed())
    finish = successive_halving(
        finalists,
        evaluate,
        left,
        eta=eta,
        clock=clock,
        on_trial=on_trial,
        keep=keep,
        effort=finish_effort,
        first_round=walk.sweep + 1,
    )
    trials = (*walk.trials, *finish.trials)
    spent = finish.budget_spent or finish.seconds >= left  # also a round cut after one
    return SearchResult(trials, finish.ranked, spent, walk.elapsed())


class _Walk:
    """The descent's measurements: each candidate once, at `DESCENT_EFFORT` (the cache)."""

    def __init__(self, evaluate, budget_s: float, clock, on_trial):
        self.evaluate, self.on_trial = evaluate, on_trial
        self.deadline = _Deadline(clock, clock(), budget_s)
        self.scores: dict[Any, Score] = {}
        self.trials: list[Trial] = []
        self.sweep = 0
        self.spent = False
        self.ties: dict[int, tuple] = {}  # axis -> the near ties of its last line, fastest first

    def elapsed(self) -> float:
        return self.deadline.clock() - self.deadline.start

    def score(self, candidate: Any) -> Score | None:
        """Its score, measured unless it was; None (and `spent`) once the budget is spent."""
        if candidate in self.scores:
            return self.scores[candidate]
        if self.scores and self.deadline.passed():
            self.spent = True
            return None
        score = self.evaluate(candidate, DESCENT_EFFORT)
        self.scores[candidate] = score
        self.trials.append(Trial(candidate, self.sweep, DESCENT_EFFORT, score))
        if self.on_trial is not None:
            self.on_trial(self.trials[-1])
        return score

    def time(self, candidate: Any) -> float:
        """Its seconds per call; infinite where it failed or was not measured."""
        score = self.scores.get(candidate)
        return score.time_s if score is not None and score.ok else math.inf


def _descend(space, walk: _Walk, keep) -> tuple:
    """Sweeps the axes from `space.start` until a sweep moves nothing or the budget is spent;
    returns the point it ends on."""
    point = tuple(space.start)
    while True:
        moved = False
        for axis in range(len(space.axes)):
            best = _best_on_line(space, walk, point, axis)
            moved, point = moved or best != point, best
            if keep is not None:
                keep(_ranked(walk.scores)[:FINALISTS])
            if walk.spent:
                return point
        if not moved:
            return point
        walk.sweep += 1


def _combine(space, walk: _Walk, point: tuple) -> None:
    """Measures the points of the product of each axis's near ties (`walk.ties`; `point`'s
    value where an axis has none) not measured yet: at most `COMBINED`, those with the most axes
    at their line's fastest value first (small gains that the margin passed over may add up)."""
    choices = [walk.ties.get(axis, (value,)) for axis, value in enumerate(point)]
    product = itertools.product(*(range(len(values)) for values in choices))
    ranks = sorted(product, key=sum)  # 0: the line's fastest value
    points = [tuple(values[i] for values, i in zip(choices, rank, strict=True)) for rank in ranks]
    new = [p for p in points if space.candidate(p) not in walk.scores][:COMBINED]
    for combined in new:
        if walk.score(space.candidate(combined)) is None:
            return


def _best_on_line(space, walk: _Walk, point: tuple, axis: int) -> tuple:
    """Measures the points of `point`'s line along `axis` not measured yet; returns the line's
    fastest point where it beats `point` by more than `MOVE_MARGIN`, else `point`."""
    line = [(*point[:axis], value, *point[axis + 1 :]) for value in space.axes[axis]]
    for other in line:
        if walk.score(space.candidate(other)) is None:
            break
    ordered = sorted(line, key=lambda p: walk.time(space.candidate(p)))
    fastest = ordered[0]
    near = walk.time(space.candidate(fastest)) * (1 + MOVE_MARGIN)
    ties = [p[axis] for p in ordered if walk.time(space.candidate(p)) <= near < math.inf]
    walk.ties[axis] = tuple(ties[:TIES_PER_AXIS]) or (fastest[axis],)
    current_s = walk.time(space.candidate(point))
    return fastest if walk.time(space.candidate(fastest)) < current_s * (1 - MOVE_MARGIN) else point
