"""Workloads on a device mesh: data parallelism and Megatron-style model parallelism.

`shard(workload, devices, parallelism)` places a built Workload's arguments on a one-axis mesh of
`devices` devices (`jax.device_put` with a `NamedSharding`), so that `jax.jit` compiles one SPMD
program and XLA inserts the collectives:

- "data": the batch (forward inputs, train inputs and targets) is split along its first axis;
  every parameter and optimizer state is replicated. A train step all-reduces the gradients.
- "model": Megatron column/row sharding (Shoeybi et al. 2019) of the Dense layers of `MlpBlock`
  and `CausalSelfAttention`: `up` and `qkv` are column-parallel (kernel split on its output axis,
  bias split), `down` and `out` are row-parallel (kernel split on its input axis, bias
  replicated); inputs, norms and embeddings are replicated. A forward block all-reduces after
  each row-parallel layer. The optimizer's moments follow their parameter (same path suffix).
  The fused QKV kernel's columns are ordered [q|k|v][head][dim], so an even column split does
  not fall on head boundaries: XLA adds the communication that this costs, and the HLO report
  shows it (a head-aligned layout would need a different model, not a different sharding).

The mesh has one axis, `MESH_AXIS`. The train step's new state is given the state's own
shardings (`out_shardings`), so a donated step can be chained and its buffers reused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from xlafuse.errors import XlafuseError
from xlafuse.kinds import Backend, Mode
from xlafuse.models.labels import PARALLELISMS

if TYPE_CHECKING:
    from xlafuse.models.workload import Workload

MESH_AXIS = "devices"
# Workloads whose Dense layers the "model" rule knows (MlpBlock, CausalSelfAttention inside).
MODEL_PARALLEL_WORKLOADS = ("attention", "gpt2", "mlp", "transformer_block")
COLUMN_LAYERS = ("up", "qkv")
ROW_LAYERS = ("down", "out")


class DeviceCountError(XlafuseError):
    """More devices were asked for than the backend has."""


@dataclasses.dataclass(frozen=True)
class MeshPlan:
    """How a workload is laid out on devices.

    Attributes:
      devices: number of devices of the one mesh axis.
      parallelism: "data" or "model".
      state_specs: the PartitionSpec of each flat state leaf, as text (e.g. "P(None, 'devices')").
    """

    devices: int
    parallelism: str
    state_specs: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (without the per-leaf specs)."""
        return {"devices": self.devices, "parallelism": self.parallelism}


def check_parallelism(parallelism: str, *, workload: str | None = None) -> str:
    """Returns `parallelism` if it is accepted (for `workload`, when given).

    Raises:
      XlafuseError: not "data" or "model", or "model" for a workload the rule does not know.
    """
    if parallelism not in PARALLELISMS:
        raise XlafuseError(
            f"unknown parallelism {parallelism!r}; accepted: {', '.join(PARALLELISMS)}"
        )
    if parallelism == "model" and workload is not None and workload not in MODEL_PARALLEL_WORKLOADS:
        raise XlafuseError(
            f"parallelism 'model' has no sharding rule for workload {workload!r}; "
            f"accepted: {', '.join(MODEL_PARALLEL_WORKLOADS)} (or parallelism 'data')"
        )
    return parallelism


def check_device_count(devices: int) -> list[jax.Device]:
    """The first `devices` devices of the default backend.

    Raises:
      DeviceCountError: `devices` < 1, or more than the backend has (on a CPU the message says
        how to get more: XLA_FLAGS=--xla_force_host_platform_device_count=N before JAX starts).
    """
    if not isinstance(devices, int) or isinstance(devices, bool) or devices < 1:
        raise DeviceCountError(f"devices must be a positive integer, got {devices!r}")
    have = jax.devices()
    if devices > len(have):
        backend = jax.default_backend()
        hint = (
            "; on a CPU set XLA_FLAGS=--xla_force_host_platform_device_count=N before JAX "
            "starts (the xlafuse CLI does it for you)"
            if backend == Backend.CPU
            else ""
        )
        raise DeviceCountError(
            f"asked for {devices} devices, but the {backend} backend has {len(have)} "
            f"({have[0].device_kind}){hint}"
        )
    return list(have[:devices])


