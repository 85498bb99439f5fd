"""The Workload record that `xlafuse.models.build` returns, and the Recipe each family supplies.

A family module (pointwise, mlp, resnet, ...) turns a resolved size configuration into a `Recipe`:
how to make the model and the example inputs, how to apply the model, and its analytic cost. The
registry turns a Recipe into a `Workload`: a pure, jit-able function plus the arguments to call it
with, for either the forward (inference) or the train mode.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from xlafuse.errors import XlafuseError
from xlafuse.models import implementations
from xlafuse.models.implementations import OWN, Implementation
from xlafuse.models.labels import cell_fields
from xlafuse.models.train import mean_squared_error

ITEMS_UNIT = "items"  # the unit of `Items` when none is given


@dataclasses.dataclass(frozen=True)
class Items:
    """How much work one call of a program does, for its throughput (`count` / s, in `unit`).

    A program of the user's returns it as the last element of what FUNCTION returns,
    `(fn, args, Items(51200, "env-steps"))` or `(fn, args, donate_argnums, Items(...))`; a
    config's workload table says `items = 51200` and `items_unit = "env-steps"`, the command
    line `--items 51200 --items-unit env-steps`. Without it a program of the user's is one
    item per call, in "calls".

    Attributes:
        count: items one call processes (an int above 0).
        unit: what an item is, e.g. "env-steps", "tokens", "images" (not empty).

    Raises:
        XlafuseError: a count that is not an int above 0, or a unit that is not a word.
    """

    count: int
    unit: str = ITEMS_UNIT

    def __post_init__(self) -> None:
        problem = items_problem(self.count, self.unit)
        if problem:
            raise XlafuseError(f"Items({self.count!r}, {self.unit!r}): {problem}")


def items_problem(count: Any, unit: Any) -> str | None:
    """What is wrong with an items count and unit, in words (None: nothing)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        return f"the count {count!r} must be an int above 0 (items one call processes)"
    if not isinstance(unit, str) or not unit.strip() or unit != unit.strip():
        return f"the unit {unit!r} must be a word such as 'env-steps' or 'tokens'"
    return None


@dataclasses.dataclass(frozen=True)
class BuildContext:
    """The numeric settings a family builds with.

    Attributes:
        dtype: dtype of the inputs and of the computation.
        param_dtype: dtype the parameters are stored in (float32 in train mode: mixed precision).
        train: True in train mode (BatchNorm then normalizes with batch statistics).
    """

    dtype: jnp.dtype
    param_dtype: jnp.dtype
    train: bool


@dataclasses.dataclass(frozen=True)
class Recipe:
    """What a family supplies for one configured workload.

    Attributes:
        make_inputs: key -> tuple of forward inputs (created on device with `jax.random`).
        apply: `apply(model, *inputs)`, or `apply(*inputs)` when `make_model` is None.
        items_per_call: work items one call processes (for throughput), counted in `items_unit`.
        items_unit: what an item is: "elements", "rows", "tokens" or "images".
        flops: analytic forward FLOPs per call (2 per multiply-add of matmuls and convolutions),
            or None where no standard count exists (elementwise and reduction work).
        make_model: `nnx.Rngs` -> the Flax NNX module; None for parameter-free workloads.
        make_targets: key -> train targets; None means standard-normal targets shaped like the
            output (for the mean-squared-error loss).
        loss: `loss(output, targets) -> scalar`, the train objective.
    """

    make_inputs: Callable[[jax.Array], tuple[jax.Array, ...]]
    apply: Callable[..., Any]
    items_per_call: int
    items_unit: str
    flops: int | None = None
    make_model: Callable[[nnx.Rngs], nnx.Module] | None = None
    make_targets: Callable[[jax.Array], jax.Array] | None = None
    loss: Callable[[jax.Array, jax.Array], jax.Array] = mean_squared_error


