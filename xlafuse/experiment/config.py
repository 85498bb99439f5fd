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

import dataclasses
import functools
import hashlib
import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp

from xlafuse.compiler import variants
from xlafuse.compiler.devices import device_count_problem
from xlafuse.compiler.variants import BACKENDS
from xlafuse.errors import XlafuseError, did_you_mean
from xlafuse.kinds import Backend, Framework
from xlafuse.measurement.timing import TimingSettings
from xlafuse.models import implementations, registry, user
from xlafuse.models.names import Cell, cell_fields
from xlafuse.models.sharding import MODEL_PARALLEL_WORKLOADS, PARALLELISMS
from xlafuse.models.workload import ITEMS_UNIT, Items, Workload, items_problem

_TOP_KEYS = ("imports", "experiment", "workloads", "timing", "measure")
_EXPERIMENT_KEYS = ("name", "output", "reference", "variants")
_WORKLOAD_KEYS = (
    "name", "entry", "size", "mode", "dtype", "overrides", "backends", "devices", "parallelism",
    "items", "items_unit", "implementations",
)  # fmt: skip
# What a user entry cannot be given: FUNCTION decides its size and dtype, on one device.
_NOT_FOR_ENTRIES = ("size", "dtype", "devices", "parallelism")
_INLINE_VARIANT_META = ("name", "description", "implementation")
# The accepted range of each [timing] setting: a warmup of 10**9 calls is a hang, not a setting.
TIMING_RANGES = {
    "warmup": (1, 1000),
    "min_time_s": (0, 600),
    "min_iters": (1, 10**6),
    "max_iters": (1, 10**6),
    "repeats": (1, 100),
}


@dataclasses.dataclass(frozen=True)
class MeasureConfig:
    """Optional measurements.

    Attributes:
      profile: record a jax.profiler trace per cell: device time and every kernel's time on a
        GPU, host-side op times on the CPU (`xlafuse.measurement.kernels`).
      keep_traces: keep each profiled cell's trace under `<results folder>/traces/<cell>/`
        (XProf/TensorBoard and Perfetto open it); false deletes them (long sweeps).
      calibrate: measure the copy-bandwidth (and matmul) ceilings once per run.
      cold_start: per cell, measure cold and warm-cache compiles and the AOT load in fresh
        processes (`xlafuse.measurement.coldstart`).
    """

    profile: bool = False
    keep_traces: bool = True
    calibrate: bool = True
    cold_start: bool = False


