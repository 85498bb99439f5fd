"""The child side of `xlafuse.compiler.child`: compile, run and time a process-flag variant.

Run as `python -m xlafuse.measurement.variant_child REQUEST_DIR` (internal). The parent wrote the
serialized export (`function.bin`), the input leaves (`args.pkl`) and `request.json`; this process
started with the variant's XLA_FLAGS, so its backend has them. It lowers and compiles the export
under the per-compile options, runs it once for the outputs and, when asked, times and traces
further calls with the same code as an in-process cell. Imports, start-up and the compile are never
part of a timed call.
"""

from __future__ import annotations

import dataclasses
import pickle
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from xlafuse.compiler.protocol import read_request, write_result
from xlafuse.measurement import profile, timing


def main(folder: Path) -> None:
    """Serve the request in `folder`: optimized HLO, outputs and result files written there."""
    request = read_request(folder)
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
        measured = timing.measure(compiled, args, settings=settings, advance=advance)
        result["timing"] = dataclasses.asdict(measured)
        result["profile"] = None
        if measure["profile_calls"]:
            args, _ = fresh_args()
            calls, trace_dir = measure["profile_calls"], measure.get("trace_dir")
            traced = profile.profile_device_time(
                compiled, args, calls=calls, advance=advance, log_dir=trace_dir
            )
            result["profile"] = dataclasses.asdict(traced) if traced else None
    write_result(folder, result)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