def make_mesh(devices: int) -> Mesh:
    """A one-axis mesh (`MESH_AXIS`) over the first `devices` devices."""
    return Mesh(np.array(check_device_count(devices)), (MESH_AXIS,))


def leaf_spec(path: Sequence[Any], ndim: int, parallelism: str) -> P:
    """The PartitionSpec of one state leaf, from its path in the (structured) state.

    Args:
      path: the leaf's key path (`jax.tree_util.tree_flatten_with_path`).
      ndim: the leaf's rank.
      parallelism: "data" (always replicated) or "model" (the Megatron rule above).
    """
    if parallelism != "model" or ndim == 0:
        return P()
    keys = [_key_name(k) for k in path]
    names = [k for k in keys if k not in ("value",)]
    if len(names) < 2:
        return P()
    layer, param = names[-2], names[-1]
    if layer in COLUMN_LAYERS:
        if param == "kernel" and ndim == 2:
            return P(None, MESH_AXIS)
        if param == "bias" and ndim == 1:
            return P(MESH_AXIS)
    if layer in ROW_LAYERS and param == "kernel" and ndim == 2:
        return P(MESH_AXIS, None)
    return P()


def _key_name(key: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def shard(workload: Workload, devices: int, *, parallelism: str = "data") -> Workload:
    """The workload with its arguments placed on a mesh of `devices` devices.

    Args:
      workload: a Workload from `xlafuse.models.build` (on one device).
      devices: mesh size; 1 returns the workload unchanged.
      parallelism: "data" or "model".

    Returns:
      A Workload whose `args` are sharded (committed `jax.Array`s), with `plan` set and, for a
      train step, `out_shardings` keeping the state's layout.

    Raises:
      XlafuseError: unknown parallelism, a workload the model rule does not know, too few
        devices (DeviceCountError), or a dimension the devices do not divide.
    """
    check_parallelism(parallelism, workload=workload.name)
    if devices == 1:
        return workload
    mesh = make_mesh(devices)
    replicated = NamedSharding(mesh, P())
    state_shardings: list[NamedSharding] | None = None
    args = list(workload.args)
    specs: tuple[str, ...] = ()
    if workload.state_tree is not None:
        structured = workload.structured_state()
        with_paths = jax.tree_util.tree_flatten_with_path(structured)[0]
        leaf_specs = [leaf_spec(path, np.ndim(leaf), parallelism) for path, leaf in with_paths]
        for (path, leaf), spec in zip(with_paths, leaf_specs, strict=True):
            where = jax.tree_util.keystr(path)
            _check_divisible(workload.name, where, leaf.shape, spec, devices, "d_model")
        state_shardings = [NamedSharding(mesh, s) for s in leaf_specs]
        args[0] = [jax.device_put(x, s) for x, s in zip(args[0], state_shardings, strict=True)]
        specs = tuple(str(s) for s in leaf_specs)
    first = 0 if workload.state_tree is None else 1
    for i in range(first, len(args)):
        args[i] = _place_batch(workload.name, args[i], mesh, parallelism, devices)
    out_shardings = None
    if workload.mode == Mode.TRAIN and state_shardings is not None:
        out_shardings = (state_shardings, replicated)
    return dataclasses.replace(
        workload,
        args=tuple(args),
        plan=MeshPlan(devices, parallelism, specs),
        out_shardings=out_shardings,
    )


def _place_batch(name: str, tree: Any, mesh: Mesh, parallelism: str, devices: int) -> Any:
    """Batch inputs: split along the first axis ("data") or replicated ("model")."""

    def place(path, x):
        spec = P(MESH_AXIS) if parallelism == "data" and np.ndim(x) > 0 else P()
        where = jax.tree_util.keystr(path) or "the input"
        _check_divisible(name, where, x.shape, spec, devices, "batch")
        return jax.device_put(x, NamedSharding(mesh, spec))

    return jax.tree_util.tree_map_with_path(place, tree)


def _check_divisible(name: str, where: str, shape, spec: P, devices: int, knob: str) -> None:
    for axis, part in enumerate(spec):
        if part is not None and shape[axis] % devices:
            raise XlafuseError(
                f"workload {name!r}: axis {axis} of {where} has size {shape[axis]}, which "
                f"{devices} devices do not divide; override {knob} with a multiple of {devices}"
            )