@dataclasses.dataclass(frozen=True)
class WorkloadConfig:
    """One workload of the sweep: `xlafuse.models.build(name, size, mode, dtype, **overrides)`.

    `devices` > 1 shards it over that many devices with `parallelism` ("data" or "model"); on a
    CPU machine the CLI runs the experiment in a child process with that many host devices.

    A program of the user's has an `entry` (`FILE.py:FUNCTION` relative to the config's
    folder, or `MODULE:FUNCTION`; `xlafuse.models.user`) and `name` is its label; its size is
    "custom", and its mode is what FUNCTION returns: "forward" for (fn, args), "train" for a
    step (fn, args, donate_argnums) (learned when the config is checked, as the command line
    learns it when it builds; a `mode` given is checked against it). `source_sha256` is the hash of
    the file that defines a program of the user's (an entry's, or the imported file that
    registered the workload; for a function given to `xlafuse.measure`, its file and its code:
    `measure_fn.program_sha256`): a changed file is a changed cell. `base` is the config's
    folder. `items` (the table's `items` and `items_unit`, an `xlafuse.models.Items`) is what
    one call processes, for throughput, in place of the workload's own; None keeps its own.
    `implementations` (an entry's table, issue 46) names other implementations of the program
    FUNCTION returns, name -> `FILE.py:FUNCTION` (relative to `base`): functions of the same
    arguments computing the same outputs, which a variant `impl=NAME` runs; their files are
    hashed into `source_sha256` with the entry's.
    """

    name: str
    size: str = "tiny"
    mode: str = "forward"
    dtype: str | None = None
    overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    backends: tuple[str, ...] = BACKENDS
    devices: int = 1
    parallelism: str = "data"
    entry: str | None = None
    source_sha256: str | None = None
    base: Path | None = dataclasses.field(default=None, compare=False)
    items: Items | None = dataclasses.field(default=None, compare=False)
    implementations: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "overrides", MappingProxyType(dict(self.overrides)))
        object.__setattr__(self, "implementations", MappingProxyType(dict(self.implementations)))

    def build(self) -> Workload:
        """The cell's Workload (`Cell.build`), with an entry's implementations (loaded, each
        checked by tracing: `xlafuse.models.user.build_entry`).

        Raises:
          XlafuseError, ValueError: as `Cell.build`; an implementation that cannot be loaded,
            traced, or that returns other outputs than the entry's program.
        """
        if not self.implementations:
            return self.cell.build()
        entries = {n: user.parse_entry(s, self.base) for n, s in self.implementations.items()}
        entry = user.parse_entry(self.entry, self.base)
        workload = user.build_entry(entry, self.overrides, implementations=entries)
        return workload.with_items(self.items)

    @functools.cached_property
    def cell(self) -> Cell:
        """The cell this table names (`xlafuse.models.names.Cell`): what the run builds, labels
        and keys its records by."""
        return Cell(
            self.name,
            self.size,
            self.mode,
            self.dtype,
            self.overrides,
            self.devices,
            self.parallelism,
            self.entry,
            self.base,
            items=self.items,
        )

    def applies_to(self, backend: str) -> bool:
        """Whether the config runs this workload on `backend` (its `backends` key)."""
        return backend in self.backends

    @property
    def label(self) -> str:
        """Short human name, e.g. `chain/tiny/forward` or `chain[ops=16]/tiny/forward`."""
        return self.cell.label

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (an entry as written: the config's folder is not part of it)."""
        return {
            **cell_fields(self),
            "overrides": dict(self.overrides),
            "backends": list(self.backends),
            "devices": self.devices,
            "parallelism": self.parallelism,
            **({"entry": self.entry, "source_sha256": self.source_sha256} if self.entry else {}),
            **({"implementations": dict(self.implementations)} if self.implementations else {}),
        }


@dataclasses.dataclass(frozen=True)
class VariantConfig:
    """A variant as the config names it: a preset spec or inline XLA options.

    Attributes:
      name: what results call it.
      spec: the preset name (or "a+b") it resolves through `xlafuse.variants.get`, or None.
      options: inline XLA options (when `spec` is None).
      implementation: with inline options, the implementation it compiles (an inline table's
        `implementation = "cudnn"`, as `impl=cudnn` names it in a spec); None: the own.
    """

    name: str
    spec: str | None = None
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    implementation: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))

    @classmethod
    def of(cls, spec) -> VariantConfig:
        """The config form of a preset name ("a+b"), a dict of XLA options (named by its "name"
        key, else "options") or a `Variant`, resolved here (as a config's are, once).

        Raises:
          UnknownNameError, ValueError, TypeError: as `xlafuse.variants.get`; ValueError also
            for a dict whose name is not a string or whose option has the wrong type
            (`xlafuse.variants.option_problem`).
        """
        if isinstance(spec, str):
            config = cls(spec, spec)
        elif isinstance(spec, Mapping):
            name = spec.get("name", "options")
            if not isinstance(name, str) or not name:
                raise ValueError(f"a variant's name must be a non-empty string, not {name!r}")
            options = {k: v for k, v in spec.items() if k not in _INLINE_VARIANT_META}
            config = cls(name, None, options, spec.get("implementation"))
        else:
            resolved = variants.get(spec)  # a Variant: its own name, resolved already
            config = cls(resolved.name, None, resolved.options, resolved.implementation)
            object.__setattr__(config, "_resolved", resolved)
        config.resolve()
        return config

    def resolve(self):
        """The `xlafuse.variants.Variant` this stands for, resolved on first use and kept: a
        run resolves each variant of its config once, however many cells use it.

        Raises:
          UnknownNameError, ValueError: as `xlafuse.variants.get` (nothing is kept then).
        """
        resolved = self.__dict__.get("_resolved")
        if resolved is None:
            if self.spec is not None:
                resolved = variants.get(self.spec)
            else:
                resolved = variants.from_options(self.options, name=self.name)
                if self.implementation is not None:
                    resolved = dataclasses.replace(resolved, implementation=self.implementation)
            object.__setattr__(self, "_resolved", resolved)  # a cache, not a field
        return resolved

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        implementation = {"implementation": self.implementation} if self.implementation else {}
        return {
            "name": self.name,
            "spec": self.spec,
            "options": dict(self.options),
            **implementation,
        }


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
    """A validated experiment: workloads x variants, timing and measurement settings."""

    name: str
    output: Path
    workloads: tuple[WorkloadConfig, ...]
    variants: tuple[VariantConfig, ...]
    reference: str = "default"
    timing: TimingSettings = dataclasses.field(default_factory=TimingSettings)
    measure: MeasureConfig = MeasureConfig()
    source: Path | None = None
    imports: tuple[str, ...] = ()

    def variant(self, name: str) -> VariantConfig:
        """The variant called `name`."""
        return next(v for v in self.variants if v.name == name)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (what `config_hash` hashes)."""
        return {
            "name": self.name,
            **({"imports": list(self.imports)} if self.imports else {}),
            "output": str(self.output),
            "reference": self.reference,
            "workloads": [w.to_dict() for w in self.workloads],
            "variants": [v.to_dict() for v in self.variants],
            "timing": dataclasses.asdict(self.timing),
            "measure": dataclasses.asdict(self.measure),
        }

    def config_hash(self) -> str:
        """First 12 hex digits of the SHA-256 of the canonical JSON form."""
        text = json.dumps(self.to_dict(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def load_config(path: str | Path, backend: str | None = None) -> ExperimentConfig:
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
    data: Mapping[str, Any], backend: str | None = None, source: Path | None = None
) -> ExperimentConfig:
    """Validate a config already parsed into a dict (as from `tomllib`).

    Raises:
      XlafuseError: every problem found, one per line, each prefixed with its location.
    """
    problems = _Problems()
    backend = backend or jax.default_backend()
    _check_keys(problems, "", data, _TOP_KEYS)
    base = source.parent if source is not None else None
    imports = _parse_imports(problems, data.get("imports", []), base)
    experiment = _table(problems, "experiment", data.get("experiment", {}))
    _check_keys(problems, "experiment.", experiment, _EXPERIMENT_KEYS)
    name = _typed(problems, "experiment.name", experiment.get("name", "experiment"), str)
    output = _typed(problems, "experiment.output", experiment.get("output"), str, optional=True)
    workloads = _parse_workloads(problems, data.get("workloads"), backend, base)
    listed = experiment.get("variants", ["default", "no-fusion"])
    variants = _parse_variants(problems, listed, backend)
    _check_implementations(problems, workloads, variants, backend)
    reference = _parse_reference(problems, experiment.get("reference", "default"), variants, listed)
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


class _Problems:
    """Collects located problems; raises them together."""

    def __init__(self):
        self.items: list[str] = []

    def add(self, where: str, message: str) -> None:
        self.items.append(f"{where}: {message}" if where else message)

    def raise_if_any(self, source: Path | None) -> None:
        if not self.items:
            return
        head = f"{source}: " if source else ""
        count = len(self.items)
        lines = "\n".join(f"  {p}" for p in self.items)
        raise XlafuseError(
            f"{head}{count} problem{'s' if count > 1 else ''} in the config:\n{lines}"
        )


def _check_keys(problems: _Problems, prefix: str, table: Any, accepted) -> None:
    if not isinstance(table, Mapping):
        return
    for key in table:
        if key not in accepted:
            problems.add(
                f"{prefix}{key}",
                f"unknown key{did_you_mean(key, accepted)}; accepted: {', '.join(accepted)}",
            )


def _table(problems: _Problems, where: str, value: Any) -> Mapping[str, Any]:
    if isinstance(value, Mapping):
        return value
    problems.add(where, f"must be a table, not {_type_name(value)}")
    return {}


def _type_name(value: Any) -> str:
    names = {str: "a string", bool: "a boolean", int: "an integer", float: "a number"}
    names.update({list: "an array", dict: "a table"})
    return names.get(type(value), type(value).__name__)


def _typed(problems, where, value, kind, optional=False, default=None):
    """`value` if it has type `kind` (ints accepted as floats, bools never as numbers)."""
    if value is None:
        if not optional:
            problems.add(where, "missing (required)")
        return default
    ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if ok:
        return value
    want = {str: "a string", int: "an integer", float: "a number", bool: "a boolean"}[kind]
    problems.add(where, f"must be {want}, not {_type_name(value)} {value!r}")
    return default


def _parse_imports(problems, value, base) -> list[str]:
    """Imports the user's files and modules (relative files: to the config's folder) first, so
    that the workloads they register are names the rest of the config may use."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        problems.add("imports", 'must be an array of files or modules, e.g. ["my_models.py"]')
        return []
    for i, target in enumerate(value):
        try:
            user.import_target(target, base)
        except XlafuseError as err:
            problems.add(f"imports[{i}]", str(err))
    return list(value)


