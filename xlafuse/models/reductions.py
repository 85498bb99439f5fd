"""Reduction workloads: a reduction over the last axis feeding elementwise work.

Fusion can put the reduction and its consumers into one kernel (or, on GPU, a Triton softmax
fusion); unfused, the statistics make an extra trip through memory. `layernorm` and `rmsnorm` carry
a learned scale (and bias), so they also have a train mode; `softmax` is parameter-free.

`layernorm` declares the op "layer_norm": a variant `impl=NAME` runs tokamax's `layer_norm`
with NAME in place of Flax's (`xlafuse.models.implementations`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
from flax import nnx

from xlafuse.models import implementations
from xlafuse.models.common import normal_inputs, token_recipe
from xlafuse.models.registry import register
from xlafuse.models.workload import BuildContext, Recipe

NORM_SIZES = {
    "tiny": {"batch": 2, "seq_len": 16, "d_model": 64},
    "small": {"batch": 8, "seq_len": 512, "d_model": 768},
    "full": {"batch": 32, "seq_len": 2048, "d_model": 4096},
}

# Attention-score shaped: (batch, heads, seq_len, seq_len), normalized over the last axis.
SOFTMAX_SIZES = {
    "tiny": {"batch": 2, "heads": 2, "seq_len": 16},
    "small": {"batch": 1, "heads": 12, "seq_len": 128},
    "full": {"batch": 8, "heads": 16, "seq_len": 2048},
}


class LayerNorm(nnx.LayerNorm):
    """`nnx.LayerNorm` (scale and bias), or tokamax's `layer_norm` where an implementation is
    chosen for "layer_norm" (the same parameters and epsilon)."""

    def __call__(self, x: jax.Array) -> jax.Array:
        chosen = implementations.chosen("layer_norm")
        if chosen is None:
            return super().__call__(x)
        scale, bias = self.scale[...], self.bias[...]
        return implementations.layer_norm(x, scale, bias, epsilon=self.epsilon, name=chosen)


def _norm_recipe(cfg: Mapping[str, Any], ctx: BuildContext, norm_cls) -> Recipe:
    shape = (cfg["batch"], cfg["seq_len"], cfg["d_model"])

    def make_model(rngs: nnx.Rngs) -> nnx.Module:
        return norm_cls(cfg["d_model"], dtype=ctx.dtype, param_dtype=ctx.param_dtype, rngs=rngs)

    return token_recipe(shape, ctx, make_model)


@register("layernorm", sizes=NORM_SIZES, op="layer_norm")
def layernorm(cfg: Mapping[str, Any], ctx: BuildContext) -> Recipe:
    """LayerNorm over d_model of a (batch, seq_len, d_model) activation: scale and bias."""
    return _norm_recipe(cfg, ctx, LayerNorm)


@register("rmsnorm", sizes=NORM_SIZES)
def rmsnorm(cfg: Mapping[str, Any], ctx: BuildContext) -> Recipe:
    """RMSNorm over d_model of a (batch, seq_len, d_model) activation: scale only."""
    return _norm_recipe(cfg, ctx, nnx.RMSNorm)


@register("softmax", sizes=SOFTMAX_SIZES, has_params=False)
def softmax(cfg: Mapping[str, Any], ctx: BuildContext) -> Recipe:
    """Softmax over the last axis of (batch, heads, seq_len, seq_len) attention scores."""
    shape = (cfg["batch"], cfg["heads"], cfg["seq_len"], cfg["seq_len"])
    return Recipe(
        make_inputs=normal_inputs(shape, ctx.dtype),
        apply=lambda x: jax.nn.softmax(x, axis=-1),
        items_per_call=shape[0] * shape[1] * shape[2],
        items_unit="rows",
    )
