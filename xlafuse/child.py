"""Compile and run a function in a child process whose XLA_FLAGS are set before JAX starts.

Some XLA flags are read only when the backend starts; a variant that needs one (its
`process_flags`) cannot be applied per compilation in this process. The function travels as a
serialized `jax.export` artifact (StableHLO), the inputs as a pickle of NumPy arrays; the child
deserializes, lowers, compiles under the variant's per-compile options, runs it once (and, when
asked, times further calls), and sends back the optimized HLO, the timings and the outputs.

Run as `python -m xlafuse.child REQUEST_DIR` (internal; the parent writes the request).
"""

from __future__ import annotations

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
    timed_calls: int = 0,
) -> dict[str, Any]:
    """Compile and run a serialized export in a child process; return what the child measured.

    Returns:
      A dict with `hlo_text`, `lower_s`, `compile_s`, `out_leaves` (NumPy arrays) and
      `call_s` (seconds of each timed call, after one warm-up call).

    Raises:
      RuntimeError: the child failed; its last error line is in the message.
    """
    with tempfile.TemporaryDirectory(prefix="xlafuse-child-") as tmp:
        folder = Path(tmp)
        (folder / "function.bin").write_bytes(exported_blob)
        with open(folder / "args.pkl", "wb") as f:
            pickle.dump([np.asarray(a) for a in arg_leaves], f)
        (folder / "request.json").write_text(
            json.dumps({"options": options, "timed_calls": timed_calls})
        )
        proc = subprocess.run(
            [sys.executable, "-m", "xlafuse.child", str(folder)],
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


def compile_in_child(fn, args, kwargs, variant, backend, options, jit_kwargs):
    """`compile_variant` for a variant with process flags: compile (and run) in a child process."""
    import jax

    from xlafuse.compile import CompiledVariant

    exported = jax.export.export(jax.jit(fn, **jit_kwargs))(*args, **kwargs)
    blob = exported.serialize()

    def run(*call_args, **call_kwargs):
        leaves = jax.tree.leaves((call_args, call_kwargs))
        result = run_exported(blob, leaves, options, variant.process_flags)
        return jax.tree.unflatten(exported.out_tree, result["out_leaves"])

    first = run_exported(blob, jax.tree.leaves((args, kwargs)), options, variant.process_flags)
    return CompiledVariant(
        variant, backend, None, first["hlo_text"], first["lower_s"], first["compile_s"], run
    )


def _serve(folder: Path) -> None:
    import jax

    request = json.loads((folder / "request.json").read_text())
    exported = jax.export.deserialize(bytearray((folder / "function.bin").read_bytes()))
    with open(folder / "args.pkl", "rb") as f:
        leaves = pickle.load(f)
    args, kwargs = jax.tree.unflatten(exported.in_tree, leaves)
    start = time.perf_counter()
    lowered = jax.jit(exported.call).lower(*args, **kwargs)
    lower_s = time.perf_counter() - start
    start = time.perf_counter()
    compiled = lowered.compile(compiler_options=request["options"])
    compile_s = time.perf_counter() - start
    outputs = jax.block_until_ready(compiled(*args, **kwargs))
    call_s = []
    for _ in range(request["timed_calls"]):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args, **kwargs))
        call_s.append(time.perf_counter() - start)
    (folder / "optimized.hlo.txt").write_text(compiled.as_text())
    with open(folder / "outputs.pkl", "wb") as f:
        pickle.dump([np.asarray(x) for x in jax.tree.leaves(outputs)], f)
    result = {"lower_s": lower_s, "compile_s": compile_s, "call_s": call_s}
    (folder / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    _serve(Path(sys.argv[1]))