def _parse_workloads(problems, value, backend, base) -> list[WorkloadConfig]:
    if value is None:
        problems.add("workloads", "missing: add at least one [[workloads]] table")
        return []
    if not isinstance(value, list) or not value:
        problems.add("workloads", "must be a non-empty array of tables ([[workloads]])")
        return []
    out = []
    named: dict[str, tuple[str | None, str]] = {}  # label -> (its entry, where it was given)
    cells: dict[tuple[str, str], str] = {}  # (cell, backend) -> where it was given
    for i, item in enumerate(value):
        where = f"workloads[{i}]"
        workload = _with_items(
            problems, where, item, _parse_workload(problems, where, item, backend, base)
        )
        if workload is None:
            continue
        earlier = named.setdefault(workload.name, (workload.entry, where))
        if earlier[0] != workload.entry:  # two programs under one label would share cells
            shown = f"entry {earlier[0]!r}" if earlier[0] else "the zoo workload"
            problems.add(f"{where}.name", f"{workload.name!r} already names {shown} ({earlier[1]})")
            continue
        if not _check_listed_once(problems, where, workload, cells):
            continue
        out.append(workload)
    return out


# --- items per call (issue 44): a workload table's `items` and `items_unit` ---------------


def _with_items(problems, where, item, workload: WorkloadConfig | None) -> WorkloadConfig | None:
    """`workload` counting the table's `items = N` (`items_unit = "env-steps"`, "items" when
    left out) per call; unchanged without `items`; None with a problem (added to `problems`)."""
    if not isinstance(item, Mapping) or ("items" not in item and "items_unit" not in item):
        return workload
    count, unit = item.get("items"), item.get("items_unit", ITEMS_UNIT)
    if count is None:
        problems.add(f"{where}.items_unit", "goes with items = N (items one call processes)")
        return None
    problem = items_problem(count, unit)
    if problem:
        key = "items" if items_problem(count, ITEMS_UNIT) else "items_unit"
        problems.add(f"{where}.{key}", problem)
        return None
    return workload and dataclasses.replace(workload, items=Items(count, unit))


