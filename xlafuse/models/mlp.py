"""Matmul workloads: `matmul_bias_act` (epilogue fusion) and `mlp` (a pre-LN feed-forward block).

`matmul_bias_act` is x @ W + b followed by GELU: with fusion the bias and activation ride in the
GEMM's epilogue (a Triton GEMM fusion or cuBLASLt epilogue on GPU); without, each is its own pass.
`MlpBlock` is also the feed-forward half of the GPT block in `transformer.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
from flax import nnx

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
