"""Result records: one JSON line per cell (workload x variant), written the moment the cell ends.

The file is append-only JSONL: a run killed half-way (Ctrl-C, OOM-kill, a dead machine) keeps
every finished cell, and re-running the same config skips them (`finished_cells`). A last line cut
short by a crash is skipped with a warning when the file is read back.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import platform
import subprocess
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jax

RESULTS_FILE = "results.jsonl"
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
    reference; unpaired: apart); on GPU with profiling, device_speedup, device_speedup_ci and
    device_speedup_verdict from per-call kernel time; host_s_per_call (host time to issue one
    pipelined call) and host_bound (pipelined time > 1.15 x device time);
    items_per_s (per wall median), achieved_bytes_per_s and tflops (modeled bytes or flops per
    second of `rate_basis`: device_time_s where profiled, else pipelined_s_per_call on a GPU,
    else time_median_s), pct_of_copy_ceiling.
    Numerics against the reference (`xlafuse.numerics`, one rule for `run` and `compare`):
    max_abs_diff, max_rel_diff, within_tolerance (forward outputs; for a train step the loss,
    gradient, batch statistics and updated parameters), numerics_worst_part; reference_error
    when the reference could not be compiled again on resume (then no numerics check).
    Cold start (with `measure.cold_start`, fresh processes): import_s, cold_compile_s (empty
    persistent cache), warm_compile_s (filled cache), cache_hit, cache_entries, cache_speedup,
    first_call_s, steady_call_s, aot_export_s, aot_load_s (deserialize + compile + first call).
    status is "ok" or "error" (then `error` holds the message and most figures are None).
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
    wall_s: float | None = None
    env: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    @property
    def ok(self) -> bool:
        """True when the cell ran to the end."""
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (mappings become plain dicts)."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CellResult:
        """From a JSON record; keys this version does not know are dropped."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


REQUIRED_KEYS = tuple(f.name for f in dataclasses.fields(CellResult))


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def cell_id(
    workload: str,
    size: str,
    mode: str,
    dtype: str | None,
    overrides: Mapping[str, Any],
    variant: str,
    backend: str,
) -> str:
    """The resume key of a cell, e.g. `chain/tiny/forward/auto/{"ops":16}/no-fusion/cpu`."""
    extra = json.dumps(dict(overrides), sort_keys=True, separators=(",", ":"), default=str)
    return "/".join([workload, size, mode, dtype or "auto", extra, variant, backend])


def append_result(path: str | Path, record: CellResult | Mapping[str, Any]) -> None:
    """Append one record as a JSON line; flushed and fsynced before returning.

    Args:
      path: the JSONL file (created with its folder if missing).
      record: a CellResult or a dict.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = record.to_dict() if isinstance(record, CellResult) else _plain(record)
    line = json.dumps(data, sort_keys=False, default=str, allow_nan=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def load_results(path: str | Path) -> list[CellResult]:
    """Read every record of a JSONL file.

    A line that is not valid JSON (a write cut short by a crash) is skipped with a warning.

    Raises:
      FileNotFoundError: no such file.
    """
    path = Path(path)
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(CellResult.from_dict(json.loads(line)))
        except (json.JSONDecodeError, TypeError) as err:
            warnings.warn(
                f"{path}:{number}: skipping a record that is not valid JSON ({err})",
                RuntimeWarning,
                stacklevel=2,
            )
    return records


def latest_per_cell(records: Iterable[CellResult]) -> list[CellResult]:
    """The last record of each cell (a re-run error cell replaces its old record), in order."""
    latest: dict[str, CellResult] = {}
    for record in records:
        key = record.cell_id or f"{id(record)}"
        latest.pop(key, None)
        latest[key] = record
    return list(latest.values())


def finished_cells(path: str | Path) -> dict[str, CellResult]:
    """Cells already measured with status "ok", by `cell_id` (error cells are run again).

    Returns an empty dict when the file does not exist.
    """
    path = Path(path)
    if not path.exists():
        return {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the runner reports truncation itself
        records = load_results(path)
    return {r.cell_id: r for r in records if r.ok and r.cell_id}


def environment(config_hash: str | None = None) -> dict[str, Any]:
    """Versions, device, XLA_FLAGS, git commit and config hash, recorded in every record."""
    device = jax.devices()[0]
    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "jax": _version("jax"),
        "jaxlib": _version("jaxlib"),
        "flax": _version("flax"),
        "optax": _version("optax"),
        "xlafuse": _version("xlafuse"),
        "backend": jax.default_backend(),
        "device": str(device),
        "device_kind": device.device_kind,
        "device_count": jax.device_count(),
        "driver": _driver(device) if device.platform == "gpu" else None,
        "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),
        "git_commit": git_commit(),
        "config_hash": config_hash,
    }
    return env


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _driver(device: Any) -> str | None:
    try:
        return str(device.client.platform_version)
    except Exception:  # not every PJRT client reports it
        return None


def git_commit(folder: str | Path | None = None) -> str | None:
    """HEAD's commit of the checkout holding xlafuse (or `folder`); None if not a git checkout."""
    folder = Path(folder) if folder else Path(__file__).resolve().parent
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None