# ----------------------------------------------------------------------------------------


def _check_listed_once(problems, where, workload: WorkloadConfig, cells) -> bool:
    """A workload's cells on a backend are named by one table only (a second would measure
    them again, as a variant listed twice would)."""
    keys = [(workload.cell.cell_id("", ""), b) for b in workload.backends]
    earlier = next((cells[k] for k in keys if k in cells), None)
    if earlier is not None:
        problems.add(
            where,
            f"{workload.label} is listed twice (also {earlier}): each cell is measured once; "
            "remove one, or give it another size, mode, dtype or overrides",
        )
        return False
    cells.update(dict.fromkeys(keys, where))
    return True


def _parse_workload(problems, where, item, backend, base) -> WorkloadConfig | None:
    if isinstance(item, str):
        item = {"name": item}
    if not isinstance(item, Mapping):
        problems.add(where, f"must be a table or a workload name, not {_type_name(item)}")
        return None
    _check_keys(problems, f"{where}.", item, _WORKLOAD_KEYS)
    if "entry" in item:
        return _parse_entry(problems, where, item, base, backend)
    start = len(problems.items)
    if "implementations" in item:
        problems.add(
            f"{where}.implementations",
            "is for an entry (FILE.py:FUNCTION); a zoo workload's implementations come with it "
            "(`xlafuse workloads`): list them as variants, impl=NAME",
        )
    name = _typed(problems, f"{where}.name", item.get("name"), str)
    size = _typed(problems, f"{where}.size", item.get("size", "tiny"), str)
    mode = _typed(problems, f"{where}.mode", item.get("mode", "forward"), str)
    dtype = _typed(problems, f"{where}.dtype", item.get("dtype"), str, optional=True)
    overrides = dict(_table(problems, f"{where}.overrides", item.get("overrides", {})))
    backends = _parse_backends(problems, f"{where}.backends", item.get("backends", list(BACKENDS)))
    devices = _typed(problems, f"{where}.devices", item.get("devices", 1), int)
    parallelism = _typed(problems, f"{where}.parallelism", item.get("parallelism", "data"), str)
    # A workload meant for other backends only is still checked, as it would be on the first;
    # every field that has a value is checked even when another has a problem (one pass).
    check_on = backend if backend in backends or not backends else backends[0]
    _check_mesh(problems, where, name, devices, parallelism, check_on)
    if name is not None:
        # A field of the wrong type (reported above) is checked as its default meanwhile.
        size_or_default = "tiny" if size is None else size
        mode_or_default = "forward" if mode is None else mode
        _check_workload(
            problems, where, name, size_or_default, mode_or_default, dtype, overrides, check_on
        )
    if len(problems.items) != start:
        return None
    source_sha256 = registry.source_sha256(name)
    return WorkloadConfig(
        name, size, mode, dtype, overrides, backends, devices, parallelism, None, source_sha256
    )


