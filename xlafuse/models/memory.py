"""Whether a workload's arrays fit in its devices' memory, judged from shapes before any is made.

Asking XLA for more memory than the machine has does not raise: XLA:CPU's allocator aborts the
process (SIGABRT), which takes a whole sweep with it, at the same cell on every resume. So
`xlafuse.models.build` weighs the arrays it is about to make (`jax.eval_shape`: nothing is
allocated) against the memory of the devices first, and refuses a workload that cannot fit.

The weight is a lower bound, so a refusal is never wrong: the state (parameters and batch
statistics; in train mode also AdamW's two moments and the gradients) plus the inputs.
Activations and XLA's temporaries come on top and are not counted.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import jax
import numpy as np

from xlafuse.errors import XlafuseError
from xlafuse.kinds import Backend

TRAIN_STATE_COPIES = 4  # the parameters, AdamW's two moments, the gradients
CGROUP_MEMORY_MAX = Path("/sys/fs/cgroup/memory.max")  # a container's limit (cgroup v2)


class WorkloadTooLargeError(XlafuseError):
    """A workload whose arrays cannot fit in the memory of the devices it would run on."""


def nbytes(tree: Any) -> int:
    """Bytes of the arrays (or `jax.ShapeDtypeStruct`s) of a pytree."""
    return sum(math.prod(leaf.shape) * _itemsize(leaf.dtype) for leaf in jax.tree.leaves(tree))


def device_memory(*, devices: int = 1) -> tuple[int, str] | None:
    """(bytes, what they are) of the memory that `devices` devices of the backend hold.

    A GPU: its `memory_stats()["bytes_limit"]` (what XLA may allocate) times `devices`. The CPU:
    the host's physical memory (or its container's limit, if lower), shared by every host
    device. None when the backend does not say.
    """
    device = jax.devices()[0]
    limit = (_memory_stats(device) or {}).get("bytes_limit")
    if limit:
        each = f"{devices} x " if devices > 1 else ""
        return int(limit) * devices, f"the memory of {each}{device.device_kind}"
    if device.platform == Backend.CPU:
        return _host_memory(), "the host's memory"
    return None


def check_fits(what: str, state: Any, inputs: Any, train: bool, *, devices: int = 1) -> None:
    """Refuse a workload whose state and inputs alone need more memory than its devices have.

    Args:
        what: the workload's label, for the message (`mlp[batch=100000000]/tiny/forward`).
        state: the model state's arrays or shapes (parameters, batch statistics); () if none.
        inputs: the inputs' arrays or shapes.
        train: whether the optimizer's state and the gradients come on top of the state.
        devices: the devices the workload is spread over.

    Raises:
        WorkloadTooLargeError: the message gives the bytes needed, the bytes there are, and what to do.
    """
    state_bytes = nbytes(state) * (TRAIN_STATE_COPIES if train else 1)
    input_bytes = nbytes(inputs)
    memory = device_memory(devices=devices)
    if memory is None or state_bytes + input_bytes <= memory[0]:
        return
    have, where = memory
    kind = "state, optimizer state and gradients" if train else "parameters"
    raise WorkloadTooLargeError(
        f"workload {what} needs at least {_size(state_bytes + input_bytes)} for its arrays "
        f"({kind} {_size(state_bytes)}, inputs {_size(input_bytes)}), more than {where} "
        f"({_size(have)}); choose a smaller size or smaller overrides"
    )


def _memory_stats(device: Any) -> dict[str, Any] | None:
    try:
        return device.memory_stats()
    except (AttributeError, NotImplementedError, RuntimeError):  # a backend that cannot say
        return None


def _host_memory() -> int:
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        limit = CGROUP_MEMORY_MAX.read_text().strip()
    except OSError:
        return physical
    return min(physical, int(limit)) if limit.isdigit() else physical


def _itemsize(dtype: Any) -> int:
    try:
        return np.dtype(dtype).itemsize
    except TypeError:  # a PRNG key type: a few words, not worth weighing
        return 0


def _size(count: int) -> str:
    """`381.5 GiB`, or `0.1 MiB` below a GiB (a model's few parameters beside a huge input)."""
    return f"{count / 2**30:,.1f} GiB" if count >= 2**30 else f"{count / 2**20:,.1f} MiB"
