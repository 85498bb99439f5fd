"""Run `xlafuse validate` cells on a GPU: a warm-up child, a child under ncu, then the judgement.

For one cell (workload x variant):

1. a child process compiles the program with a persistent compilation cache (so the next process
   compiles nothing: XLA's GEMM autotuning under ncu takes minutes), calls it, traces a few calls
   with `jax.profiler` for the device time per kernel name, and reads the device's L2 size;
2. a second child runs under `ncu` (`xlafuse.measurement.ncu.ncu_command`; with `detail`, ncu also
   measures `xlafuse.measurement.ncu.DETAIL_METRICS` per launch): it compiles (a cache hit),
   calls the program twice unprofiled, then profiles ONE call between `cuProfilerStart` and
   `cuProfilerStop`, and writes the optimized HLO it ran;
3. `xlafuse.measurement.validate.compare_kernels` joins ncu's launches to that HLO's kernels and
   judges them.

The parent never starts a JAX backend: the GPU stays free for the children.
"""

from __future__ import annotations

import ctypes
import dataclasses
import gzip
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from xlafuse.compiler.protocol import run_child
from xlafuse.compiler.variants import get
from xlafuse.errors import XlafuseError, check_selected
from xlafuse.kinds import Backend
from xlafuse.measurement.coldstart import workload_spec
from xlafuse.measurement.ncu import NcuKernel, find_ncu, ncu_command, parse_ncu_csv
from xlafuse.measurement.validate import ValidationResult, compare_kernels, modeled_kernels

DEFAULT_PROFILE_CALLS = 5
DEFAULT_TIMEOUT_S = 600.0
_CHILD_MODULE = "xlafuse.measurement.validate_child"


def require_tools(*, ncu: str | None = None) -> str:
    """The ncu executable, once ncu and the CUDA driver are both there.

    Args:
      ncu: the ncu executable; None looks for $XLAFUSE_NCU, then `ncu` on PATH.

    Raises:
      XlafuseError: one line naming everything that is missing.
    """
    missing, path = [], None
    try:
        path = find_ncu(path=ncu)
    except XlafuseError as err:
        missing.append(str(err))
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        missing.append("no NVIDIA driver: libcuda.so.1 cannot be loaded (a GPU is needed)")
    if missing:
        raise XlafuseError("; ".join(missing))
    return path


def validate_cell(
    workload: Any,
    *,
    variant: Any = "default",
    cache_dir: str | os.PathLike | None = None,
    ncu: str | None = None,
    profile_calls: int = DEFAULT_PROFILE_CALLS,
    keep: str | os.PathLike | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    detail: bool = False,
) -> ValidationResult:
    """Profile one call of a workload under ncu and judge the HLO's kernels against it.

    Args:
      workload: as `xlafuse.measurement.coldstart.workload_spec` takes it (a Cell, a Workload, a
        name or a program of the user's, or a spec dict).
      variant: a preset name, "a+b", a Variant or a dict of XLA options.
      cache_dir: the persistent compilation cache to warm and read; a temporary one when None.
      ncu: the ncu executable; None looks for $XLAFUSE_NCU, then `ncu` on PATH.
      profile_calls: calls traced with `jax.profiler` for the device time (0: none).
      keep: a folder to keep ncu's raw output (`STEM.ncu.csv`, STEM from `file_stem`) and the
        optimized HLO it ran (`STEM.hlo.txt.gz`). timeout_s: seconds each child may take.
      detail: also ask ncu for `ncu.DETAIL_METRICS` (each row's `detail`; more passes: slower).

    Returns:
      The ValidationResult.

    Raises:
      XlafuseError: ncu or the CUDA driver is missing, or the child sees no GPU.
      RuntimeError: a child failed or ran past `timeout_s` (its last error line is in the message).
    """
    ncu_path, spec, chosen = require_tools(ncu=ncu), workload_spec(workload), get(variant)
    request = {"workload": spec, "variant": chosen.to_dict(), "profile_calls": int(profile_calls)}
    flags = tuple(chosen.process_flags)
    with tempfile.TemporaryDirectory(prefix="xlafuse-validate-") as tmp:
        folder = Path(tmp)
        request["cache_dir"] = str(Path(cache_dir) if cache_dir else folder / "cache")
        warm, profiled, csv_text = _profile(request, folder, flags, timeout_s, ncu_path, detail)
        hlo_text = (folder / "ncu" / "optimized.hlo.txt").read_text()
        if keep is not None:
            _keep(Path(keep), spec, chosen.name, csv_text, hlo_text)
        modeled = modeled_kernels(hlo_text)
        same = modeled == modeled_kernels(folder / "warm" / "optimized.hlo.txt")
        measured = _measured(csv_text, spec, chosen.name)
        profiler_s, l2 = warm.get("profiler_kernel_s"), warm.get("l2_bytes")
        return compare_kernels(
            modeled, measured, profiler_kernel_s=profiler_s, l2_bytes=l2, workload=spec, variant=chosen.name,
            compiled_under_ncu=profiled["cache_hits"] == 0, same_kernels=same,
        )  # fmt: skip


