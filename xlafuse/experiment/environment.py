"""What a run is measured under, read from its config and from the running process.

`run_settings` is what every cell of a run shares (experiment, reference, backend and device,
timing and measure tables, XLA_FLAGS, jax/jaxlib/xlafuse versions); `cell_settings` adds the
cell's variant resolved to its XLA options (`variant_settings`): a record's `settings`, which
`xlafuse.results.settings.check_resumable` compares with a file's. `environment` is the versions
and machine a record names (`env`). They read JAX and the experiment's config, so they live
here and the record layer gets their values as data.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import platform
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jax
import jaxlib

from xlafuse import __version__ as XLAFUSE_VERSION
from xlafuse.experiment.config import ExperimentConfig, VariantConfig
from xlafuse.kinds import Backend, Framework
from xlafuse.models.implementations import tokamax_version
from xlafuse.results.parts import plain


def run_settings(config: ExperimentConfig, backend: str, device_kind: str) -> dict[str, Any]:
    """What every cell of a run is measured under, besides its own workload and variant.

    Args:
      config: the experiment (its name, reference, timing and measure tables).
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
        "xlafuse": XLAFUSE_VERSION,
    }


def variant_settings(variant: VariantConfig) -> dict[str, Any]:
    """A config variant resolved to what XLA gets: disabled passes, options, process flags;
    and the implementation it names (`impl=NAME`) with the installed tokamax's version.

    A variant that no longer resolves (a preset gone from the registry) is recorded by its
    config form, so an error record can still be written.
    """
    try:
        resolved = variant.resolve()
    except ValueError:
        return {"unresolved": plain(variant.to_dict())}
    if resolved.framework != Framework.JAX:
        compile_kwargs = resolved.torch_compile
        return {
            "framework": resolved.framework,
            "framework_version": resolved.framework_version(),
            "torch_compile": None if compile_kwargs is None else plain(compile_kwargs),
        }
    settings = {
        "disable_passes": list(resolved.disable_passes),
        "options": plain(resolved.options),
        "process_flags": list(resolved.process_flags),
    }
    if resolved.implementation:  # impl=NAME: which, and the tokamax that may run it
        settings["implementation"] = resolved.implementation
        settings["tokamax"] = tokamax_version()
    return settings


def by_name(variants: Iterable[VariantConfig]) -> dict[str, dict[str, Any]]:
    """Each variant's `variant_settings` by its name, for `check_resumable`."""
    return {v.name: variant_settings(v) for v in variants}


def cell_settings(settings: Mapping[str, Any], variant: VariantConfig) -> dict[str, Any]:
    """`run_settings` plus the cell's resolved variant (`variant_settings`): a record's settings."""
    return {**settings, "variant": variant_settings(variant)}


def environment(*, config_hash: str | None = None) -> dict[str, Any]:
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
        "driver": _driver(device) if device.platform == Backend.GPU else None,
        "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),
        "git_commit": git_commit(),
        "config_hash": config_hash,
    }
    return env


def host_cpu(*, cpuinfo: str | Path = "/proc/cpuinfo") -> str | None:
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
    except (AttributeError, NotImplementedError, RuntimeError):  # not every PJRT client has it
        return None


COMMIT_ENV = "XLAFUSE_GIT_COMMIT"


def git_commit(*, folder: str | Path | None = None) -> str | None:
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
