"""A batched Cartpole rollout under `lax.scan`: a user program for xlafuse (no Flax, no zoo).

`rollout(**overrides)` returns `(fn, args)`: `fn(params, key)` runs `envs` cart-poles for
`steps` steps under a small tanh policy (4 -> hidden -> hidden -> 2, categorical actions) and
returns the mean return. Every step is a handful of tiny kernels, so the program is bound by
launches and loop overhead, not by memory: the kind of program whose XLA options (scan
unrolling, while-loop double buffering, command buffers) matter.

    xlafuse compare examples/cartpole.py:rollout --overrides steps=50
    xlafuse inspect --workload examples/cartpole.py:rollout --overrides envs=64
"""

import jax
import jax.numpy as jnp

GRAVITY, CART_MASS, POLE_MASS, POLE_HALF_LENGTH, FORCE, DT = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02


def physics(state, action):
    """One Euler step of the classic cart-pole equations (Barto, Sutton and Anderson, 1983)."""
    x, x_dot, theta, theta_dot = state[..., 0], state[..., 1], state[..., 2], state[..., 3]
    force = jnp.where(action == 1, FORCE, -FORCE)
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
    done = (jnp.abs(new[..., 0]) > 2.4) | (jnp.abs(new[..., 2]) > 0.2095)
    return new, done


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
            state, done = physics(state, action)
            alive = alive & ~done
            return (state, alive, total + alive), None

        carry = (start, jnp.ones((envs,), bool), jnp.zeros((envs,)))
        (_, _, total), _ = jax.lax.scan(step, carry, jax.random.split(key, steps), unroll=unroll)
        return total.mean()

    return run, (params, keys[-1])