def _profile(request, folder: Path, flags, timeout_s: float, ncu_path: str, detail: bool):
    """(the warm child's result, the ncu child's result, ncu's CSV): a child that fills the
    cache and traces device times, then one under ncu (with `detail`: its detail metrics too)
    that profiles one call.

    Raises:
      XlafuseError: the warm child sees no GPU.
    """
    warm = _run_child({**request, "phase": "warm"}, folder / "warm", flags, timeout_s)
    if warm["backend"] != Backend.GPU:
        raise XlafuseError(
            f"no GPU: JAX in a child process has only the {warm['backend']!r} backend "
            "(xlafuse validate needs an NVIDIA GPU and Nsight Compute)"
        )
    program = [sys.executable, "-m", _CHILD_MODULE, str(folder / "ncu")]
    command = ncu_command(ncu_path, program, detail=detail)
    profiled, csv_text = _run_child(
        {**request, "phase": "ncu"}, folder / "ncu", flags, timeout_s, command
    )
    return warm, profiled, csv_text


def validate_config(
    config: Any,
    *,
    only: Sequence[str] | None = None,
    variants: Sequence[str] | None = None,
    say: Callable[[str], None] | None = None,
    **kwargs: Any,
) -> list[ValidationResult]:
    """Validate every GPU cell (workload x variant) of an experiment config, one after another.

    Args:
      config: an `xlafuse.experiment.config.ExperimentConfig`.
      only: workload names or labels to validate; all when None.
      variants: variant names to validate; all when None (the reference is not added).
      say: called with one progress line per cell; None for silence.
      **kwargs: passed to `validate_cell` (cache_dir, ncu, profile_calls, keep, timeout_s,
        detail).

    Returns:
      One ValidationResult per cell; a cell whose child failed has `error` set.

    Raises:
      XlafuseError: `only` or `variants` names nothing in the config; ncu or the CUDA driver is
        missing; no GPU.
    """
    workloads = [w for w in config.workloads if w.applies_to("gpu")]
    if only:
        check_selected(
            "workload",
            only,
            [w.name for w in workloads] + [w.label for w in workloads],
            "among the config's GPU cells",
        )
        workloads = [w for w in workloads if w.name in only or w.label in only]
    chosen = list(config.variants)
    if variants:
        check_selected(
            "variant", variants, [v.name for v in chosen], "among the config's GPU cells"
        )
        chosen = [v for v in chosen if v.name in variants]
    cells = [
        (w.cell, dataclasses.replace(v.resolve(), name=v.name)) for w in workloads for v in chosen
    ]
    return validate_cells(cells, say=say, **kwargs)


def validate_cells(
    cells: Iterable[tuple[Any, Any]], *, say: Callable[[str], None] | None = None, **kwargs: Any
) -> list[ValidationResult]:
    """Validate (workload, variant) cells one after another; a failed child fails its cell only.

    Args:
      cells: (workload, variant) pairs, each as `validate_cell` takes them.
      say: called with one progress line per cell; None for silence.
      **kwargs: passed to `validate_cell` (`detail=True` asks ncu for the detail metrics).

    Returns:
      One ValidationResult per cell; a cell whose child failed or timed out has `error` set.

    Raises:
      XlafuseError: ncu or the CUDA driver is missing (checked before the first cell); no GPU.
    """
    require_tools(ncu=kwargs.get("ncu"))
    results = []
    for workload, variant in cells:
        spec, chosen = workload_spec(workload), get(variant)
        if say:
            say(f"validate {ValidationResult((), 0, 0, workload=spec).label} {chosen.name}")
        try:
            results.append(validate_cell(spec, variant=chosen, **kwargs))
        except RuntimeError as err:
            results.append(
                ValidationResult((), 0, 0, workload=spec, variant=chosen.name, error=str(err))
            )
    return results


def _run_child(request, folder: Path, flags, timeout_s, argv=None):
    """Run the child on `request` in `folder`, directly or (argv) under ncu.

    Returns:
      The child's result dict; with `argv`, the pair (result dict, ncu's stdout).
    """
    folder.mkdir(parents=True, exist_ok=True)
    command = argv or [sys.executable, "-m", _CHILD_MODULE, str(folder)]
    what = f"{request['phase']} child ({request['workload']['name']}, {request['variant']['name']})"
    result, stdout = run_child(
        command, folder, request, f"validate {what}", process_flags=flags, timeout_s=timeout_s
    )
    return (result, stdout) if argv else result


def _measured(csv_text: str, spec: Mapping[str, Any], variant: str) -> tuple[NcuKernel, ...]:
    """ncu's launches; a child that profiled nothing is a failed cell, not a usage error."""
    try:
        return parse_ncu_csv(csv_text)
    except XlafuseError as err:
        said = [
            ln.strip()
            for ln in csv_text.splitlines()
            if ln.startswith(("==WARNING==", "==ERROR=="))
        ]
        tail = f"; ncu said: {said[-1]}" if said else ""
        raise RuntimeError(f"ncu output of {spec['name']}, {variant}: {err}{tail}") from None


def _keep(folder: Path, spec: Mapping[str, Any], variant: str, csv_text: str, hlo: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    stem = file_stem(spec, variant)
    (folder / f"{stem}.ncu.csv").write_text(csv_text)
    (folder / f"{stem}.hlo.txt.gz").write_bytes(gzip.compress(hlo.encode(), mtime=0))


def file_stem(workload: Mapping[str, Any], variant: str) -> str:
    """A file-name stem for a cell, e.g. `chain-ops=8-full-forward.no-fusion`."""
    label = ValidationResult((), 0, 0, workload=workload).label
    return re.sub(r"[^A-Za-z0-9_.=+-]+", "-", f"{label}.{variant}").strip("-")
