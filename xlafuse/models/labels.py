"""The words a workload cell is named with, without JAX and without `Cell`.

What the modules that build workloads (`workload.py`, `user.py`, `registry.py`, `sharding.py`)
need of a cell's name: they import it from here, so that `names.py`, whose `Cell.build` calls
the registry, is imported by none of them (no circle of imports, even inside functions).
`names.py` re-exports each of these.
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
    *,
    size: str | None = None,
    mode: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    dtype: str | None = None,
    mesh: str | None = None,
) -> str:
    """The one short human name of a workload cell, e.g. `chain[ops=16]/tiny/forward/bfloat16 @data2`.

    Overrides stay in the name (they tell two chains apart); dtype and mesh only when given.
    """
    label = "/".join(str(p) for p in (_head(name, overrides), size, mode, dtype) if p)
    return f"{label} @{mesh}" if mesh else label


def _head(name: str, overrides: Mapping[str, Any] | None) -> str:
    """`chain[ops=16]`: the name with its overrides (they tell two chains apart)."""
    extra = ",".join(f"{k}={v}" for k, v in sorted((overrides or {}).items()))
    return f"{name}[{extra}]" if extra else str(name)
