"""`tune`: the search, its proof and what it writes.

target -> space (`space`) -> a search (`search`: coordinate descent, successive halving or
the grid; each candidate measured by `evaluate`) -> the fastest candidate re-measured against
the default program in a fresh process (`rerun`) -> the lines printed; with an output folder,
`tune.jsonl` (every trial as it ends, the proof, the conclusion: `journal`, which also resumes
an interrupted tuning) and `best.toml` (a config `xlafuse run` reruns the two with: `best`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from xlafuse.distributed import lockstep, messages, runtime
from xlafuse.errors import UnknownNameError, XlafuseError, did_you_mean, error_line
from xlafuse.experiment.tune import journal as journal_lib
from xlafuse.experiment.tune import search as search_lib
from xlafuse.experiment.tune.best import best_toml, portable_name, toml_value
from xlafuse.experiment.tune.evaluate import Evaluator, Target
from xlafuse.experiment.tune.rerun import Rerun, rerun
from xlafuse.experiment.tune.space import (
    Candidate,
    Family,
    SpaceGrid,
    enumerate_space,
    space_grid,
    typed_knobs,
)
from xlafuse.folders import write_atomically
from xlafuse.kinds import Verdict
from xlafuse.measurement import timing
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
        return self.proof is not None and self.proof.verdict == Verdict.FASTER

    def conclusion(self) -> str:
        """One line: the winner and its proof, or why nothing beats the default."""
        if self.best is None:
            return "no candidate ran: see tune.jsonl for why each was refused"
        if self.best == self.space[0]:
            return "nothing beats the default program: it ranked first"
        if self.proof is None:
            why = self.proof_error or "not rerun"
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
    *,
    out: Path | None = None,
    prove: bool = True,
    say: Callable[[str], None] = print,
    evaluate: Callable[[Candidate, int], search_lib.Score] | None = None,
    prover: Callable[[dict[str, Any]], Rerun] = rerun,
    unproved: str = "",
    search: str = DEFAULT_SEARCH,
    imports: Sequence[str] | None = None,
) -> TuneResult:
    """Searches the space of `knobs` x `families` for `target` within `budget_s` seconds,
    then proves the fastest candidate against the default program in a fresh process.

    With `out`, every trial is appended to `out/tune.jsonl` as it ends, the proof and the
    conclusion after it, and `out/best.toml` is written last (`journal`): the folder is taken
    (checked, locked) before anything compiles, and a tune of the same tuning into it resumes,
    measuring no recorded trial again and running no recorded proof again.

    Args:
      target: the zoo workload or user program, with its fixed settings.
      knobs: override or keyword -> the values to try (typed against the target's own values:
        `space.typed_knobs`).
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
      unproved: why the proof is not run, when `prove` is False ("not rerun (--no-rerun)").
      imports: the user's files (absolute) and modules the target needs imported, for
        best.toml (None: the file that registered a zoo name of the user's, if it is one).

    Raises:
      XlafuseError: a knob the target does not take or a value it refuses; an output folder
        that cannot be written, is held by another process, or holds another tuning or other
        files (`journal.open_journal`); the default program itself could not be built,
        compiled or run; a file that could not be written (it is named).
    """
    defaults = knob_defaults(target)
    knobs = _checked_knobs(knobs, defaults, target.name)
    space, grid = _space(knobs, families, defaults)
    layout = runtime.layout()
    budget = budget_s if search != "grid" else None
    imports = tuple(imports) if imports is not None else _imports(target)
    _check_toml(out)
    head = _header(target, knobs, families, search, budget, defaults, imports, layout)
    with contextlib.ExitStack() as held:
        journal, history = _history(out, head, layout, held, say)
        evaluator = evaluate or Evaluator(target, default=space[0])
        board = _Leaderboard(say, _default_label(knobs, defaults))
        replay = _replay(history, journal, evaluator, board)
        say(_start_line(len(space), budget_s, budget))
        result = _search(search, space, replay, budget_s, replay, grid, clock=replay.clock)
        _check_default_ran(result)
        best = result.ranked[0] if result.ranked else None
        proof, error = _proof(
            target, space[0], best, history, journal, prover, say, prove=prove, unproved=unproved
        )
        found = TuneResult(target, space, result, best, proof, error, replay.lead, search, budget)
        _report(found, journal, history, say, imports=imports, processes=layout.processes)
    return found


def _replay(history, journal, evaluator, board: _Leaderboard) -> journal_lib.Replay:
    """The evaluator of a tune's trials behind its journal: a recorded trial replayed, a new
    one measured, written (`_writer`) and shown on the leaderboard as it ends."""
    return journal_lib.Replay(
        history, evaluator, clock=_shared_clock, write=_writer(journal), show=board.add
    )


def _start_line(count: int, budget_s: float, budget: float | None) -> str:
    """The line a tune starts with: its candidates and its budget (none for the grid)."""
    plural = "s" if count != 1 else ""
    how = f"budget {budget_s:g} s" if budget is not None else "the whole grid, no budget"
    return f"tune: {count} candidate{plural}, {how}"


def _proof(
    target, default: Candidate, best, history, journal, prover, say, *, prove: bool, unproved: str
) -> tuple[Rerun | None, str]:
    """The fresh-process proof of `best` against the default program, and why there is none
    (`unproved`; "not rerun" without `prove`; "" when there is one or `best` is the default).
    A proof the journal holds is replayed, not run again; a new one is recorded in it."""
    proof, error = None, unproved or ("" if prove else "not rerun")
    if prove and best is not None and best != default:
        spec = _spec(target, default, best)
        proof, error = _recorded_proof(history, best, say) or _prove(prover, spec, say)
        _record_proof(journal, history, default, best, proof)
    return proof, error


def knob_defaults(target: Target) -> dict[str, Any] | None:
    """The target's own knob values (`Target.defaults`), or None where they cannot be read
    (nothing is then typed or left out)."""
    try:
        return target.defaults()
    except (XlafuseError, ValueError, TypeError, KeyError):
        return None


def _history(out, head, layout: runtime.Layout, held, say):
    """(the journal of `out`, or None; the tuning's history there). Under `jax.distributed`
    process 0 alone reads and writes the folder: what it read, or why it refused it, reaches
    the other processes (`messages.share`), so every one replays the same trials."""
    journal, message = None, {"lines": []}
    if out is not None:
        try:
            journal = held.enter_context(journal_lib.open_journal(out, head))
        except Exception as err:
            messages.share({"error": error_line(err)}, layout.processes)
            raise
        message = {"lines": journal.lines}
    message = messages.share(message, layout.processes)
    if "error" in message:
        raise XlafuseError(message["error"])
    history = journal_lib.History.of(message["lines"])
    if journal is not None:
        _say_resumed(journal, history, say)
    return journal, history


def _say_resumed(journal: journal_lib.Journal, history: journal_lib.History, say) -> None:
    if journal.torn is not None:
        say(f"tune: a torn last line of {journal.path} was moved aside to {journal.torn}")
    for note in history.skipped:
        say(f"tune: {journal.path} {note}: skipped")
    if journal.resumed:
        count = len(history.trials)
        trials = f"{count} trial{'s' if count != 1 else ''}"
        proved = " and the proof" if history.proofs else ""
        say(f"tune: resuming {journal.path}: {trials}{proved} measured before, not measured again")


def _writer(journal: journal_lib.Journal | None):
    return journal.append if journal is not None else None


def _recorded_proof(history: journal_lib.History, best: Candidate, say):
    """(the proof of `best` recorded by an earlier process, "") or None."""
    recorded = history.proofs.get(best)
    if recorded is None:
        return None
    try:
        proof = Rerun.from_dict(recorded)
    except (TypeError, ValueError, KeyError):
        return None
    say(f"rerun: {best.name} against the default: recorded, not run again")
    return proof, ""


def _record_proof(journal, history, default: Candidate, best: Candidate, proof) -> None:
    if journal is None or proof is None or best in history.proofs:
        return
    journal.append({
        "kind": journal_lib.PROOF, "default": default.to_dict(), "winner": best.to_dict(),
        "proof": proof.to_dict(),
    })  # fmt: skip


def _report(
    found: TuneResult,
    journal: journal_lib.Journal | None,
    history: journal_lib.History,
    say,
    *,
    imports: Sequence[str],
    processes: int,
) -> None:
    """The conclusion, where the time went (on a GPU), and the files written."""
    say(found.conclusion())
    if found.proof is not None and found.proof.evidence is not None:
        for line in found.proof.evidence.lines():
            say(line)
    if journal is None:
        return
    summary = _summary(found)
    if not _same_conclusion(history.conclusion, summary):
        journal.append(summary)
    folder = journal.path.parent
    best = folder / journal_lib.BEST_FILE
    text = best_toml(found, folder=folder, imports=imports, processes=processes)
    write_atomically(best, lambda temp: temp.write_text(text, encoding="utf-8"), noun="config")
    say(f"wrote {journal.path} and {best}")


def _summary(result: TuneResult) -> dict[str, Any]:
    return {
        "kind": journal_lib.CONCLUSION,
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


_CONCLUDED = ("conclusion", "best", "confirmed", "proof", "proof_error")


def _same_conclusion(recorded: Mapping[str, Any] | None, summary: Mapping[str, Any]) -> bool:
    """Whether the file's last conclusion says what this one says (a rerun of a finished
    tuning then writes none)."""
    if recorded is None:
        return False
    now = json.loads(json.dumps({k: summary[k] for k in _CONCLUDED}, default=str))
    return all(recorded.get(k) == now[k] for k in _CONCLUDED)


def _check_default_ran(result: search_lib.SearchResult) -> None:
    first = result.trials[0].score if result.trials else None
    if first is None or not first.ok:
        raise XlafuseError(f"the default program did not run: {first.detail if first else '-'}")


def _checked_knobs(knobs, defaults: Mapping[str, Any] | None, name: str) -> dict[str, tuple]:
    """The knobs typed against the target's own values (`typed_knobs`) and checked: a knob
    the target does not take, a value a zoo workload refuses, or one best.toml could not hold
    is a usage error, found before any compile."""
    try:
        typed = typed_knobs(knobs, defaults)
    except ValueError as err:
        raise XlafuseError(str(err)) from None
    _check_knobs(typed, defaults, name)
    for key, values in typed.items():
        for value in values:
            try:
                toml_value(value)
            except TypeError as err:
                raise XlafuseError(f"knob {key}={value!r}: {err}") from None
    return typed


def _space(knobs, families, defaults) -> tuple[tuple[Candidate, ...], SpaceGrid]:
    """The candidates, the default program first, and the same as a grid."""
    return tuple(enumerate_space(knobs, families, defaults=defaults)), space_grid(
        knobs, families, defaults=defaults
    )


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


def _default_label(knobs, defaults: Mapping[str, Any] | None) -> str:
    """How the default program is shown: with its own values of the knobs searched."""
    own = [f"{k}={defaults[k]}" for k in knobs if defaults is not None and k in defaults]
    return f"default ({' '.join(own)})" if own else "default"


def _imports(target: Target) -> tuple[str, ...]:
    """The file whose import registered the target, a zoo name of the user's (`--import`);
    () for the zoo's own and an entry (its own file is in best.toml)."""
    if user.is_entry(target.name):
        return ()
    try:
        module = sys.modules.get(registry.spec(target.name).builder.__module__)
    except XlafuseError:
        return ()
    path = getattr(module, "__file__", None)
    if module is None or module.__name__.startswith("xlafuse.") or path is None:
        return ()
    return (str(Path(path).resolve()),)


def _check_toml(out: Path | None) -> None:
    """An output folder whose name best.toml could not hold is refused before the search."""
    try:
        toml_value(str(out or ""))
    except TypeError as err:
        raise XlafuseError(f"output folder {str(out)!r}: {err}") from None


def _header(target, knobs, families, search, budget, defaults, imports, layout) -> dict:
    """The tuning, as tune.jsonl's first line names it (`journal.check_header` compares)."""
    return {
        "kind": journal_lib.HEADER,
        "format": journal_lib.FORMAT,
        "target": portable_name(target.name),
        "source_sha256": _source_sha256(target.name),
        "settings": dict(target.settings),
        "overrides": dict(target.overrides),
        "figure": target.figure,
        "knobs": {k: list(v) for k, v in knobs.items()},
        "knob_defaults": {k: defaults[k] for k in knobs if defaults and k in defaults},
        "space": [f.name for f in families],
        "search": search,
        "budget_s": budget,
        "imports": list(imports),
        "processes": layout.processes,
        "process_devices": layout.process_devices,
        **journal_lib.environment(),
    }


def _source_sha256(name: str) -> str | None:
    """The hash of the file that defines a program of the user's (None for the zoo's)."""
    try:
        if user.is_entry(name):
            return user.source_sha256(user.parse_entry(portable_name(name)))
        return registry.source_sha256(name)
    except (XlafuseError, OSError, KeyError):
        return None


def _search(
    search: str,
    space,
    evaluator,
    budget_s: float,
    board,
    grid: SpaceGrid | None = None,
    *,
    clock: Callable[[], float] | None = None,
) -> search_lib.SearchResult:
    """The search named (`SEARCHES`) over `space` (`grid`: the same as coordinates, for the
    descent), each trial handed to `board.add`, on `clock` (the shared clock when None)."""
    clock = clock or _shared_clock
    if search == "grid":
        return search_lib.grid(space, evaluator, GRID_EFFORT, on_trial=board.add, clock=clock)
    keep = getattr(evaluator, "keep", None)
    if search == "descent":
        if grid is None:
            raise ValueError("the descent searches a grid: pass the space's (space_grid)")
        return search_lib.coordinate_descent(
            grid,
            evaluator,
            budget_s,
            clock=clock,
            on_trial=board.add,
            keep=keep,
            finish_effort=FINISH_EFFORT,
        )
    order = halving_order(space)
    return search_lib.successive_halving(
        order, evaluator, budget_s, on_trial=board.add, keep=keep, clock=clock
    )


def halving_order(space: tuple[Candidate, ...], *, seed: int = ORDER_SEED) -> list[Candidate]:
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
    process's rounds (`xlafuse.measurement.timing`), so all rank and keep the same candidates."""
    return lockstep.current().first(time.monotonic())


def _prove(prover, spec: dict[str, Any], say) -> tuple[Rerun | None, str]:
    """(the rerun, "") or (None, why it failed)."""
    say(f"rerun: {spec['winner']['name']} against the default, in a fresh process")
    try:
        return prover(spec), ""
    except XlafuseError as err:
        return None, str(err)


class _Leaderboard:
    """Prints each trial (one given back from tune.jsonl marked so), and the three fastest so
    far after each round."""

    def __init__(self, say: Callable[[str], None], default_label: str = "default"):
        self.say = say
        self.default_label = default_label
        self.best: dict[Candidate, float] = {}
        self.round = 0

    def add(self, trial: search_lib.Trial, recorded: bool = False) -> None:
        if trial.round != self.round:
            self.round = trial.round
            top = sorted(self.best.items(), key=lambda kv: kv[1])[:3]
            self.say("  leaders: " + "; ".join(f"{self._name(c)} {_ms(t)} ms" for c, t in top))
        s = trial.score
        shown = f"{_ms(s.time_s)} ms" if s.ok else f"{s.status}: {s.detail}"
        mark = " (recorded)" if recorded else ""
        name = self._name(trial.candidate)
        self.say(f"  [round {trial.round}, effort {trial.effort}] {name}: {shown}{mark}")
        if s.ok:
            self.best[trial.candidate] = s.time_s

    def _name(self, candidate: Candidate) -> str:
        name = candidate.name
        return self.default_label if name == "default" else name


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None or not math.isfinite(seconds) else f"{seconds * 1e3:.4g}"


def _spec(target: Target, default: Candidate, winner: Candidate) -> dict[str, Any]:
    return {
        "target": portable_name(target.name),
        "settings": dict(target.settings),
        "overrides": dict(target.overrides),
        "figure": target.figure,
        "imports": list(user.imported()),
        "default": default.to_dict(),
        "winner": winner.to_dict(),
    }
