"""What a results file was measured under, and the check that keeps one file to one set of settings.

Every record carries the `settings` it was measured under (`run_settings`: experiment, reference,
backend and device, timing and measure tables, XLA_FLAGS, jax/jaxlib/xlafuse versions, and the
cell's variant resolved to its XLA options); `check_resumable` refuses to add cells to a file
written under other settings, so cells are never mixed or reused. `environment` is the versions
and machine a record names.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import platform
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jax
import jaxlib

import xlafuse
from xlafuse.errors import XlafuseError
from xlafuse.results.records import CellResult, parse_file, plain


def run_settings(config: Any, backend: str, device_kind: str) -> dict[str, Any]:
    """What every cell of a run is measured under, besides its own workload and variant.

    Args:
      config: the ExperimentConfig (its name, reference, timing and measure tables).
      backend: "cpu" or "gpu".
      device_kind: the device's kind, e.g. "NVIDIA H200".
    """

    return {
        "experiment": config.name,
        "reference": config.reference,
        "backend": backend,
        "device_kind": device_kind,
        "timing": dataclasses.asdict(config.timing),
        # Keeping traces or not changes no measurement: a run may resume with the other choice.
        "measure": {
            k: v for k, v in dataclasses.asdict(config.measure).items() if k != "keep_traces"
        },
        "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "xlafuse": xlafuse.__version__,
    }


def variant_settings(variant: Any) -> dict[str, Any]:
    """A config variant resolved to what XLA gets: disabled passes, options, process flags.

    A variant that no longer resolves (a preset gone from the registry) is recorded by its
    config form, so an error record can still be written.
    """
    try:
        resolved = variant.resolve()
    except ValueError:
        return {"unresolved": plain(variant.to_dict())}
    if resolved.framework != "jax":
        compile_kwargs = resolved.torch_compile
        return {
            "framework": resolved.framework,
            "framework_version": resolved.framework_version(),
            "torch_compile": None if compile_kwargs is None else plain(compile_kwargs),
        }
    return {
        "disable_passes": list(resolved.disable_passes),
        "options": plain(resolved.options),
        "process_flags": list(resolved.process_flags),
    }


def cell_settings(settings: Mapping[str, Any], variant: Any) -> dict[str, Any]:
    """`run_settings` plus the cell's resolved variant (`variant_settings`): a record's settings."""
    return {**settings, "variant": variant_settings(variant)}


def check_resumable(
    path: str | Path, settings: Mapping[str, Any], variants: Iterable[Any] = ()
) -> None:
    """Refuse to add cells to a results file that was written under other settings.

    Args:
      path: the results file (nothing to check when it does not exist).
      settings: this run's `run_settings`.
      variants: this run's config variants; a recorded variant of the same name must have
        resolved to the same XLA options.

    Raises:
      XlafuseError: one line naming what differs, with the two ways out (`--fresh`, `--out`).
    """
    path = Path(path)
    if not path.exists():
        return
    now = {v.name: variant_settings(v) for v in variants}
    for record in parse_file(path)[0]:
        differences = _differences(record, settings, now)
        if differences:
            shown = "; ".join(differences[:3])
            more = f" and {len(differences) - 3} more" if len(differences) > 3 else ""
            raise XlafuseError(
                f"{path} holds results measured under other settings ({shown}{more}): "
                "resuming would mix them; pass --fresh to move that file aside and start over, "
                "or write to another --out"
            )


def _differences(
    record: CellResult, settings: Mapping[str, Any], variants: Mapping[str, Any]
) -> list[str]:
    if not record.settings:
        return [f"cell {record.cell_id or record.workload!r} records no settings (older xlafuse)"]
    recorded = {k: v for k, v in record.settings.items() if k != "variant"}
    differences = [
        f"{key}: {_show(before)} in the file, {_show(after)} now"
        for key, before, after in _diff_flat(recorded, settings)
    ]
    if record.variant in variants and record.settings.get("variant") != variants[record.variant]:
        differences.append(
            f"variant {record.variant!r}: {_show(record.settings.get('variant'))} in the file, "
            f"{_show(variants[record.variant])} now"
        )
    return differences


def _diff_flat(before: Mapping[str, Any], after: Mapping[str, Any], prefix: str = ""):
    for key in dict.fromkeys([*before, *after]):
        a, b = before.get(key), after.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            yield from _diff_flat(a, b, f"{prefix}{key}.")
        elif plain(a) != plain(b):
            yield f"{prefix}{key}", a, b


def _show(value: Any) -> str:
    return json.dumps(plain(value), sort_keys=True, default=str)


def environment(config_hash: str | None = None) -> dict[str, Any]:
    """Versions, host CPU, device, XLA_FLAGS, git commit and config hash, in every record."""
    device = jax.devices()[0]
    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        # The host compiles and dispatches: compile seconds and host time per call depend on it.
        "host_cpu": host_cpu(),
        "host_cpus": host_cpus(),
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


def host_cpu(cpuinfo: str | Path = "/proc/cpuinfo") -> str | None:
    """The host processor's model name (Linux's `/proc/cpuinfo`; elsewhere what `platform`
    says, which may be only the architecture), or None when nothing says."""
    try:
        for line in Path(cpuinfo).read_text(errors="replace").splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() == "model name" and value.strip():
                return " ".join(value.split())
    except OSError:
        pass
    return platform.processor() or None


def host_cpus() -> int | None:
    """CPUs this process may run on (its affinity where the OS has one), not all the host has."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count()


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


COMMIT_ENV = "XLAFUSE_GIT_COMMIT"


def git_commit(folder: str | Path | None = None) -> str | None:
    """HEAD's commit of the checkout holding xlafuse (or `folder`), `-dirty` when tracked files differ
    from it; None if not a git checkout. `XLAFUSE_GIT_COMMIT` names the commit instead, for a copy of
    a checkout made without its `.git` (as on a machine the tree is copied to)."""
    if os.environ.get(COMMIT_ENV):
        return os.environ[COMMIT_ENV]
    folder = Path(folder) if folder else Path(__file__).resolve().parent
    head = _git(folder, "rev-parse", "HEAD")
    if not head:
        return None
    changed = _git(folder, "status", "--porcelain", "--untracked-files=no")
    return f"{head}-dirty" if changed else head


def _git(folder: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=folder, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None
