"""Cold start: what a compiled model costs before its first useful call, measured in fresh processes.

A serving process pays, before it can answer: the imports, tracing and lowering, the XLA compile
and a first (slower) call. The persistent compilation cache (`jax_compilation_cache_dir`) turns the
compile into a disk read when an earlier process compiled the same module with the same options;
ahead-of-time export (`jax.export`) removes tracing and lowering from the serving process.

Every figure comes from a child process (a bare `python -c` running
`xlafuse.measurement.coldstart_child.BOOTSTRAP`, which times the imports first), because
JAX keeps compiled executables in memory: timing a second compile in this process would time a
lookup. Three children make one `ColdStartResult`:

1. cold: an empty cache folder; times import, lower, compile, first and steady calls, and exports
   the function (serialized StableHLO) for step 3;
2. warm: the same cache folder, a new process: the compile is a cache read;
3. AOT: a new process, no cache: deserialize the export, compile it, make the first call.

Cache hits are counted, not guessed from times: the child listens to JAX's monitoring events
('/jax/compilation_cache/cache_hits' and 'cache_misses', `xlafuse.compiler.cache.cache_events`)
during the measured compile only. Each child sets its own cache (`cache.apply_settings`): the
folder it is given, or none, whatever the environment or xlafuse's commands use; never the
commands' cache folder.

The parent compiles nothing: a program of the user's is built in it once, on the host, only to
check it before a child starts (`check_user_program`).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax

from xlafuse.compiler.cache import cache_entry_count
from xlafuse.compiler.devices import HOST_DEVICES_FLAG
from xlafuse.compiler.protocol import run_child
from xlafuse.compiler.variants import get as get_variant
from xlafuse.folders import writable_folder
from xlafuse.kinds import Backend
from xlafuse.models import user
from xlafuse.models.names import Cell
from xlafuse.models.workload import Workload

# Run by a bare `python -c` with the request folder as argv[1]; times what a serving process
# imports before it can compile, then hands over to `main`.
BOOTSTRAP = """\
import sys, time
start = time.perf_counter()
import jax, flax
import xlafuse, xlafuse.models
import_s = time.perf_counter() - start
from xlafuse.measurement.coldstart_child import main
main(sys.argv[1], import_s)
"""

DEFAULT_STEADY_CALLS = 10


@dataclasses.dataclass(frozen=True)
class StartRun:
    """What one child process measured on the jit path (trace, lower, compile, call).

    Attributes:
      backend: JAX's default backend in the child ("cpu" or "gpu").
      import_s: seconds to import jax, flax and the xlafuse models.
      build_s: seconds to build the workload (parameters, inputs; not part of the start cost).
      lower_s: seconds to trace and lower the function.
      compile_s: seconds of `Lowered.compile` (a disk read on a cache hit).
      first_call_s: seconds of the first call, synchronized.
      steady_call_s: median seconds of the following synchronized calls.
      cache_hits: persistent-cache hits during the measured compile (0 or 1).
      cache_misses: entries written to the cache by the measured compile (0 or 1).
      cache_entries: entries in the cache folder when the child finished (0 without a cache).
      aot_export_s: seconds to export and serialize the function, when asked (else None).
      devices: the devices the program ran on (its first call's outputs'): a sharded cell's
        mesh, rebuilt in the child (`workload_spec`).
    """

    backend: str
    import_s: float
    build_s: float
    lower_s: float
    compile_s: float
    first_call_s: float
    steady_call_s: float
    cache_hits: int
    cache_misses: int
    cache_entries: int
    aot_export_s: float | None = None
    devices: int = 1

    @property
    def cache_hit(self) -> bool:
        """True when the measured compile was served by the persistent cache."""
        return self.cache_hits > 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, with `cache_hit`."""
        return {**dataclasses.asdict(self), "cache_hit": self.cache_hit}


