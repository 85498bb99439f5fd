"""`tune`: the search, its proof and what it writes.

target -> space (`space`) -> a search (`search`: coordinate descent, successive halving or
the grid; each candidate measured by `evaluate`) -> the fastest candidate re-measured against
the default program in a fresh process (`rerun`) -> `tune.jsonl` (every trial), `best.toml` (a
config `xlafuse run` reruns the two with) and the lines printed.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from xlafuse.distributed import lockstep
from xlafuse.errors import UnknownNameError, XlafuseError, did_you_mean
from xlafuse.experiment.tune import search as search_lib
from xlafuse.experiment.tune.evaluate import Evaluator, Target
from xlafuse.experiment.tune.rerun import Rerun, rerun
from xlafuse.experiment.tune.space import Candidate, Family, SpaceGrid, enumerate_space, space_grid
from xlafuse.measure import timing
from xlafuse.models import registry, user

SEARCHES = ("descent", "halving", "grid")
DEFAULT_SEARCH = "descent"
FIGURES = (timing.LATENCY, timing.PIPELINED)  # what `--figure` chooses (`ranked_figure`)
ORDER_SEED = 0  # the first round's order (`halving_order`): fixed, so a rerun measures alike
GRID_EFFORT = 8  # each candidate measured as long as in halving's fourth round (1, 2, 4, 8)
# the descent's finish: its last round (two left) measured as long as the grid measures each
FINISH_EFFORT = GRID_EFFORT // 2


@dataclasses.dataclass(frozen=True)
class TuneResult:
    """What a tuning found.

    Attributes:
      target: what was tuned.
      space: every candidate, the default program first.
      search: the trials and the last round's ranking.
      best: the fastest candidate of the search (None: none measured ok).
      proof: the fresh-process rerun of `best` against the default (None: not run, or `best`
        is the default program).
      proof_error: why the rerun failed, one line (else "").
      lead: the figure ranked ("latency" or "pipelined").
      search_kind: "descent", "halving" or "grid" (`SEARCHES`).
      budget_s: the search's budget (None for the grid, which has none).
    """

    target: Target
    space: tuple[Candidate, ...]
    search: search_lib.SearchResult
    best: Candidate | None
    proof: Rerun | None
    proof_error: str = ""
    lead: str | None = None
    search_kind: str = DEFAULT_SEARCH
    budget_s: float | None = None

    @property
    def confirmed(self) -> bool:
        """Whether a candidate other than the default is faster, its rerun says so too."""
        return self.proof is not None and self.proof.verdict == "faster"

    def conclusion(self) -> str:
        """One line: the winner and its proof, or why nothing beats the default."""
        if self.best is None:
            return "no candidate ran: see tune.jsonl for why each was refused"
        if self.best == self.space[0]:
            return "nothing beats the default program: it ranked first"
        if self.proof is None:
            why = self.proof_error or "not rerun (--no-rerun)"
            return f"fastest in the search: {self.best.name}; unconfirmed: {why}"
        p = self.proof
        line = (
            f"{self.best.name}: {p.speedup:.2f}x [{p.ci[0]:.2f}, {p.ci[1]:.2f}] {p.verdict} on "
            f"{p.figure} in a fresh process ({_ms(p.winner_s)} vs {_ms(p.default_s)} ms; compile "
            f"{p.compile_s[1]:.1f} vs {p.compile_s[0]:.1f} s)"
        )
        if self.confirmed:
            return "winner: " + line
        return f"no confirmed winner: the search's fastest, {line}, is noise"


def tune(
    target: Target,
    knobs: Mapping[str, Sequence[Any]],
    families: Sequence[Family],
    budget_s: float,
    out: Path | None = None,
    prove: bool = True,
    say: Callable[[str], None] = print,
    evaluate: Callable[[Candidate, int], search_lib.Score] | None = None,
    prover: Callable[[dict[str, Any]], Rerun] = rerun,
    unproved: str = "",
    search: str = DEFAULT_SEARCH,
) -> TuneResult:
    """Searches the space of `knobs` x `families` for `target` within `budget_s` seconds,
    then proves the fastest candidate against the default program in a fresh process.

    Args:
      target: the zoo workload or user program, with its fixed settings.
      knobs: override or keyword -> the values to try.
      families: XLA option families (`space.families_for`).
      budget_s: seconds the search may take (the proof comes on top).
      out: a folder for `tune.jsonl` and `best.toml` (None: nothing written).
      prove: run the fresh-process rerun.
      say: where the live leaderboard's lines go.
      evaluate: the measurement (default: an `Evaluator` of `target`; injectable for tests).
      prover: the proof (`rerun.rerun`; injectable for tests).
      search: "descent" (coordinate descent within the budget, then a short halving of the
        fastest), "halving" (successive halving within the budget) or "grid" (every candidate
        at effort `GRID_EFFORT`, no budget: what a search is judged against).
      unproved: why the proof is not run, when `prove` is False ("" for --no-rerun).

    Raises:
      XlafuseError: the default program itself could not be built, compiled or run.
    """
    space, grid = _space(target, knobs, families)
    evaluator = evaluate or Evaluator(target)
    plural = "s" if len(space) != 1 else ""
    budget = budget_s if search != "grid" else None
    how = f"budget {budget_s:g} s" if budget is not None else "the whole grid, no budget"
    say(f"tune: {len(space)} candidate{plural}, {how}")
    result = _search(search, space, evaluator, budget_s, _Leaderboard(say), grid)
    _check_default_ran(result)
    best = result.ranked[0] if result.ranked else None
    proof, error = None, unproved
    if prove and best is not None and best != space[0]:
        proof, error = _prove(prover, _spec(target, space[0], best), say)
    lead = getattr(evaluator, "lead", None)
    found = TuneResult(target, space, result, best, proof, error, lead, search, budget)
    _report(found, out, say)
    return found


def _report(found: TuneResult, out: Path | None, say) -> None:
    """The conclusion, where the time went (on a GPU), and the files written."""
    say(found.conclusion())
    if found.proof is not None and found.proof.evidence is not None:
        for line in found.proof.evidence.lines():
            say(line)
    if out is not None:
        write(found, Path(out))
        say(f"wrote {Path(out) / 'tune.jsonl'} and {Path(out) / 'best.toml'}")


def _check_default_ran(result: search_lib.SearchResult) -> None:
    first = result.trials[0].score if result.trials else None
    if first is None or not first.ok:
        raise XlafuseError(f"the default program did not run: {first.detail if first else '-'}")


def _space(target: Target, knobs, families) -> tuple[tuple[Candidate, ...], SpaceGrid]:
    """The candidates, the default program first, and the same as a grid; a knob the target
    does not take, or a zoo workload's knob value of the wrong kind, refused."""
    defaults = _defaults(target)
    _check_knobs(knobs, defaults, target.name)
    return tuple(enumerate_space(knobs, families, defaults)), space_grid(knobs, families, defaults)


