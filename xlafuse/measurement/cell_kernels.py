"""What the runner records of a traced cell: its kept trace, its kernel times, its kernel diff.

Per profiled cell the runner gets a trace folder (`new_trace_dir`: `traces/<cell>/` of the
results folder, or a temporary one when `measure.keep_traces` is false) and, after the cell is
traced, asks `kernel_fields` for the record's `trace_path`, `kernel_times` (its `trace` part, as
flat keys; every kernel joined to its HLO kernel, `xlafuse.measurement.kernels`; totals, the top
kernels, and every kernel in its `kernel_table` with the kernels whose outputs it reads,
`xlafuse.hlo.dataflow`) and, for a
variant other than the reference, `kernel_diff` (the reference vs this variant, kernel group by
kernel group with measured times, `xlafuse.measurement.kernel_diff`). The diff is computed here,
while both programs' HLO and full kernel times are in memory, so the report needs neither the
HLO nor a recompile: a resumed run whose reference cell was not traced again records no diff.

A GPU cell given its twin (`xlafuse.measurement.predicted`: the program compiled again with XLA's
cost-model stats and priority-fusion dump) also gets `cost_model`: each kernel's predicted time
against its measured one (`xlafuse.measurement.costmodel`) and, against a reference that has a
dump, XLA's fusion decisions scored by the measured groups (`xlafuse.measurement.decisions`).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from xlafuse.compiler.jit import unoptimized_hlo
from xlafuse.hlo.dataflow import producer_names
from xlafuse.hlo.diff import diff_modules
from xlafuse.hlo.parse import parse_hlo
from xlafuse.measurement.costmodel import cost_model_record, join_costs
from xlafuse.measurement.decisions import decisions_of_diff
from xlafuse.measurement.kernel_diff import kernel_diff_record, timed_groups
from xlafuse.measurement.kernels import GPU_BASIS, KernelTimes, find_trace, join_trace, trace_events
from xlafuse.measurement.predicted import Twin

TRACES_DIR = "traces"


@dataclasses.dataclass(frozen=True)
class Baseline:
    """The reference cell's traced kernels, for the other cells of its workload.

    Attributes:
      times: its KernelTimes.
      hlo_text: its optimized HLO.
      twin: its twin compile with XLA's estimates and dump (GPU cells; else None).
    """

    times: KernelTimes
    hlo_text: str
    twin: Twin | None = None


def trace_folder_name(cell: str) -> str:
    """A cell id as one folder name: `chain/tiny/forward/auto/{"ops":4}/no-fusion/gpu` ->
    `chain_tiny_forward_auto_ops_4_no-fusion_gpu`."""
    return re.sub(r"[^A-Za-z0-9.=+-]+", "_", cell).strip("_")


def new_trace_dir(results_dir: Path, cell: str, keep: bool, *, process: int | None = None) -> Path:
    """An empty folder for a cell's trace: `results_dir/traces/<cell>/` when kept (an earlier
    trace of the cell is removed), else a temporary folder (the caller removes it). Under
    `jax.distributed` each process keeps its own: `traces/<cell>/process-<process>/`."""
    if not keep:
        return Path(tempfile.mkdtemp(prefix="xlafuse-trace-"))
    folder = Path(results_dir) / TRACES_DIR / trace_folder_name(cell)
    if process is not None:
        folder = folder / f"process-{process}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def kernel_fields(
    trace_dir: Path,
    compiled: Any,
    workload: Any,
    *,
    results_dir: Path | None,
    calls: int,
    labels: tuple[str, str],
    baseline: Baseline | None = None,
    ceilings_bytes_flops: tuple[float | None, float | None] = (None, None),
    twin: Twin | dict[str, str] | None = None,
) -> tuple[dict[str, Any], Baseline | None]:
    """The record fields of a traced cell (empty when the profiler wrote no trace), and its
    Baseline (what the other cells' kernel diffs need, when it is the reference's).

    Args:
      trace_dir: the cell's trace folder.
      compiled: the cell's CompiledVariant (`report`, `hlo_text`).
      workload: the Workload (lowered for the unoptimized HLO of the diff, when its compiled
        program does not keep its lowering).
      results_dir: the results folder when the trace is kept (`trace_path` is relative to it);
        None when it is not.
      calls: calls traced.
      labels: (reference variant, this cell's variant).
      baseline: the reference's traced kernels (None: the reference was not traced in this run,
        or this cell is the reference).
      ceilings_bytes_flops: the measured copy (bytes/s) and matmul (FLOP/s) ceilings, used for
        GPU kernels only; (None, None) when not measured.
      twin: the cell's twin compile (`xlafuse.measurement.predicted.compile_twin`), or
        {"error": line} when it failed (recorded as the cost model's); None: no cost model.
    """
    path = find_trace(trace_dir)
    if path is None:
        return {}, None
    fields: dict[str, Any] = {}
    if results_dir is not None:
        fields["trace_path"] = Path(trace_dir).relative_to(results_dir).as_posix()
    basis, events = trace_events(path)
    if not events:
        return fields, None
    times = _joined(compiled.report, events, calls, basis, ceilings_bytes_flops)
    producers = producer_names(compiled.hlo_text, compiled.report.kernel_details)
    fields["kernel_times"] = times.summary(producers=producers)
    decisions = None
    if labels[0] != labels[1] and baseline is not None:
        fields["kernel_diff"], decisions = _diff(baseline, compiled, workload, times, labels)
    fields.update(_cost_model(twin, times, decisions))
    own = twin if isinstance(twin, Twin) else None
    return fields, Baseline(times, compiled.hlo_text, own)


def _joined(
    report: Any,
    events: list,
    calls: int,
    basis: str,
    ceilings_bytes_flops: tuple[float | None, float | None],
) -> KernelTimes:
    """The traced events joined to the report's kernels, at the ceilings on a GPU's basis only."""
    copy, matmul = ceilings_bytes_flops if basis == GPU_BASIS else (None, None)
    return join_trace(
        report,
        events,
        calls,
        basis=basis,
        copy_ceiling_bytes_per_s=copy,
        matmul_ceiling_flops_per_s=matmul,
    )


def _cost_model(twin, times: KernelTimes, decisions) -> dict[str, Any]:
    """{"cost_model": each kernel's prediction against its measured time (a failed twin: its
    error), with the reference's decisions scored}; {} with neither."""
    cost = twin
    if isinstance(twin, Twin):
        join = join_costs(twin.report.kernel_details, times, runs=twin.runs)
        record = cost_model_record(join, times, estimates=twin.estimates)
        cost = {**record, "same_kernels": twin.same_kernels}
    if decisions is not None:
        cost = {**(cost or {}), "decisions": decisions}
    return {"cost_model": cost} if cost is not None else {}


def _diff(baseline: Baseline, compiled, workload, times: KernelTimes, labels):
    """(The reference vs this cell with measured times, the reference's fusion decisions
    scored by them or None); an error here never fails the cell."""
    try:
        unoptimized = compiled.unoptimized_hlo() or unoptimized_hlo(workload)
        texts = (unoptimized, baseline.hlo_text, compiled.hlo_text)
        ref, a, b = (
            parse_hlo(t, source=name)
            for t, name in zip(texts, ("unoptimized", *labels), strict=True)
        )
        diff = diff_modules(a, b, labels=labels, reference=ref, texts=texts)
        timed = timed_groups(diff, baseline.times, times)
        record = kernel_diff_record(diff, baseline.times, times, timed=timed)
    except Exception as err:
        return {"error": _error(err)}, None
    dump = baseline.twin.dump if baseline.twin is not None else None
    if dump is None:
        return record, None
    try:
        return record, decisions_of_diff(dump, ref, unoptimized, diff, timed)
    except Exception as err:
        return record, {"error": _error(err)}


def _error(err: BaseException) -> str:
    return f"{type(err).__name__}: {str(err).strip()[:300]}"