@dataclasses.dataclass(frozen=True)
class ColdStartResult:
    """Cold-start figures of one workload under one variant.

    Attributes:
      workload: the workload spec (name, size, mode, dtype, seed, overrides).
      variant: the variant's name.
      backend: "cpu" or "gpu".
      import_s: seconds to import jax, flax and the models (cold child).
      lower_s: seconds to trace and lower (cold child).
      cold_compile_s: compile seconds with an empty cache; None when the cache was already warm.
      warm_compile_s: compile seconds in a new process with the cache filled.
      first_call_s: seconds of the first call after compiling (cold child).
      steady_call_s: median seconds of a call once warmed up (cold child).
      aot_export_s: seconds to export and serialize (jax.export); None without AOT.
      aot_load_s: seconds to deserialize + compile + first call in a fresh process; None without AOT.
      cache_hit: whether the warm child's compile was a persistent-cache hit (counted, not timed).
      cache_entries: entries in the cache folder after the warm child.
      cache_dir: the cache folder used, or None when it was a temporary one.
    """

    workload: Mapping[str, Any]
    variant: str
    backend: str
    import_s: float
    lower_s: float
    cold_compile_s: float | None
    warm_compile_s: float
    first_call_s: float
    steady_call_s: float
    aot_export_s: float | None
    aot_load_s: float | None
    cache_hit: bool
    cache_entries: int
    cache_dir: str | None = None

    @property
    def cache_speedup(self) -> float | None:
        """cold_compile_s / warm_compile_s; None if either is missing."""
        if self.cold_compile_s is None or not self.warm_compile_s:
            return None
        return self.cold_compile_s / self.warm_compile_s

    @property
    def compile_to_steady(self) -> float | None:
        """How many steady calls one cold compile costs; None if unknown."""
        if self.cold_compile_s is None or not self.steady_call_s:
            return None
        return self.cold_compile_s / self.steady_call_s

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, with the derived `cache_speedup` and `compile_to_steady`."""
        out = dataclasses.asdict(self)
        out["workload"] = dict(self.workload)
        out["cache_speedup"] = self.cache_speedup
        out["compile_to_steady"] = self.compile_to_steady
        return out


def build_workload(spec: Mapping[str, Any]) -> Workload:
    """The workload a `workload_spec` describes, built (in a child process), sharded over its
    devices when it names more than one (the child was started with them: `_run_child`). The
    user's imports the spec lists are imported first."""
    for target in spec.get("imports", ()):
        user.import_target(target)
    return Cell.from_dict(spec).build(seed=spec["seed"])


def workload_spec(workload: Any) -> dict[str, Any]:
    """A JSON-able spec from which a child process rebuilds the same workload: its cell's
    `to_dict` form, devices and parallelism included, with a seed, a label and the imports.

    Args:
      workload: a `Cell` (a config's: `WorkloadConfig.cell`), a built `Workload` (its resolved
        configuration becomes the overrides: `Cell.rebuilt`; the seed is taken as 0),
        a workload name, or a dict of a Cell's keys (and `seed`, `label`). A program of the
        user's is named by its resolved entry, so a child in any folder finds it; `label`
        keeps the name it is shown by.

    Returns:
      The spec; `imports` lists this process's imports of the user's (`xlafuse.models.user`),
      which the child imports first.

    Raises:
      TypeError: none of those.
    """
    label, seed = None, 0
    if isinstance(workload, str):
        workload = Cell(workload)
    elif isinstance(workload, Workload):
        label, workload = workload.name, Cell.rebuilt(workload)
    elif isinstance(workload, Mapping) and "name" in workload:
        label, seed = workload.get("label"), int(workload.get("seed", 0))
        workload = Cell.from_dict(workload)
    if not isinstance(workload, Cell):
        raise TypeError(
            "a workload is a Cell, a Workload, a name or a dict with 'name', "
            f"not {type(workload).__name__}"
        )
    cell = _for_child(workload)
    shown = workload.name if workload.entry else user.display_name(cell.name)
    return {
        **cell.to_dict(),
        "label": label or shown,
        "seed": seed,
        "imports": list(user.imported()),
    }


def _for_child(cell: Cell) -> Cell:
    """The cell as a child process in any folder builds it: a program of the user's, and its
    other implementations, by their entries resolved (a config's against the config's folder)."""
    name = cell.build_name
    if user.is_entry(name):
        name = user.parse_entry(name).resolved
    implementations = {n: e.resolved for n, e in cell.implementation_entries().items()}
    return dataclasses.replace(
        cell, name=name, entry=None, base=None, implementations=implementations
    )


