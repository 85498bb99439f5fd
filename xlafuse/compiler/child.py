"""Compile, run and time a function in a child process whose XLA_FLAGS are set before JAX starts.

Some XLA flags are read only when the backend starts; a variant that needs one (its
`process_flags`) cannot be applied per compilation in this process. The function travels as a
serialized `jax.export` artifact (StableHLO), the inputs as a pickle of NumPy arrays. The child
deserializes, lowers, compiles under the variant's per-compile options, runs it once for the
outputs and, when asked, warms up and times further calls with the same timing code as an
in-process cell (`xlafuse.measurement.timing.measure`) and traces them for device time. Process
start-up, imports and the compile are never part of a timed call. It sends back the optimized
HLO, the compile timings, the outputs and what it measured.

The child side is `xlafuse.measurement.variant_child` (started by module name: measuring is a layer
above compiling); the request/response files follow `xlafuse.compiler.protocol`.
"""

from __future__ import annotations

import pickle
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from xlafuse.compiler.protocol import run_child

CHILD_MODULE = "xlafuse.measurement.variant_child"


def run_exported(
    exported_blob: bytes,
    arg_leaves: list,
    options: dict[str, Any],
    process_flags: tuple[str, ...],
    *,
    donate_argnums: tuple[int, ...] = (),
    measure: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Compile and run a serialized export in a child process; return what the child measured.

    Args:
      exported_blob: `jax.export.Exported.serialize()` of the function.
      arg_leaves: the flat leaves of its arguments.
      options: per-compile XLA options.
      process_flags: XLA_FLAGS for the child.
      donate_argnums: argument positions the compiled function donates.
      measure: `{"settings": {...TimingSettings fields}, "train": bool, "profile_calls": int,
        "trace_dir": str or None}`
        to time calls after the first one; None to only compile and run once.

    Returns:
      A dict with `hlo_text`, `lower_s`, `compile_s`, `out_leaves` (NumPy arrays of the first
      call), and with `measure`, `timing` (the Timing fields, samples included) and `profile`
      (the DeviceProfile fields, or None).

    Raises:
      ChildError: the child failed; its last error line is in the message.
    """
    with tempfile.TemporaryDirectory(prefix="xlafuse-child-") as tmp:
        folder = Path(tmp)
        (folder / "function.bin").write_bytes(exported_blob)
        with open(folder / "args.pkl", "wb") as f:
            pickle.dump([np.asarray(a) for a in arg_leaves], f)
        request = {"options": options, "donate_argnums": list(donate_argnums), "measure": measure}
        command = [sys.executable, "-m", CHILD_MODULE, str(folder)]
        result, _ = run_child(
            command, folder, request, "child process", process_flags=process_flags
        )
        result["hlo_text"] = (folder / "optimized.hlo.txt").read_text()
        with open(folder / "outputs.pkl", "rb") as f:
            result["out_leaves"] = pickle.load(f)
        return result


def export_function(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    jit_kwargs: dict[str, Any],
) -> tuple[Any, bytes]:
    """(the `jax.export.Exported`, its serialized bytes) of `jax.jit(fn)` for these inputs."""
    exported = jax.export.export(jax.jit(fn, **jit_kwargs))(*args, **kwargs)
    return exported, exported.serialize()