def _parse_entry(problems, where, item, base, backend) -> WorkloadConfig | None:
    """A `[[workloads]]` table with `entry`: a program of the user's (`xlafuse.models.user`).

    Its function is found and its overrides checked against its parameters. Where it runs
    (`backend` is this process's and one of its `backends`), FUNCTION is called once to learn
    its mode (`_returned_mode`): a `mode` left out is that mode, one given that differs is a
    problem. The call makes FUNCTION's arrays and drops them; nothing is traced or compiled,
    and what it returns is checked when the run builds it. A FUNCTION that raises here, or that
    does not run here, keeps the given mode ("forward" when none), and the run records its
    error.
    """
    start = len(problems.items)
    spec = _typed(problems, f"{where}.entry", item.get("entry"), str)
    implementations = _parse_implementations(problems, where, item.get("implementations"), base)
    for key in _NOT_FOR_ENTRIES:
        if key in item:
            problems.add(
                f"{where}.{key}",
                "not for an entry: FUNCTION's overrides decide a program of the user's "
                "(its size and dtype), on one device",
            )
    given = _typed(problems, f"{where}.mode", item.get("mode"), str, optional=True)
    _check_choice(problems, f"{where}.mode", given, registry.MODES, "mode")
    overrides = dict(_table(problems, f"{where}.overrides", item.get("overrides", {})))
    backends = _parse_backends(problems, f"{where}.backends", item.get("backends", list(BACKENDS)))
    entry, source_sha256 = None, None
    if spec is not None:
        try:
            entry = user.parse_entry(spec, base)
            user.check_overrides(entry, overrides)
            source_sha256 = user.source_sha256(entry)
        except XlafuseError as err:
            problems.add(f"{where}.entry", str(err))
    function = entry.function if entry is not None else None
    name = _typed(problems, f"{where}.name", item.get("name", function), str, optional=True)
    if name is not None:
        _check_entry_name(problems, f"{where}.name", name, function or name)
    if len(problems.items) != start or name is None:
        return None
    runs_here = backend in backends and backend == jax.default_backend()
    returned = _returned(entry, overrides) if runs_here else None
    if (
        runs_here
        and implementations
        and not _traced_implementations(problems, where, entry, overrides, implementations)
    ):
        return None
    if given is not None and returned is not None and given != returned[0]:
        mode, what = returned
        problems.add(
            f"{where}.mode",
            f"{given!r}, but entry {spec!r} returns {what}, measured as mode {mode!r}: leave "
            f'mode out (it is what FUNCTION returns) or set mode = "{mode}"',
        )
        return None
    return WorkloadConfig(
        name,
        size=user.ENTRY_SIZE,
        mode=given or (returned[0] if returned else "forward"),
        overrides=overrides,
        backends=backends,
        entry=spec,
        source_sha256=_with_sources(source_sha256, entry, implementations),
        base=base,
        implementations={n: e.spec for n, e in implementations.items()},
    )


# --- an entry's implementations (issue 46) ------------------------------------------------


def _parse_implementations(problems, where, value, base) -> dict[str, user.Entry]:
    """An entry's `implementations` table, name -> `FILE.py:FUNCTION`: each name one an
    `impl=NAME` part can give (not "xla", the entry's own program), each function found
    (its file imported; it is not called)."""
    if value is None:
        return {}
    table = _table(problems, f"{where}.implementations", value)
    found = {}
    for name, spec in table.items():
        at = f"{where}.implementations.{name}"
        problem = variants.implementation_problem(name)
        if problem is None and name == implementations.OWN:
            problem = f"{name!r} is the entry's own program; give its other implementations"
        if problem:
            problems.add(at, problem)
            continue
        spec = _typed(problems, at, spec, str)
        try:
            entry = user.parse_entry(spec, base) if spec is not None else None
            if entry is not None:
                user.load_function(entry)
                found[name] = entry
        except XlafuseError as err:
            problems.add(at, str(err))
    return found


