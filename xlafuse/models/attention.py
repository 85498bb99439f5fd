"""Causal multi-head self-attention through `jax.nn.dot_product_attention`.

The override `implementation` picks "xla" (default: XLA builds the [B, H, S, S] scores and fuses
around them) or "cudnn" (one fused FlashAttention-style custom call; NVIDIA GPU and 16-bit dtypes
only). `CausalSelfAttention` is also the attention half of the GPT block in `transformer.py`.

The `attention` workload declares the op "attention": a variant `impl=NAME` runs tokamax's
`dot_product_attention` with NAME in place of `jax.nn`'s (`xlafuse.models.implementations`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from xlafuse.kinds import Backend
from xlafuse.models import implementations
from xlafuse.models.common import linear, token_recipe
from xlafuse.models.registry import choose, register
from xlafuse.models.workload import BuildContext, Recipe

IMPLEMENTATIONS = ("xla", "cudnn")

SIZES = {
    "tiny": {"batch": 2, "seq_len": 16, "heads": 4, "head_dim": 16},
    "small": {"batch": 1, "seq_len": 128, "heads": 12, "head_dim": 64},
    "full": {"batch": 8, "seq_len": 2048, "heads": 16, "head_dim": 64},
}


class CausalSelfAttention(nnx.Module):
    """Fused QKV projection, causal dot-product attention, output projection (GPT-2 layout)."""

    def __init__(
        self, d_model: int, heads: int, implementation: str, *, ctx: BuildContext, rngs: nnx.Rngs
    ):
        self.qkv = linear(d_model, 3 * d_model, ctx, rngs)
        self.out = linear(d_model, d_model, ctx, rngs)
        self.heads = heads
        self.implementation = implementation

    def __call__(self, x: jax.Array) -> jax.Array:
        batch, seq_len, d_model = x.shape
        qkv = self.qkv(x).reshape(batch, seq_len, 3, self.heads, d_model // self.heads)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        chosen = implementations.chosen("attention")  # a variant's impl=NAME (issue 46)
        if chosen is not None:
            y = implementations.attention(q, k, v, chosen)
        else:
            y = jax.nn.dot_product_attention(
                q, k, v, is_causal=True, implementation=self.implementation
            )
        return self.out(y.reshape(batch, seq_len, d_model))


def check_implementation(implementation: str, ctx: BuildContext, workload: str) -> str:
    """Returns `implementation` if it can run here.

    Raises:
        UnknownNameError: not "xla" or "cudnn".
        ValueError: "cudnn" without an NVIDIA GPU backend, or with a dtype cuDNN cannot take.
    """
    where = f" for workload {workload!r}"
    choose("attention implementation", implementation, IMPLEMENTATIONS, where=where)
    if implementation != "cudnn":
        return implementation
    backend = jax.default_backend()
    if backend != Backend.GPU:
        raise ValueError(
            f"implementation='cudnn'{where} needs an NVIDIA GPU, but JAX's backend is "
            f"{backend!r}; use implementation='xla'"
        )
    if ctx.dtype not in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)):
        raise ValueError(
            f"implementation='cudnn'{where} needs dtype bfloat16 or float16, got {ctx.dtype.name}"
        )
    return implementation


def check_heads(d_model: int, heads: int, workload: str) -> None:
    """Raises ValueError unless `heads` divides `d_model`."""
    if heads < 1 or d_model % heads:
        raise ValueError(
            f"workload {workload!r}: heads={heads} must divide d_model={d_model} evenly"
        )


def attention_flops(batch: int, seq_len: int, d_model: int) -> int:
    """Returns forward FLOPs of `CausalSelfAttention`: 2 per multiply-add.

    Projections: 8 * tokens * d_model**2 (QKV and output). Scores and weighted sum:
    4 * batch * seq_len**2 * d_model, counted in full although the mask makes half of them
    unnecessary (what the "xla" implementation computes; the PaLM/Megatron convention).
    """
    tokens = batch * seq_len
    return 8 * tokens * d_model**2 + 4 * batch * seq_len**2 * d_model


@register("attention", sizes=SIZES, options={"implementation": "xla"}, op="attention")
def attention(cfg: Mapping[str, Any], ctx: BuildContext) -> Recipe:
    """Causal multi-head self-attention on a (batch, seq_len, heads * head_dim) input."""
    implementation = check_implementation(cfg["implementation"], ctx, "attention")
    batch, seq_len, heads = cfg["batch"], cfg["seq_len"], cfg["heads"]
    d_model = heads * cfg["head_dim"]
    return token_recipe(
        (batch, seq_len, d_model),
        ctx,
        lambda rngs: CausalSelfAttention(d_model, heads, implementation, ctx=ctx, rngs=rngs),
        flops=attention_flops(batch, seq_len, d_model),
    )
