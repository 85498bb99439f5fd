"""The child process of the cold-start measurements (internal).

Started by `xlafuse.measurement.coldstart` as `python -c BOOTSTRAP FOLDER` (BOOTSTRAP lives there): reads FOLDER/request.json,
writes FOLDER/result.json. `import_s` is timed by BOOTSTRAP in a bare interpreter, from before
`import jax` to after `import flax`, `xlafuse` and its models: `python -m` on this module would
import the `xlafuse` package (hence JAX) before any code here could start a clock. Phases:

- before either: the request's cache folder, or no cache (`xlafuse.compiler.cache.apply_settings`);
- "jit": build -> lower -> compile -> first call -> steady calls [-> export];
- "aot": build (for the inputs only) -> deserialize + compile + first call of an export.
"""

from __future__ import annotations

import pickle
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from xlafuse.compiler.cache import (
    CACHE_HITS,
    CACHE_MISSES,
    apply_settings,
    cache_entry_count,
    cache_events,
)
from xlafuse.compiler.jit import lower_workload
from xlafuse.compiler.protocol import read_request, write_result
from xlafuse.compiler.variants import Variant
from xlafuse.kinds import Mode
from xlafuse.measurement.coldstart import build_workload


def per_call_seconds(
    compiled: Callable[..., Any],
    args: tuple[Any, ...],
    calls: int,
    *,
    on_first: Callable[[], None] | None = None,
    train: bool = False,
) -> list[float]:
    """Seconds of each of `calls` synchronized calls of `compiled(*args)`.

    Args:
      compiled: a `jax.stages.Compiled`.
      args: the positional arguments (a train step's donated state is consumed).
      calls: how many calls to time.
      on_first: called with the first call's output.
      train: each call's first output is the next call's first argument (a train step).
    """
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        out = jax.block_until_ready(compiled(*args))
        seconds.append(time.perf_counter() - start)
        if on_first is not None and len(seconds) == 1:
            on_first(out)
        if train:
            args = (out[0], *args[1:])
    return seconds


def _flat(fn, treedef):
    """`fn` over a flat list of array leaves: exports cannot serialize Flax pytree types."""

    def flat_fn(*leaves):
        return jax.tree.leaves(fn(*jax.tree.unflatten(treedef, leaves)))

    flat_fn.__name__ = getattr(fn, "__name__", "fn")
    return flat_fn


def _save_outputs(path: str | None, out) -> None:
    if path is None:
        return
    with open(path, "wb") as f:
        pickle.dump([np.asarray(x) for x in jax.tree.leaves(out)], f)


def _phase_jit(request: dict[str, Any], import_s: float) -> dict[str, Any]:
    start = time.perf_counter()
    variant = Variant.from_dict(request["variant"])
    # the implementation the variant names (`impl=NAME`), as the runner compiles the cell
    workload = build_workload(request["workload"]).with_implementation(variant.implementation)
    build_s = time.perf_counter() - start
    options = variant.compiler_options(backend=jax.default_backend())
    args = workload.args  # this process calls it alone: no copies (they would compile)
    aot_export_s = _export(workload, request["export_to"])
    # The runner's lowering (`lower_workload`: donated, sharded alike), so a warm-up serves both.
    start = time.perf_counter()
    lowered = lower_workload(workload)
    lower_s = time.perf_counter() - start
    with cache_events() as counted:
        start = time.perf_counter()
        compiled = lowered.compile(compiler_options=options)
        compile_s = time.perf_counter() - start
    devices = []
    steady = per_call_seconds(
        compiled,
        args,
        1 + request["steady_calls"],
        on_first=lambda out: (_save_outputs(request["outputs_to"], out), devices.append(_on(out))),
        train=workload.mode == Mode.TRAIN,
    )
    return {
        "backend": jax.default_backend(),
        "import_s": import_s,
        "build_s": build_s,
        "lower_s": lower_s,
        "compile_s": compile_s,
        "first_call_s": steady[0],
        "steady_call_s": statistics.median(steady[1:]) if len(steady) > 1 else steady[0],
        "cache_hits": counted[CACHE_HITS],
        "cache_misses": counted[CACHE_MISSES],
        "cache_entries": cache_entry_count(request["cache_dir"]),
        "aot_export_s": aot_export_s,
        "devices": devices[0],
    }


def _on(out) -> int:
    """The devices a call's outputs are on: more than one for a sharded program."""
    return max((len(x.sharding.device_set) for x in jax.tree.leaves(out)), default=1)


def _export(workload, path: str | None) -> float | None:
    """Export the workload's function to `path`; seconds to trace, lower and serialize."""
    if path is None:
        return None
    leaves, treedef = jax.tree.flatten(workload.args)
    start = time.perf_counter()
    exported = jax.export.export(jax.jit(_flat(workload.fn, treedef)))(*leaves)
    blob = exported.serialize()
    seconds = time.perf_counter() - start
    Path(path).write_bytes(blob)
    return seconds


def _phase_aot(request: dict[str, Any], import_s: float) -> dict[str, Any]:
    workload = build_workload(request["workload"])
    leaves = jax.tree.leaves(workload.args)
    options = Variant.from_dict(request["variant"]).compiler_options(backend=jax.default_backend())
    blob = Path(request["exported_path"]).read_bytes()
    start = time.perf_counter()
    exported = jax.export.deserialize(bytearray(blob))
    compiled = jax.jit(exported.call).lower(*leaves).compile(compiler_options=options)
    out = jax.block_until_ready(compiled(*leaves))
    aot_load_s = time.perf_counter() - start
    _save_outputs(request["outputs_to"], out)
    return {"backend": jax.default_backend(), "import_s": import_s, "aot_load_s": aot_load_s}


def main(folder: str, import_s: float) -> None:
    """Serve one request from `folder` (request.json -> result.json).

    Args:
      folder: the request folder.
      import_s: seconds the bootstrap spent importing jax, flax and xlafuse.
    """
    request = read_request(folder)
    # Its own cache folder or none, whatever this process inherited (JAX_COMPILATION_CACHE_DIR).
    apply_settings(request.get("cache_dir"))
    phase = {"jit": _phase_jit, "aot": _phase_aot}[request["phase"]]
    result = phase(request, import_s)
    write_result(folder, result)
