"""The names of workload cells and of mesh layouts, without JAX.

`Cell` is the one name of a workload cell (issue 30): the config, the runner, cold start, warm-up,
diff, explain, validation and the reports pass it, and ask it for its label, its mesh and its
resume key. The command line, the records and the reports name workloads with these; a command
that only reads HLO or results (`xlafuse inspect DUMP`, `xlafuse report`) imports them and starts
without JAX. The sharding itself is `xlafuse.models.sharding`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from xlafuse.kinds import Mode

# The words of a cell's name: the modules that build workloads import them from labels.py.
from xlafuse.models.labels import (  # noqa: F401 - part of this module's API
    PARALLELISMS,
    _head,
    cell_fields,
    display_name,
    is_entry,
    workload_label,
)

if TYPE_CHECKING:
    from xlafuse.models.workload import Workload


@dataclasses.dataclass(frozen=True)
class Cell:
    """The one name of a workload cell: what is built, at which size, in which mode, on which
    devices. A variant and a backend make it a measured cell (`cell_id`).

    Attributes:
      name: a zoo workload's name, a workload registered by the user's imports, or an entry
        (`FILE.py:FUNCTION`, `MODULE:FUNCTION`); for a config's entry, the label it gives it.
      size, mode: "tiny", "small", "full" ("custom" for an entry); "forward" or "train".
      dtype: the dtype asked for; None for the workload's default.
      overrides: size-table or option overrides (an entry's keyword arguments).
      devices, parallelism: the mesh; on one device parallelism is "data" whatever was given.
      entry: a config's entry as written (`name` is then its label); None otherwise.
      base: the folder an entry's relative FILE is found from (not part of the name).
      items: a `xlafuse.models.Items` that the built workload counts per call in place of its
        own (`--items`, a config's `items`), for throughput; None keeps its own (not part of
        the name: the program is the same).
      implementations: an entry's other implementations of its program, name ->
        `FILE.py:FUNCTION` (a config's `implementations` table, found from `base`), which a
        variant `impl=NAME` runs (not part of the name: their files are in the entry's
        `source_sha256`).
    """

    name: str
    size: str = "tiny"
    mode: str = "forward"
    dtype: str | None = None
    overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)
    devices: int = 1
    parallelism: str = "data"
    entry: str | None = None
    base: Path | None = dataclasses.field(default=None, compare=False)
    items: Any = dataclasses.field(default=None, compare=False)
    implementations: Mapping[str, str] = dataclasses.field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "overrides", MappingProxyType(dict(self.overrides or {})))
        implementations = MappingProxyType(dict(self.implementations or {}))
        object.__setattr__(self, "implementations", implementations)
        if self.devices <= 1:
            object.__setattr__(self, "parallelism", "data")

    @property
    def mesh(self) -> str | None:
        """`data2`, `model4`: the layout on several devices; None on one."""
        return f"{self.parallelism}{self.devices}" if self.devices > 1 else None

    @property
    def on_devices(self) -> str | None:
        """`data-parallel on 2 devices`; None on one device."""
        return f"{self.parallelism}-parallel on {self.devices} devices" if self.mesh else None

    @property
    def head(self) -> str:
        """`chain[ops=16]`: the name (a program of the user's by its FUNCTION) with its
        overrides."""
        return _head(display_name(self.name), self.overrides)

    @property
    def short_label(self) -> str:
        """`chain[ops=16]/tiny/forward`: what the report's tables group a workload's cells by."""
        return workload_label(self.head, size=self.size, mode=self.mode)

    @property
    def label(self) -> str:
        """`chain[ops=16]/tiny/forward/bfloat16 @data2`: dtype when asked for, mesh when sharded."""
        return workload_label(
            self.head,
            size=self.size,
            mode=self.mode,
            overrides=None,
            dtype=self.dtype,
            mesh=self.mesh,
        )

    def cell_id(self, variant: str, backend: str, *, processes: str | None = None) -> str:
        """The resume key of the cell under `variant` on `backend`, e.g.
        `chain/tiny/forward/auto/{"ops":16}/no-fusion/cpu`; a sharded cell ends with its mesh
        (`.../gpu/data2`), a one-device cell keeps the key published before meshes. A cell of
        several `jax.distributed` processes ends with them, `processes` being processes x
        devices per process (`.../cpu/data4/processes2x2`); one process keeps the old key."""
        extra = json.dumps(dict(self.overrides), sort_keys=True, separators=(",", ":"), default=str)
        parts = [self.name, self.size, self.mode, self.dtype or "auto", extra, variant, backend]
        tail = ([self.mesh] if self.mesh else []) + ([f"processes{processes}"] if processes else [])
        return "/".join(parts + tail)

    @property
    def build_name(self) -> str:
        """What `xlafuse.models.build` takes: the name, or the config's entry resolved."""
        if self.entry is None:
            return self.name
        from xlafuse.models import user  # JAX: only a build needs it (user.py imports no Cell)

        return user.parse_entry(self.entry, base=self.base).resolved

    def implementation_entries(self) -> dict[str, Any]:
        """The `implementations` as `xlafuse.models.user.Entry`s, found from `base`."""
        from xlafuse.models import user  # JAX: only a build needs it (user.py imports no Cell)

        return {n: user.parse_entry(s, base=self.base) for n, s in self.implementations.items()}

    def build(self, *, seed: int = 0) -> Workload:
        """The `xlafuse.models.Workload` of this cell (`xlafuse.models.build`), sharded over its
        devices.

        Raises:
          XlafuseError, ValueError: as `build`; for a config's entry, also a mode that is not
            what FUNCTION returned.
        """
        # JAX, imported by the one call that builds; neither module imports this one
        from xlafuse.models import registry, user

        if self.implementations:  # an entry's, each loaded and checked by tracing
            workload = user.build_entry(
                self.build_name,
                overrides=self.overrides,
                implementations=self.implementation_entries(),
            )
        else:
            workload = registry.build(
                self.build_name,
                size=self.size,
                mode=self.mode,
                dtype=self.dtype,
                seed=seed,
                devices=self.devices,
                parallelism=self.parallelism,
                **self.overrides,
            )
        if self.entry is not None and workload.mode != self.mode:
            step = workload.mode == Mode.TRAIN
            returned = "a step (fn, args, donate_argnums)" if step else "a forward program"
            raise user.EntryError(
                f"entry {self.entry!r} returned {returned}, and the config says mode = "
                f"{self.mode!r}: set mode = {workload.mode!r}"
            )
        return workload.with_items(self.items)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (what a child process rebuilds the cell from: `from_dict`); the
        parallelism is None on one device, an entry's key only for an entry."""
        return {
            **cell_fields(self),
            "overrides": dict(self.overrides),
            "devices": self.devices,
            "parallelism": self.parallelism if self.mesh else None,
            **({"entry": self.entry} if self.entry else {}),
            **({"implementations": dict(self.implementations)} if self.implementations else {}),
        }

    @classmethod
    def of(cls, workload: Any) -> Cell:
        """The cell a built `Workload` names: `gpt2/tiny/train @data2` (which of its
        configuration were overrides is not known once built: they are left out)."""
        parallelism = workload.parallelism or "data"
        return cls(
            name=workload.name,
            size=workload.size,
            mode=workload.mode,
            devices=workload.devices,
            parallelism=parallelism,
        )

    @classmethod
    def rebuilt(cls, workload: Any) -> Cell:
        """The cell a child process builds a `Workload` again from: its resolved configuration
        as the overrides, a program of the user's by its resolved entry (whose dtype is its
        inputs')."""
        return cls(
            name=workload.entry or workload.name,
            size=workload.size,
            mode=workload.mode,
            dtype=None if workload.entry else workload.dtype,
            overrides=workload.config,
            devices=workload.devices,
            parallelism=workload.parallelism or "data",
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Cell:
        """The cell of a `to_dict` form (missing keys take their defaults)."""
        return cls(
            name=data["name"],
            size=data.get("size") or "tiny",
            mode=data.get("mode") or "forward",
            dtype=data.get("dtype"),
            overrides=data.get("overrides") or {},
            devices=int(data.get("devices") or 1),
            parallelism=data.get("parallelism") or "data",
            entry=data.get("entry"),
            implementations=data.get("implementations") or {},
        )
