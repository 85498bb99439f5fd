"""Results files: append-only JSON lines, one record per cell, written the moment the cell ends.

The file is append-only JSONL: a run killed half-way (Ctrl-C, OOM-kill, a dead machine) keeps
every finished cell, and re-running the same config skips them (`finished_cells`).

What keeps one file honest (besides one set of settings per file: `xlafuse.results.settings`):
- a last line cut short by a crash (no newline) is moved aside, bytes kept, by `repair_tail`,
  and `append_result` always starts on a new line, so the next record is never swallowed;
- `lock_folder` keeps a second run out of a folder that a run is writing to;
- `read_results` says which lines it skipped; a file with no record at all is an error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import time
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from xlafuse.errors import XlafuseError
from xlafuse.results.records import CellResult, plain

RESULTS_FILE = "results.jsonl"
LOCK_FILE = ".xlafuse.lock"


def repair_tail(path: str | Path) -> Path | None:
    """Move a torn last line (a write cut short: no final newline) aside, keeping its bytes.

    The file is cut back to its last complete line and the torn bytes go to
    `results.torn-<time>.txt` beside it, so the next record starts on a line of its own.

    Returns:
      The file holding the torn bytes, or None when the file ends cleanly (or does not exist).
    """
    path = Path(path)
    if not path.exists():
        return None
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return None
    keep = data.rfind(b"\n") + 1
    aside = _free_name(path.with_name(f"{path.stem}.torn-{time.strftime('%Y%m%d-%H%M%S')}.txt"))
    aside.write_bytes(data[keep:])
    with open(path, "r+b") as f:
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    return aside


def _free_name(path: Path) -> Path:
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
    return candidate


def move_aside(path: str | Path) -> Path | None:
    """Rename a results file to `results.<time>.jsonl.old` (a free name); None if absent."""
    path = Path(path)
    if not path.exists():
        return None
    aside = _free_name(path.with_name(f"{path.stem}.{time.strftime('%Y%m%d-%H%M%S')}.jsonl.old"))
    path.rename(aside)
    return aside


def prepare_output(folder: str | Path) -> Path:
    """Create the output folder if needed and check that results can be written there.

    Raises:
      XlafuseError: an empty name, a file, a path through a file, or a folder that cannot be
        created or written to; the message names the folder and the reason.
    """
    if not str(folder).strip():
        raise XlafuseError(
            "the output folder is an empty name; give a folder, e.g. --out results/x"
        )
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise XlafuseError(f"output folder {str(path)!r} is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".xlafuse-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
        results = path / RESULTS_FILE
        if results.exists():
            with open(results, "ab"):
                pass
    except (FileExistsError, NotADirectoryError):
        parent = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
        raise XlafuseError(
            f"cannot create output folder {str(path)!r}: {str(parent)!r} is a file"
        ) from None
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise XlafuseError(f"cannot write to output folder {str(path)!r}: {reason}") from None
    return path


@contextlib.contextmanager
def lock_folder(folder: str | Path) -> Iterator[Path]:
    """Hold an exclusive lock on an output folder for the `with` block.

    The lock is an `flock` on `folder/.xlafuse.lock`, which holds the PID of its holder; the
    kernel releases it when the holder exits, even by kill -9, so a lock is never left stale.

    Raises:
      XlafuseError: another process holds the folder (its PID is named).
    """
    path = Path(folder) / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise XlafuseError(
            f"output folder {str(folder)!r} is in use by another xlafuse run (PID {holder}); "
            "wait for it to end or pass another --out"
        ) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        os.ftruncate(fd, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def append_result(path: str | Path, record: CellResult | Mapping[str, Any]) -> None:
    """Append one record as a JSON line; flushed and fsynced before returning.

    If the file does not end with a newline (a torn write), the record starts on a new line, so
    it is never glued to the torn bytes.

    Args:
      path: the JSONL file (created with its folder if missing).
      record: a CellResult or a dict.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = record.to_dict() if isinstance(record, CellResult) else plain(record)
    line = json.dumps(data, sort_keys=False, default=str, allow_nan=True).encode() + b"\n"
    with open(path, "a+b") as f:
        f.seek(0, os.SEEK_END)
        if f.tell():
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                line = b"\n" + line
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


