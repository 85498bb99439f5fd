"""The child processes of `xlafuse validate` (internal).

Run as `python -m xlafuse.measurement.validate_child FOLDER`: reads FOLDER/request.json, writes
FOLDER/result.json and FOLDER/optimized.hlo.txt. Phases:

- "warm": stop early when JAX has no GPU (`backend` says which it has); else compile with the
  persistent cache (filling it), call once, trace `profile_calls` calls with `jax.profiler` for
  the device time per kernel name, read the device's L2 size;
- "ncu" (run under ncu with `--profile-from-start off`): compile (a cache hit), call twice
  unprofiled, then profile ONE call between `cuProfilerStart` and `cuProfilerStop`.

Train steps thread their state from call to call (`xlafuse.measurement.timing.thread_state`), so the
children stay right when the compile path donates it.

The variant's process flags are already in this process's XLA_FLAGS (the parent sets them), so the
compile happens here, not in a grandchild.
"""

from __future__ import annotations

import ctypes
import dataclasses
import sys
import tempfile
from pathlib import Path
from typing import Any

import jax
from jax.profiler import ProfileData

from xlafuse.compiler.cache import CACHE_HITS, cache_events, cache_settings
from xlafuse.compiler.jit import compile_workload
from xlafuse.compiler.protocol import read_request, write_result
from xlafuse.compiler.variants import Variant
from xlafuse.kinds import Backend, Mode
from xlafuse.measurement.coldstart import build_workload
from xlafuse.measurement.profile import gpu_kernel_events
from xlafuse.measurement.timing import same_args, thread_state, warm_up

_CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38


def _compile(workload, variant):
    """The one line that compiles: the runner's path (`compile_workload`, train state donated)."""
    return compile_workload(workload, variant)


def _build(request: dict[str, Any]):
    for key, value in cache_settings(request["cache_dir"]).items():
        jax.config.update(key, value)
    variant = dataclasses.replace(Variant.from_dict(request["variant"]), process_flags=())
    return build_workload(request["workload"]), variant


def _phase_warm(request: dict[str, Any], folder: Path) -> dict[str, Any]:
    if jax.default_backend() != Backend.GPU:
        return {"backend": jax.default_backend()}
    workload, variant = _build(request)
    compiled = _compile(workload, variant)
    advance = _advance(workload)
    args = warm_up(compiled, workload.args, 1, advance=advance)
    (folder / "optimized.hlo.txt").write_text(compiled.hlo_text)
    return {
        "backend": "gpu",
        "profiler_kernel_s": _profile(compiled, args, advance, request["profile_calls"]),
        "l2_bytes": _l2_bytes(),
    }


def _phase_ncu(request: dict[str, Any], folder: Path) -> dict[str, Any]:
    workload, variant = _build(request)
    with cache_events() as events:
        compiled = _compile(workload, variant)
    hits = events[CACHE_HITS]
    args = warm_up(compiled, workload.args, 2, advance=_advance(workload))
    driver = _driver()
    _check(driver.cuProfilerStart(), "cuProfilerStart")
    jax.block_until_ready(compiled(*args))
    _check(driver.cuProfilerStop(), "cuProfilerStop")
    (folder / "optimized.hlo.txt").write_text(compiled.hlo_text)
    return {"backend": jax.default_backend(), "cache_hits": hits}


def _advance(workload):
    """How one call's output makes the next call's arguments (a train step threads its state,
    so a donated buffer is never passed twice)."""
    return thread_state if workload.mode == Mode.TRAIN else same_args


def _profile(compiled, args, advance, calls: int) -> dict[str, float] | None:
    """Device seconds per call of each kernel name over `calls` traced calls; None if none."""
    if calls <= 0:
        return None
    with tempfile.TemporaryDirectory(prefix="xlafuse-validate-trace-") as tmp:
        with jax.profiler.trace(tmp):
            out = None
            for _ in range(calls):
                out = compiled(*args)
                args = advance(args, out)
            jax.block_until_ready(out)
        files = sorted(Path(tmp).rglob("*.xplane.pb"), key=lambda p: p.stat().st_mtime)
        if not files:
            return None
        per_name: dict[str, float] = {}
        for name, _, ns in gpu_kernel_events(ProfileData.from_file(str(files[-1])).planes):
            per_name[name] = per_name.get(name, 0.0) + ns * 1e-9 / calls
    return per_name or None


def _driver():
    """The CUDA driver library, with the primary context current on this thread.

    cuProfilerStart acts on the current context; JAX makes it current on its own threads only.
    """
    driver = ctypes.CDLL("libcuda.so.1")
    _check(driver.cuInit(0), "cuInit")
    device = ctypes.c_int(0)
    _check(driver.cuDeviceGet(ctypes.byref(device), _ordinal()), "cuDeviceGet")
    context = ctypes.c_void_p()
    _check(driver.cuCtxGetCurrent(ctypes.byref(context)), "cuCtxGetCurrent")
    if not context.value:
        _check(driver.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "PrimaryCtxRetain")
        _check(driver.cuCtxSetCurrent(context), "cuCtxSetCurrent")
    return driver


def _ordinal() -> int:
    return int(getattr(jax.devices()[0], "local_hardware_id", None) or 0)


def _l2_bytes() -> int | None:
    """The device's L2 size in bytes, from the driver; None if it cannot be asked."""
    try:
        driver = _driver()
        device, value = ctypes.c_int(0), ctypes.c_int(0)
        _check(driver.cuDeviceGet(ctypes.byref(device), _ordinal()), "cuDeviceGet")
        attribute = _CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE
        _check(driver.cuDeviceGetAttribute(ctypes.byref(value), attribute, device), "attribute")
    except (OSError, RuntimeError):
        return None
    return value.value or None


def _check(status: int, call: str) -> None:
    if status != 0:
        raise RuntimeError(f"CUDA driver call {call} failed with CUresult {status}")


def main(folder: str) -> None:
    """Serve one request from `folder` (request.json -> result.json)."""
    path = Path(folder)
    request = read_request(path)
    phase = {"warm": _phase_warm, "ncu": _phase_ncu}[request["phase"]]
    result = phase(request, path)
    write_result(path, result)


if __name__ == "__main__":
    main(sys.argv[1])
