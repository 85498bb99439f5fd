"""Each measured source as a part of the record: the one place a source becomes a `CellResult`
part (`xlafuse.results.parts`).

A built workload, a compile and XLA's analyses of it, a FusionReport, a Timing, a speedup, a
DeviceProfile (and its communication figures), a CollectiveReport, a NumericDiff, a cold-start
result and the run's ceilings each become one part here, mostly by same-named attributes
(`Part.of`); the rates derived from the measured times are computed from the record's parts.
The runner only puts the parts together.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from xlafuse.hlo.dataflow import producer_names
from xlafuse.kinds import Backend
from xlafuse.measurement import timing as timing_lib
from xlafuse.measurement.calibrate import Ceilings
from xlafuse.measurement.coldstart import measure_cold_start
from xlafuse.measurement.collectives import CommProfile
from xlafuse.measurement.kernels import hlo_kernel_table
from xlafuse.measurement.numerics import NumericDiff
from xlafuse.measurement.profile import DeviceProfile, device_speedup
from xlafuse.measurement.rules import HOST_BOUND, TRACE_PERTURBED
from xlafuse.measurement.timing import Comparison, Timing
from xlafuse.results import parts
from xlafuse.results.records import CellResult


def model_part(workload: Any) -> parts.ModelRecord:
    """num_params, items_per_call, items_unit, flops of a built workload (None: not built)."""
    return parts.ModelRecord.of(workload)


def ceilings_part(ceilings: Ceilings | None) -> parts.CeilingsRecord:
    return parts.CeilingsRecord.of(ceilings)


def compile_part(compiled: Any) -> parts.CompileRecord:
    """Lower and compile seconds, XLA's cost analysis and its memory analysis (argument +
    output + temp - alias bytes)."""
    cost = compiled.cost_analysis() or {}
    peak = None
    memory = compiled.memory_analysis()
    if memory is not None:
        sizes = ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes")
        total = sum(int(getattr(memory, s, 0) or 0) for s in sizes)
        peak = total - int(getattr(memory, "alias_size_in_bytes", 0) or 0)
    return parts.CompileRecord.of(
        compiled,
        compile_s=None if compiled.compile_cached else compiled.compile_s,  # a cache read
        cost_flops=cost.get("flops"),
        cost_bytes_accessed=cost.get("bytes accessed"),
        peak_memory_bytes=peak,
    )


def fusion_part(
    report: Any, *, missed_fusions: Any = None, hlo_text: str | None = None
) -> parts.FusionRecord:
    """The FusionReport's counts and modeled bytes (and the default program's missed fusions);
    given the program's `hlo_text` (a cell whose trace keeps no kernel table), also every
    kernel from the HLO alone (`kernel_table`: `xlafuse.measurement.kernels.hlo_kernel_table`)."""
    table = None
    if hlo_text is not None:
        table = hlo_kernel_table(report, producer_names(hlo_text, report.kernel_details))
    return parts.FusionRecord.of(report, missed_fusions=missed_fusions, kernel_table=table)


def collectives_part(report: Any) -> parts.CollectivesRecord:
    """A CollectiveReport's figures per device per step."""
    return parts.CollectivesRecord.of(report, counts=report.counts())


def numerics_part(diff: NumericDiff | None, reference_error: str | None) -> parts.NumericsRecord:
    """A NumericDiff's figures, and why the reference could not be compiled again (then there
    is no diff)."""
    if diff is None:
        return parts.NumericsRecord(reference_error=reference_error)
    return parts.NumericsRecord(
        max_abs_diff=diff.max_abs_diff,
        max_rel_diff=diff.max_rel_diff,
        within_tolerance=diff.within_tolerance,
        worst_part=diff.worst_part,
        reference_error=reference_error,
        precision=diff.precision,
    )


def timing_part(measured: Timing) -> parts.TimingRecord:
    """A Timing's figures (its samples stay out of the record)."""
    return parts.TimingRecord(
        median_s=measured.time_median_s,
        p10_s=measured.time_p10_s,
        p90_s=measured.time_p90_s,
        min_s=measured.time_min_s,
        iters=measured.iters,
        pipelined_s_per_call=measured.pipelined_s_per_call,
        pipelined_iters=measured.pipelined_iters,
        warmup_iters=measured.warmup_iters,
        host_s_per_call=measured.host_s_per_call,
    )


def processes_part(
    measured: Timing, lead: str, *, device_times: list[float | None] | None = None
) -> parts.ProcessesRecord:
    """Each process's own figures (`Timing.per_process`, under `jax.distributed`): the one the
    cell leads with per process, the slowest and fastest and their spread, host seconds per
    call, device seconds per call when profiled; an empty part on one process."""
    rows = measured.per_process
    if not rows:
        return parts.ProcessesRecord()
    column = 1 if lead == timing_lib.PIPELINED else 0
    times = [row[column] for row in rows]
    slowest, fastest = max(times), min(times)
    return parts.ProcessesRecord(
        figure=lead,
        times_s=times,
        slowest_s=slowest,
        fastest_s=fastest,
        spread=slowest / fastest - 1.0 if fastest > 0 else None,
        host_s_per_call=[row[2] for row in rows],
        device_time_s=device_times,
    )


