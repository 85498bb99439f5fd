"""Workloads under `lax.scan`, where launches and the loop decide: `cartpole` and `lstm`.

Each step of these programs is a handful of small kernels, so on a GPU the time goes to
launches and loop overhead more than to arithmetic, and program-level choices (the scan's
`unroll`, an option of both workloads) and XLA's loop options (while-loop double buffering and
unrolling, command buffers) change it most: the programs `xlafuse tune` is for.

- `cartpole`: `envs` cart-poles (Barto, Sutton and Anderson, 1983) stepped `steps` times under
  a 4 -> hidden -> hidden -> 2 tanh policy with sampled actions. Forward: per environment its
  return and the log-probability of its actions; train: a REINFORCE step (the policy gradient
  with the mean return as baseline) through the whole rollout.
- `lstm`: an LSTM layer (input projection for every step at once, the recurrence under the
  scan) and an output projection back to `d_model`, on a (batch, seq_len, d_model) input.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from xlafuse.models.common import call_model, linear, normal_inputs
from xlafuse.models.registry import register
from xlafuse.models.workload import BuildContext, Recipe

CARTPOLE_SIZES = {
    "tiny": {"envs": 64, "steps": 32, "hidden": 16},
    "small": {"envs": 256, "steps": 200, "hidden": 64},
    "full": {"envs": 1024, "steps": 500, "hidden": 64},
}

LSTM_SIZES = {
    "tiny": {"batch": 2, "seq_len": 16, "d_model": 32, "d_hidden": 64},
    "small": {"batch": 16, "seq_len": 128, "d_model": 256, "d_hidden": 512},
    "full": {"batch": 64, "seq_len": 512, "d_model": 1024, "d_hidden": 1024},
}

# The scan's `unroll` (steps per loop iteration): 1 is `lax.scan`'s default.
LOOP_OPTIONS = {"unroll": 1}

GRAVITY, CART_MASS, POLE_MASS, POLE_HALF_LENGTH, FORCE, DT = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
X_LIMIT, THETA_LIMIT = 2.4, 0.2095  # an episode ends past 2.4 m or 12 degrees


def cartpole_physics(state: jax.Array, push_right: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One Euler step of the cart-pole equations; returns (new state, episode over)."""
    x, x_dot, theta, theta_dot = (state[:, i] for i in range(4))
    force = jnp.where(push_right, FORCE, -FORCE)
    total = CART_MASS + POLE_MASS
    cos, sin = jnp.cos(theta), jnp.sin(theta)
    temp = (force + POLE_MASS * POLE_HALF_LENGTH * theta_dot**2 * sin) / total
    theta_acc = (GRAVITY * sin - cos * temp) / (
        POLE_HALF_LENGTH * (4.0 / 3.0 - POLE_MASS * cos**2 / total)
    )
    x_acc = temp - POLE_MASS * POLE_HALF_LENGTH * theta_acc * cos / total
    new = jnp.stack(
        [x + DT * x_dot, x_dot + DT * x_acc, theta + DT * theta_dot, theta_dot + DT * theta_acc],
        axis=-1,
    )
    over = (jnp.abs(new[:, 0]) > X_LIMIT) | (jnp.abs(new[:, 2]) > THETA_LIMIT)
    return new, over


class CartpolePolicy(nnx.Module):
    """A 4 -> hidden -> hidden -> 2 tanh network, rolled out over a batch of cart-poles."""

    def __init__(self, hidden: int, steps: int, unroll: int, *, ctx: BuildContext, rngs: nnx.Rngs):
        sizes = (4, hidden, hidden, 2)
        self.layers = nnx.List([linear(m, n, ctx, rngs) for m, n in itertools.pairwise(sizes)])
        self.steps, self.unroll = steps, unroll

    def __call__(self, start: jax.Array, keys: jax.Array) -> jax.Array:
        """(envs, 2): each environment's return and its actions' summed log-probability.

        Args:
            start: (envs, 4) initial states.
            keys: (envs, 2) raw PRNG keys (uint32), one stream per environment.
        """
        weights = [(layer.kernel[...], layer.bias[...]) for layer in self.layers]

        def logits(obs):
            h = obs.astype(weights[0][0].dtype)
            for w, b in weights[:-1]:
                h = jnp.tanh(h @ w + b[None, :])
            w, b = weights[-1]
            return (h @ w + b[None, :]).astype(jnp.float32)

        def step(carry, _):
            state, alive, total, log_prob, keys = carry
            split = jax.vmap(jax.random.split)(keys)  # (envs, 2, 2): this step's and the next's
            uniform = jax.vmap(jax.random.uniform)(split[:, 0])
            step_log_probs = jax.nn.log_softmax(logits(state))
            push_right = uniform < jnp.exp(step_log_probs[:, 1])
            chosen = jnp.where(push_right, step_log_probs[:, 1], step_log_probs[:, 0])
            state, over = cartpole_physics(state, push_right)
            log_prob = log_prob + jnp.where(alive, chosen, 0.0)
            alive = alive & ~over
            return (state, alive, total + alive, log_prob, split[:, 1]), None

        envs = start.shape[0]
        zeros = jnp.zeros((envs,), jnp.float32)
        carry = (start, jnp.ones((envs,), bool), zeros, zeros, keys)
        carry, _ = jax.lax.scan(step, carry, None, length=self.steps, unroll=self.unroll)
        return jnp.stack([carry[2], carry[3]], axis=-1)


