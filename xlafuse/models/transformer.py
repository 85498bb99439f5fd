"""`transformer_block` (a pre-LN GPT block) and `gpt2` (a decoder-only LM with tied embeddings).

The GPT-2 layout: learned token and position embeddings, blocks of
x + Attn(LN(x)) then x + MLP(LN(x)) with d_hidden = 4 * d_model, a final LayerNorm, and logits
from the transposed token embedding. Size "small" is GPT-2 small (124,439,808 parameters).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from xlafuse.models import implementations
from xlafuse.models.attention import (
    CausalSelfAttention,
    attention_flops,
    check_heads,
    check_implementation,
)
from xlafuse.models.common import call_model, layer_norm, token_recipe
from xlafuse.models.mlp import MlpBlock, mlp_flops
from xlafuse.models.registry import register
from xlafuse.models.train import cross_entropy
from xlafuse.models.workload import BuildContext, Recipe

BLOCK_SIZES = {
    "tiny": {"batch": 2, "seq_len": 16, "d_model": 64, "heads": 4},
    "small": {"batch": 1, "seq_len": 128, "d_model": 768, "heads": 12},
    "full": {"batch": 8, "seq_len": 2048, "d_model": 1024, "heads": 16},
}

_GPT2_SMALL = {"layers": 12, "d_model": 768, "heads": 12, "vocab": 50257, "context": 1024}
GPT2_SIZES = {
    "tiny": {
        "batch": 2,
        "seq_len": 32,
        "layers": 2,
        "d_model": 64,
        "heads": 4,
        "vocab": 256,
        "context": 64,
    },
    "small": {"batch": 1, "seq_len": 128, **_GPT2_SMALL},
    "full": {"batch": 8, "seq_len": 1024, **_GPT2_SMALL},
}

EMBED_STDDEV = 0.02  # GPT-2's initializer range; unit-variance tied embeddings give huge logits


class TransformerBlock(nnx.Module):
    """Pre-LN GPT block: x + Attn(LN(x)), then x + MLP(LN(x)) with a 4x hidden layer."""

    def __init__(
        self, d_model: int, heads: int, implementation: str, *, ctx: BuildContext, rngs: nnx.Rngs
    ):
        self.norm = layer_norm(d_model, ctx, rngs)
        self.attn = CausalSelfAttention(d_model, heads, implementation, ctx=ctx, rngs=rngs)
        self.mlp = MlpBlock(d_model, 4 * d_model, ctx=ctx, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.mlp(x + self.attn(self.norm(x)))


class LmHead(NamedTuple):
    """What `GPT2` returns where an implementation is chosen for "lm_head_loss": the final
    LayerNorm's output and the tied embedding (vocab, d_model), for the loss to project."""

    hidden: jax.Array
    embedding: jax.Array


class GPT2(nnx.Module):
    """Decoder-only LM: token + position embeddings, blocks, final LN, tied output embedding."""

    def __init__(
        self,
        cfg: Mapping[str, Any],
        implementation: str,
        *,
        ctx: BuildContext,
        rngs: nnx.Rngs,
    ):
        init = nnx.initializers.normal(EMBED_STDDEV)
        kw = {"dtype": ctx.dtype, "param_dtype": ctx.param_dtype, "embedding_init": init}
        d_model = cfg["d_model"]
        self.wte = nnx.Embed(cfg["vocab"], d_model, rngs=rngs, **kw)
        self.wpe = nnx.Embed(cfg["context"], d_model, rngs=rngs, **kw)
        self.blocks = nnx.List(
            [
                TransformerBlock(d_model, cfg["heads"], implementation, ctx=ctx, rngs=rngs)
                for _ in range(cfg["layers"])
            ]
        )
        self.norm = layer_norm(d_model, ctx, rngs)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        positions = jnp.arange(tokens.shape[1])
        x = self.wte(tokens) + self.wpe(positions)[None]
        for block in self.blocks:
            x = block(x)
        if implementations.chosen("lm_head_loss") is not None:
            return LmHead(self.norm(x), self.wte.embedding[...])
        return self.wte.attend(self.norm(x))


def lm_loss(output: jax.Array | LmHead, labels: jax.Array) -> jax.Array:
    """GPT-2's train loss: mean next-token cross-entropy of its logits, or, from an `LmHead`,
    of the LM head and loss in one op by the implementation chosen."""
    if isinstance(output, LmHead):
        name = implementations.chosen("lm_head_loss")
        return implementations.lm_head_loss(output.hidden, output.embedding, labels, name)
    return cross_entropy(output, labels)


def block_flops(batch: int, seq_len: int, d_model: int) -> int:
    """Returns forward matmul FLOPs of one `TransformerBlock` (see `attention_flops`)."""
    tokens = batch * seq_len
    return attention_flops(batch, seq_len, d_model) + mlp_flops(tokens, d_model, 4 * d_model)


def gpt2_flops(cfg: Mapping[str, Any]) -> int:
    """Returns forward FLOPs of `GPT2`: the blocks plus the tied LM head (2 * tokens * d * vocab)."""
    batch, seq_len, d_model = cfg["batch"], cfg["seq_len"], cfg["d_model"]
    head = 2 * batch * seq_len * d_model * cfg["vocab"]
    return cfg["layers"] * block_flops(batch, seq_len, d_model) + head


@register("transformer_block", sizes=BLOCK_SIZES, options={"implementation": "xla"})
def transformer_block(cfg: Mapping[str, Any], ctx: BuildContext) -> Recipe:
    """One pre-LN GPT block on a (batch, seq_len, d_model) activation."""
    implementation = check_implementation(cfg["implementation"], ctx, "transformer_block")
    batch, seq_len, d_model, heads = (cfg[k] for k in ("batch", "seq_len", "d_model", "heads"))
    check_heads(d_model, heads, "transformer_block")
    return token_recipe(
        (batch, seq_len, d_model),
        ctx,
        lambda rngs: TransformerBlock(d_model, heads, implementation, ctx=ctx, rngs=rngs),
        flops=block_flops(batch, seq_len, d_model),
    )


@register("gpt2", sizes=GPT2_SIZES, options={"implementation": "xla"}, op="lm_head_loss")
def gpt2(cfg: Mapping[str, Any], ctx: BuildContext) -> Recipe:
    """GPT-2 on (batch, seq_len) int32 tokens -> (batch, seq_len, vocab) logits.

    Train mode minimizes next-token cross-entropy against fixed random target tokens.
    """
    implementation = check_implementation(cfg["implementation"], ctx, "gpt2")
    check_heads(cfg["d_model"], cfg["heads"], "gpt2")
    if cfg["seq_len"] > cfg["context"]:
        raise ValueError(
            f"workload 'gpt2': seq_len={cfg['seq_len']} exceeds context={cfg['context']}"
        )
    shape = (cfg["batch"], cfg["seq_len"])

    def make_tokens(key: jax.Array) -> jax.Array:
        return jax.random.randint(key, shape, 0, cfg["vocab"], dtype=jnp.int32)

    return Recipe(
        make_inputs=lambda key: (make_tokens(key),),
        apply=call_model,
        items_per_call=shape[0] * shape[1],
        items_unit="tokens",
        flops=gpt2_flops(cfg),
        make_model=lambda rngs: GPT2(cfg, implementation, ctx=ctx, rngs=rngs),
        make_targets=make_tokens,
        loss=lm_loss,
    )
