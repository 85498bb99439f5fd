"""Each measured source as record fields: the one place they are flattened into a `CellResult`.

A FusionReport, a CollectiveReport, XLA's cost and memory analyses, a device profile's
communication figures, a cold-start result and the rates derived from the measured times each
become a dict of the record's keys here; the runner only merges them.
"""

from __future__ import annotations

from typing import Any

from xlafuse.measure.calibrate import Ceilings
from xlafuse.measure.coldstart import measure_cold_start

HOST_BOUND = 1.15  # pipelined time above this x device time: the host sets the pace


_COLD_START_KEYS = (
    "import_s", "cold_compile_s", "warm_compile_s", "first_call_s", "steady_call_s",
    "aot_export_s", "aot_load_s", "cache_hit", "cache_entries", "cache_speedup",
)  # fmt: skip


def cold_start_fields(workload, variant) -> dict[str, Any]:
    """Cold/warm-cache compile and AOT load of this cell, measured in fresh processes."""
    measured = measure_cold_start(workload, variant.resolve()).to_dict()
    return {key: measured[key] for key in _COLD_START_KEYS}


def report_fields(report) -> dict[str, Any]:
    return {
        "kernels": report.kernels,
        "fusions": report.fusions,
        "real_fusions": report.real_fusions,
        "custom_calls": report.custom_calls,
        "custom_call_targets": dict(report.custom_call_targets),
        "kinds": dict(report.kinds),
        "modeled_bytes": report.modeled_bytes,
    }


def collective_fields(report) -> dict[str, Any]:
    return {
        "collectives": report.count,
        "logical_collectives": report.logical,
        "collective_async_pairs": report.async_pairs,
        "collective_operand_bytes": report.operand_bytes,
        "collective_ring_bytes": report.ring_bytes,
        "collective_counts": report.counts(),
    }


def comm_fields(comm: dict[str, Any] | None) -> dict[str, Any]:
    if not comm:
        return {}
    return {
        "comm_time_s": comm["comm_time_s"],
        "comm_overlap_s": comm["overlap_s"],
        "comm_overlap_fraction": comm["overlap_fraction"],
        "comm_kernels_per_call": comm["comm_kernels_per_call"],
    }


def analysis_fields(compiled) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    cost = compiled.cost_analysis() or {}
    fields["cost_flops"] = cost.get("flops")
    fields["cost_bytes_accessed"] = cost.get("bytes accessed")
    memory = compiled.memory_analysis()
    if memory is not None:
        parts = ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes")
        total = sum(int(getattr(memory, p, 0) or 0) for p in parts)
        fields["peak_memory_bytes"] = total - int(getattr(memory, "alias_size_in_bytes", 0) or 0)
    return fields


def derived_rates(
    backend: str, ceilings: Ceilings | None, workload, fields: dict[str, Any]
) -> dict[str, Any]:
    """Rates from the measured times: items/s, bandwidth, % of the copy ceiling, TFLOP/s.

    A cell is `host_bound` when its pipelined time per call exceeds HOST_BOUND x its device
    time: the host (Python, dispatch), not the GPU, sets its pace, so its wall-clock speedups
    measure the host.
    """
    wall = fields["time_median_s"]
    basis, seconds = rate_basis(backend, fields)
    derived: dict[str, Any] = {
        "items_per_s": workload.items_per_call / wall if wall else None,
        "rate_basis": basis,
    }
    if fields.get("modeled_bytes") and seconds:
        derived["achieved_bytes_per_s"] = fields["modeled_bytes"] / seconds
        if ceilings is not None:
            ceiling = ceilings.copy_bytes_per_s
            derived["pct_of_copy_ceiling"] = 100.0 * derived["achieved_bytes_per_s"] / ceiling
    if workload.flops and seconds:
        derived["tflops"] = workload.flops / seconds / 1e12
    device, pipelined = fields.get("device_time_s"), fields.get("pipelined_s_per_call")
    if device and pipelined:
        derived["host_bound"] = pipelined > HOST_BOUND * device
    return derived


def rate_basis(backend: str, fields: dict[str, Any]) -> tuple[str, float | None]:
    """The time that bandwidth and FLOP/s divide by, and its name.

    Device time (profiled kernels) excludes dispatch; without it, on a GPU the pipelined time per
    call hides most of the launch and sync latency that a synchronized call adds to a short
    kernel. On a CPU the synchronized wall-clock median is used.
    """
    if fields.get("device_time_s"):
        return "device_time_s", fields["device_time_s"]
    if backend == "gpu" and fields.get("pipelined_s_per_call"):
        return "pipelined_s_per_call", fields["pipelined_s_per_call"]
    return "time_median_s", fields.get("time_median_s")