@dataclasses.dataclass(frozen=True)
class ResultsFile:
    """A results file as read: its records and the lines that were not records.

    Attributes:
      path: the file.
      records: every record, in file order.
      skipped: (line number, reason) of each non-blank line that is not a record.
    """

    path: Path
    records: tuple[CellResult, ...]
    skipped: tuple[tuple[int, str], ...] = ()

    def skipped_note(self) -> str | None:
        """One line saying how many lines were skipped and where; None if none were."""
        if not self.skipped:
            return None
        count = len(self.skipped)
        where = ", ".join(str(n) for n, _ in self.skipped[:10])
        more = ", ..." if count > 10 else ""
        return (
            f"{self.path}: skipped {count} line{'s' if count > 1 else ''} that "
            f"{'are' if count > 1 else 'is'} not a record (line{'s' if count > 1 else ''} "
            f"{where}{more}: {self.skipped[0][1]})"
        )


def results_file(path: str | Path) -> Path:
    """The results file a path stands for: the file itself, or a folder's results.jsonl.

    Raises:
      XlafuseError: a folder without results.jsonl, or no such file.
    """
    path = Path(path)
    if path.is_dir():
        inner = path / RESULTS_FILE
        if not inner.is_file():
            raise XlafuseError(f"folder {str(path)!r} has no {RESULTS_FILE}")
        return inner
    if not path.exists():
        raise XlafuseError(f"results file {str(path)!r} not found")
    return path


def read_results(path: str | Path) -> ResultsFile:
    """Read a results file (or a folder's results.jsonl), saying which lines were skipped.

    Raises:
      XlafuseError: not a results file: not UTF-8 text, or no line of it is a record.
    """
    path = results_file(path)
    records, skipped = parse_file(path)
    if skipped and not records:
        number, reason = skipped[0]
        raise XlafuseError(
            f"{path} is not a results file (JSON lines from `xlafuse run`): none of its "
            f"{len(skipped)} lines is a record (line {number}: {reason})"
        )
    return ResultsFile(path, tuple(records), tuple(skipped))


def parse_file(path: Path) -> tuple[list[CellResult], list[tuple[int, str]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise XlafuseError(
            f"{path} is not a results file: not UTF-8 text (byte {err.object[err.start]:#04x} "
            f"at offset {err.start})"
        ) from None
    records, skipped = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(CellResult.from_dict(json.loads(line)))
        except json.JSONDecodeError as err:
            skipped.append((number, f"not valid JSON ({err})"))
        except TypeError as err:
            skipped.append((number, f"not a cell record ({err})"))
        except XlafuseError as err:
            skipped.append((number, str(err)))
    return records, skipped


def load_results(path: str | Path) -> list[CellResult]:
    """Read every record of a JSONL file.

    A line that is not a record (a write cut short by a crash) is skipped with a warning.

    Raises:
      FileNotFoundError: no such file.
      XlafuseError: the file is not UTF-8 text.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"results file {str(path)!r} not found")
    records, skipped = parse_file(path)
    for number, reason in skipped:
        warnings.warn(
            f"{path}:{number}: skipping a record that is {reason}", RuntimeWarning, stacklevel=2
        )
    return records


def finished_cells(path: str | Path) -> dict[str, CellResult]:
    """Cells already measured with status "ok", by `cell_id` (error cells are run again).

    Returns an empty dict when the file does not exist.
    """
    path = Path(path)
    if not path.exists():
        return {}
    return {r.cell_id: r for r in parse_file(path)[0] if r.ok and r.cell_id}
