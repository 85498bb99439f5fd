"""Pointwise workloads: the textbook cases of fusion, parameter-free and memory-bound.

Unfused, every elementwise op reads and writes its whole array; fused, the data makes one trip.
Inputs are 2-D `(rows, cols)` arrays of standard-normal values. The dtype defaults to float32 at
every size (not bfloat16 on GPU), so that "full" is exactly 1 GiB per input array (2**28 floats)
and the sizes stay comparable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from xlafuse.models.registry import register
from xlafuse.models.workload import BuildContext, Recipe

SIZES = {
    "tiny": {"rows": 64, "cols": 128},
    "small": {"rows": 1024, "cols": 1024},
    "full": {"rows": 16384, "cols": 16384},
}

# Cheap ops that keep values bounded however long the chain: x -> 0.999 x + 0.001 has fixed point 1.
_CHEAP_OPS: tuple[Callable[[jax.Array], jax.Array], ...] = (
    lambda x: x * 0.999,
    lambda x: x + 0.001,
    lambda x: jnp.maximum(x, -4.0),
    lambda x: x - 0.0005,
)


def _recipe(cfg: Mapping[str, Any], ctx: BuildContext, apply, num_inputs: int) -> Recipe:
    shape = (cfg["rows"], cfg["cols"])

    def make_inputs(key: jax.Array) -> tuple[jax.Array, ...]:
        keys = jax.random.split(key, num_inputs)
        return tuple(jax.random.normal(k, shape, ctx.dtype) for k in keys)

    return Recipe(make_inputs, apply, items_per_call=shape[0] * shape[1], items_unit="elements")


@register("mul_add_relu", sizes=SIZES, has_params=False, default_dtype="float32")
def mul_add_relu(cfg: Mapping[str, Any], ctx: BuildContext) -> Recipe:
    """relu(x * a + b) on three same-shape arrays."""
    return _recipe(cfg, ctx, lambda x, a, b: jax.nn.relu(x * a + b), num_inputs=3)


@register("cos_relu", sizes=SIZES, has_params=False, default_dtype="float32")
def cos_relu(cfg: Mapping[str, Any], ctx: BuildContext) -> Recipe:
    """relu(cos(x)): a transcendental followed by a cheap op."""
    return _recipe(cfg, ctx, lambda x: jax.nn.relu(jnp.cos(x)), num_inputs=1)


@register("gelu", sizes=SIZES, has_params=False, default_dtype="float32")
def gelu(cfg: Mapping[str, Any], ctx: BuildContext) -> Recipe:
    """GELU (tanh approximation, as GPT-2): a handful of elementwise ops in one activation."""
    return _recipe(cfg, ctx, jax.nn.gelu, num_inputs=1)


@register("chain", sizes=SIZES, options={"ops": 8}, has_params=False, default_dtype="float32")
def chain(cfg: Mapping[str, Any], ctx: BuildContext) -> Recipe:
    """`ops` cheap elementwise ops in a row (multiply, add, max, subtract, repeated)."""
    ops = cfg["ops"]  # an integer >= 1: the registry checks every override (check_override)

    def apply(x: jax.Array) -> jax.Array:
        for i in range(ops):
            x = _CHEAP_OPS[i % len(_CHEAP_OPS)](x)
        return x

    return _recipe(cfg, ctx, apply, num_inputs=1)
