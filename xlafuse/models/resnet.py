"""`resnet50`: ResNet-50 v1.5 (stride in the 3x3 convolution) on NHWC images.

The torchvision layout: convolutions without bias, each followed by BatchNorm (scale and bias),
bottleneck blocks of widths (w, w, 4w), projection shortcuts where the shape changes, global average
pooling and a dense classifier. Sizes "small" and "full" are the ImageNet model (224x224, 1000
classes, 25,557,032 parameters); "tiny" keeps the structure with one block per stage, width 8 and
32x32 images. BatchNorm uses running statistics in forward mode and batch statistics in train mode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from xlafuse.models.common import call_model, normal_inputs
from xlafuse.models.registry import register
from xlafuse.models.train import cross_entropy
from xlafuse.models.workload import BuildContext, Recipe

_IMAGENET = {"image_size": 224, "stages": (3, 4, 6, 3), "width": 64, "classes": 1000}
SIZES = {
    "tiny": {"batch": 2, "image_size": 32, "stages": (1, 1, 1, 1), "width": 8, "classes": 10},
    "small": {"batch": 2, **_IMAGENET},
    "full": {"batch": 64, **_IMAGENET},
}

EXPANSION = 4
BN_MOMENTUM = 0.9
BN_EPSILON = 1e-5


def _conv(cin: int, cout: int, kernel: int, stride: int, ctx: BuildContext, rngs) -> nnx.Conv:
    pad = kernel // 2  # torchvision's symmetric padding, not "SAME" (asymmetric at stride 2)
    return nnx.Conv(
        cin,
        cout,
        (kernel, kernel),
        strides=stride,
        padding=((pad, pad), (pad, pad)),
        use_bias=False,
        dtype=ctx.dtype,
        param_dtype=ctx.param_dtype,
        rngs=rngs,
    )


def _bn(features: int, ctx: BuildContext, rngs: nnx.Rngs) -> nnx.BatchNorm:
    return nnx.BatchNorm(
        features,
        use_running_average=not ctx.train,
        momentum=BN_MOMENTUM,
        epsilon=BN_EPSILON,
        dtype=ctx.dtype,
        param_dtype=ctx.param_dtype,
        rngs=rngs,
    )


class ConvBN(nnx.Module):
    """Convolution (no bias) followed by BatchNorm."""

    def __init__(
        self,
        cin: int,
        cout: int,
        kernel: int,
        stride: int,
        *,
        ctx: BuildContext,
        rngs: nnx.Rngs,
    ):
        self.conv = _conv(cin, cout, kernel, stride, ctx, rngs)
        self.bn = _bn(cout, ctx, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.bn(self.conv(x))


class Bottleneck(nnx.Module):
    """1x1 -> 3x3 (strided, v1.5) -> 1x1 convolutions, plus a shortcut, then ReLU."""

    def __init__(self, cin: int, mid: int, stride: int, *, ctx: BuildContext, rngs: nnx.Rngs):
        cout = EXPANSION * mid
        self.reduce = ConvBN(cin, mid, 1, 1, ctx=ctx, rngs=rngs)
        self.spatial = ConvBN(mid, mid, 3, stride, ctx=ctx, rngs=rngs)
        self.expand = ConvBN(mid, cout, 1, 1, ctx=ctx, rngs=rngs)
        needs_projection = stride != 1 or cin != cout
        self.shortcut = (
            ConvBN(cin, cout, 1, stride, ctx=ctx, rngs=rngs) if needs_projection else None
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        y = jax.nn.relu(self.reduce(x))
        y = jax.nn.relu(self.spatial(y))
        y = self.expand(y)
        shortcut = x if self.shortcut is None else self.shortcut(x)
        return jax.nn.relu(y + shortcut)


class ResNet(nnx.Module):
    """ResNet v1.5 with bottleneck blocks; `stages` gives the number of blocks per stage."""

    def __init__(
        self,
        stages: Sequence[int],
        width: int,
        classes: int,
        *,
        ctx: BuildContext,
        rngs: nnx.Rngs,
    ):
        self.stem = ConvBN(3, width, 7, 2, ctx=ctx, rngs=rngs)
        blocks, cin = [], width
        for i, count in enumerate(stages):
            mid = width * 2**i
            for j in range(count):
                stride = 2 if i > 0 and j == 0 else 1
                blocks.append(Bottleneck(cin, mid, stride, ctx=ctx, rngs=rngs))
                cin = EXPANSION * mid
        self.blocks = nnx.List(blocks)
        self.head = nnx.Linear(
            cin, classes, dtype=ctx.dtype, param_dtype=ctx.param_dtype, rngs=rngs
        )

    def __call__(self, images: jax.Array) -> jax.Array:
        x = jax.nn.relu(self.stem(images))
        x = nnx.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
        for block in self.blocks:
            x = block(x)
        return self.head(jnp.mean(x, axis=(1, 2)))


def _out(size: int, kernel: int, stride: int) -> int:
    """Output side of a convolution or pool with padding kernel // 2."""
    return (size + 2 * (kernel // 2) - kernel) // stride + 1


def _conv_flops(side: int, kernel: int, cin: int, cout: int) -> int:
    return 2 * side * side * kernel * kernel * cin * cout


def resnet_flops(cfg: Mapping[str, Any]) -> int:
    """Returns forward FLOPs of `ResNet` per call: convolutions and classifier, 2 per MAC.

    BatchNorm, ReLU, pooling and residual additions are not counted (about 8.2e9 per 224x224
    image for ResNet-50, i.e. the usual "4.1 GMACs").
    """
    width = cfg["width"]
    side = _out(cfg["image_size"], 7, 2)
    total = _conv_flops(side, 7, 3, width)
    side, cin = _out(side, 3, 2), width
    for i, count in enumerate(cfg["stages"]):
        mid = width * 2**i
        for j in range(count):
            stride = 2 if i > 0 and j == 0 else 1
            out_side = _out(side, 3, stride)
            total += _conv_flops(side, 1, cin, mid) + _conv_flops(out_side, 3, mid, mid)
            total += _conv_flops(out_side, 1, mid, EXPANSION * mid)
            if stride != 1 or cin != EXPANSION * mid:
                total += _conv_flops(out_side, 1, cin, EXPANSION * mid)
            side, cin = out_side, EXPANSION * mid
    return cfg["batch"] * (total + 2 * cin * cfg["classes"])


@register("resnet50", sizes=SIZES)
def resnet50(cfg: Mapping[str, Any], ctx: BuildContext) -> Recipe:
    """ResNet-50 v1.5 on (batch, image_size, image_size, 3) images -> (batch, classes) logits.

    Train mode minimizes cross-entropy against fixed random labels.
    """
    batch, side, classes = cfg["batch"], cfg["image_size"], cfg["classes"]
    stages = tuple(cfg["stages"])

    def make_labels(key: jax.Array) -> jax.Array:
        return jax.random.randint(key, (batch,), 0, classes, dtype=jnp.int32)

    return Recipe(
        make_inputs=normal_inputs((batch, side, side, 3), ctx.dtype),
        apply=call_model,
        items_per_call=batch,
        items_unit="images",
        flops=resnet_flops(cfg),
        make_model=lambda rngs: ResNet(stages, cfg["width"], classes, ctx=ctx, rngs=rngs),
        make_targets=make_labels,
        loss=cross_entropy,
    )
