"""Matmul workloads: `matmul_bias_act` (epilogue fusion), `mlp` (a pre-LN feed-forward block)
and `swiglu` (a SwiGLU feed-forward block).

`matmul_bias_act` is x @ W + b followed by GELU: with fusion the bias and activation ride in the
GEMM's epilogue (a Triton GEMM fusion or cuBLASLt epilogue on GPU); without, each is its own pass.
`MlpBlock` is also the feed-forward half of the GPT block in `transformer.py`. `swiglu`
declares the op "gated_linear_unit": a variant `impl=NAME` runs tokamax's `gated_linear_unit`
with NAME for its gate and up projections (`xlafuse.models.implementations`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from xlafuse.models import implementations
from xlafuse.models.common import call_model, layer_norm, linear, normal_inputs, token_recipe
from xlafuse.models.registry import register
from xlafuse.models.workload import BuildContext, Recipe

MATMUL_SIZES = {
    "tiny": {"rows": 32, "d_in": 64, "d_out": 128},
    "small": {"rows": 512, "d_in": 768, "d_out": 3072},
    "full": {"rows": 8192, "d_in": 4096, "d_out": 16384},
}

MLP_SIZES = {
    "tiny": {"batch": 2, "seq_len": 16, "d_model": 64, "d_hidden": 256},
    "small": {"batch": 1, "seq_len": 128, "d_model": 768, "d_hidden": 3072},
    "full": {"batch": 8, "seq_len": 1024, "d_model": 4096, "d_hidden": 16384},
}


# LLaMA's proportions: d_hidden about 8/3 of d_model (full: LLaMA-7B's 4,096 and 11,008)
GATED_SIZES = {
    "tiny": {"batch": 2, "seq_len": 16, "d_model": 64, "d_hidden": 128},
    "small": {"batch": 1, "seq_len": 128, "d_model": 768, "d_hidden": 2048},
    "full": {"batch": 8, "seq_len": 1024, "d_model": 4096, "d_hidden": 11008},
}


class MatmulBiasAct(nnx.Module):
    """GELU(x @ W + b)."""

    def __init__(self, d_in: int, d_out: int, *, ctx: BuildContext, rngs: nnx.Rngs):
        self.dense = linear(d_in, d_out, ctx, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return jax.nn.gelu(self.dense(x))


class MlpBlock(nnx.Module):
    """x + Dense(GELU(Dense(LayerNorm(x)))): the pre-LN feed-forward sublayer of a GPT block."""

    def __init__(self, d_model: int, d_hidden: int, *, ctx: BuildContext, rngs: nnx.Rngs):
        self.norm = layer_norm(d_model, ctx, rngs)
        self.up = linear(d_model, d_hidden, ctx, rngs)
        self.down = linear(d_hidden, d_model, ctx, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return x + self.down(jax.nn.gelu(self.up(self.norm(x))))


class GatedMlp(nnx.Module):
    """down(swish(x @ W_gate) * (x @ W_up)), no biases: a SwiGLU feed-forward block. W_gate and
    W_up are one (d_model, 2, d_hidden) parameter, the fused form tokamax's
    `gated_linear_unit` takes."""

    def __init__(self, d_model: int, d_hidden: int, *, ctx: BuildContext, rngs: nnx.Rngs):
        init = nnx.initializers.lecun_normal(in_axis=0, out_axis=(1, 2))
        self.gate_up = nnx.Param(init(rngs.params(), (d_model, 2, d_hidden), ctx.param_dtype))
        self.down = nnx.Linear(
            d_hidden, d_model, use_bias=False, dtype=ctx.dtype, param_dtype=ctx.param_dtype,
            rngs=rngs,
        )  # fmt: skip
        self.dtype = ctx.dtype

    def __call__(self, x: jax.Array) -> jax.Array:
        weights = self.gate_up[...].astype(self.dtype)
        chosen = implementations.chosen("gated_linear_unit")
        if chosen is None:
            hidden = gated_linear_unit(x, weights)
        else:
            hidden = implementations.gated_linear_unit(
                x, weights, activation=jax.nn.swish, name=chosen
            )
        return self.down(hidden)


def gated_linear_unit(x: jax.Array, weights: jax.Array) -> jax.Array:
    """swish(x @ weights[:, 0]) * (x @ weights[:, 1]): the gated MLP's own program."""
    gate = jnp.einsum("...k,kn->...n", x, weights[:, 0])
    up = jnp.einsum("...k,kn->...n", x, weights[:, 1])
    return jax.nn.swish(gate) * up


def mlp_flops(tokens: int, d_model: int, d_hidden: int) -> int:
    """Returns the forward matmul FLOPs of `MlpBlock`: two GEMMs, 2 FLOPs per multiply-add."""
    return 2 * 2 * tokens * d_model * d_hidden


@register("matmul_bias_act", sizes=MATMUL_SIZES)
def matmul_bias_act(cfg: Mapping[str, Any], ctx: BuildContext) -> Recipe:
    """GELU(x @ W + b) with x of shape (rows, d_in) and W of shape (d_in, d_out)."""
    rows, d_in, d_out = cfg["rows"], cfg["d_in"], cfg["d_out"]
    return Recipe(
        make_inputs=normal_inputs((rows, d_in), ctx.dtype),
        apply=call_model,
        items_per_call=rows,
        items_unit="rows",
        flops=2 * rows * d_in * d_out,
        make_model=lambda rngs: MatmulBiasAct(d_in, d_out, ctx=ctx, rngs=rngs),
    )


@register("mlp", sizes=MLP_SIZES)
def mlp(cfg: Mapping[str, Any], ctx: BuildContext) -> Recipe:
    """LayerNorm -> Dense -> GELU -> Dense, plus residual, on a (batch, seq_len, d_model) input."""
    batch, seq_len, d_model, d_hidden = (
        cfg[k] for k in ("batch", "seq_len", "d_model", "d_hidden")
    )
    return token_recipe(
        (batch, seq_len, d_model),
        ctx,
        lambda rngs: MlpBlock(d_model, d_hidden, ctx=ctx, rngs=rngs),
        flops=mlp_flops(batch * seq_len, d_model, d_hidden),
    )


@register("swiglu", sizes=GATED_SIZES, op="gated_linear_unit")
def swiglu(cfg: Mapping[str, Any], ctx: BuildContext) -> Recipe:
    """SwiGLU feed-forward (gate, up, down; no biases) on a (batch, seq_len, d_model) input."""
    batch, seq_len, d_model, d_hidden = (
        cfg[k] for k in ("batch", "seq_len", "d_model", "d_hidden")
    )
    return token_recipe(
        (batch, seq_len, d_model),
        ctx,
        lambda rngs: GatedMlp(d_model, d_hidden, ctx=ctx, rngs=rngs),
        flops=3 * 2 * batch * seq_len * d_model * d_hidden,
    )
