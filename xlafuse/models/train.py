"""Pure functions over (state, inputs) built from Flax NNX modules: forward passes and train steps.

XLA sees only pure functions of arrays: the module is split once into a static graph definition and
its state (`nnx.split`), and every call merges them back (`nnx.merge`). That keeps the train state an
ordinary pytree, so a caller can donate its buffers to the compiled step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

ADAM_B1 = 0.9  # optax.adamw's default first-moment decay, which the zoo uses

Apply = Callable[..., jax.Array]
Loss = Callable[[jax.Array, jax.Array], jax.Array]


def mean_squared_error(output: jax.Array, targets: jax.Array) -> jax.Array:
    """Returns the mean squared error, computed in float32."""
    diff = output.astype(jnp.float32) - targets.astype(jnp.float32)
    return jnp.mean(jnp.square(diff))


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Returns the mean softmax cross-entropy of integer labels, computed in float32."""
    losses = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels)
    return jnp.mean(losses)


def forward_fn(graphdef: nnx.GraphDef, apply: Apply) -> Callable[..., jax.Array]:
    """Returns `fn(state, *inputs)`: the module rebuilt from `state`, applied to the inputs."""

    def fn(state: nnx.State, *inputs: jax.Array) -> jax.Array:
        return apply(nnx.merge(graphdef, state), *inputs)

    return fn


def flat_state_fn(fn: Callable[..., Any], tree: Any, returns_state: bool) -> Callable[..., Any]:
    """`fn(state, *rest)` as a function of the state's flat list of leaves.

    Args:
        fn: `fn(state, *rest)`; with `returns_state`, it returns `(new_state, *outputs)` and the
            new state has the same tree structure as `state`.
        tree: the tree structure of `state` (`jax.tree.flatten(state)[1]`).
        returns_state: whether the first output is a new state, to be returned flat too.

    Returns:
        `flat(leaves, *rest)`: `fn` with the state rebuilt from `leaves`.
    """

    def flat(leaves: list[jax.Array], *rest: Any) -> Any:
        out = fn(jax.tree.unflatten(tree, leaves), *rest)
        if not returns_state:
            return out
        new_state, *outputs = out
        return (jax.tree.leaves(new_state), *outputs)

    flat.__name__ = getattr(fn, "__name__", "fn")
    return flat


def gradient_of_first_step(opt_state: Any, *, b1: float = ADAM_B1) -> Any:
    """The gradient of an Adam-family optimizer's first step, from its state; None without one.

    After one step from zeros, the first moment `mu` is `(1 - b1) * gradient`.
    """
    for part in jax.tree.leaves(opt_state, is_leaf=lambda x: hasattr(x, "mu")):
        if hasattr(part, "mu"):
            return jax.tree.map(lambda m: np.asarray(m) / (1.0 - b1), part.mu)
    return None


def init_train_state(
    model: nnx.Module, optimizer: optax.GradientTransformation
) -> tuple[nnx.GraphDef, dict[str, Any]]:
    """Splits a module into its graph definition and a train state.

    Args:
        model: the module, built for train mode.
        optimizer: the optax transformation whose state the train state carries.

    Returns:
        `(graphdef, train_state)`; train_state has "params", "opt_state" and "batch_stats"
        (an empty `nnx.State` for models without BatchNorm).

    Raises:
        ValueError: the module holds variables other than parameters and batch statistics.
    """
    graphdef, params, batch_stats = nnx.split(model, nnx.Param, nnx.BatchStat)
    state = {"params": params, "opt_state": optimizer.init(params), "batch_stats": batch_stats}
    return graphdef, state


def train_step_fn(
    graphdef: nnx.GraphDef, apply: Apply, loss: Loss, optimizer: optax.GradientTransformation
) -> Callable[[dict[str, Any], dict[str, Any]], tuple[dict[str, Any], jax.Array]]:
    """Returns `step(train_state, batch) -> (new_train_state, loss)`: loss, grad and update.

    Args:
        graphdef: the static part of the module, from `init_train_state`.
        apply: `apply(model, *inputs) -> output`.
        loss: `loss(output, targets) -> scalar`.
        optimizer: the optax transformation (AdamW in the registry).

    Returns:
        A pure function; `batch` is a dict with "inputs" (a tuple) and "targets".
    """

    def objective(params, batch_stats, batch):
        # copy=True: fresh Variables at this trace level, so BatchNorm may update its statistics.
        model = nnx.merge(graphdef, params, batch_stats, copy=True)
        value = loss(apply(model, *batch["inputs"]), batch["targets"])
        # BatchNorm in train mode updated its running statistics in place on the merged module.
        return value, nnx.state(model, nnx.BatchStat)

    def step(train_state, batch):
        params = train_state["params"]
        grad_fn = jax.value_and_grad(objective, has_aux=True)
        (value, batch_stats), grads = grad_fn(params, train_state["batch_stats"], batch)
        updates, opt_state = optimizer.update(grads, train_state["opt_state"], params)
        new_params = optax.apply_updates(params, updates)
        return {"params": new_params, "opt_state": opt_state, "batch_stats": batch_stats}, value

    return step
