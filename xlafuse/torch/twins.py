"""PyTorch twins of the Flax workloads: the same computation, written idiomatically in torch.

A twin mirrors its Flax module's attribute names (`blocks.0.attn.qkv`, `stem.bn`, ...), so
`xlafuse.torch.convert` maps every Flax parameter path onto a torch name; only the layouts differ
(torch keeps Linear weights (out, in), convolution weights OIHW and images NCHW, in channels-last
memory). Each layer casts its parameters to the compute dtype on use, as Flax's `dtype` /
`param_dtype` split does (float32 parameters, bfloat16 compute in a mixed-precision train step).

The numerics the twins must match (checked by the tests, on the same weights):
- GELU is the tanh approximation (`jax.nn.gelu`'s default); LayerNorm and RMSNorm use Flax's
  epsilon 1e-6; BatchNorm uses epsilon 1e-5, Flax's momentum 0.9 (torch's 0.1) and updates its
  running variance with the biased batch variance, as Flax does (torch's BatchNorm would use the
  unbiased one, so it is written out here).
- Attention is `F.scaled_dot_product_attention(is_causal=True)` on (batch, heads, seq, head_dim).
- Losses are computed in float32: mean squared error, or mean cross-entropy of integer labels.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

LN_EPS = 1e-6  # flax.nnx.LayerNorm / RMSNorm default
BN_EPS = 1e-5
BN_MOMENTUM = 0.9  # Flax convention: running = momentum * running + (1 - momentum) * batch
EXPANSION = 4


class Linear(nn.Module):
    """x @ W.T + b with W of shape (out, in) (Flax's kernel is (in, out))."""

    def __init__(self, d_in: int, d_out: int, dtype: torch.dtype, param_dtype: torch.dtype):
        super().__init__()
        self.dtype = dtype
        self.weight = nn.Parameter(torch.empty(d_out, d_in, dtype=param_dtype))
        self.bias = nn.Parameter(torch.empty(d_out, dtype=param_dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x.to(self.dtype), self.weight.to(self.dtype), self.bias.to(self.dtype))


class LayerNorm(nn.Module):
    """LayerNorm over the last axis with scale (`weight`) and bias."""

    def __init__(self, d: int, dtype: torch.dtype, param_dtype: torch.dtype):
        super().__init__()
        self.dtype = dtype
        self.weight = nn.Parameter(torch.empty(d, dtype=param_dtype))
        self.bias = nn.Parameter(torch.empty(d, dtype=param_dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w, b = self.weight.to(self.dtype), self.bias.to(self.dtype)
        return F.layer_norm(x.to(self.dtype), (x.shape[-1],), w, b, LN_EPS)


class RMSNorm(nn.Module):
    """x / sqrt(mean(x**2) + eps) * scale over the last axis."""

    def __init__(self, d: int, dtype: torch.dtype, param_dtype: torch.dtype):
        super().__init__()
        self.dtype = dtype
        self.weight = nn.Parameter(torch.empty(d, dtype=param_dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.dtype)
        return F.rms_norm(x, (x.shape[-1],), self.weight.to(self.dtype), LN_EPS)


class Embedding(nn.Module):
    """A lookup table; `attend` is the tied output projection x @ E.T."""

    def __init__(self, n: int, d: int, dtype: torch.dtype, param_dtype: torch.dtype):
        super().__init__()
        self.dtype = dtype
        self.weight = nn.Parameter(torch.empty(n, d, dtype=param_dtype))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.weight.to(self.dtype))

    def attend(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.dtype) @ self.weight.to(self.dtype).t()


class MatmulBiasAct(nn.Module):
    """GELU(x @ W + b)."""

    def __init__(self, cfg: Mapping[str, Any], dtype: torch.dtype, param_dtype: torch.dtype):
        super().__init__()
        self.dense = Linear(cfg["d_in"], cfg["d_out"], dtype, param_dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.dense(x), approximate="tanh")


class GatedMlp(nn.Module):
    """down(silu(x @ W_gate) * (x @ W_up)), no biases; `gate_up` (d_model, 2, d_hidden) kept
    in Flax's layout (the zoo's `swiglu`)."""

    def __init__(self, d_model: int, d_hidden: int, dtype: torch.dtype, param_dtype: torch.dtype):
        super().__init__()
        self.dtype = dtype
        self.gate_up = nn.Parameter(torch.empty(d_model, 2, d_hidden, dtype=param_dtype))
        self.down = nn.Module()
        self.down.weight = nn.Parameter(torch.empty(d_model, d_hidden, dtype=param_dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, weights = x.to(self.dtype), self.gate_up.to(self.dtype)
        hidden = F.silu(x @ weights[:, 0]) * (x @ weights[:, 1])
        return hidden @ self.down.weight.to(self.dtype).t()


class MlpBlock(nn.Module):
    """x + Dense(GELU(Dense(LayerNorm(x))))."""

    def __init__(self, d_model: int, d_hidden: int, dtype: torch.dtype, param_dtype: torch.dtype):
        super().__init__()
        self.norm = LayerNorm(d_model, dtype, param_dtype)
        self.up = Linear(d_model, d_hidden, dtype, param_dtype)
        self.down = Linear(d_hidden, d_model, dtype, param_dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x)), approximate="tanh"))


class CausalSelfAttention(nn.Module):
    """Fused QKV projection, causal SDPA, output projection (the Flax module's layout)."""

    def __init__(self, d_model: int, heads: int, dtype: torch.dtype, param_dtype: torch.dtype):
        super().__init__()
        self.qkv = Linear(d_model, 3 * d_model, dtype, param_dtype)
        self.out = Linear(d_model, d_model, dtype, param_dtype)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, d_model = x.shape
        qkv = self.qkv(x).reshape(batch, seq, 3, self.heads, d_model // self.heads)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # (B, H, S, D)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(batch, seq, d_model))


class TransformerBlock(nn.Module):
    """Pre-LN GPT block: x + Attn(LN(x)), then the MLP sublayer (its own LN and residual)."""

    def __init__(self, d_model: int, heads: int, dtype: torch.dtype, param_dtype: torch.dtype):
        super().__init__()
        self.norm = LayerNorm(d_model, dtype, param_dtype)
        self.attn = CausalSelfAttention(d_model, heads, dtype, param_dtype)
        self.mlp = MlpBlock(d_model, 4 * d_model, dtype, param_dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x + self.attn(self.norm(x)))


class GPT2(nn.Module):
    """Token + position embeddings, blocks, final LN, tied output embedding."""

    def __init__(self, cfg: Mapping[str, Any], dtype: torch.dtype, param_dtype: torch.dtype):
        super().__init__()
        d = cfg["d_model"]
        self.wte = Embedding(cfg["vocab"], d, dtype, param_dtype)
        self.wpe = Embedding(cfg["context"], d, dtype, param_dtype)
        self.blocks = nn.ModuleList(
            TransformerBlock(d, cfg["heads"], dtype, param_dtype) for _ in range(cfg["layers"])
        )
        self.norm = LayerNorm(d, dtype, param_dtype)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)[None]
        for block in self.blocks:
            x = block(x)
        return self.wte.attend(self.norm(x))


class BatchNorm(nn.Module):
    """BatchNorm over NCHW channels with Flax's running-statistics update (biased variance)."""

    def __init__(self, c: int, dtype: torch.dtype, param_dtype: torch.dtype):
        super().__init__()
        self.dtype = dtype
        self.weight = nn.Parameter(torch.empty(c, dtype=param_dtype))
        self.bias = nn.Parameter(torch.empty(c, dtype=param_dtype))
        self.register_buffer("running_mean", torch.zeros(c, dtype=param_dtype))
        self.register_buffer("running_var", torch.ones(c, dtype=param_dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w, b = self.weight.to(self.dtype), self.bias.to(self.dtype)
        if not self.training:
            mean, var = self.running_mean.to(self.dtype), self.running_var.to(self.dtype)
            return F.batch_norm(x, mean, var, w, b, False, 0.0, BN_EPS)
        var, mean = torch.var_mean(x.float(), dim=(0, 2, 3), correction=0)
        with torch.no_grad():
            keep = BN_MOMENTUM
            self.running_mean.mul_(keep).add_(mean.to(self.running_mean.dtype), alpha=1 - keep)
            self.running_var.mul_(keep).add_(var.to(self.running_var.dtype), alpha=1 - keep)
        scale = (torch.rsqrt(var + BN_EPS) * w.float())[None, :, None, None]
        shift = (b.float() - mean * scale.flatten())[None, :, None, None]
        return (x.float() * scale + shift).to(self.dtype)


class ConvBN(nn.Module):
    """Convolution (no bias, symmetric padding kernel // 2) followed by BatchNorm."""

    def __init__(
        self,
        cin: int,
        cout: int,
        kernel: int,
        stride: int,
        dtype: torch.dtype,
        param_dtype: torch.dtype,
    ):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False, dtype=param_dtype)
        self.bn = BatchNorm(cout, dtype, param_dtype)
        self.dtype = dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.conv.weight.to(self.dtype)
        y = F.conv2d(x, weight, None, self.conv.stride, self.conv.padding)
        return self.bn(y)


class Bottleneck(nn.Module):
    """1x1 -> 3x3 (strided, v1.5) -> 1x1 convolutions, plus a shortcut, then ReLU."""

    def __init__(
        self, cin: int, mid: int, stride: int, dtype: torch.dtype, param_dtype: torch.dtype
    ):
        super().__init__()
        cout = EXPANSION * mid
        self.reduce = ConvBN(cin, mid, 1, 1, dtype, param_dtype)
        self.spatial = ConvBN(mid, mid, 3, stride, dtype, param_dtype)
        self.expand = ConvBN(mid, cout, 1, 1, dtype, param_dtype)
        projection = stride != 1 or cin != cout
        self.shortcut = ConvBN(cin, cout, 1, stride, dtype, param_dtype) if projection else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.reduce(x))
        y = F.relu(self.spatial(y))
        y = self.expand(y)
        return F.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class ResNet(nn.Module):
    """ResNet v1.5 on NCHW images (the Flax workload's NHWC images, permuted)."""

    def __init__(self, cfg: Mapping[str, Any], dtype: torch.dtype, param_dtype: torch.dtype):
        super().__init__()
        width = cfg["width"]
        self.dtype = dtype
        self.stem = ConvBN(3, width, 7, 2, dtype, param_dtype)
        blocks, cin = [], width
        for i, count in enumerate(cfg["stages"]):
            mid = width * 2**i
            for j in range(count):
                stride = 2 if i > 0 and j == 0 else 1
                blocks.append(Bottleneck(cin, mid, stride, dtype, param_dtype))
                cin = EXPANSION * mid
        self.blocks = nn.ModuleList(blocks)
        self.head = Linear(cin, cfg["classes"], dtype, param_dtype)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.stem(images.to(self.dtype)))
        x = F.max_pool2d(x, 3, 2, 1)
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(dim=(2, 3)))


def _chain(ops: int) -> Callable[[torch.Tensor], torch.Tensor]:
    cheap = (
        lambda x: x * 0.999,
        lambda x: x + 0.001,
        lambda x: torch.clamp_min(x, -4.0),
        lambda x: x - 0.0005,
    )

    def apply(x):
        for i in range(ops):
            x = cheap[i % len(cheap)](x)
        return x

    return apply


class Lstm(nn.Module):
    """`xlafuse.models.loops.Lstm`: the input's share of the gates for every step at once, the
    recurrent share step by step (a Python loop, which eager runs and Inductor unrolls), the
    gates i, f, g, o in that order, the cell state in float32."""

    def __init__(self, d_model: int, d_hidden: int, dtype: torch.dtype, param_dtype: torch.dtype):
        super().__init__()
        self.dtype, self.d_hidden = dtype, d_hidden
        self.inputs = Linear(d_model, 4 * d_hidden, dtype, param_dtype)
        self.recurrent = nn.Linear(d_hidden, 4 * d_hidden, bias=False, dtype=param_dtype)
        self.out = Linear(d_hidden, d_model, dtype, param_dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gates_in = self.inputs(x)  # (batch, seq_len, 4 * d_hidden)
        recurrent = self.recurrent.weight.to(self.dtype)
        h = torch.zeros(x.shape[0], self.d_hidden, dtype=self.dtype, device=x.device)
        c = torch.zeros(x.shape[0], self.d_hidden, dtype=torch.float32, device=x.device)
        hs = []
        for t in range(x.shape[1]):
            gates = (gates_in[:, t] + F.linear(h, recurrent)).float()
            i, f, g, o = gates.chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = (torch.sigmoid(o) * torch.tanh(c)).to(self.dtype)
            hs.append(h)
        return self.out(torch.stack(hs, dim=1))


def _gelu(x):
    return F.gelu(x, approximate="tanh")


POINTWISE: dict[str, Callable[[Mapping[str, Any]], Callable[..., torch.Tensor]]] = {
    "mul_add_relu": lambda cfg: lambda x, a, b: torch.relu(x * a + b),
    "cos_relu": lambda cfg: lambda x: torch.relu(torch.cos(x)),
    "gelu": lambda cfg: _gelu,
    "chain": lambda cfg: _chain(cfg["ops"]),
    "softmax": lambda cfg: lambda x: torch.softmax(x, dim=-1),
}

MODELS: dict[str, Callable[[Mapping[str, Any], Any, Any], nn.Module]] = {
    "layernorm": lambda cfg, dt, pdt: LayerNorm(cfg["d_model"], dt, pdt),
    "rmsnorm": lambda cfg, dt, pdt: RMSNorm(cfg["d_model"], dt, pdt),
    "matmul_bias_act": MatmulBiasAct,
    "mlp": lambda cfg, dt, pdt: MlpBlock(cfg["d_model"], cfg["d_hidden"], dt, pdt),
    "swiglu": lambda cfg, dt, pdt: GatedMlp(cfg["d_model"], cfg["d_hidden"], dt, pdt),
    "attention": lambda cfg, dt, pdt: CausalSelfAttention(
        cfg["heads"] * cfg["head_dim"], cfg["heads"], dt, pdt
    ),
    "transformer_block": lambda cfg, dt, pdt: TransformerBlock(
        cfg["d_model"], cfg["heads"], dt, pdt
    ),
    "gpt2": GPT2,
    "resnet50": ResNet,
    "lstm": lambda cfg, dt, pdt: Lstm(cfg["d_model"], cfg["d_hidden"], dt, pdt),
}

# Workloads without a twin, and why (`xlafuse workloads` and the torch variants say so).
NO_TWIN = {
    "cartpole": "its actions are sampled inside the scan with JAX's threefry generator, whose "
    "numbers PyTorch cannot draw: a twin could not be judged against it",
}

# The loss each train twin minimizes (the Flax recipe's): cross-entropy for the classifiers.
CROSS_ENTROPY = ("gpt2", "resnet50")


def has_twin(name: str) -> bool:
    """Whether workload `name` has a torch twin."""
    return name in POINTWISE or name in MODELS


def make_model(
    name: str, cfg: Mapping[str, Any], dtype: torch.dtype, param_dtype: torch.dtype
) -> nn.Module:
    """The twin module of a workload with parameters (uninitialized: load Flax weights into it).

    Raises:
      ValueError: `name` has no twin, or its config asks for an implementation torch lacks.
    """
    if name not in MODELS:
        raise ValueError(no_twin_message(name))
    if cfg.get("implementation", "xla") != "xla":
        raise ValueError(
            f"workload {name!r}: the torch twin runs torch's SDPA, not implementation="
            f"{cfg['implementation']!r}; use implementation='xla' for the XLA side"
        )
    return MODELS[name](cfg, dtype, param_dtype)


def pointwise_fn(name: str, cfg: Mapping[str, Any]) -> Callable[..., torch.Tensor]:
    """The twin function of a parameter-free workload."""
    return POINTWISE[name](cfg)


def no_twin_message(name: str) -> str:
    """Why workload `name` has no twin, one line, with the workloads that have one."""
    why = f" ({NO_TWIN[name]})" if name in NO_TWIN else ""
    return f"workload {name!r} has no torch twin{why}; twins: {', '.join(twin_names())}"


def twin_names() -> list[str]:
    """Every workload with a twin."""
    return [*POINTWISE, *MODELS]


def loss_fn(name: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The train loss of workload `name`, computed in float32."""
    if name in CROSS_ENTROPY:
        return _cross_entropy
    return _mse


def _mse(out, targets):
    return torch.mean(torch.square(out.float() - targets.float()))


def _cross_entropy(logits, labels):
    logits = logits.float()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).long())


def count_params(name: str, cfg: Mapping[str, Any]) -> int:
    """Parameters of the twin, counted on the meta device (nothing allocated)."""
    if name not in MODELS:
        return 0
    with torch.device("meta"):
        model = make_model(name, cfg, torch.float32, torch.float32)
    return sum(math.prod(p.shape) for p in model.parameters())