def speedup_part(comparison: Comparison | None, lead: str) -> parts.SpeedupRecord:
    """Both speedups over the reference, the one on `lead` (`timing.leading_figure`) repeated as
    the record's speedup; without a comparison, only the figure the cell leads with."""
    if comparison is None:
        return parts.SpeedupRecord(lead=lead)
    lead = comparison.lead(lead)
    headline, pipelined = comparison.speedup(lead), comparison.pipelined
    return parts.SpeedupRecord(
        vs_reference=headline.speedup,
        ci=headline.ci,
        verdict=headline.verdict,
        basis=comparison.basis(lead),
        lead=lead,
        reference_median_s=comparison.reference.time_median_s,
        reference_pipelined_s=comparison.reference.pipelined_s_per_call,
        latency=comparison.latency.speedup,
        latency_ci=comparison.latency.ci,
        latency_verdict=comparison.latency.verdict,
        pipelined=pipelined.speedup if pipelined else None,
        pipelined_ci=pipelined.ci if pipelined else None,
        pipelined_verdict=pipelined.verdict if pipelined else None,
    )


def reference_speedup_part(lead: str) -> parts.SpeedupRecord:
    """The reference's own speedup (1.0) and the figure its workload's cells lead with."""
    return parts.SpeedupRecord(vs_reference=1.0, lead=lead)


def device_part(profile: DeviceProfile, reference: DeviceProfile | None) -> parts.DeviceRecord:
    """Kernel time per call of a profiled cell, and its speedup over the reference's profile
    (None for the reference itself: pass `reference=None`)."""
    speedup = device_speedup(profile, reference)
    return parts.DeviceRecord(
        time_s=profile.device_time_s,
        kernels_per_call=profile.device_kernels_per_call,
        speedup=speedup.speedup if speedup else None,
        speedup_ci=speedup.ci if speedup else None,
        speedup_verdict=speedup.verdict if speedup else None,
        top_kernels=profile.top_kernels,
    )


def comm_part(data: dict[str, Any] | None) -> parts.CommRecord:
    """A device profile's communication figures (`DeviceProfile.comm`, `CommProfile`'s JSON
    form); empty without."""
    if not data:
        return parts.CommRecord()
    comm = CommProfile.from_dict(data)
    return parts.CommRecord(
        time_s=comm.comm_time_s,
        overlap_s=comm.overlap_s,
        overlap_fraction=comm.overlap_fraction,
        kernels_per_call=comm.comm_kernels_per_call,
    )


def cold_start_part(workload: Any, variant: Any) -> parts.ColdStartRecord:
    """Cold/warm-cache compile and AOT load of this cell, measured in fresh processes."""
    return parts.ColdStartRecord.of(measure_cold_start(workload, variant=variant.resolve()))


def with_rates(record: CellResult, backend: str) -> CellResult:
    """The record with its `rates` part: items/s, bandwidth, % of the copy ceiling, TFLOP/s.

    A cell is `host_bound` when its pipelined time per call exceeds HOST_BOUND x its device
    time: the host (Python, dispatch), not the GPU, sets its pace, so its wall-clock speedups
    measure the host. It is `cache_resident` when its memory (XLA's memory analysis: arguments,
    outputs, temporaries) fits in the last-level cache: then it has no % of the copy ceiling,
    which is main memory's. Bandwidth and TFLOP/s divide the modeled bytes and FLOPs of one
    call (a loop body counted by its trip count: `FusionRecord.bytes_per_call`; FLOPs the
    workload's own count, else the HLO's per call); where a trip count is unknown there are
    none, never a per-call rate from one iteration's bytes.
    """
    wall, model = record.timing.median_s, record.model
    device, pipelined = record.device.time_s, record.timing.pipelined_s_per_call
    perturbed = trace_perturbed(device, pipelined)
    basis, seconds = rate_basis(backend, record, perturbed=bool(perturbed))
    rates: dict[str, Any] = {
        "items_per_s": model.items_per_call / wall if wall else None,
        "basis": basis,
    }
    modeled, cache = record.fusion.bytes_per_call, record.ceilings.cache_bytes
    memory = record.compile.peak_memory_bytes
    if cache and memory is not None:
        rates["cache_resident"] = memory <= cache
    if modeled and seconds:
        rates["achieved_bytes_per_s"] = modeled / seconds
        ceiling = record.ceilings.copy_bytes_per_s
        if ceiling is not None and not rates.get("cache_resident"):
            rates["pct_of_copy_ceiling"] = 100.0 * rates["achieved_bytes_per_s"] / ceiling
    flops = model.flops or record.fusion.flops_per_call
    if flops and seconds:
        rates["tflops"] = flops / seconds / 1e12
    if device and pipelined:
        rates["host_bound"] = pipelined > HOST_BOUND * device
        rates["trace_perturbed"] = perturbed
    return dataclasses.replace(record, rates=parts.RatesRecord(**rates))


def trace_perturbed(device_s: float | None, pipelined_s: float | None) -> bool | None:
    """Whether the traced kernel time per call exceeds TRACE_PERTURBED x the untraced pipelined
    time per call: kernels that cannot have run back to back in the untraced time were another
    program's (the profiler's). None without both figures."""
    if not device_s or not pipelined_s:
        return None
    return device_s > TRACE_PERTURBED * pipelined_s


def rate_basis(
    backend: str, record: CellResult, *, perturbed: bool = False
) -> tuple[str, float | None]:
    """The time that bandwidth and FLOP/s divide by, and its flat key.

    Device time (profiled kernels) excludes dispatch; without it, or where tracing perturbed the
    program (`trace_perturbed`), on a GPU the pipelined time per call hides most of the launch
    and sync latency that a synchronized call adds to a short kernel. On a CPU the synchronized
    wall-clock median is used.
    """
    if record.device.time_s and not perturbed:
        return "device_time_s", record.device.time_s
    if backend == Backend.GPU and record.timing.pipelined_s_per_call:
        return "pipelined_s_per_call", record.timing.pipelined_s_per_call
    return "time_median_s", record.timing.median_s
