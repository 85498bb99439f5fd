"""The frozen dataclasses a TOML experiment config is read into (`xlafuse.experiment.config`,
which checks a config and re-exports them): the experiment, its workloads, its variants and its
optional measurements."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from xlafuse.compiler import variants
from xlafuse.compiler.variants import BACKENDS
from xlafuse.measurement.timing import TimingSettings
from xlafuse.models.names import Cell, cell_fields
from xlafuse.models.workload import Items, Workload

if TYPE_CHECKING:
    from xlafuse.compiler.variants import Variant

INLINE_VARIANT_META = ("name", "description", "implementation")


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
        return self.cell.build()

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
            implementations=self.implementations,
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
    def of(cls, spec: str | Mapping[str, Any]) -> VariantConfig:
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
            options = {k: v for k, v in spec.items() if k not in INLINE_VARIANT_META}
            config = cls(name, None, options, spec.get("implementation"))
        else:
            resolved = variants.get(spec)  # a Variant: its own name, resolved already
            config = cls(resolved.name, None, resolved.options, resolved.implementation)
            object.__setattr__(config, "_resolved", resolved)
        config.resolve()
        return config

    def resolve(self) -> Variant:
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
