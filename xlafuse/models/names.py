"""The names of workload cells and of mesh layouts, without JAX.

The command line, the records and the reports name workloads with these; a command that only
reads HLO or results (`xlafuse inspect DUMP`, `xlafuse report`) imports them and starts without
JAX. The sharding itself is `xlafuse.models.sharding`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PARALLELISMS = ("data", "model")  # see xlafuse.models.sharding


def cell_fields(cell: Any) -> dict[str, Any]:
    """The `name`, `size`, `mode` and `dtype` of a Workload or a config's WorkloadConfig: what
    names a cell, the first keys of both their JSON forms (`to_dict`)."""
    return {key: getattr(cell, key) for key in ("name", "size", "mode", "dtype")}


def is_entry(name: Any) -> bool:
    """Whether a workload name is a program of the user's (`FILE.py:FUNCTION`,
    `MODULE:FUNCTION`; `xlafuse.models.user`): zoo names have no colon."""
    return isinstance(name, str) and ":" in name


def display_name(name: str) -> str:
    """How a workload is shown: a zoo name as it is, a program of the user's by FUNCTION."""
    return name.rpartition(":")[2] if is_entry(name) else name


def workload_label(
    name: str,
    size: str | None = None,
    mode: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    dtype: str | None = None,
    mesh: str | None = None,
) -> str:
    """The one short human name of a workload cell, e.g. `chain[ops=16]/tiny/forward/bfloat16 @data2`.

    Overrides stay in the name (they tell two chains apart); dtype and mesh only when given.
    """
    extra = ",".join(f"{k}={v}" for k, v in sorted((overrides or {}).items()))
    head = f"{name}[{extra}]" if extra else str(name)
    label = "/".join(str(p) for p in (head, size, mode, dtype) if p)
    return f"{label} @{mesh}" if mesh else label