def reinforce_loss(output: jax.Array, targets: jax.Array) -> jax.Array:
    """REINFORCE with the mean return as baseline: -mean(advantage * log-probability).

    `output` is `CartpolePolicy`'s (envs, 2); `targets` are not used (a rollout makes its own).
    """
    del targets
    returns, log_prob = output[:, 0], output[:, 1]
    advantage = jax.lax.stop_gradient(returns - returns.mean())
    return -jnp.mean(advantage * log_prob)


def cartpole_flops(envs: int, steps: int, hidden: int) -> int:
    """The policy's matmul FLOPs over a rollout: 2 per multiply-add, every env and step."""
    per_step = 4 * hidden + hidden * hidden + hidden * 2
    return 2 * envs * steps * per_step


@register("cartpole", sizes=CARTPOLE_SIZES, options=LOOP_OPTIONS, default_dtype="float32")
def cartpole(cfg: Mapping[str, Any], ctx: BuildContext) -> Recipe:
    """A batched cart-pole rollout under `lax.scan` with a small sampled policy."""
    envs, steps, hidden, unroll = (cfg[k] for k in ("envs", "steps", "hidden", "unroll"))

    def make_inputs(key: jax.Array) -> tuple[jax.Array, jax.Array]:
        state_key, stream_key = jax.random.split(key)
        start = jax.random.uniform(state_key, (envs, 4), jnp.float32, -0.05, 0.05)
        return start, jax.random.bits(stream_key, (envs, 2), jnp.uint32)

    return Recipe(
        make_inputs=make_inputs,
        apply=call_model,
        items_per_call=envs * steps,
        items_unit="env-steps",
        flops=cartpole_flops(envs, steps, hidden),
        make_model=lambda rngs: CartpolePolicy(hidden, steps, unroll, ctx=ctx, rngs=rngs),
        make_targets=lambda key: jnp.zeros((envs,), jnp.float32),
        loss=reinforce_loss,
    )


class Lstm(nnx.Module):
    """An LSTM layer (gates i, f, g, o; Hochreiter and Schmidhuber, 1997) and a projection
    back to `d_model`. The input's share of the gates is one matmul over every step; the
    recurrent share runs under the scan. The cell state is kept in float32."""

    def __init__(
        self, d_model: int, d_hidden: int, unroll: int, *, ctx: BuildContext, rngs: nnx.Rngs
    ):
        self.inputs = linear(d_model, 4 * d_hidden, ctx, rngs)
        self.recurrent = nnx.Linear(
            d_hidden,
            4 * d_hidden,
            use_bias=False,
            dtype=ctx.dtype,
            param_dtype=ctx.param_dtype,
            rngs=rngs,
        )
        self.out = linear(d_hidden, d_model, ctx, rngs)
        self.d_hidden, self.unroll = d_hidden, unroll

    def __call__(self, x: jax.Array) -> jax.Array:
        batch, dtype = x.shape[0], x.dtype
        recurrent = self.recurrent.kernel[...].astype(dtype)

        def step(carry, gates_in):
            h, c = carry
            gates = (gates_in + h @ recurrent).astype(jnp.float32)
            i, f, g, o = jnp.split(gates, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = (jax.nn.sigmoid(o) * jnp.tanh(c)).astype(dtype)
            return (h, c), h

        gates_in = self.inputs(x).swapaxes(0, 1)  # (seq_len, batch, 4 * d_hidden)
        start = (
            jnp.zeros((batch, self.d_hidden), dtype),
            jnp.zeros((batch, self.d_hidden), jnp.float32),
        )
        _, hs = jax.lax.scan(step, start, gates_in, unroll=self.unroll)
        return self.out(hs.swapaxes(0, 1))


def lstm_flops(tokens: int, d_model: int, d_hidden: int) -> int:
    """The LSTM's forward matmul FLOPs: input and recurrent gates, and the output projection."""
    return 2 * tokens * (d_model * 4 * d_hidden + d_hidden * 4 * d_hidden + d_hidden * d_model)


@register("lstm", sizes=LSTM_SIZES, options=LOOP_OPTIONS)
def lstm(cfg: Mapping[str, Any], ctx: BuildContext) -> Recipe:
    """An LSTM over a (batch, seq_len, d_model) input, the recurrence under `lax.scan`."""
    batch, seq_len, d_model, d_hidden, unroll = (
        cfg[k] for k in ("batch", "seq_len", "d_model", "d_hidden", "unroll")
    )
    return Recipe(
        make_inputs=normal_inputs((batch, seq_len, d_model), ctx.dtype),
        apply=call_model,
        items_per_call=batch * seq_len,
        items_unit="tokens",
        flops=lstm_flops(batch * seq_len, d_model, d_hidden),
        make_model=lambda rngs: Lstm(d_model, d_hidden, unroll, ctx=ctx, rngs=rngs),
    )