def run_start(
    workload: Any,
    *,
    variant: Any = "default",
    cache_dir: str | os.PathLike | None = None,
    steady_calls: int = DEFAULT_STEADY_CALLS,
    export_to: str | os.PathLike | None = None,
    outputs_to: str | os.PathLike | None = None,
) -> StartRun:
    """Start a fresh process that builds, lowers, compiles and calls the workload once over.

    Args:
      workload: see `workload_spec`.
      variant: a preset name, "a+b", a Variant or a dict of XLA options.
      cache_dir: the persistent-cache folder to use (every entry cached); None: no cache.
      steady_calls: synchronized calls after the first whose median is `steady_call_s`.
      export_to: if given, also export the function there (serialized `jax.export`).
      outputs_to: if given, pickle the first call's output leaves (NumPy) there.

    Returns:
      The child's StartRun.

    Raises:
      RuntimeError: the child failed (its last error line is in the message).
    """
    request = {
        "phase": "jit",
        "workload": workload_spec(workload),
        "variant": _variant_dict(variant),
        "cache_dir": None if cache_dir is None else str(cache_dir),
        "steady_calls": int(steady_calls),
        "export_to": None if export_to is None else str(export_to),
        "outputs_to": None if outputs_to is None else str(outputs_to),
    }
    return StartRun(**_run_child(request))


def run_aot_load(
    workload: Any,
    variant: Any,
    exported_path: str | os.PathLike,
    *,
    outputs_to: str | os.PathLike | None = None,
) -> float:
    """Start a fresh process that loads an export, compiles it and makes the first call.

    The child rebuilds the workload only for its inputs (not timed); no persistent cache is used.

    Returns:
      Seconds of deserialize + compile + first call (`aot_load_s`).

    Raises:
      RuntimeError: the child failed.
    """
    request = {
        "phase": "aot",
        "workload": workload_spec(workload),
        "variant": _variant_dict(variant),
        "exported_path": str(exported_path),
        "outputs_to": None if outputs_to is None else str(outputs_to),
    }
    return float(_run_child(request)["aot_load_s"])


def measure_cold_start(
    workload: Any,
    *,
    variant: Any = "default",
    cache_dir: str | os.PathLike | None = None,
    steady_calls: int = DEFAULT_STEADY_CALLS,
    aot: bool = True,
    on_step: Callable[[str], None] | None = None,
) -> ColdStartResult:
    """Measure the cold start of a workload under a variant, in two or three fresh processes.

    Args:
      workload: see `workload_spec`.
      variant: a preset name, "a+b", a Variant or a dict of XLA options.
      cache_dir: the cache folder to fill and keep (None: a temporary one). If it holds
        entries already (`xlafuse warmup`), the cold run is skipped: `cold_compile_s` is None.
      steady_calls: calls whose median is `steady_call_s`.
      aot: also measure export and the AOT load in a third process. on_step: called with a
        short line before each child process starts (for progress).

    Returns:
      The ColdStartResult.

    Raises:
      XlafuseError: `cache_dir` cannot serve as a cache folder (a file, or not writable).
      EntryError: a program of the user's that cannot be built (`check_user_program`); no child
        has started.
      RuntimeError: a child failed.
    """
    if cache_dir is not None:
        check_cache_dir(cache_dir)
    check_user_program(workload)
    step = on_step or (lambda line: None)
    cold, warm, first, aot_load_s = _run_children(
        workload, variant, cache_dir, steady_calls, aot=aot, step=step
    )
    name = _variant_dict(variant)["name"]
    return _result(workload_spec(workload), name, cold, warm, first, aot_load_s, cache_dir)


