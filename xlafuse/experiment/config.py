"""TOML experiment configs -> typed, frozen dataclasses, validated before anything compiles.

A config names the workloads, the fusion variants and how to measure them::

    [experiment]
    name = "quickstart"
    output = "results/quickstart"          # folder, relative to the working directory
    reference = "default"                   # speedups and numeric diffs are against it
    variants = ["default", "no-fusion",     # presets, "a+b", or inline XLA options
                { name = "no-cpu-fusion", xla_disable_hlo_passes = "fusion" }]

    imports = ["my_models.py"]             # optional: files or modules of the user's, imported
                                            # first: their registered workloads become names

    [[workloads]]
    name = "chain"
    size = "tiny"                           # tiny | small | full
    mode = "forward"                        # forward | train
    dtype = "float32"                       # optional: the workload's default otherwise
    overrides = { ops = 16 }
    backends = ["cpu", "gpu"]               # optional: run this workload only on these
    devices = 2                             # optional: shard over N devices (default 1)
    parallelism = "data"                    # with devices > 1: data | model

    [[workloads]]
    entry = "my_models.py:rollout"          # a program of the user's (xlafuse.models.user):
    name = "my_cartpole"                     # its label (default: the function's name)
    overrides = { steps = 50 }              # FUNCTION's keyword arguments
                                            # mode: what FUNCTION returns (a step: "train")

    [timing]
    warmup = 2
    min_time_s = 0.5
    min_iters = 10
    max_iters = 1000
    repeats = 3

    [measure]
    profile = false                         # jax.profiler trace per cell: kernel times
    keep_traces = true                      # keep them in <output>/traces/<cell>/
    calibrate = true                        # copy-bandwidth and matmul ceilings once per run
    cold_start = false                      # per cell: cold/warm compile, AOT load (child processes)

Validation collects every problem (unknown keys with "did you mean", wrong types, unknown
workloads, sizes, modes, dtypes, overrides and variants, override values the workload's builder
rejects, an entry's mode that is not what its FUNCTION returns, GPU-only things on a CPU
backend, a workload or a variant listed twice, variant options of the wrong type or that the
running XLA rejects: each variant is compiled once on a trivial function) and raises one
`XlafuseError` that lists them one per line, each prefixed with its TOML location. It is one pass: a field with a problem does not hide the problems of the others
(a field of the wrong type is checked as its default meanwhile); only what depends on a wrong
value (the overrides of an unknown workload, the builder's check of a bad size) waits for it.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax

from xlafuse.errors import XlafuseError
from xlafuse.experiment.config_problems import (
    Problems,
    as_table,
    check_keys,
    flat_table,
    typed_field,
)
from xlafuse.experiment.config_types import (
    ExperimentConfig,
    MeasureConfig,
    VariantConfig,
    WorkloadConfig,
)
from xlafuse.experiment.config_variants import (
    check_implementations,
    parse_reference,
    parse_variants,
    variant_problem,
    xla_rejects,
)
from xlafuse.experiment.config_workloads import parse_imports, parse_workloads
from xlafuse.measurement.timing import TimingSettings

__all__ = [
    "TIMING_RANGES",
    "ExperimentConfig",
    "MeasureConfig",
    "VariantConfig",
    "WorkloadConfig",
    "check_config_file",
    "load_config",
    "parse_config",
    "timing_problems",
    "variant_problem",
    "xla_rejects",
]  # the dataclasses and the checks of variants are defined beside this module, re-exported here

_TOP_KEYS = ("imports", "experiment", "workloads", "timing", "measure")
_EXPERIMENT_KEYS = ("name", "output", "reference", "variants")
# The accepted range of each [timing] setting: a warmup of 10**9 calls is a hang, not a setting.
TIMING_RANGES = {
    "warmup": (1, 1000),
    "min_time_s": (0, 600),
    "min_iters": (1, 10**6),
    "max_iters": (1, 10**6),
    "repeats": (1, 100),
}


def load_config(path: str | Path, *, backend: str | None = None) -> ExperimentConfig:
    """Read and validate a TOML experiment config.

    Args:
      path: the .toml file.
      backend: "cpu" or "gpu" to validate against; None means JAX's default backend.

    Returns:
      The validated ExperimentConfig.

    Raises:
      XlafuseError: no such file, invalid TOML, or every problem found, one per line.
    """
    path = check_config_file(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise XlafuseError(
            f"{path}: not a TOML config: not UTF-8 text (byte {err.object[err.start]:#04x} at "
            f"offset {err.start})"
        ) from None
    except tomllib.TOMLDecodeError as err:
        raise XlafuseError(f"{path}: not valid TOML: {err}") from err
    return parse_config(data, backend=backend, source=path)


def check_config_file(path: str | Path) -> Path:
    """The config's path, if it is a file (checked before anything else is looked at).

    Raises:
      XlafuseError: a folder, no such file (the message lists the configs in configs/), or a
        path that is neither (a device, a FIFO, a symlink loop: never opened).
    """
    from xlafuse.errors import REGULAR_FILE, check_path_kind  # the lead may hoist this import

    path = Path(path)
    check_path_kind(path, REGULAR_FILE, "expected a TOML config file, e.g. configs/quickstart.toml")
    if path.is_dir():
        raise XlafuseError(
            f"config {str(path)!r} is a folder; give a TOML file, e.g. configs/quickstart.toml"
        )
    if not path.is_file():
        shipped = ", ".join(sorted(p.name for p in Path("configs").glob("*.toml")))
        hint = f" (configs/ here has: {shipped})" if shipped else ""
        raise XlafuseError(f"config file {str(path)!r} not found{hint}")
    return path


def parse_config(
    data: Mapping[str, Any], *, backend: str | None = None, source: Path | None = None
) -> ExperimentConfig:
    """Validate a config already parsed into a dict (as from `tomllib`).

    Raises:
      XlafuseError: every problem found, one per line, each prefixed with its location.
    """
    problems = Problems()
    backend = backend or jax.default_backend()
    check_keys(problems, "", data, _TOP_KEYS)
    base = source.parent if source is not None else None
    imports = parse_imports(problems, data.get("imports", []), base)
    experiment = as_table(problems, "experiment", data.get("experiment", {}))
    check_keys(problems, "experiment.", experiment, _EXPERIMENT_KEYS)
    name = typed_field(problems, "experiment.name", experiment.get("name", "experiment"), str)
    output = typed_field(
        problems, "experiment.output", experiment.get("output"), str, optional=True
    )
    workloads = parse_workloads(problems, data.get("workloads"), backend, base)
    listed = experiment.get("variants", ["default", "no-fusion"])
    variants = parse_variants(problems, listed, backend)
    check_implementations(problems, workloads, variants, backend)
    reference = parse_reference(problems, experiment.get("reference", "default"), variants, listed)
    timing = _parse_timing(problems, data.get("timing", {}))
    measure = _parse_measure(problems, data.get("measure", {}))
    problems.raise_if_any(source)
    return ExperimentConfig(
        name=name,
        output=Path(output or f"results/{name}"),
        workloads=tuple(workloads),
        variants=tuple(variants),
        reference=reference,
        timing=timing,
        measure=measure,
        source=source,
        imports=tuple(imports),
    )


def _parse_timing(problems, value) -> TimingSettings:
    def kind_of(key):
        return float if key.endswith("_s") else int

    timing = flat_table(problems, "timing", value, TimingSettings, kind_of)
    for where, message in timing_problems(timing):
        problems.add(where, message)
    return timing


def timing_problems(timing: TimingSettings) -> list[tuple[str, str]]:
    """(where, what) of each timing setting out of its range (`TIMING_RANGES`), and a
    max_iters below min_iters."""
    found = []
    for key, (low, high) in TIMING_RANGES.items():
        got = getattr(timing, key)
        if not low <= got <= high:  # also refuses nan
            found.append((f"timing.{key}", f"must be from {low} to {high}, not {got!r}"))
    if timing.max_iters < timing.min_iters:
        found.append(
            (
                "timing.max_iters",
                f"{timing.max_iters} is below timing.min_iters ({timing.min_iters})",
            )
        )
    return found


def _parse_measure(problems, value) -> MeasureConfig:
    # profile is accepted on a CPU and yields no device time there: no trace has GPU planes.
    return flat_table(problems, "measure", value, MeasureConfig, lambda key: bool)
