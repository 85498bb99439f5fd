"""One torch cell of an experiment: the twin timed, counted and judged like an XLA cell.

What each figure means here (recorded with its basis, `kernels_basis` and `modeled_bytes_basis`):
- compile_s: the first call's seconds under `torch.compile` (Dynamo trace, AOTAutograd, Inductor
  codegen, the C++ or Triton compile), with an empty Inductor cache folder: a cold compile. With
  `measure.cold_start`, warm_compile_s is the first call after `torch._dynamo.reset()` with that
  folder filled (Inductor's FX graph cache), cache_hit whether the FX graph cache answered.
  Eager cells have no compile (compile_s None).
- kernels per call: on a GPU, the device kernels the torch profiler sees per call (memcpy and
  memset included, as XLA's profile counts them; with CUDA graphs, the launches that copy
  inputs into the graph's buffers too, also counted apart as input_copy_kernels_per_call). On
  the CPU: for Inductor, the kernel calls in its generated wrapper code (`cpp_fused_*` loops plus
  library `extern_kernels.*` / aten fallbacks: each runs once per call); for eager, the non-view aten ops dispatched in one call
  (each is one kernel, or one library call, of torch's CPU backend).
- modeled_bytes: for Inductor, its own estimate (`GraphLowering.count_bytes`: the bytes each
  generated kernel reads and writes, summed over the graphs of a call); for eager, the input and
  output tensor bytes of every non-view aten op of one call.
- timing: `xlafuse.measurement.reference.time_against`, the XLA cells' one rule and settings: paired
  with the XLA reference (timed in alternation) when it is in this process, as an XLA variant is.
- numerics: the first call (a train step from the Flax workload's initial state) against the
  XLA reference's outputs, by `xlafuse.measurement.reference.judge_against` (as an XLA cell).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from xlafuse.kinds import Backend
from xlafuse.measurement import timing
from xlafuse.measurement.profile import DeviceProfile, device_speedup_fields
from xlafuse.measurement.reference import Reference, judge_against, time_against
from xlafuse.torch.program import (
    TorchProgram,
    backend_of,
    build_program,
    host_outputs,
    synchronize,
)

TOP_KERNELS = 5
COMPARISON = "comparison"  # the key of a cell's timing.Comparison among its fields
_METRICS_LOG = "torch._inductor.compile_fx.__inductor_metrics"
# A kernel call in Inductor's generated wrapper (CPU loops, Triton launches, library calls).
_KERNEL_CALL = re.compile(
    r"^\s+(?:\w+ = )?(?:cpp_fused_\w+|triton_\w+\.run|extern_kernels\.\w+|aten\.\w+(?:\.\w+)?"
    r"|torch\.ops\.\w+\.\w+(?:\.\w+)?)\(",
    re.MULTILINE,
)
# The kernel of `torch._foreach_copy_`, with which CUDA-graph replays copy their inputs.
_INPUT_COPY = re.compile(r"multi_tensor_apply_kernel<.*Copy<")

# What `kernels` counts, by device and kind (recorded as kernels_basis).
KERNELS_PROFILED = "device kernels per call, torch profiler"
KERNELS_INDUCTOR_CPU = "kernel calls in Inductor's generated wrapper code, CPU"
KERNELS_EAGER_CPU = "aten ops dispatched per call (non-view), CPU"
BYTES_BASIS = {
    "eager": "input + output tensor bytes of each non-view aten op of one call",
    "inductor": "Inductor's count_bytes: bytes read + written by each generated kernel",
}


@dataclasses.dataclass
class TwinRun:
    """A twin built and called once: what `compare` shows and a cell starts from.

    Attributes:
      program: the callable twin (`xlafuse.torch.program.TorchProgram`).
      outputs: the first call's outputs in the form `xlafuse.measurement.numerics.judge_workload` compares.
      counts: record fields of that call: compile_s (Inductor), kernels, kernels_basis,
        modeled_bytes, modeled_bytes_basis, generated_kernels (what the device can answer).
    """

    program: TorchProgram
    outputs: Any
    counts: dict[str, Any]


def run_twin(workload: Any, variant: Any) -> TwinRun:
    """Build the twin of `workload` under a torch variant and call it once (the compile).

    Call it with Inductor's cache folder set as wanted (`fresh_inductor_cache`): the first call
    compiles, and compile_s is cold only from an empty folder.

    Raises:
      ValueError: the workload has no twin, or one the twin cannot run (see `build_program`).
    """
    kind = "eager" if variant.torch_compile is None else "inductor"
    program = build_program(workload, variant.torch_compile)
    if kind == "inductor":
        _start_inductor(program.device)
    torch._dynamo.reset()
    out, counts = _first_call(program, kind)
    outputs = host_outputs(program, workload, out)
    counts.update(_count_eager(program, kind))
    return TwinRun(program, outputs, counts)


_INDUCTOR_STARTED: set[str] = set()


def _start_inductor(dev: torch.device) -> None:
    """Compile a throwaway function once per process and device type.

    Inductor's first compile in a process also pays one-time costs (imports, the compile worker
    pool, the C++ toolchain probe: 13-50 s on a busy 2-core CPU, against 2-3 s for the next
    cold compile); XLA's backend, too, has started before its first timed compile. Without this,
    whichever torch cell came first would carry them in its compile_s.
    """
    if dev.type in _INDUCTOR_STARTED:
        return
    with fresh_inductor_cache():
        torch._dynamo.reset()
        torch.compile(_probe)(torch.ones(8, device=dev))
    _INDUCTOR_STARTED.add(dev.type)


def _probe(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x * 2.0 + 1.0)


def measure_cell(
    workload: Any,
    variant: Any,
    request: Any,
    reference: Reference,
    *,
    cold_start: bool = False,
) -> dict[str, Any]:
    """Measure a torch variant's cell; the runner's record fields.

    Args:
      workload: the `xlafuse.models.Workload`.
      variant: the resolved `xlafuse.compiler.variants.Variant` (framework "torch").
      request: the runner's `MeasureRequest` (timing settings, train, profile calls).
      reference: the workload's XLA Reference (`xlafuse.measurement.reference`: its compiled
        program, outputs, timing, profile), as the XLA cells have it.
      cold_start: also compile again from Inductor's filled cache (warm_compile_s).

    Returns:
      Record fields: compile and kernel figures, numerics, timing, speedups, device profile.
    """
    with fresh_inductor_cache():
        twin = run_twin(workload, variant)
        program, fields = twin.program, dict(twin.counts)
        diff = judge_against(reference, workload, twin.outputs)
        if diff is not None:
            fields.update(diff.record_fields())
        if reference.error:
            fields["reference_error"] = reference.error
        fields.update(_timed(program, request, reference))
        if request.profile_calls and program.device.type == "cuda":
            fields.update(_profiled(program, request, reference))
        if cold_start and variant.torch_compile is not None:
            fields.update(_warm_compile(workload, variant, fields["compile_s"]))
    return fields


@contextlib.contextmanager
def fresh_inductor_cache() -> Iterator[str]:
    """An empty Inductor (and Triton) cache folder for this cell, removed afterwards."""
    old = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    folder = tempfile.mkdtemp(prefix="xlafuse-inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder
    try:
        yield folder
    finally:
        if old is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = old
        shutil.rmtree(folder, ignore_errors=True)


def _first_call(program: TorchProgram, kind: str) -> tuple[Any, dict[str, Any]]:
    """The first call (the compile, under Inductor) with its outputs and Inductor's counts."""
    if kind == "eager":
        out = program.call(*program.args)
        synchronize(program.device)
        return out, {}
    from torch._inductor import metrics
    from torch._inductor.utils import run_and_get_code

    metrics.reset()
    start = time.perf_counter()
    with _inductor_metrics():
        out, codes = run_and_get_code(program.call, *program.args)
        synchronize(program.device)
    fields: dict[str, Any] = {"compile_s": time.perf_counter() - start}
    fields["modeled_bytes"] = int(metrics.num_bytes_accessed) or None
    fields["modeled_bytes_basis"] = BYTES_BASIS["inductor"] if fields["modeled_bytes"] else None
    fields["generated_kernels"] = int(metrics.generated_kernel_count)
    if backend_of(program.device) == Backend.CPU:
        fields["kernels"] = wrapper_kernel_calls(codes)
        fields["kernels_basis"] = KERNELS_INDUCTOR_CPU
    return out, fields


