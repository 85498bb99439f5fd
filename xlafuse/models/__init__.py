"""Flax NNX workloads for fusion experiments: named models at several sizes, forward or train.

    >>> from xlafuse import models
    >>> w = models.build("gpt2", size="tiny", mode="train")
    >>> new_state, loss = jax.jit(w.fn, donate_argnums=w.donate_argnums)(*w.args)

Every workload is randomly initialized (nothing is downloaded) and built from a seed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# name -> the submodule that defines it, imported on first use (PEP 562): `xlafuse.models.names`
# is read without JAX by the command line and the reports. The registry imports the family
# modules (which register their workloads) before it answers.
_EXPORTS = {
    "DTYPES": "registry",
    "MODES": "registry",
    "SIZES": "registry",
    "available": "registry",
    "build": "registry",
    "count_params": "registry",
    "param_count": "registry",
    "register": "registry",
    "BuildContext": "workload",
    "Items": "workload",
    "Recipe": "workload",
    "Workload": "workload",
}
_SUBMODULES = (
    "attention", "common", "memory", "mlp", "names", "pointwise", "reductions", "registry",
    "resnet", "sharding", "train", "transformer", "user", "workload",
)  # fmt: skip

if TYPE_CHECKING:
    from xlafuse.models.registry import (
        DTYPES,
        MODES,
        SIZES,
        available,
        build,
        count_params,
        param_count,
        register,
    )
    from xlafuse.models.workload import BuildContext, Items, Recipe, Workload


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"xlafuse.models.{_EXPORTS[name]}"), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"xlafuse.models.{name}")
    else:
        raise AttributeError(f"module 'xlafuse.models' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_SUBMODULES})


__all__ = [
    "DTYPES",
    "MODES",
    "SIZES",
    "BuildContext",
    "Items",
    "Recipe",
    "Workload",
    "available",
    "build",
    "count_params",
    "param_count",
    "register",
]