def _check_knobs(knobs, defaults: Mapping[str, Any] | None, name: str) -> None:
    """A knob the target does not take, or a value a zoo workload refuses (`unroll=x`, as its
    overrides are checked), is a usage error, found before any compile (unless the target's own
    values could not be read: its candidates are then refused one by one). A user program's
    values are its own affair: calling it will tell."""
    if defaults is None:
        return
    unknown = [k for k in knobs if k not in defaults]
    if unknown:
        accepted = ", ".join(sorted(defaults))
        raise UnknownNameError(
            f"knob {unknown[0]!r}: {name!r} takes no override of that name"
            f"{did_you_mean(unknown[0], defaults)}; accepted: {accepted}"
        )
    if not user.is_entry(name):
        for key, values in knobs.items():
            for value in values:
                registry.check_override(name, key, value, defaults[key])


def _defaults(target: Target) -> dict[str, Any] | None:
    """The target's own knob values, or None where they cannot be read (nothing is left out)."""
    try:
        return target.defaults()
    except (XlafuseError, ValueError, TypeError, KeyError):
        return None


def _search(
    search: str, space, evaluator, budget_s: float, board, grid: SpaceGrid | None = None
) -> search_lib.SearchResult:
    """The search named (`SEARCHES`) over `space` (`grid`: the same as coordinates, for the
    descent), on the shared clock."""
    if search == "grid":
        return search_lib.grid(
            space, evaluator, GRID_EFFORT, on_trial=board.add, clock=_shared_clock
        )
    keep = getattr(evaluator, "keep", None)
    if search == "descent":
        if grid is None:
            raise ValueError("the descent searches a grid: pass the space's (space_grid)")
        return search_lib.coordinate_descent(
            grid,
            evaluator,
            budget_s,
            clock=_shared_clock,
            on_trial=board.add,
            keep=keep,
            finish_effort=FINISH_EFFORT,
        )
    order = halving_order(space)
    return search_lib.successive_halving(
        order, evaluator, budget_s, on_trial=board.add, keep=keep, clock=_shared_clock
    )


def halving_order(space: tuple[Candidate, ...], seed: int = ORDER_SEED) -> list[Candidate]:
    """The order successive halving's first round measures the space in: the default program
    first (every other is judged against it), the rest shuffled with a fixed seed, so that a
    budget that ends the first round early has measured a sample of the whole space, not the
    corner its enumeration starts in. The same space always gets the same order (and every
    process of a `jax.distributed` run the same one)."""
    rest = list(space[1:])
    random.Random(seed).shuffle(rest)
    return [*space[:1], *rest]


def _shared_clock() -> float:
    """This process's monotonic clock; process 0's under `jax.distributed`, where every process
    runs the same search: the budget read from one clock, each score over the slowest
    process's rounds (`xlafuse.measure.timing`), so all rank and keep the same candidates."""
    return lockstep.current().first(time.monotonic())


def _prove(prover, spec: dict[str, Any], say) -> tuple[Rerun | None, str]:
    """(the rerun, "") or (None, why it failed)."""
    say(f"rerun: {spec['winner']['name']} against the default, in a fresh process")
    try:
        return prover(spec), ""
    except XlafuseError as err:
        return None, str(err)