def _run_children(
    workload: Any,
    variant: Any,
    cache_dir: str | os.PathLike | None,
    steady_calls: int,
    *,
    aot: bool,
    step: Callable[[str], None],
) -> tuple[Any, Any, Any, float | None]:
    """The child processes of `measure_cold_start`, one after another: cold (only with an
    empty cache), warm, export (with `aot`, when no cold child exported) and the AOT load.

    Returns:
      (cold, warm, first, aot_load_s): the cold child's result (None when the cache was
      filled already), the warm child's, the first child's (with the export time), and the
      AOT load's seconds (None without `aot`).

    Raises:
      RuntimeError: a child failed.
    """
    with tempfile.TemporaryDirectory(prefix="xlafuse-coldstart-") as tmp:
        folder = Path(cache_dir) if cache_dir is not None else Path(tmp) / "cache"
        exported = Path(tmp) / "exported.bin" if aot else None
        cold = None
        if cache_entry_count(folder) == 0:
            step("cold start: new process, empty cache (import, build, compile, calls)")
            cold = run_start(
                workload,
                variant=variant,
                cache_dir=folder,
                steady_calls=steady_calls,
                export_to=exported,
            )
        step("warm start: new process, filled cache")
        warm = run_start(workload, variant=variant, cache_dir=folder, steady_calls=steady_calls)
        first = cold or warm
        aot_load_s = None
        if aot and cold is None:  # the warm child did not export: a child without a cache does
            step("export: new process, no cache")
            exporting = run_start(
                workload, variant=variant, cache_dir=None, steady_calls=1, export_to=exported
            )
            first = dataclasses.replace(first, aot_export_s=exporting.aot_export_s)
        if aot:
            step("AOT load: new process, deserialize + compile + first call")
            aot_load_s = run_aot_load(workload, variant, exported)
    return cold, warm, first, aot_load_s


def check_user_program(workload: Any) -> None:
    """Build a program of the user's here, once, before a child process starts: a FUNCTION that
    raises (or calls `sys.exit`), returns another shape or cannot be traced is one line naming
    the entry, as in every other command, not a child's failure. Nothing is compiled; its
    arrays are made on the host, so that an accelerator's memory stays the children's.

    Args:
      workload: as for `workload_spec`; a zoo workload or a built Workload is left alone (its
        checks are `xlafuse.models.registry.check_build`'s, made without building it).

    Raises:
      EntryError: as `xlafuse.models.user.build_entry`, or (a config's entry) a mode other than
        the one FUNCTION returns.
    """
    if isinstance(workload, str):
        workload = Cell(workload)
    elif isinstance(workload, Mapping) and "name" in workload:
        workload = Cell.from_dict(workload)
    if not isinstance(workload, Cell) or not user.is_entry(workload.build_name):
        return
    with jax.default_device(jax.devices("cpu")[0]):
        workload.build()


def _result(spec, variant: str, cold, warm, first, aot_load_s, cache_dir) -> ColdStartResult:
    """The ColdStartResult of the runs (`first`: the cold run's, else the warm one's)."""
    return ColdStartResult(
        workload=spec,
        variant=variant,
        backend=first.backend,
        import_s=first.import_s,
        lower_s=first.lower_s,
        cold_compile_s=None if cold is None else cold.compile_s,
        warm_compile_s=warm.compile_s,
        first_call_s=first.first_call_s,
        steady_call_s=first.steady_call_s,
        aot_export_s=first.aot_export_s,
        aot_load_s=aot_load_s,
        cache_hit=warm.cache_hit,
        cache_entries=warm.cache_entries,
        cache_dir=None if cache_dir is None else str(cache_dir),
    )


def check_cache_dir(cache_dir: str | os.PathLike) -> Path:
    """Create a persistent-cache folder if needed and check that entries can be written there
    (`xlafuse.folders.writable_folder`): JAX itself ignores a cache folder it cannot use (every
    compile would be cold, silently).

    Raises:
      XlafuseError: a file, a path through a file, or a folder that cannot be written.
    """
    return writable_folder(cache_dir, "cache folder")


def _variant_dict(variant: Any) -> dict[str, Any]:
    return get_variant(variant).to_dict()


def _run_child(request: dict[str, Any]) -> dict[str, Any]:
    """Run the child on `request`; returns its result dict."""
    with tempfile.TemporaryDirectory(prefix="xlafuse-coldstart-child-") as tmp:
        what = f"cold-start child ({request['phase']}, {request['workload']['name']})"
        command = [sys.executable, "-c", BOOTSTRAP, tmp]
        flags = list(request["variant"].get("process_flags", ()))
        devices = request["workload"].get("devices", 1)
        if (
            devices > 1 and jax.default_backend() == Backend.CPU
        ):  # N host devices, as `run` has them
            flags.append(f"{HOST_DEVICES_FLAG}={devices}")
        return run_child(command, Path(tmp), request, what, process_flags=flags)[0]