@dataclasses.dataclass(frozen=True, eq=False)
class Workload:
    """A named model at one size and mode, ready to hand to `xlafuse.compile`.

    Call it as `fn(*args)`. In forward mode with parameters, `fn(params, *inputs)` where `params`
    is the flat list of the model's `nnx.State` leaves (parameters, plus BatchNorm running
    statistics for resnet50); for parameter-free workloads `fn(*inputs)`. In train mode
    `fn(train_state, batch)` returns `(new_train_state, loss)`; `train_state` is the flat list of
    leaves of a dict with "params", "opt_state" (optax AdamW) and "batch_stats", `batch` a dict
    with "inputs" (a tuple) and "targets". `structured_state(leaves)` rebuilds the dict. States
    are flat lists because jit flattens a list in C++, while an `nnx.State` costs milliseconds of
    Python per call. The train state is donated (`donate_argnums`), as in a real training loop:
    call `fresh_args()` for arguments that a donating call may consume.

    Attributes:
        name: registered workload name.
        size: "tiny", "small" or "full".
        mode: "forward" or "train".
        dtype: compute and input dtype name, e.g. "float32" or "bfloat16".
        fn: pure function of arrays and pytrees; jit-able.
        args: example arguments, built deterministically from the seed.
        num_params: exact number of trainable parameters (0 for parameter-free workloads).
        items_per_call: items one call processes, in `items_unit`.
        items_unit: "elements", "rows", "tokens" or "images".
        flops: analytic FLOPs per call (train: 3x forward), or None where no standard count exists.
        config: the resolved size configuration with overrides applied (JSON-able).
        donate_argnums: argument positions donated to the compiled function (the train state).
        state_tree: the tree structure of the flat state in `args[0]` (None without parameters).
        plan: a `xlafuse.models.sharding.MeshPlan` when the arguments are sharded over a device
            mesh (`build(..., devices=N, parallelism=...)`); None on one device.
        out_shardings: the `out_shardings` to jit with (a sharded train step keeps its state's
            layout); None lets XLA choose.
        entry: for a program of the user's, its entry resolved (`/abs/path.py:FUNCTION` or
            `module:FUNCTION`, `xlafuse.models.user`), from which a child process builds it
            again; None for a zoo workload.
        static: the leaves of a user's program's arguments that are not arrays, made static
            (`xlafuse.compiler.static`: `fn` and `args` are then the program jax.jit traces,
            which puts them back); empty for a zoo workload.
        implementation: the name of the implementation `fn` is (`xlafuse.models.implementations`:
            "xla", the workload's own program, unless `with_implementation` chose another).
        implementations: its other implementations, by name (a zoo workload's: tokamax's, for
            the operation it declares; a program of the user's: the functions given with it).
        interpreted: `fn` holds a Pallas kernel run in interpret mode
            (`xlafuse.models.implementations.Implementation`).
    """

    name: str
    size: str
    mode: str
    dtype: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    num_params: int
    items_per_call: int
    items_unit: str
    flops: int | None
    config: Mapping[str, Any]
    donate_argnums: tuple[int, ...] = ()
    state_tree: Any = None
    plan: Any = None
    out_shardings: Any = None
    entry: str | None = None
    static: tuple[Any, ...] = ()
    implementation: str = OWN
    implementations: Mapping[str, Implementation] = dataclasses.field(default_factory=dict)
    interpreted: bool = False

    @property
    def devices(self) -> int:
        """Devices the workload runs on (1 unless `xlafuse.models.sharding.shard` placed it)."""
        return self.plan.devices if self.plan is not None else 1

    @property
    def parallelism(self) -> str | None:
        """ "data" or "model" on a mesh; None on one device."""
        return self.plan.parallelism if self.plan is not None else None

    def structured_state(self, *, leaves: Any = None) -> Any:
        """The state as a pytree (`nnx.State`, or the train-state dict) from its flat leaves.

        Args:
            leaves: flat leaves (e.g. a train step's new state); `args[0]` when None.

        Raises:
            ValueError: the workload has no parameters.
        """
        if self.state_tree is None:
            raise ValueError(f"workload {self.name!r} has no parameters, so no state")
        return jax.tree.unflatten(self.state_tree, self.args[0] if leaves is None else leaves)

    def jit_kwargs(self) -> dict[str, Any]:
        """The `jax.jit` arguments every compile of this workload uses (one definition).

        The train state is donated; a sharded train step also pins its new state's layout
        (`out_shardings`), so the next step takes it without resharding. The input shardings
        travel with the arguments themselves (committed, sharded arrays).
        """
        kwargs: dict[str, Any] = {}
        if self.donate_argnums:
            kwargs["donate_argnums"] = self.donate_argnums
        if self.out_shardings is not None:
            kwargs["out_shardings"] = self.out_shardings
        return kwargs

    def fresh_args(self) -> tuple[Any, ...]:
        """`args` with every donated argument copied: a donating call may consume the copies."""
        return tuple(
            jax.tree.map(jnp.copy, a) if i in self.donate_argnums else a
            for i, a in enumerate(self.args)
        )

    def with_implementation(self, name: str | None) -> Workload:
        """This workload computing by its implementation `name` (itself for None or the one it
        runs): the same arguments, another `fn`; its own kept among `implementations`.

        Raises:
          XlafuseError: it has no implementation `name` (the message lists those it has), or
            cannot run it here (`built_implementation_problem`: tokamax missing, a GPU
            kernel on a CPU, ...), before anything is traced.
        """
        if name is None or name == self.implementation:
            return self
        problem = built_implementation_problem(self, name)
        if problem:
            raise XlafuseError(problem)
        chosen = self.implementations[name]
        own = Implementation(self.fn, self.interpreted)
        others = {**self.implementations, self.implementation: own}
        del others[name]
        return dataclasses.replace(
            self, fn=chosen.fn, implementation=name, implementations=others,
            interpreted=chosen.interpreted,
        )  # fmt: skip

    def with_items(self, items: Items | None) -> Workload:
        """This workload counting `items` per call (unchanged when None)."""
        if items is None:
            return self
        return dataclasses.replace(self, items_per_call=items.count, items_unit=items.unit)

    def to_dict(self) -> dict[str, Any]:
        """Returns the description the experiment runner records: JSON-able, no arrays."""
        return {
            **cell_fields(self),
            "num_params": self.num_params,
            "items_per_call": self.items_per_call,
            "items_unit": self.items_unit,
            "flops": self.flops,
            "config": {k: _jsonable(v) for k, v in self.config.items()},
            "devices": self.devices,
            "parallelism": self.parallelism,
            "entry": self.entry,
        }


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    return value


def built_implementation_problem(workload: Workload, implementation: str) -> str | None:
    """Why a built workload cannot run `implementation` (one line saying what is accepted;
    None when it can): one it does not have, or one of tokamax's that the device or the
    installed tokamax cannot run (`implementations.problem`)."""
    accepted = (workload.implementation, *workload.implementations)
    if implementation not in accepted:
        shown = ", ".join(f"impl={n}" for n in accepted)
        return (
            f"workload {workload.name!r} has no implementation {implementation!r}; "
            f"accepted: {shown}"
        )
    chosen = workload.implementations.get(implementation)
    if chosen is None or chosen.op is None:  # its own, or a function of the user's
        return None
    return implementations.problem(
        workload.name, chosen.op, implementation,
        mode=workload.mode, dtype=workload.dtype, devices=workload.devices,
    )  # fmt: skip