class _Leaderboard:
    """Prints each trial, and the three fastest so far after each round."""

    def __init__(self, say: Callable[[str], None]):
        self.say = say
        self.best: dict[Candidate, float] = {}
        self.round = 0

    def add(self, trial: search_lib.Trial) -> None:
        if trial.round != self.round:
            self.round = trial.round
            top = sorted(self.best.items(), key=lambda kv: kv[1])[:3]
            self.say("  leaders: " + "; ".join(f"{c.name} {_ms(t)} ms" for c, t in top))
        s = trial.score
        shown = f"{_ms(s.time_s)} ms" if s.ok else f"{s.status}: {s.detail}"
        self.say(f"  [round {trial.round}, effort {trial.effort}] {trial.candidate.name}: {shown}")
        if s.ok:
            self.best[trial.candidate] = s.time_s


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None or not math.isfinite(seconds) else f"{seconds * 1e3:.4g}"


def _spec(target: Target, default: Candidate, winner: Candidate) -> dict[str, Any]:
    return {
        "target": _portable_name(target.name),
        "settings": dict(target.settings),
        "overrides": dict(target.overrides),
        "figure": target.figure,
        "imports": list(user.imported()),
        "default": default.to_dict(),
        "winner": winner.to_dict(),
    }


def _portable_name(name: str) -> str:
    """An entry resolved to its absolute file, so a child in any folder finds it."""
    if ":" in name and user.is_file_target(name.rpartition(":")[0]):
        return user.parse_entry(name).resolved
    return name


def write(result: TuneResult, folder: Path) -> None:
    """`tune.jsonl` (one line per trial, then the conclusion) and `best.toml`."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps(
            {
                "candidate": t.candidate.to_dict(),
                "round": t.round,
                "effort": t.effort,
                **dataclasses.asdict(t.score),
            }
        )
        for t in result.search.trials
    ]
    summary = {
        "conclusion": result.conclusion(),
        "best": result.best.to_dict() if result.best else None,
        "confirmed": result.confirmed,
        "proof": result.proof.to_dict() if result.proof else None,
        "proof_error": result.proof_error,
        "figure": result.lead,
        "search": result.search_kind,
        "budget_s": result.budget_s,
        "budget_spent": result.search.budget_spent,
        "search_s": result.search.seconds,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    (folder / "tune.jsonl").write_text("\n".join([*lines, json.dumps(summary)]) + "\n")
    (folder / "best.toml").write_text(best_toml(result, folder))


def best_toml(result: TuneResult, folder: Path | None = None) -> str:
    """A config that runs the default program and the best candidate with `xlafuse run`: one
    workload with both as variants when only XLA options differ, else the target twice (as
    `default` and `tuned`, its knobs as overrides) under both variants."""
    target, best = result.target, result.best or result.space[0]
    winner = best.options()
    variants = '"default"' + (f", {_inline({'name': 'tuned', **winner})}" if winner else "")
    tuned_for = (
        [f"# tuned for {target.figure} time: the run's records hold both speedups"]
        if target.figure
        else []
    )
    lines = [
        f"# xlafuse tune: {result.conclusion()}",
        *tuned_for,
        "#   xlafuse run best.toml",
        "",
        "[experiment]",
        'name = "tune"',
        'output = "results/tune"',
        f"variants = [{variants}]",
        'reference = "default"',
    ]
    programs = [("default", {})] + ([("tuned", dict(best.knobs))] if best.knobs else [])
    for label, knobs in programs:
        lines += ["", "[[workloads]]", *_workload_lines(target, label, knobs, folder)]
    return "\n".join(lines) + "\n"


def _workload_lines(
    target: Target, label: str, knobs: Mapping[str, Any], folder: Path | None
) -> list[str]:
    is_entry = ":" in target.name
    lines = [
        f'entry = "{_entry_from(target.name, folder)}"' if is_entry else f'name = "{target.name}"'
    ]
    if is_entry:
        lines.append(f'name = "{label}"')
    for key in ("size", "mode", "dtype"):
        if target.settings.get(key) is not None and not (is_entry and key != "mode"):
            lines.append(f"{key} = {_value(target.settings[key])}")
    overrides = {**target.overrides, **knobs}
    if overrides:
        lines.append(f"overrides = {_inline(overrides)}")
    return lines


def _entry_from(name: str, folder: Path | None) -> str:
    """An entry as a config in `folder` names it: a file relative to that folder (a config's
    relative FILE is found from its own folder), so best.toml holds no path of this machine."""
    entry = _portable_name(name)
    file, sep, function = entry.rpartition(":")
    if folder is None or not sep or not Path(file).is_absolute():
        return entry
    return f"{os.path.relpath(file, Path(folder).resolve())}:{function}"


def _inline(table: Mapping[str, Any]) -> str:
    return "{ " + ", ".join(f"{k} = {_value(v)}" for k, v in table.items()) + " }"


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))
