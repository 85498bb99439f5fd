"""Compile, run and time a function in a child process whose XLA_FLAGS are set before JAX starts.

Some XLA flags are read only when the backend starts; a variant that needs one (its
`process_flags`) cannot be applied per compilation in this process. The function travels as a
serialized `jax.export` artifact (StableHLO), the inputs as a pickle of NumPy arrays. The child
deserializes, lowers, compiles under the variant's per-compile options, runs it once for the
outputs and, when asked, warms up and times further calls with the same timing code as an
in-process cell (`xlafuse.measure.timing.measure`) and traces them for device time. Process
start-up, imports and the compile are never part of a timed call. It sends back the optimized
HLO, the compile timings, the outputs and what it measured.

Run as `python -m xlafuse.child REQUEST_DIR` (internal; the parent writes the request).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


def child_env(process_flags: tuple[str, ...]) -> dict[str, str]:
    """The environment of a child: this process's, with `process_flags` appended to XLA_FLAGS.

    GPU children must not preallocate memory that the parent may already hold.
    """
    env = dict(os.environ)
    env["XLA_FLAGS"] = " ".join(filter(None, [env.get("XLA_FLAGS", ""), *process_flags]))
    env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    return env


def run_exported(
    exported_blob: bytes,
    arg_leaves: list,
    options: dict[str, Any],
    process_flags: tuple[str, ...],
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
      RuntimeError: the child failed; its last error line is in the message.
    """
    with tempfile.TemporaryDirectory(prefix="xlafuse-child-") as tmp:
        folder = Path(tmp)
        (folder / "function.bin").write_bytes(exported_blob)
        with open(folder / "args.pkl", "wb") as f:
            pickle.dump([np.asarray(a) for a in arg_leaves], f)
        request = {"options": options, "donate_argnums": list(donate_argnums), "measure": measure}
        (folder / "request.json").write_text(json.dumps(request))
        proc = subprocess.run(
            [sys.executable, "-m", "xlafuse.compile.child", str(folder)],
            env=child_env(process_flags),
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
            raise RuntimeError(
                f"child process failed (exit {proc.returncode}): "
                f"{lines[-1] if lines else 'no output'}"
            )
        result = json.loads((folder / "result.json").read_text())
        result["hlo_text"] = (folder / "optimized.hlo.txt").read_text()
        with open(folder / "outputs.pkl", "rb") as f:
            result["out_leaves"] = pickle.load(f)
        return result


def export_function(fn, args, kwargs, jit_kwargs) -> tuple[Any, bytes]:
    """(the `jax.export.Exported`, its serialized bytes) of `jax.jit(fn)` for these inputs."""
    import jax

    exported = jax.export.export(jax.jit(fn, **jit_kwargs))(*args, **kwargs)
    return exported, exported.serialize()


def _serve(folder: Path) -> None:
    import jax
    import jax.numpy as jnp

    from xlafuse.measure import profile, timing

    request = json.loads((folder / "request.json").read_text())
    exported = jax.export.deserialize(bytearray((folder / "function.bin").read_bytes()))
    with open(folder / "args.pkl", "rb") as f:
        leaves = pickle.load(f)

    def fresh_args():
        args, kwargs = jax.tree.unflatten(exported.in_tree, [jnp.asarray(x) for x in leaves])
        return args, kwargs

    donate = tuple(request["donate_argnums"])
    args, kwargs = fresh_args()
    start = time.perf_counter()
    lowered = jax.jit(exported.call, donate_argnums=donate).lower(*args, **kwargs)
    lower_s = time.perf_counter() - start
    start = time.perf_counter()
    compiled = lowered.compile(compiler_options=request["options"])
    compile_s = time.perf_counter() - start
    outputs = jax.block_until_ready(compiled(*args, **kwargs))
    result: dict[str, Any] = {"lower_s": lower_s, "compile_s": compile_s}
    (folder / "optimized.hlo.txt").write_text(compiled.as_text())
    with open(folder / "outputs.pkl", "wb") as f:
        pickle.dump([np.asarray(x) for x in jax.tree.leaves(outputs)], f)
    measure = request["measure"]
    if measure:
        settings = timing.TimingSettings(**measure["settings"])
        advance = timing.thread_state if measure["train"] else timing.same_args
        args, _ = fresh_args()
        measured = timing.measure(compiled, args, settings, advance)
        result["timing"] = dataclasses.asdict(measured)
        result["profile"] = None
        if measure["profile_calls"]:
            args, _ = fresh_args()
            calls, trace_dir = measure["profile_calls"], measure.get("trace_dir")
            traced = profile.profile_device_time(compiled, args, calls, advance, trace_dir)
            result["profile"] = dataclasses.asdict(traced) if traced else None
    (folder / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    _serve(Path(sys.argv[1]))
