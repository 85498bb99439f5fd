"""Successive halving over a tuning space, within a time budget.

Every candidate is measured with a small effort; the faster half (1 / `eta`) goes on to a
measurement `eta` times longer; and so on until one is left or the budget is spent. A
candidate that failed (its options rejected, its answer changed beyond tolerance) never goes
on. How a candidate is measured is the caller's (`evaluate`), and so is the clock: the search
itself is plain bookkeeping, tested on a fake clock.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

OK = "ok"


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
    eta: int = 2,
    clock: Callable[[], float] = time.monotonic,
    on_trial: Callable[[Trial], None] | None = None,
    keep: Callable[[Sequence[Any]], None] | None = None,
) -> SearchResult:
    """Ranks `candidates` by successive halving.

    Args:
      candidates: the space, the default program first (it is always measured: the others'
        numerics and speedups are against it).
      evaluate: `(candidate, effort) -> Score`; effort 1, then `eta`, `eta`**2, ... per round.
      budget_s: seconds of `clock` the search may take; a round it runs out in is cut short,
        and the ranking is of what that round measured.
      eta: how many times fewer candidates each round keeps (and how much longer it measures).
      clock: seconds (injectable).
      on_trial: called after each trial (a live leaderboard).
      keep: called with the candidates of each next round (the others may be let go).

    Returns:
      The SearchResult.
    """
    start = clock()
    alive, effort, trials, round_ = list(candidates), 1, [], 0
    while True:
        scores = {}
        for candidate in alive:
            if scores and clock() - start >= budget_s:
                break
            score = evaluate(candidate, effort)
            trial = Trial(candidate, round_, effort, score)
            trials.append(trial)
            scores[candidate] = score
            if on_trial is not None:
                on_trial(trial)
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


def grid(
    candidates: Sequence[Any],
    evaluate: Callable[[Any, int], Score],
    effort: int,
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