def _traced_implementations(problems, where, entry, overrides, found) -> bool:
    """Whether the entry's implementations trace with its arguments to its program's outputs
    (`user.build_entry`: FUNCTION called, nothing compiled); the problem added where not."""
    try:
        user.build_entry(entry, overrides, implementations=found)
    except XlafuseError as err:
        problems.add(f"{where}.implementations", str(err).splitlines()[0])
        return False
    return True


def _with_sources(sha256: str | None, entry, found: Mapping[str, user.Entry]) -> str | None:
    """The entry's source hash, with the files of its implementations where they are other
    files than the entry's (a changed kernel file is a changed cell)."""
    if sha256 is None or not found:
        return sha256
    files = user.entry_sources(entry)
    more = {k: v for e in found.values() for k, v in user.entry_sources(e).items()}
    if set(more) <= set(files):
        return sha256
    return user.sources_sha256({**files, **more})


def _check_implementations(problems, workloads, listed, backend) -> None:
    """Each variant naming an implementation (`impl=NAME`), against each workload: one it has
    and can run here (`registry.implementation_problem`; an entry: one of its table's)."""
    for i, variant in enumerate(listed):
        name = _implementation(variant)
        if name is None:
            continue
        for w in workloads:
            problem = _implementation_problem(w, name, backend)
            if problem:
                problems.add(f"experiment.variants[{i}]", f"{variant.name!r}: {problem}")


def _implementation(variant: VariantConfig) -> str | None:
    try:
        return variant.resolve().implementation
    except ValueError:
        return None


def _implementation_problem(w: WorkloadConfig, name: str, backend: str) -> str | None:
    """What keeps workload `w` from running implementation `name` (None: nothing)."""
    if w.entry is not None:
        accepted = (implementations.OWN, *w.implementations)
        if name in accepted:
            return None
        shown = ", ".join(f"impl={n}" for n in accepted)
        return (
            f"entry {w.entry!r} has no implementation {name!r}; accepted: {shown} (its "
            'workload table\'s implementations = {NAME = "FILE.py:FUNCTION"})'
        )
    check_on = backend if backend in w.backends or not w.backends else w.backends[0]
    return registry.implementation_problem(
        w.name, name, mode=w.mode, dtype=w.dtype, devices=w.devices, backend=check_on
    )


# ----------------------------------------------------------------------------------------


def _returned(entry: user.Entry, overrides: Mapping[str, Any]) -> tuple[str, str] | None:
    """The mode of what `entry`'s FUNCTION returns with `overrides`, as the command line infers
    it (`xlafuse.models.user.workload_from`), and that return in words: a Workload's own mode,
    "train" for a step `(fn, args, donate_argnums)` that donates, else "forward". None when
    FUNCTION raises or returns another shape: the run's build says what is wrong.

    FUNCTION is called (it makes its arrays, which are dropped); nothing is traced.
    """
    try:
        result = user.load_function(entry)(**overrides)
    except user.USER_CODE_ERRORS:
        return None
    if isinstance(result, Workload):
        return result.mode, f"a Workload in mode {result.mode!r}"
    result, _ = user.without_items(result)  # an Items at the end says nothing of the mode
    if not isinstance(result, tuple | list) or len(result) not in (2, 3):
        return None
    donate = result[2] if len(result) == 3 else ()
    one = isinstance(donate, int) and not isinstance(donate, bool)
    if one or (isinstance(donate, tuple | list) and donate):
        return "train", "a step (fn, args, donate_argnums)"
    return "forward", "a forward program (fn, args)"


def _check_entry_name(problems, where, name, function) -> None:
    """An entry's label is neither a zoo workload's name nor a spec (`:` or `/`)."""
    if name in registry.available() or ":" in name or "/" in name:
        what = "a zoo workload's name" if name in registry.available() else "no label (: or /)"
        problems.add(
            where, f'{name!r} is {what}; give the entry another name (name = "my_{function}")'
        )


