"""Flax state <-> torch twin: parameter names, layouts and array copies.

A Flax path such as `("blocks", 0, "attn", "qkv", "kernel")` names the torch tensor
`blocks.0.attn.qkv.weight`. The last key maps (`kernel`, `scale`, `embedding` -> `weight`;
BatchNorm `mean`/`var` -> `running_mean`/`running_var`), and a kernel's layout is changed:
a dense kernel (in, out) is transposed to torch's (out, in), a convolution kernel (H, W, I, O)
permuted to OIHW. `to_flax` applies the inverse, so a twin's state can be judged against the
Flax workload's by `xlafuse.measurement.numerics` leaf by leaf.

Arrays travel through host memory (bfloat16 as its 16-bit pattern: NumPy has no native
bfloat16 that torch reads): a copy, once per cell, outside every timed region.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
import torch
from flax import nnx

_RENAME = {
    "kernel": "weight",
    "scale": "weight",
    "embedding": "weight",
    "mean": "running_mean",
    "var": "running_var",
}
_TORCH_DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float64": torch.float64,
    "int32": torch.int32,
    "int64": torch.int64,
}


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a NumPy/JAX dtype name.

    Raises:
      ValueError: a dtype the twins do not take.
    """
    if name not in _TORCH_DTYPES:
        raise ValueError(f"dtype {name!r} has no torch twin; accepted: {', '.join(_TORCH_DTYPES)}")
    return _TORCH_DTYPES[name]


def torch_name(path: tuple[Any, ...]) -> str:
    """The torch parameter or buffer name of a Flax state path."""
    *head, last = (str(p) for p in path)
    return ".".join([*head, _RENAME.get(last, last)])


def to_torch_layout(array: np.ndarray, *, key: Any = "kernel") -> np.ndarray:
    """A Flax kernel in torch's layout: (in, out) -> (out, in); (H, W, I, O) -> OIHW.

    Only kernels (the last path key `key`) change layout; embeddings and vectors do not.
    """
    return _kernel_layout(array, key, conv_axes=(3, 2, 0, 1))


def to_flax_layout(array: np.ndarray, *, key: Any = "kernel") -> np.ndarray:
    """The inverse of `to_torch_layout`."""
    return _kernel_layout(array, key, conv_axes=(2, 3, 1, 0))


def _kernel_layout(array: np.ndarray, key: Any, conv_axes: tuple[int, ...]) -> np.ndarray:
    """A kernel transposed (dense) or permuted by `conv_axes` (convolution); else `array`."""
    if key != "kernel":
        return array
    if array.ndim == 2:
        return array.T
    if array.ndim == 4:
        return array.transpose(conv_axes)
    return array


def to_tensor(array: Any, *, device: str | torch.device = "cpu") -> torch.Tensor:
    """A host copy of a JAX or NumPy array as a torch tensor on `device` (bfloat16 kept)."""
    host = np.array(jax.device_get(array), order="C")  # a writable copy: torch may write
    if host.dtype.name == "bfloat16":
        return torch.from_numpy(host.view(np.int16)).view(torch.bfloat16).to(device)
    return torch.from_numpy(host).to(device)


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A host NumPy copy of a tensor (bfloat16 as `ml_dtypes.bfloat16`, as JAX returns it).

    Always a copy: on the CPU `.cpu().numpy()` shares the tensor's memory, and a later train
    step would change the "outputs" of this one.
    """
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(jax.numpy.bfloat16).copy()
    return tensor.numpy().copy()


def _flat(state: Any) -> list[tuple[tuple[Any, ...], Any]]:
    return [(path, var) for path, var in nnx.to_flat_state(state)]


def _value(var: Any) -> Any:
    return var.get_value() if hasattr(var, "get_value") else getattr(var, "value", var)


def load_flax_state(model: torch.nn.Module, *states: Any) -> None:
    """Copy Flax states (parameters, batch statistics) into the twin, layouts converted.

    Every torch parameter and buffer must be covered, and every Flax leaf must land.

    Raises:
      ValueError: a Flax path without a torch tensor, a shape that does not match, or a torch
        tensor no Flax leaf filled.
    """
    tensors = dict(model.named_parameters()) | dict(model.named_buffers())
    filled = set()
    for state in states:
        for path, var in _flat(state):
            name = torch_name(path)
            if name not in tensors:
                raise ValueError(f"Flax parameter {path} has no torch twin tensor {name!r}")
            array = to_torch_layout(np.asarray(jax.device_get(_value(var))), key=path[-1])
            target = tensors[name]
            if tuple(array.shape) != tuple(target.shape):
                raise ValueError(
                    f"Flax parameter {path}: shape {list(array.shape)} in torch layout, "
                    f"twin tensor {name!r} has {list(target.shape)}"
                )
            with torch.no_grad():
                target.copy_(to_tensor(np.ascontiguousarray(array), device=target.device))
            filled.add(name)
    missing = sorted(set(tensors) - filled)
    if missing:
        raise ValueError(f"twin tensors no Flax leaf filled: {', '.join(missing)}")


def to_flax(like: Any, tensors: Mapping[str, torch.Tensor]) -> Any:
    """A Flax-shaped tree of host arrays: `like`'s structure, values from the twin's tensors.

    Args:
      like: a Flax state (its paths and leaf order are kept).
      tensors: torch name -> tensor (parameters, buffers, or their gradients).
    """

    def leaf(path, _):
        keys = tuple(_key(k) for k in path)
        # A Variable's value sits under a trailing key (".value" / "raw_value") in some versions.
        for end in range(len(keys), 0, -1):
            name = torch_name(keys[:end])
            if name in tensors:
                return to_flax_layout(to_numpy(tensors[name]), key=keys[end - 1])
        raise ValueError(f"no twin tensor for Flax path {keys}")

    return jax.tree_util.tree_map_with_path(leaf, like)


def _key(entry: Any) -> Any:
    for attr in ("key", "idx", "name"):
        if hasattr(entry, attr):
            return getattr(entry, attr)
    return entry
