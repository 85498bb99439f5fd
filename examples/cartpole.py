"""A batched Cartpole rollout under `lax.scan`: a user program for xlafuse (no Flax).

`rollout(**overrides)` returns `(fn, args)`: `fn(params, key)` runs `envs` cart-poles for
`steps` steps under a small tanh policy (4 -> hidden -> hidden -> 2, categorical actions) and
returns the mean return. Every step is a handful of tiny kernels, so the program is bound by
launches and loop overhead, not by memory: the kind of program whose XLA options (scan
unrolling, while-loop double buffering, command buffers) matter. The cart-pole equations are
the zoo's (`xlafuse.models.loops`, whose `cartpole` workload is this program as a Flax model).

    xlafuse compare examples/cartpole.py:rollout --overrides steps=50
    xlafuse inspect --workload examples/cartpole.py:rollout --overrides envs=64
"""

import jax
import jax.numpy as jnp

from xlafuse.models.loops import cartpole_physics


def policy(params, obs):
    """Logits of a 4 -> hidden -> hidden -> 2 tanh network."""
    h = obs
    for w, b in params[:-1]:
        h = jnp.tanh(h @ w + b[None, :])
    w, b = params[-1]
    return h @ w + b[None, :]


def rollout(envs: int = 256, steps: int = 100, hidden: int = 64, unroll: int = 1):
    """`(fn, args)`: `fn(params, key)` is the mean return of `envs` episodes of `steps` steps."""
    sizes = [4, hidden, hidden, 2]
    keys = jax.random.split(jax.random.key(0), len(sizes))
    params = [
        (jax.random.normal(k, (m, n)) / jnp.sqrt(m), jnp.zeros((n,)))
        for k, m, n in zip(keys, sizes[:-1], sizes[1:], strict=False)
    ]

    def run(params, key):
        start = jax.random.uniform(key, (envs, 4), minval=-0.05, maxval=0.05)

        def step(carry, key):
            state, alive, total = carry
            action = jax.random.categorical(key, policy(params, state))
            state, done = cartpole_physics(state, action == 1)
            alive = alive & ~done
            return (state, alive, total + alive), None

        carry = (start, jnp.ones((envs,), bool), jnp.zeros((envs,)))
        (_, _, total), _ = jax.lax.scan(step, carry, jax.random.split(key, steps), unroll=unroll)
        return total.mean()

    return run, (params, keys[-1])