def _check_mesh(problems, where, name, devices, parallelism, backend) -> None:
    """The device count and the parallelism (each when it has a value of its type)."""
    problem = device_count_problem(devices, backend) if devices is not None else None
    if problem:
        problems.add(f"{where}.devices", problem)
    _check_choice(problems, f"{where}.parallelism", parallelism, PARALLELISMS, "parallelism")
    if parallelism == "model" and name is not None and name not in MODEL_PARALLEL_WORKLOADS:
        problems.add(
            f"{where}.parallelism",
            f"'model' has no sharding rule for {name!r} "
            f"(accepted: {', '.join(MODEL_PARALLEL_WORKLOADS)}; or 'data')",
        )


def _check_workload(problems, where, name, size, mode, dtype, overrides, backend) -> None:
    """The registry's problems with the workload and its override values, GPU-only options."""
    before = len(problems.items)
    found = registry.problems(name, size, mode, dtype, overrides)
    for field, message in found:
        problems.add(f"{where}.{field}", message)
    if found and found[0][0] == "name":
        return
    if overrides.get("implementation") == "cudnn" and backend != Backend.GPU:
        problems.add(
            f"{where}.overrides.implementation",
            f"'cudnn' needs a GPU; the backend is {backend!r} (use 'xla')",
        )
    if len(problems.items) != before or backend != jax.default_backend():
        return
    # Builders may ask the running backend (cudnn needs a GPU): only build where it runs.
    for field, message in registry.problems(name, size, mode, dtype, overrides, build=True):
        problems.add(f"{where}.{field}", message)


def _parse_backends(problems, where, value) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(b, str) for b in value):
        problems.add(where, f"must be a non-empty array of backend names ({', '.join(BACKENDS)})")
        return ()
    for name in value:
        _check_choice(problems, where, name, BACKENDS, "backend")
    return tuple(b for b in value if b in BACKENDS)


def _check_choice(problems, where, value, accepted, kind) -> None:
    if value is not None and value not in accepted:
        problems.add(
            where,
            f"{value!r} is not a {kind}{did_you_mean(value, accepted)} "
            f"(accepted: {', '.join(accepted)})",
        )


def _parse_variants(problems, value, backend) -> list[VariantConfig]:
    if not isinstance(value, list) or not value:
        problems.add("experiment.variants", "must be a non-empty array of names or tables")
        return []
    out: list[VariantConfig] = []
    for i, item in enumerate(value):
        where = f"experiment.variants[{i}]"
        variant = _parse_variant(problems, where, item, backend)
        if variant is None or not _check_variant_applies(problems, where, variant, backend):
            continue
        if any(v.name == variant.name for v in out):
            problems.add(where, f"variant {variant.name!r} is listed twice")
            continue
        out.append(variant)
    return out


def _parse_variant(problems, where, item, backend) -> VariantConfig | None:
    if isinstance(item, Mapping):
        return _parse_inline_variant(problems, where, item, backend)
    if not isinstance(item, str):
        problems.add(where, f"must be a preset name or a table, not {_type_name(item)}")
        return None
    config = VariantConfig(item, item)
    try:
        config.resolve()  # kept: the run uses this resolution
    except ValueError as err:
        problems.add(where, str(err))
        return None
    return config


def _parse_inline_variant(problems, where, item, backend) -> VariantConfig | None:
    """An inline variant's table (`variants.option_problem` for each option's type). Its
    well-typed options are checked against XLA even when its name or another option has a
    problem: every problem comes out in one pass."""
    name = _typed(problems, f"{where}.name", item.get("name"), str)
    _typed(problems, f"{where}.description", item.get("description"), str, optional=True)
    implementation = _inline_implementation(problems, where, item)
    options = {k: v for k, v in item.items() if k not in _INLINE_VARIANT_META}
    if not options and implementation is None:
        problems.add(where, "an inline variant needs at least one XLA option besides its name")
    typed = {}
    for key, value in options.items():
        problem = variants.option_problem(key, value)
        if problem:
            problems.add(f"{where}.{key}", problem)
        else:
            typed[key] = value
    if not typed and implementation is None:
        return None
    config = VariantConfig(name or "unnamed", None, typed, implementation)
    if name and typed == options:
        return config  # checked against the backend by the caller, as a preset is
    _check_variant_applies(problems, where, config, backend)
    return None


def _inline_implementation(problems, where, item) -> str | None:
    """An inline variant's `implementation` (what `impl=NAME` names), None without one."""
    name = _typed(
        problems, f"{where}.implementation", item.get("implementation"), str, optional=True
    )
    problem = name is not None and variants.implementation_problem(name)
    if problem:
        problems.add(f"{where}.implementation", problem)
        return None
    return name


