"""A Flax NNX model of the user's, registered as a workload: sizes, forward and train modes.

Import it (`--import examples/my_models.py`, or `imports = [...]` in a config) and `gated_mlp`
is a workload like the zoo's: `xlafuse compare gated_mlp --import examples/my_models.py
--mode train` measures its train step (AdamW, donated state) exactly as the zoo's.
"""

import jax
from flax import nnx

import xlafuse

SIZES = {
    "tiny": {"batch": 8, "d_model": 32, "d_hidden": 64},
    "small": {"batch": 64, "d_model": 512, "d_hidden": 2048},
    "full": {"batch": 1024, "d_model": 4096, "d_hidden": 16384},
}


class GatedMlp(nnx.Module):
    """x + down(silu(gate(x)) * up(x)): a SwiGLU feed-forward block."""

    def __init__(self, d_model, d_hidden, *, ctx, rngs):
        dense = dict(dtype=ctx.dtype, param_dtype=ctx.param_dtype, rngs=rngs)
        self.gate = nnx.Linear(d_model, d_hidden, **dense)
        self.up = nnx.Linear(d_model, d_hidden, **dense)
        self.down = nnx.Linear(d_hidden, d_model, **dense)

    def __call__(self, x):
        return x + self.down(jax.nn.silu(self.gate(x)) * self.up(x))


@xlafuse.models.register("gated_mlp", sizes=SIZES)
def gated_mlp(cfg, ctx):
    """The block on a (batch, d_model) input."""
    batch, d_model, d_hidden = cfg["batch"], cfg["d_model"], cfg["d_hidden"]
    return xlafuse.models.Recipe(
        make_inputs=lambda key: (jax.random.normal(key, (batch, d_model), ctx.dtype),),
        apply=lambda model, x: model(x),
        items_per_call=batch,
        items_unit="rows",
        flops=3 * 2 * batch * d_model * d_hidden,
        make_model=lambda rngs: GatedMlp(d_model, d_hidden, ctx=ctx, rngs=rngs),
    )
