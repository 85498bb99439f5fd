"""Programs of a user's, in every form an entry may return, and the wrong ones (tests)."""

import jax.numpy as jnp

from xlafuse import models


def forward(n: int = 64):
    """(fn, args): a forward program."""

    def scaled_tanh(x, w):
        return jnp.tanh(x * w) + x

    return scaled_tanh, (jnp.linspace(-1.0, 1.0, n), jnp.full((n,), 0.5))


def step(n: int = 64):
    """(fn, args, donate_argnums): a step that consumes its state."""

    def update(state, x):
        new = state * 0.9 + jnp.sin(x)
        return new, (new**2).sum()

    return update, (jnp.zeros((n,)), jnp.linspace(0.0, 1.0, n)), (0,)


def workload(batch: int = 2):
    """A Workload: the zoo's mlp train step."""
    return models.build("mlp", size="tiny", mode="train", batch=batch)


def raises(n: int = 4):
    raise RuntimeError(f"no data for n={n}")


def wrong_shape():
    return jnp.ones(3)


def not_jittable():
    def branchy(x):
        if x.sum() > 0:  # a Python branch on a traced value
            return x
        return -x

    return branchy, (jnp.ones(3),)


def bad_step():
    """Donates its state but returns something else first."""
    return (lambda s, x: (x.sum(), s)), (jnp.ones(3), jnp.ones(4)), (0,)