def wrapper_kernel_calls(codes: list[str]) -> int:
    """Kernel calls in Inductor's generated wrapper modules (one per kernel launch per call)."""
    total = 0
    for code in codes:
        body = code[code.find("def call(") :] if "def call(" in code else code
        total += len(_KERNEL_CALL.findall(body))
    return total


@contextlib.contextmanager
def _inductor_metrics() -> Iterator[None]:
    """Let Inductor count each graph's bytes (it does so only when its metrics log is on)."""
    log = logging.getLogger(_METRICS_LOG)
    saved = (log.level, log.propagate)
    handler = logging.NullHandler()
    log.setLevel(logging.INFO)
    log.propagate = False
    log.addHandler(handler)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(saved[0])
        log.propagate = saved[1]


class _OpCounter(TorchDispatchMode):
    """Counts the non-view aten ops dispatched and the bytes of their tensor operands."""

    def __init__(self):
        super().__init__()
        self.ops = 0
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func.is_view and func._schema.name not in ("aten::detach", "aten::alias"):
            self.ops += 1
            self.bytes += _tensor_bytes(args) + _tensor_bytes(kwargs) + _tensor_bytes(out)
        return out


def _tensor_bytes(tree: Any) -> int:
    leaves = torch.utils._pytree.tree_leaves(tree)
    return sum(t.numel() * t.element_size() for t in leaves if isinstance(t, torch.Tensor))


