"""Result records: one `CellResult` per cell (workload x variant), one JSON line each, written the
moment the cell ends.

The file is append-only JSONL: a run killed half-way (Ctrl-C, OOM-kill, a dead machine) keeps
every finished cell, and re-running the same config skips them (`finished_cells`). A record is
read back with every key kept: those this version does not know stay in `extra`, and a newer
`schema_version` is refused with a message (`check_schema_version`). Files without the key are
schema 1, as published in `experiments/`.

What keeps one file honest (besides one set of settings per file: `xlafuse.results.settings`):
- a last line cut short by a crash (no newline, not JSON) is moved aside, bytes kept, by
  `repair_tail`, and `append_result` always starts on a new line, so the next record is never
  swallowed; a write that fails (a full disk, Ctrl-C) is cut back, so the file ends on its last
  whole record;
- `lock_folder` keeps a second run out of a folder that a run is writing to;
- `check_appendable` keeps records out of a file of another program;
- a line is a record only if each known field has its type (`FLAT_TYPES`: `"time_median_s":
  "fast"` is no record); `read_results` says which lines it skipped, `load_results` warns of
  each (`SkippedLineWarning`); a file with no record at all is an error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import time
import typing
import warnings
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from xlafuse.errors import XlafuseError
from xlafuse.folders import writable_folder
from xlafuse.kinds import Framework, Status, member
from xlafuse.results import parts
from xlafuse.results.parts import plain

RESULTS_FILE = "results.jsonl"
LOCK_FILE = ".xlafuse.lock"
SCHEMA_VERSION = 1


@dataclasses.dataclass(frozen=True)
class CellResult:
    """What one cell measured: its name, then one part per source of its figures.

    Times in seconds, sizes in bytes, rates per second.

    The cell's name (the record's own fields): workload, size, mode, dtype (resolved;
    `dtype_requested` is the config's value or None), overrides, devices and parallelism (a
    sharded cell: devices > 1, "data" or "model"), processes and process_devices (a cell of
    several `jax.distributed` processes: how many, and the devices of each; 1 and None on
    one process), variant (and its config form, variant_options), framework (`Framework`:
    "jax", or "torch" for a PyTorch twin, `xlafuse.torch`) and
    framework_version, implementation (issue 46: what computed the cell, "xla" for the
    workload's own program, else what `impl=NAME` named; None for a PyTorch twin and records
    written before) and interpreted (its program ran a Pallas kernel in interpret mode: its
    times are the interpreter's, never compared with a compiled program's), reference (the
    variant speedups compare with), backend, device_kind;
    `cell_id` joins them (the resume key); experiment names the run. A program of the user's
    also has `entry` (its `FILE.py:FUNCTION` as the config wrote it; None for a registered
    workload), `source_sha256` (the hash of its source: the file that defines it, an entry's or
    the imported file that registered it, and the modules of the user's that file imports;
    `xlafuse.models.user.source_files`; None for the zoo's workloads) and `source_files` (the
    files hashed, by path relative to the defining file's folder -> SHA-256; empty where not
    known), so a resume names the file that changed.

    Its parts (`xlafuse.results.parts`, each a frozen record of one source): model, compile,
    fusion, timing, speedup, device, trace, rates, ceilings, numerics, cold_start,
    collectives, comm, per_process (each process's own figures; its timing is then the slowest
    process's in each round). A part that was not measured holds its defaults (None, or an empty
    mapping), e.g. `device` without a GPU profile, `cold_start` without `measure.cold_start`.
    Scaling against one device is derived from two records (`xlafuse.results.scaling`): this
    one and the cell with devices = 1 of the same workload, global batch and variant.

    status is `Status.OK` or `Status.ERROR` (then `error` holds the message, `error_type` its exception's
    name, and most figures are None); wall_s: the cell's own wall time.
    settings: what the measurement depends on besides the cell's name (`cell_settings`); a
    results file holds records of one set of settings only (`check_resumable`). env: the
    versions and machine (`xlafuse.experiment.environment.environment`).
    schema_version: the record format (`SCHEMA_VERSION`; a newer one is refused on read,
    `check_schema_version`). extra: keys of a read record that this version does not know,
    kept and written back unchanged.

    On disk a record is one flat JSON object (`to_dict`, `from_dict`): the name's fields as they
    are, each part's fields under their flat keys (`Part.flat_keys`: `timing.median_s` is
    `time_median_s`), the same keys as the schema-1 files published in `experiments/`.
    """

    workload: str
    size: str
    mode: str
    dtype: str | None
    variant: str
    backend: str
    device_kind: str
    status: Status = Status.OK
    error: str | None = None
    error_type: str | None = None
    cell_id: str = ""
    experiment: str = ""
    dtype_requested: str | None = None
    overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    entry: str | None = None
    source_sha256: str | None = None
    source_files: Mapping[str, str] = dataclasses.field(default_factory=dict)
    devices: int = 1
    parallelism: str | None = None
    processes: int = 1
    process_devices: int | None = None
    reference: str = "default"
    variant_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    framework: Framework = Framework.JAX
    framework_version: str | None = None
    implementation: str | None = None
    interpreted: bool = False
    model: parts.ModelRecord = dataclasses.field(default_factory=parts.ModelRecord)
    compile: parts.CompileRecord = dataclasses.field(default_factory=parts.CompileRecord)
    fusion: parts.FusionRecord = dataclasses.field(default_factory=parts.FusionRecord)
    timing: parts.TimingRecord = dataclasses.field(default_factory=parts.TimingRecord)
    speedup: parts.SpeedupRecord = dataclasses.field(default_factory=parts.SpeedupRecord)
    device: parts.DeviceRecord = dataclasses.field(default_factory=parts.DeviceRecord)
    trace: parts.TraceRecord = dataclasses.field(default_factory=parts.TraceRecord)
    rates: parts.RatesRecord = dataclasses.field(default_factory=parts.RatesRecord)
    ceilings: parts.CeilingsRecord = dataclasses.field(default_factory=parts.CeilingsRecord)
    numerics: parts.NumericsRecord = dataclasses.field(default_factory=parts.NumericsRecord)
    cold_start: parts.ColdStartRecord = dataclasses.field(default_factory=parts.ColdStartRecord)
    collectives: parts.CollectivesRecord = dataclasses.field(
        default_factory=parts.CollectivesRecord
    )
    comm: parts.CommRecord = dataclasses.field(default_factory=parts.CommRecord)
    per_process: parts.ProcessesRecord = dataclasses.field(default_factory=parts.ProcessesRecord)
    wall_s: float | None = None
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    env: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in _OWN_FIELDS:
            object.__setattr__(self, name, plain(getattr(self, name)))
        # the boundary: a record's status and framework are members from here on
        object.__setattr__(self, "status", member(Status, self.status, "status"))
        object.__setattr__(self, "framework", member(Framework, self.framework, "framework"))

    @property
    def ok(self) -> bool:
        """True when the cell ran to the end."""
        return self.status == Status.OK

    def to_dict(self) -> dict[str, Any]:
        """The flat JSON form written to disk; `extra` keys are written back as read."""
        flat: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name in PARTS:
                flat.update(value.flat())
            elif field.name != "extra":
                flat[field.name] = value
        return {**plain(self.extra), **flat}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CellResult:
        """From a flat JSON record; keys this version does not know are kept in `extra`.

        Raises:
          TypeError: `data` is not a mapping, lacks a required key, or has a known key whose
            value is of another type (`FLAT_TYPES`; the message names each such key).
          XlafuseError: a schema_version this version cannot read (newer, or not a version).
        """
        if not isinstance(data, Mapping):
            raise TypeError(f"a record is a JSON object, not {type(data).__name__}")
        missing = [key for key in REQUIRED_KEYS if key not in data]
        if missing:
            raise TypeError(
                f"a record is a JSON object with the keys {', '.join(REQUIRED_KEYS)}; this one "
                f"has no {', '.join(missing)}"
            )
        check_schema_version(data.get("schema_version", 1))
        wrong = [
            parts.wrong_type(key, data[key], hint)
            for key, hint in FLAT_TYPES.items()
            if key in data and not parts.has_type(data[key], hint)
        ]
        pairs = [k for k in FLAT_PAIRS if k in data and parts.has_type(data[k], FLAT_TYPES[k])]
        wrong += [problem for key in pairs if (problem := parts.wrong_pair(key, data[key]))]
        if wrong:
            raise TypeError("; ".join(wrong))
        fields, unknown = unflatten(data)
        return cls(**fields, extra=unknown)


# The record's parts by field name, and its own fields (the cell's name, status, settings...).
PARTS: dict[str, type[parts.Part]] = {
    f.name: f.default_factory
    for f in dataclasses.fields(CellResult)
    if isinstance(f.default_factory, type) and issubclass(f.default_factory, parts.Part)
}
_OWN_FIELDS = tuple(f.name for f in dataclasses.fields(CellResult) if f.name not in PARTS)
# The keys every record has: the cell's name, which has no default.
REQUIRED_KEYS = tuple(
    f.name
    for f in dataclasses.fields(CellResult)
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
)


def _flat_keys() -> dict[str, tuple[str | None, str]]:
    """Flat key -> (part or None for the record's own field, field name); each key once."""
    keys: dict[str, tuple[str | None, str]] = {n: (None, n) for n in _OWN_FIELDS if n != "extra"}
    for part, kind in PARTS.items():
        for name, key in kind.flat_keys().items():
            if key in keys:
                raise AssertionError(f"flat key {key!r} of {part}.{name} is also {keys[key]}")
            keys[key] = (part, name)
    return keys


FLAT_KEYS = _flat_keys()


def _flat_types() -> dict[str, Any]:
    """Flat key -> the type its field is annotated with (what a read record is checked by)."""
    own = typing.get_type_hints(CellResult)
    types = {key: own[name] for key, (part, name) in FLAT_KEYS.items() if part is None}
    for kind in PARTS.values():
        hints = typing.get_type_hints(kind)
        types |= {key: hints[name] for name, key in kind.flat_keys().items()}
    del types["schema_version"]  # `check_schema_version` says what is wrong with it
    return types


# What a read record is checked by, key by key (`parts.has_type`): a record whose
# "time_median_s" is "fast" is skipped as a line that is no record, never a failed report.
FLAT_TYPES = _flat_types()
# The flat keys of intervals and ranges: two numbers or null (`parts.pair`).
FLAT_PAIRS = tuple(
    key for key in FLAT_TYPES if any(key in kind.flat_pairs() for kind in PARTS.values())
)


def unflatten(data: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A flat record's keys as CellResult fields, and the keys it does not know.

    The one unflatten: of a line read from a file, and of a measurement given as flat keys (a
    torch cell). Only the parts that `data` has a key of are built (each whole); the others are
    left to their defaults.
    """
    own = {k: v for k, v in data.items() if k in FLAT_KEYS and FLAT_KEYS[k][0] is None}
    present = {FLAT_KEYS[k][0] for k in data if k in FLAT_KEYS} - {None}
    built = {name: PARTS[name].from_flat(data) for name in PARTS if name in present}
    unknown = {k: v for k, v in data.items() if k not in FLAT_KEYS}
    return {**own, **built}, unknown


def check_schema_version(version: Any) -> None:
    """Raise XlafuseError unless this version of xlafuse reads records of `version`.

    Records without the key are schema 1 (the first published files).
    """
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise XlafuseError(f"schema_version {version!r} is not a version (a positive integer)")
    if version > SCHEMA_VERSION:
        raise XlafuseError(
            f"written under schema_version {version}, newer than the {SCHEMA_VERSION} this "
            "xlafuse reads: upgrade xlafuse to read it"
        )


def latest_per_cell(records: Iterable[CellResult]) -> list[CellResult]:
    """The last record of each cell (a re-run error cell replaces its old record), in order."""
    latest: dict[str, CellResult] = {}
    for record in records:
        key = record.cell_id or f"{id(record)}"
        latest.pop(key, None)
        latest[key] = record
    return list(latest.values())


def _torn_from(data: bytes) -> int:
    """Where a torn last line starts (a write cut short: no final newline, and not JSON);
    `len(data)` when there is none. A last line that is whole JSON is kept: only its newline
    is missing, which `append_result` adds."""
    keep = data.rfind(b"\n") + 1
    if keep == len(data):
        return keep
    try:
        json.loads(data[keep:])
    except ValueError:  # not JSON, or not UTF-8
        return keep
    return len(data)


def repair_tail(path: str | Path) -> Path | None:
    """Move a torn last line (a write cut short: no final newline, not JSON) aside, keeping
    its bytes.

    The file is cut back to its last complete line and the torn bytes go to
    `results.torn-<time>.txt` beside it, so the next record starts on a line of its own.

    Returns:
      The file holding the torn bytes, or None when the file ends cleanly (or does not exist).
    """
    path = Path(path)
    if not path.exists():
        return None
    data = path.read_bytes()
    keep = _torn_from(data)
    if keep == len(data):
        return None
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
    """Create the output folder if needed and check that results can be written there
    (`xlafuse.folders.writable_folder`), the results file included when it exists.

    Raises:
      XlafuseError: the message names the folder and the reason.
    """
    if not str(folder).strip():
        raise XlafuseError(
            "the output folder is an empty name; give a folder, e.g. --out results/x"
        )
    path = writable_folder(folder, "output folder")
    results = path / RESULTS_FILE
    try:
        if results.exists():
            with open(results, "ab"):
                pass
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise XlafuseError(f"cannot write to {str(results)!r}: {reason}") from None
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
        _write_holder(fd, folder)
        yield path
    finally:
        os.ftruncate(fd, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _write_holder(fd: int, folder: str | Path) -> None:
    """The lock file's PID, written at once: a full disk is found before any work."""
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise XlafuseError(f"cannot write to output folder {str(folder)!r}: {reason}") from None


def append_result(path: str | Path, record: CellResult | Mapping[str, Any]) -> None:
    """Append one record as a JSON line; fsynced before returning.

    If the file does not end with a newline (a torn write), the record starts on a new line, so
    it is never glued to the torn bytes. A write that fails or is interrupted (a full disk,
    Ctrl-C) is cut back: the file ends as it did before, on its last whole record.

    Args:
      path: the JSONL file (created with its folder if missing).
      record: a CellResult or a dict.

    Raises:
      XlafuseError: the line could not be written (the message names the file and the OS's
        reason); the records before it are kept.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = record.to_dict() if isinstance(record, CellResult) else plain(record)
    line = json.dumps(data, sort_keys=False, default=str, allow_nan=True).encode() + b"\n"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        _append_or_cut_back(fd, line, size, path)
    finally:
        os.close(fd)


def _holds(fd: int, size: int) -> bool:
    """Whether the file open as `fd` is at least `size` bytes long (False where it cannot be
    read)."""
    try:
        return os.fstat(fd).st_size >= size
    except OSError:
        return False


def _append_or_cut_back(fd: int, line: bytes, size: int, path: Path) -> None:
    """Write `line` at the end of the file open as `fd` (of `size` bytes before), whole and
    synced, or cut the file back to `size` and raise. An interrupt (Ctrl-C) that lands once
    the whole line is in the file keeps it: the record was measured, and is whole."""
    try:
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException as err:
        if not isinstance(err, OSError) and _holds(fd, size + len(line)):
            raise
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
            os.fsync(fd)
        if not isinstance(err, OSError):
            raise
        reason = err.strerror or type(err).__name__
        raise XlafuseError(
            f"cannot append a record to {str(path)!r}: {reason}; the records before it are kept"
        ) from None


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

    def skipped_lines(self) -> list[str]:
        """One line per skipped line: `FILE:LINE: skipping a record that is REASON`."""
        return [skipped_line(self.path, number, reason) for number, reason in self.skipped]

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


def read_results(path: str | Path, *, empty_ok: bool = False) -> ResultsFile:
    """Read a results file (or a folder's results.jsonl), saying which lines were skipped.

    Args:
      path: the file, or its folder.
      empty_ok: an empty file (no line but blank ones) is read as one of no record.

    Raises:
      XlafuseError: not a results file: not UTF-8 text, empty (unless `empty_ok`), or no line
        of it is a record.
    """
    path = results_file(path)
    records, skipped = parse_file(path)
    if not records and not skipped and not empty_ok:
        raise XlafuseError(
            f"results file {str(path)!r} holds no record (it is empty); a results file holds "
            "the JSON lines of `xlafuse run`, one record per cell"
        )
    if skipped and not records:
        raise XlafuseError(_not_results(path, skipped))
    return ResultsFile(path, tuple(records), tuple(skipped))


def _not_results(path: Path, skipped: list[tuple[int, str]]) -> str:
    number, reason = skipped[0]
    return (
        f"{path} is not a results file (JSON lines from `xlafuse run`): none of its "
        f"{len(skipped)} lines is a record (line {number}: {reason})"
    )


def check_appendable(path: str | Path) -> None:
    """Refuse to add records to a file that another program wrote.

    A results file takes records when it is absent, holds nothing but blank lines, or holds at
    least one record (its other lines are skipped on read and said); a torn last line
    (`repair_tail`) does not count.

    Raises:
      XlafuseError: not UTF-8 text, or none of its lines is a record; the message names the
        file, its first line that is no record, and the ways out (--fresh, another --out).
    """
    path = Path(path)
    if not path.is_file():
        return
    data = path.read_bytes()
    way_out = (
        "; records are added only to a results file of xlafuse's: pass --fresh to move it "
        "aside and start over, or write to another --out"
    )
    try:
        records, skipped = _parse_lines(path, data[: _torn_from(data)])
    except XlafuseError as err:
        raise XlafuseError(f"{err}{way_out}") from None
    if skipped and not records:
        raise XlafuseError(_not_results(path, skipped) + way_out)


def parse_file(path: Path) -> tuple[list[CellResult], list[tuple[int, str]]]:
    """(the records of a results file, (line number, reason) of each other non-blank line).

    Raises:
      XlafuseError: the file is not UTF-8 text.
    """
    return _parse_lines(path, path.read_bytes())


def _parse_lines(path: Path, data: bytes) -> tuple[list[CellResult], list[tuple[int, str]]]:
    try:
        text = data.decode("utf-8")
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


class SkippedLineWarning(RuntimeWarning):
    """A line of a results file that is not a record, skipped on read; the message is
    `FILE:LINE: skipping a record that is REASON` (`xlafuse run` prints it as one line)."""


def skipped_line(path: str | Path, number: int, reason: str) -> str:
    """What a skipped line is called, wherever it is said: `FILE:LINE: skipping ...`."""
    return f"{path}:{number}: skipping a record that is {reason}"


def load_results(path: str | Path) -> list[CellResult]:
    """Read every record of a JSONL file.

    A line that is not a record (a write cut short by a crash, a field of the wrong type) is
    skipped with a `SkippedLineWarning` each, located at the caller.

    Raises:
      FileNotFoundError: no such file.
      XlafuseError: the file is not UTF-8 text.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"results file {str(path)!r} not found")
    records, skipped = parse_file(path)
    for number, reason in skipped:
        warnings.warn(skipped_line(path, number, reason), SkippedLineWarning, stacklevel=2)
    return records


def finished_cells(path: str | Path) -> dict[str, CellResult]:
    """Cells already measured with status "ok", by `cell_id` (error cells are run again).

    Returns an empty dict when the file does not exist.
    """
    path = Path(path)
    if not path.exists():
        return {}
    return {r.cell_id: r for r in parse_file(path)[0] if r.ok and r.cell_id}