def _parse_reference(problems, value, variants, listed) -> str:
    """The reference's name; a problem unless it names a variant (one listed that has its own
    problem, like a torch variant without torch, is not reported twice)."""
    reference = _typed(problems, "experiment.reference", value, str, default="default")
    names = [v.name for v in variants]
    if variants and reference not in names + _listed_names(listed):
        problems.add(
            "experiment.reference",
            f"{reference!r} is not one of the variants{did_you_mean(reference, names)} "
            f"(variants: {', '.join(names)})",
        )
    chosen = [v for v in variants if v.name == reference]
    if chosen and _framework(chosen[0]) != Framework.JAX:
        problems.add(
            "experiment.reference",
            f"{reference!r} runs PyTorch; the reference must be an XLA variant (e.g. 'default'): "
            "torch cells are judged and timed against it",
        )
    return reference


def _listed_names(listed: Any) -> list[str]:
    """The names given in `experiment.variants`, valid or not: a preset's, or a table's name."""
    items = listed if isinstance(listed, list) else []
    named = [item.get("name") if isinstance(item, Mapping) else item for item in items]
    return [name for name in named if isinstance(name, str)]


def _framework(config: VariantConfig) -> Framework:
    try:
        return config.resolve().framework
    except ValueError:
        return Framework.JAX


def _check_variant_applies(problems, where, config: VariantConfig, backend) -> bool:
    """The variant applies to the backend and names only passes its XLA has."""
    problem = variant_problem(config, backend)
    if problem:
        problems.add(where, problem)
    return problem is None


def variant_problem(config: VariantConfig, backend: str) -> str | None:
    """What is wrong with running `config` on `backend` (None: nothing): a name that does not
    resolve, a variant for other backends, torch missing for a torch variant, a pass or an
    option the running XLA does not have (each variant's options compiled once)."""
    try:
        variant = config.resolve()
    except ValueError as err:
        return str(err)
    if not variant.applies_to(backend):
        return (
            f"variant {config.name!r} applies to {', '.join(variant.backends)} only; "
            f"the backend is {backend!r}"
        )
    if (
        variant.framework != Framework.JAX
    ):  # a PyTorch twin: no XLA options, but torch must be there
        try:
            variant.check_framework()
        except ValueError as err:
            return str(err)
        return None
    if backend != jax.default_backend():
        return None  # pass names can only be checked against the XLA that will run them
    try:
        options = variant.compiler_options(backend)
    except ValueError as err:
        return str(err)
    rejected = xla_rejects(options)
    if rejected:
        return f"XLA rejects the options of variant {config.name!r}: {rejected}"
    return None


def xla_rejects(options: Mapping[str, Any]) -> str | None:
    """Why the running XLA rejects per-compile `options` (None if it takes them).

    Keys and values are checked the only sure way: by compiling a trivial function with them
    (about 20 ms; once per distinct set of options in a process).
    """
    if not options:
        return None
    return _xla_rejects(json.dumps(dict(options), sort_keys=True))


@functools.cache
def _xla_rejects(options_json: str) -> str | None:
    lowered = jax.jit(lambda x: x + 1).lower(jnp.ones((), jnp.float32))
    try:
        lowered.compile(compiler_options=json.loads(options_json))
    # XLA: JaxRuntimeError (INVALID_ARGUMENT) for a key or value it rejects; TypeError for a
    # value no option takes (a list, None)
    except (jax.errors.JaxRuntimeError, TypeError) as err:
        text = str(err).strip() or type(err).__name__
        return text.splitlines()[0].removeprefix("INVALID_ARGUMENT: ")
    return None


def _flat_table(problems, section: str, value, cls, kind_of):
    """A `cls` from a TOML table of its fields, each checked to be of type `kind_of(name)`."""
    table = _table(problems, section, value)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    _check_keys(problems, f"{section}.", table, tuple(fields))
    kwargs = {}
    for key, field in fields.items():
        got = _typed(problems, f"{section}.{key}", table.get(key, field.default), kind_of(key))
        if got is not None:
            kwargs[key] = got
    return cls(**kwargs)


def _parse_timing(problems, value) -> TimingSettings:
    def kind_of(key):
        return float if key.endswith("_s") else int

    timing = _flat_table(problems, "timing", value, TimingSettings, kind_of)
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
    return _flat_table(problems, "measure", value, MeasureConfig, lambda key: bool)
