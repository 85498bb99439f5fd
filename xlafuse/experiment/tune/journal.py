"""tune.jsonl: what `xlafuse tune` measured, one line the moment each trial ends, so that an
interrupted tuning resumes where it stopped, and a folder holds one tuning only.

The first line is the header: which tuning this is (`header`: the target, its settings and
overrides, the knobs and option families searched, the search and its budget, the imports, the
processes, the backend and versions). Every later line is a trial, the proof, or a conclusion
(its `kind`). A tune into a folder is refused, one line, before anything compiles
(`open_journal`), where the folder holds another tuning (its header differs: what differs is
named), a `tune.jsonl` that is no tune's, an `xlafuse run`'s `results.jsonl`, or a `best.toml`
that no `tune.jsonl` there accounts for; and while another process holds its lock (the one
`xlafuse run` takes, `records.lock_folder`). The same tuning resumes: its recorded trials are
given back to the search instead of measured again (`Replay`), on a clock that stands at each
one's recorded time, so that the search decides as it did; a recorded proof of the same winner
is not run again. Every line is appended and fsynced (`records.append_result`); a torn last
line is moved aside first (`records.repair_tail`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jaxlib

from xlafuse import __version__ as XLAFUSE_VERSION
from xlafuse.errors import XlafuseError
from xlafuse.experiment import interrupts
from xlafuse.experiment.tune.rerun import candidate_from
from xlafuse.experiment.tune.search import Score, Trial
from xlafuse.experiment.tune.space import Candidate
from xlafuse.folders import writable_folder
from xlafuse.results import records
from xlafuse.results.settings import shown_differences

TUNE_FILE = "tune.jsonl"
BEST_FILE = "best.toml"
FORMAT = 1  # the header's `format`: a newer file is refused, not misread
HEADER, TRIAL, PROOF, CONCLUSION = "tune", "trial", "proof", "conclusion"
_NOT_COMPARED = ("created",)  # header keys that may differ on a resume


def environment() -> dict[str, Any]:
    """What a tuning is measured under besides its own settings: backend, device, XLA_FLAGS
    and the versions (a resume under others would mix measurements)."""
    return {
        "backend": jax.default_backend(),
        "device_kind": jax.devices()[0].device_kind,
        "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "xlafuse": XLAFUSE_VERSION,
    }


def trial_record(trial: Trial, figure: str | None, elapsed_s: float) -> dict[str, Any]:
    """A trial's line: its candidate, round, effort, score, the figure ranked and the search
    clock when it ended."""
    return {
        "kind": TRIAL,
        "candidate": trial.candidate.to_dict(),
        "round": trial.round,
        "effort": trial.effort,
        **dataclasses.asdict(trial.score),
        "figure": figure,
        "elapsed_s": elapsed_s,
    }


@dataclasses.dataclass(frozen=True)
class Recorded:
    """A trial measured by an earlier process: its score, the figure ranked, and the search
    clock when it ended."""

    score: Score
    figure: str | None
    elapsed_s: float


@dataclasses.dataclass(frozen=True)
class History:
    """What a tune.jsonl holds of its tuning, past its header.

    Attributes:
      trials: (candidate, effort) -> its recorded trial.
      proofs: the winner -> its recorded proof (`Rerun.to_dict()`).
      conclusion: the last conclusion recorded (None: none).
      skipped: "line N: why" of each line that could not be read (left in the file).
    """

    trials: Mapping[tuple[Candidate, int], Recorded] = dataclasses.field(default_factory=dict)
    proofs: Mapping[Candidate, dict[str, Any]] = dataclasses.field(default_factory=dict)
    conclusion: dict[str, Any] | None = None
    skipped: tuple[str, ...] = ()

    @classmethod
    def of(cls, lines: Sequence[Any], *, first_line: int = 2) -> History:
        """From the records after the header (JSON values, one per line)."""
        trials, proofs, conclusion, skipped = {}, {}, None, []
        for number, record in enumerate(lines, first_line):
            try:
                if not isinstance(record, dict):
                    raise ValueError("not a JSON object")
                kind = record["kind"]
                if kind == TRIAL:
                    key, recorded = _trial(record)
                    trials.setdefault(key, recorded)
                elif kind == PROOF:
                    proofs[candidate_from(record["winner"])] = _proof(record)
                elif kind == CONCLUSION:
                    conclusion = record
                else:
                    raise ValueError(f"unknown kind {kind!r}")
            except (KeyError, TypeError, ValueError, AttributeError) as err:
                skipped.append(f"line {number}: {_why(err)}")
        return cls(trials, proofs, conclusion, tuple(skipped))


def _trial(record: Mapping[str, Any]) -> tuple[tuple[Candidate, int], Recorded]:
    candidate = candidate_from(record["candidate"])
    hash(candidate)  # a list among the knobs: not a candidate of a space
    effort, status, elapsed = record["effort"], record["status"], record["elapsed_s"]
    time_s, compile_s, detail = record["time_s"], record.get("compile_s"), record["detail"]
    if not (_is_int(effort) and effort >= 1 and isinstance(status, str)):
        raise ValueError("a trial's effort or status of the wrong type")
    if not (_is_number(elapsed) and (time_s is None or (_is_number(time_s) and time_s > 0))):
        raise ValueError("a trial's time of the wrong type")
    if not (isinstance(detail, str) and (compile_s is None or _is_number(compile_s))):
        raise ValueError("a trial's detail or compile time of the wrong type")
    figure = record.get("figure")
    score = Score(status, time_s, detail, compile_s)
    return (candidate, effort), Recorded(
        score, figure if isinstance(figure, str) else None, elapsed
    )


def _proof(record: Mapping[str, Any]) -> dict[str, Any]:
    proof = record["proof"]
    if not isinstance(proof, Mapping) or not _is_number(proof.get("speedup")):
        raise ValueError("a proof without its speedup")
    return dict(proof)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _why(err: BaseException) -> str:
    if isinstance(err, KeyError):
        return f"no {err.args[0]!r}"
    return str(err) or type(err).__name__


class Journal:
    """A tuning's tune.jsonl, opened for this process to append to (`open_journal`).

    Attributes:
      path: the file.
      lines: the records after its header, as read when it was opened.
      resumed: whether the file held this tuning already.
      torn: where a torn last line was moved aside (None: none).
    """

    def __init__(self, path: Path, lines: list[Any], resumed: bool, torn: Path | None):
        self.path, self.lines, self.resumed, self.torn = path, lines, resumed, torn

    def append(self, record: Mapping[str, Any]) -> None:
        """Appends one line, fsynced.

        Raises:
          XlafuseError: it could not be written (a full disk): the file is named, and what
            was written before is kept.
        """
        try:
            records.append_result(self.path, record)
        except OSError as err:
            reason = err.strerror or type(err).__name__
            raise XlafuseError(
                f"cannot write to {str(self.path)!r}: {reason} (the lines written before are kept)"
            ) from None
        interrupts.check()  # a Ctrl-C that Python swallowed stops the tune here


@contextlib.contextmanager
def open_journal(folder: str | Path, header: Mapping[str, Any]) -> Iterator[Journal]:
    """Takes the tune's output folder for the `with` block: created and checked writable, its
    lock held, refused unless it is empty of other results or holds this tuning; a new file
    gets the header.

    Raises:
      XlafuseError: one line: the folder cannot be written, another process holds it, or it
        holds another tuning or another kind of file (`check_folder`).
    """
    folder = writable_folder(folder, "output folder")
    with records.lock_folder(folder):
        path = folder / TUNE_FILE
        check_folder(folder)
        lines = read_lines(path)
        resumed = bool(lines)
        if resumed:  # before a torn tail is set aside: another tuning's file is left alone
            check_header(path, lines[0], header)
        torn = records.repair_tail(path)
        journal = Journal(path, lines[1:], resumed, torn)
        if not resumed:
            journal.append({**header, "created": time.strftime("%Y-%m-%dT%H:%M:%S")})
        yield journal


def check_folder(folder: Path) -> None:
    """Refuses a folder holding files of another kind than a tuning's.

    Raises:
      XlafuseError: an `xlafuse run`'s results.jsonl, or a best.toml without a tune.jsonl.
    """
    if (folder / records.RESULTS_FILE).exists():
        raise XlafuseError(
            f"output folder {str(folder)!r} holds the results of an `xlafuse run` "
            f"({records.RESULTS_FILE}): a tune writes into a folder of its own; pass another --out"
        )
    tune_file = folder / TUNE_FILE
    if (folder / BEST_FILE).exists() and not (tune_file.exists() and tune_file.stat().st_size):
        raise XlafuseError(
            f"output folder {str(folder)!r} holds a {BEST_FILE} that no {TUNE_FILE} there "
            "accounts for: not a tune's folder; pass another --out"
        )


def read_lines(path: Path) -> list[Any]:
    """The file's whole lines (a torn last one left out) as JSON values (a line that is not
    JSON: None); [] when it is absent or has no whole line.

    Raises:
      XlafuseError: its first line is not a JSON object (not a tune's file).
    """
    data = path.read_bytes() if path.exists() else b""
    whole = data[: data.rfind(b"\n") + 1].decode("utf-8", errors="replace")
    out = []
    for line in whole.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            out.append(None)
    if out and not isinstance(out[0], dict):
        raise XlafuseError(
            f"{path} is not a tune's file (line 1 is no tune header): pass another --out"
        )
    return out


def check_header(path: Path, first: Mapping[str, Any], header: Mapping[str, Any]) -> None:
    """Refuses a file whose header is not this tuning's.

    Raises:
      XlafuseError: the file is another program's, an older xlafuse tune's (no header), a
        newer one's, or another tuning's (the first three settings that differ are named).
    """
    if first.get("kind") != HEADER:
        older = " (an older xlafuse tune's: no header line)" if "candidate" in first else ""
        raise XlafuseError(f"{path} is not a tune's file{older}: pass another --out")
    if not _is_int(first.get("format")) or first["format"] > FORMAT:
        raise XlafuseError(
            f"{path} was written by a newer xlafuse (format {first.get('format')!r}; this one "
            f"reads {FORMAT}): pass another --out"
        )
    differences = _differences(first, header)
    if differences:
        raise XlafuseError(
            f"{path} holds another tuning ({shown_differences(differences)}): resuming would "
            "mix them; pass "
            "another --out"
        )


def _differences(recorded: Mapping[str, Any], header: Mapping[str, Any]) -> list[str]:
    now = json.loads(json.dumps(header, default=str))
    keys = [k for k in now if k not in _NOT_COMPARED]
    keys += [k for k in recorded if k not in now and k not in _NOT_COMPARED]
    return [
        f"{key}: {_show(recorded.get(key))} in the file, {_show(now.get(key))} now"
        for key in keys
        if recorded.get(key) != now.get(key)
    ]


def _show(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


class Replay:
    """The search's `evaluate`, `clock` and `on_trial` (`add`) over a tuning's history: a recorded
    (candidate, effort) is given back instead of measured, with the clock set to when it ended;
    a new one is measured and written (`write`).

    Attributes:
      replayed: how many trials were given back.
      lead: the figure ranked (the evaluator's, else the records').
    """

    def __init__(
        self,
        history: History,
        evaluate: Callable[[Candidate, int], Score],
        *,
        clock: Callable[[], float],
        write: Callable[[Mapping[str, Any]], None] | None = None,
        show: Callable[[Trial, bool], None] | None = None,
    ):
        self.history, self._evaluate, self._base, self._write = history, evaluate, clock, write
        self._show = show
        self._offset, self._anchor = 0.0, clock()
        self._replaying = False
        self.replayed = 0
        self._figure = next((r.figure for r in history.trials.values() if r.figure), None)

    @property
    def lead(self) -> str | None:
        return getattr(self._evaluate, "lead", None) or self._figure

    def keep(self, candidates: Sequence[Any]) -> None:
        keep = getattr(self._evaluate, "keep", None)
        if keep is not None:
            keep(candidates)

    def clock(self) -> float:
        """Seconds of the search: the recorded time of the last trial given back, then on."""
        return self._offset + (self._base() - self._anchor)

    def __call__(self, candidate: Candidate, effort: int) -> Score:
        recorded = self.history.trials.get((candidate, effort))
        self._replaying = recorded is not None
        if recorded is None:
            return self._evaluate(candidate, effort)
        self._offset, self._anchor = recorded.elapsed_s, self._base()
        self.replayed += 1
        return recorded.score

    def add(self, trial: Trial) -> None:
        """The search's `on_trial`: writes a trial just measured (not one given back), then
        shows it."""
        elapsed = self.clock()  # on every process: under jax.distributed the clock is collective
        if not self._replaying and self._write is not None:
            self._write(trial_record(trial, self.lead, elapsed))
        if self._show is not None:
            self._show(trial, self._replaying)
