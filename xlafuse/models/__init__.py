"""Flax NNX workloads for fusion experiments: named models at several sizes, forward or train.

    >>> from xlafuse import models
    >>> w = models.build("gpt2", size="tiny", mode="train")
    >>> new_state, loss = jax.jit(w.fn, donate_argnums=w.donate_argnums)(*w.args)

Every workload is randomly initialized (nothing is downloaded) and built from a seed.
"""

# The family modules register their workloads when imported.
from xlafuse.models import attention, mlp, pointwise, reductions, resnet, transformer  # noqa: F401
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
from xlafuse.models.workload import BuildContext, Recipe, Workload

__all__ = [
    "DTYPES",
    "MODES",
    "SIZES",
    "BuildContext",
    "Recipe",
    "Workload",
    "available",
    "build",
    "count_params",
    "param_count",
    "register",
]
