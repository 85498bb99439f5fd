"""A program of a user's whose flag switches between two equal computations (tests of `xlafuse
tune`): flag=False spins a loop that changes nothing before the answer (a slow program), and
flag=True gives the same answer at once, so the tuned winner is flag=True."""

import jax
import jax.numpy as jnp


def make(flag: bool = False, n: int = 64, spin: int = 300):
    """(fn, args): tanh of a vector, after `spin` idle loop iterations unless `flag`."""

    def idle(i, x):
        return x + 0.0 * jnp.sin(x * i)  # x exactly (0 times a finite number), the sin paid

    def slow(x, k):
        return jnp.tanh(jax.lax.fori_loop(0, k, idle, x))

    def fast(x, k):
        return jnp.tanh(x)

    return (fast if flag else slow), (jnp.linspace(-1.0, 1.0, n), jnp.int32(spin))
