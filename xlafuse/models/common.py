"""Small building blocks the workload families share: layers in the build dtypes, input makers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from flax import nnx

from xlafuse.models.workload import BuildContext, Recipe


def linear(d_in: int, d_out: int, ctx: BuildContext, rngs: nnx.Rngs) -> nnx.Linear:
    """Returns a Dense layer (with bias) in the context's dtypes."""
    return nnx.Linear(d_in, d_out, dtype=ctx.dtype, param_dtype=ctx.param_dtype, rngs=rngs)


def layer_norm(d_model: int, ctx: BuildContext, rngs: nnx.Rngs) -> nnx.LayerNorm:
    """Returns a LayerNorm (scale and bias) in the context's dtypes."""
    return nnx.LayerNorm(d_model, dtype=ctx.dtype, param_dtype=ctx.param_dtype, rngs=rngs)


def normal_inputs(shape: tuple[int, ...], dtype: Any) -> Callable[[jax.Array], tuple[jax.Array]]:
    """Returns `make_inputs(key)` giving one standard-normal array of `shape`, made on device."""

    def make_inputs(key: jax.Array) -> tuple[jax.Array]:
        return (jax.random.normal(key, shape, dtype),)

    return make_inputs


def call_model(model: nnx.Module, *inputs: jax.Array) -> jax.Array:
    """Applies a module to its inputs (the `apply` of most recipes)."""
    return model(*inputs)


def token_recipe(
    shape: tuple[int, int, int],
    ctx: BuildContext,
    make_model: Callable[[nnx.Rngs], nnx.Module],
    *,
    flops: int | None = None,
) -> Recipe:
    """The Recipe of a module applied to one standard-normal (batch, seq_len, d_model)
    activation, counting its batch * seq_len tokens."""
    return Recipe(
        make_inputs=normal_inputs(shape, ctx.dtype),
        apply=call_model,
        items_per_call=shape[0] * shape[1],
        items_unit="tokens",
        flops=flops,
        make_model=make_model,
    )
