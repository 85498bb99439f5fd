"""Result records: one `CellResult` per cell (workload x variant), one JSON line each, written the
moment the cell ends.

The file is append-only JSONL: a run killed half-way (Ctrl-C, OOM-kill, a dead machine) keeps
every finished cell, and re-running the same config skips them (`finished_cells`). A record is
read back with every key kept: those this version does not know stay in `extra`, and a newer
`schema_version` is refused with a message (`check_schema_version`). Files without the key are
schema 1, as published in `experiments/`.

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
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from xlafuse.errors import XlafuseError
from xlafuse.folders import writable_folder

RESULTS_FILE = "results.jsonl"
LOCK_FILE = ".xlafuse.lock"
SCHEMA_VERSION = 1


@dataclasses.dataclass(frozen=True)
class CellResult:
    """What one cell measured. Times in seconds, sizes in bytes, rates per second.

    Identity: workload, size, mode, dtype (resolved; `dtype_requested` is the config's value or
    None), overrides, variant, backend; `cell_id` joins them (the resume key).
    Compilation: lower_s, compile_s; the fusion report: kernels, fusions, real_fusions,
    custom_calls, kinds, modeled_bytes; XLA's analyses: cost_flops, cost_bytes_accessed,
    peak_memory_bytes (argument + output + temp - alias).
    Timing: time_median_s, time_p10_s, time_p90_s, iters, pipelined_s_per_call; on GPU with
    profiling, device_time_s and device_kernels_per_call.
    Derived: speedup_vs_reference (reference median / this median; 1.0 for the reference)
    with speedup_ci (95% bootstrap interval), speedup_verdict ("faster", "slower", "same": see
    `xlafuse.measure.stats`) and speedup_basis (paired: timed in alternation with the
    reference; unpaired: apart), reference_time_median_s (the reference's median over the
    same rounds when paired); on GPU with profiling, device_speedup, device_speedup_ci and
    device_speedup_verdict from per-call kernel time; host_s_per_call (host time to issue one
    pipelined call) and host_bound (pipelined time > 1.15 x device time);
    items_per_s (per wall median), achieved_bytes_per_s and tflops (modeled bytes or flops per
    second of `rate_basis`: device_time_s where profiled, else pipelined_s_per_call on a GPU,
    else time_median_s), pct_of_copy_ceiling.
    Sharded cells (`devices` > 1, `parallelism` "data" or "model"): the collectives of the
    optimized HLO (`xlafuse.hlo.collectives`, per device per step): collectives (instructions),
    logical_collectives (what they carry: the count without combining), collective_async_pairs,
    collective_operand_bytes, collective_ring_bytes (ring model), collective_counts (per kind);
    on GPU with profiling (`xlafuse.measure.collectives`, one device's trace): comm_time_s (time
    in communication kernels per call), comm_overlap_s (of it, overlapped by compute kernels),
    comm_overlap_fraction, comm_kernels_per_call. Scaling against one device is computed in the
    report, from the cell with devices = 1 of the same workload, global batch and variant.
    Numerics against the reference (`xlafuse.measure.numerics`, one rule for `run` and `compare`):
    max_abs_diff, max_rel_diff, within_tolerance (forward outputs; for a train step the loss,
    gradient, batch statistics and updated parameters), numerics_worst_part; reference_error
    when the reference could not be compiled again on resume (then no numerics check).
    missed_fusions: for the "default" variant, the largest kernel boundaries of its program
    (`xlafuse.inspect.explain.missed_fusions`: top 5 by modeled bytes).
    Cold start (with `measure.cold_start`, fresh processes): import_s, cold_compile_s (empty
    persistent cache), warm_compile_s (filled cache), cache_hit, cache_entries, cache_speedup,
    first_call_s, steady_call_s, aot_export_s, aot_load_s (deserialize + compile + first call).
    Framework: framework ("jax", or "torch" for a PyTorch twin, `xlafuse.torch`) and
    framework_version. Torch cells say what their counts mean: kernels_basis (profiler device
    kernels on a GPU; on the CPU Inductor's generated kernel calls or eager's aten ops),
    modeled_bytes_basis, generated_kernels (Inductor's kernels generated at compile), and
    top_kernels ((name, seconds per call) of the longest device kernels, profiled on a GPU);
    under CUDA graphs, input_copy_kernels_per_call and input_copy_time_s (the launches that copy
    inputs into the graph's buffers before each replay, `xlafuse.torch.measure.input_copy_fields`).
    Kernels (with `measure.profile`, `xlafuse.measure.kernels`): trace_path (the cell's trace
    folder, relative to the results folder; None when not kept), kernel_times (totals and the
    top kernels by time, each joined to its HLO kernel; `KernelTimes.summary()`), kernel_diff
    (a non-reference cell against the reference: the kernel groups of `xlafuse diff` with both
    sides' measured times, top savings first; `kernel_diff.kernel_diff_record`).
    status is "ok" or "error" (then `error` holds the message and most figures are None).
    settings: what the measurement depends on besides the cell's name (`cell_settings`); a
    results file holds records of one set of settings only (`check_resumable`).
    schema_version: the record format (`SCHEMA_VERSION`; a newer one is refused on read,
    `check_schema_version`). extra: keys of a read record that this version does not know,
    kept and written back unchanged.
    """

    workload: str
    size: str
    mode: str
    dtype: str | None
    variant: str
    backend: str
    device_kind: str
    status: str = "ok"
    error: str | None = None
    error_type: str | None = None
    cell_id: str = ""
    experiment: str = ""
    dtype_requested: str | None = None
    overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    devices: int = 1
    parallelism: str | None = None
    reference: str = "default"
    variant_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    num_params: int | None = None
    items_per_call: int | None = None
    items_unit: str | None = None
    flops: float | None = None
    kernels: int | None = None
    fusions: int | None = None
    real_fusions: int | None = None
    custom_calls: int | None = None
    custom_call_targets: Mapping[str, int] = dataclasses.field(default_factory=dict)
    kinds: Mapping[str, int] = dataclasses.field(default_factory=dict)
    modeled_bytes: int | None = None
    lower_s: float | None = None
    compile_s: float | None = None
    cost_flops: float | None = None
    cost_bytes_accessed: float | None = None
    peak_memory_bytes: int | None = None
    time_median_s: float | None = None
    time_p10_s: float | None = None
    time_p90_s: float | None = None
    time_min_s: float | None = None
    iters: int | None = None
    pipelined_s_per_call: float | None = None
    pipelined_iters: int | None = None
    warmup_iters: int | None = None
    device_time_s: float | None = None
    device_kernels_per_call: float | None = None
    speedup_vs_reference: float | None = None
    reference_time_median_s: float | None = None
    speedup_ci: tuple[float, float] | None = None
    speedup_verdict: str | None = None
    speedup_basis: str | None = None
    device_speedup: float | None = None
    device_speedup_ci: tuple[float, float] | None = None
    device_speedup_verdict: str | None = None
    host_s_per_call: float | None = None
    host_bound: bool | None = None
    items_per_s: float | None = None
    rate_basis: str | None = None
    achieved_bytes_per_s: float | None = None
    pct_of_copy_ceiling: float | None = None
    tflops: float | None = None
    copy_ceiling_bytes_per_s: float | None = None
    copy_ceiling_basis: str | None = None
    matmul_ceiling_flops_per_s: float | None = None
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None
    within_tolerance: bool | None = None
    numerics_worst_part: str | None = None
    missed_fusions: Mapping[str, Any] | None = None
    reference_error: str | None = None
    import_s: float | None = None
    cold_compile_s: float | None = None
    warm_compile_s: float | None = None
    first_call_s: float | None = None
    steady_call_s: float | None = None
    aot_export_s: float | None = None
    aot_load_s: float | None = None
    cache_hit: bool | None = None
    cache_entries: int | None = None
    cache_speedup: float | None = None
    trace_path: str | None = None
    kernel_times: Mapping[str, Any] | None = None
    kernel_diff: Mapping[str, Any] | None = None
    collectives: int | None = None
    logical_collectives: int | None = None
    collective_async_pairs: int | None = None
    collective_operand_bytes: int | None = None
    collective_ring_bytes: int | None = None
    collective_counts: Mapping[str, int] = dataclasses.field(default_factory=dict)
    comm_time_s: float | None = None
    comm_overlap_s: float | None = None
    comm_overlap_fraction: float | None = None
    comm_kernels_per_call: float | None = None
    wall_s: float | None = None
    framework: str = "jax"
    framework_version: str | None = None
    kernels_basis: str | None = None
    modeled_bytes_basis: str | None = None
    generated_kernels: int | None = None
    top_kernels: tuple[tuple[str, float], ...] | None = None
    input_copy_kernels_per_call: float | None = None
    input_copy_time_s: float | None = None
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    env: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the cell ran to the end."""
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (mappings become plain dicts); `extra` keys are written back as read."""
        known = {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}
        del known["extra"]
        return {**plain(self.extra), **known}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CellResult:
        """From a JSON record; keys this version does not know are kept in `extra`.

        Raises:
          TypeError: `data` is not a mapping, or lacks a required key.
          XlafuseError: a schema_version this version cannot read (newer, or not a version).
        """
        if not isinstance(data, Mapping):
            raise TypeError(f"a record is a JSON object, not {type(data).__name__}")
        check_schema_version(data.get("schema_version", 1))
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        extra = {k: v for k, v in data.items() if k not in names}
        return cls(**{k: v for k, v in data.items() if k in names}, extra=extra)


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


def plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def cell_id(
    workload: str,
    size: str,
    mode: str,
    dtype: str | None,
    overrides: Mapping[str, Any],
    variant: str,
    backend: str,
    mesh: str | None = None,
) -> str:
    """The resume key of a cell, e.g. `chain/tiny/forward/auto/{"ops":16}/no-fusion/cpu`.

    A sharded cell ends with its layout (`.../gpu/data2`); one-device cells keep the old key.
    """
    extra = json.dumps(dict(overrides), sort_keys=True, separators=(",", ":"), default=str)
    parts = [workload, size, mode, dtype or "auto", extra, variant, backend]
    return "/".join(parts + ([mesh] if mesh else []))


def latest_per_cell(records: Iterable[CellResult]) -> list[CellResult]:
    """The last record of each cell (a re-run error cell replaces its old record), in order."""
    latest: dict[str, CellResult] = {}
    for record in records:
        key = record.cell_id or f"{id(record)}"
        latest.pop(key, None)
        latest[key] = record
    return list(latest.values())


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