def _count_eager(program: TorchProgram, kind: str) -> dict[str, Any]:
    """Ops and bytes of one eager call (a kernel count on the CPU; bytes on every device)."""
    if kind != "eager":
        return {}
    counter = _OpCounter()
    with counter:
        program.call(*program.args)
    synchronize(program.device)
    fields: dict[str, Any] = {
        "modeled_bytes": counter.bytes,
        "modeled_bytes_basis": BYTES_BASIS["eager"],
    }
    if backend_of(program.device) == Backend.CPU:
        fields["kernels"] = counter.ops
        fields["kernels_basis"] = KERNELS_EAGER_CPU
    return fields


def _advance(program: TorchProgram):
    return timing.thread_state if program.train else timing.same_args


def _timed(program: TorchProgram, request, reference: Reference) -> dict[str, Any]:
    """Timing and speedups, by the XLA cells' one rule (`xlafuse.measurement.reference.time_against`):
    in alternation with the XLA reference when it is compiled in this process (paired
    speedups), otherwise alone, against the reference cell's samples. The Comparison is
    returned under COMPARISON: the runner makes it the record's speedup part, as for an XLA
    cell."""
    lead = timing.leading_figure(program.train, backend_of(program.device))
    settings, advance = request.settings, _advance(program)
    measured, comparison = time_against(
        reference, program.call, program.args, settings, advance=advance, lead=lead
    )
    return {**measured.to_dict(), COMPARISON: comparison}


def _profiled_events(program: TorchProgram, calls: int) -> list[Any]:
    """The CUDA events of `calls` calls under the torch profiler, in start order."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    args, advance = program.args, _advance(program)
    synchronize(program.device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            out = program.call(*args)
            args = advance(args, out)
        synchronize(program.device)
    events = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    events.sort(key=lambda e: e.time_range.start)
    return events


def _device_profile(events: list[Any], calls: int) -> DeviceProfile:
    durations = [e.time_range.elapsed_us() * 1e-6 for e in events]
    per_call: tuple[float, ...] = ()
    if events and len(events) % calls == 0:
        n = len(events) // calls
        per_call = tuple(sum(durations[i * n : (i + 1) * n]) for i in range(calls))
    totals: dict[str, float] = {}
    for e, d in zip(events, durations, strict=True):
        totals[e.name] = totals.get(e.name, 0.0) + d / calls
    top = sorted(totals.items(), key=lambda kv: -kv[1])[:TOP_KERNELS]
    return DeviceProfile(
        device_time_s=sum(durations) / calls,
        device_kernels_per_call=len(events) / calls,
        calls=calls,
        top_kernels=tuple(top),
        per_call_s=per_call,
    )


def input_copy_fields(names_and_seconds: list[tuple[str, float]], calls: int) -> dict[str, Any]:
    """How many of a call's device kernels copy inputs into CUDA-graph buffers, and their time.

    Inductor's CUDA graphs (mode "reduce-overhead", cudagraph trees) copy every input that is not
    a static address (parameters and buffers are; plain tensor arguments are not) into the graph's
    own buffers before each replay, with `torch._foreach_copy_`: one or more launches of
    `multi_tensor_apply_kernel<..., Copy<...>>`. They are real work of such a call; the report
    shows them apart from the program's own kernels.
    """
    copies = [seconds for name, seconds in names_and_seconds if _INPUT_COPY.search(name)]
    return {
        "input_copy_kernels_per_call": len(copies) / calls,
        "input_copy_time_s": sum(copies) / calls,
    }


def _profiled(program: TorchProgram, request, reference: Reference) -> dict[str, Any]:
    events = _profiled_events(program, request.profile_calls)
    profile = _device_profile(events, request.profile_calls)
    fields: dict[str, Any] = {
        "device_time_s": profile.device_time_s,
        "device_kernels_per_call": profile.device_kernels_per_call,
        "top_kernels": [list(k) for k in profile.top_kernels],
        "kernels": round(profile.device_kernels_per_call),
        "kernels_basis": KERNELS_PROFILED,
    }
    timed = [(e.name, e.time_range.elapsed_us() * 1e-6) for e in events]
    fields.update(input_copy_fields(timed, request.profile_calls))
    fields.update(device_speedup_fields(profile, reference.profile))
    return fields


def _warm_compile(workload, variant, cold_s: float) -> dict[str, Any]:
    """The compile again, after `torch._dynamo.reset()`, from the cache folder the cold
    compile filled (still TORCHINDUCTOR_CACHE_DIR)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    hits = counters["inductor"]["fxgraph_cache_hit"]
    program = build_program(workload, variant.torch_compile)
    start = time.perf_counter()
    program.call(*program.args)
    synchronize(program.device)
    warm = time.perf_counter() - start
    hit = counters["inductor"]["fxgraph_cache_hit"] > hits
    return {
        "cold_compile_s": cold_s,
        "warm_compile_s": warm,
        "cache_hit": hit,
        "cache_speedup": cold_s / warm if warm else None,
    }
