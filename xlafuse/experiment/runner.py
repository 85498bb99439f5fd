"""Run an experiment config cell by cell (workload x variant) and append a record per cell.

Per workload: build its cell once (`Cell.build`), then its reference (`_reference`: the frozen
`xlafuse.measurement.reference.Reference` that every other cell of the workload is judged and
timed against, made from the reference cell measured now or compiled again on resume), then
each other variant against it. A cell is measured in named steps that return values
(`_measure`): compile under the variant, read the fusion report and XLA's cost and memory
analyses, run once for the outputs, judge them against the reference's (`judge_against`), time
the calls against the reference (`_time` -> `time_against`, the rule the torch twins use too),
trace them if asked (the trace kept in `traces/<cell>/`, every kernel's time joined to its HLO
kernel, and each other variant's kernel groups timed against the reference's:
`_kernel_fields`), derive rates, and append the record at once. Each source becomes one part of
the record (`xlafuse.experiment.fields`); a torch cell's flat keys are unflattened into the same
parts (`xlafuse.results.records.unflatten`).

A cell that raises (an out-of-memory, a compile error, XLA rejecting an option) becomes a record
with status `Status.ERROR` and the sweep goes on. Re-running a config skips the cells already
recorded as `Status.OK` (`fresh=True` moves the old results aside); a Ctrl-C keeps every
finished cell.

Under `jax.distributed` (several processes, one SPMD program) every process measures every
cell, in step, and process 0 alone writes: it takes the folder, plans the cells still to do
and sends the plan to the others (`xlafuse.distributed.messages`), which follow it (`_follow`)
and keep their records in memory. A record then carries the layout (`processes`,
`process_devices`, also in its cell id and settings: a folder of another layout is refused)
and each process's own figures (`per_process`).
"""

from __future__ import annotations

import dataclasses
import gc
import shutil
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from xlafuse.compiler.jit import MeasureRequest, compile_workload, unoptimized_hlo
from xlafuse.distributed import lockstep, runtime, watch
from xlafuse.errors import XlafuseError, error_line
from xlafuse.experiment import environment as run_environment
from xlafuse.experiment import fields as fields_lib
from xlafuse.experiment import interrupts
from xlafuse.experiment.config import ExperimentConfig, VariantConfig, WorkloadConfig
from xlafuse.experiment.plan import (
    Plan,
    RunCell,
    Scope,
    Taken,
    framework_of,
    phases,
    received_plan,
    scope_of,
    select,
    selected_records,
    source_files,
    take_folder,
)
from xlafuse.experiment.progress import Reporter
from xlafuse.inspect.explain import missed_fusions
from xlafuse.kinds import Backend, Framework, Mode, Status
from xlafuse.measurement import cell_kernels, timing
from xlafuse.measurement.calibrate import calibrate
from xlafuse.measurement.numerics import host_outputs
from xlafuse.measurement.predicted import compile_twin
from xlafuse.measurement.profile import DeviceProfile, profile_device_time
from xlafuse.measurement.reference import (
    INTERPRETED_BASIS,
    Reference,
    compared_apart,
    judge_against,
    time_against,
    timed_against,
)
from xlafuse.models import implementations
from xlafuse.report.lines import cell_line
from xlafuse.report.markdown import write_report
from xlafuse.results import parts, records
from xlafuse.results.records import CellResult, append_result

__all__ = ["run_experiment", "select"]  # `select`: the config restricted (`plan.select`)

PROFILE_CALLS = 10
MISSED_FUSIONS_VARIANT = "default"  # the program whose missed fusions the report lists
MISSED_FUSIONS_TOP = 5


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Run:
    """What every cell of one run shares, made once (`_start`, `_following`); never changed.

    Attributes:
      scope: the run as known before its folder was taken.
      results_path: its results file.
      env: each record's environment (`run_environment.environment`).
      ceilings: the results file's calibration; None when not calibrated, and on a process
        other than 0, which writes no record.
      say: where its lines go.
    """

    scope: Scope
    results_path: Path
    env: Mapping[str, Any]
    ceilings: parts.CeilingsRecord | None
    say: Callable[[str], None]

    @property
    def config(self) -> ExperimentConfig:
        return self.scope.config

    @property
    def backend(self) -> str:
        return self.scope.backend

    @property
    def layout(self) -> runtime.Layout:
        return self.scope.layout


def run_experiment(
    config: ExperimentConfig | str | Path,
    *,
    out: str | Path | None = None,
    only: Sequence[str] | None = None,
    variants: Sequence[str] | None = None,
    fresh: bool = False,
    progress: bool = True,
    built: Mapping[str, Any] | None = None,
    ceilings: parts.CeilingsRecord | None = None,
    report: bool = True,
    stream: TextIO | None = None,
) -> list[CellResult]:
    """Run every cell of an experiment, resuming where an earlier run of it stopped.

    Args:
      config: an ExperimentConfig or the path of its TOML file.
      out: results folder; the config's `experiment.output` when None.
      only: workload names (or labels like "mlp/tiny/train") to run; all when None.
      variants: variant names to run (the reference is always included); all when None.
      fresh: move earlier results aside and start over. progress: a bar with an ETA.
      built: workloads already built, by the config's name (`xlafuse.measure`'s function).
      ceilings: the calibration to use when the results file has none (else one is made).
      report: write report.md and the plots. stream: where the lines go (None: stdout).

    Returns:
      The latest record of every selected cell, earlier runs' included, in sweep order.

    Raises:
      DeviceCountError: more devices than the backend has (`xlafuse run` on a CPU runs
        itself again with enough host devices).
      XlafuseError: an invalid config, `only`/`variants` naming nothing in it, an output folder that
        cannot be written, one that another run holds, a results file there of another program
        (`records.check_appendable`) or written under other settings or from other source files of
        the user's (resuming would mix them); all before any cell is measured. A record that cannot
        be written (a full disk) ends the run, naming the file; the records before it are kept.

    Warns:
      SkippedLineWarning: once per line of the results file that is not a record (a field of
        the wrong type, say), at the start; that cell is measured again. `xlafuse run` prints
        each as one line (`xlafuse: FILE:LINE: skipping a record that is ...`).
    """
    given = {"built": built, "ceilings": ceilings, "report": report}
    scope = scope_of(config, only=only, variants=variants, **given)
    folder = out if out is not None else scope.config.output
    if not scope.layout.writer:
        return _follow(scope, Path(folder))
    with take_folder(scope, folder, fresh=fresh) as taken:
        _run_taken(scope, taken, progress=progress, stream=stream)
    return selected_records(scope, taken.results_path)


def _run_taken(scope, taken, *, progress: bool, stream: TextIO | None) -> None:
    """`run_experiment` in the folder it took: warns of each skipped line (attributed to
    `run_experiment`'s caller), says where a torn last line went, then runs the plan."""
    for line in taken.skipped:
        warnings.warn(line, records.SkippedLineWarning, stacklevel=3)
    with Reporter(progress, taken.todo, stream=stream) as reporter:
        if taken.torn is not None:
            reporter.say(
                f"a torn last line of {taken.results_path} was moved aside to {taken.torn}"
            )
        _run_plan(scope, taken, reporter)


def _follow(scope: Scope, out_dir: Path) -> list[CellResult]:
    """A process other than 0: run the cells of process 0's plan, in step with it; write
    nothing (its traces excepted, in their own folders); return its records."""
    plan = received_plan(scope)
    return _run_phases(_following(scope, out_dir / records.RESULTS_FILE), plan, advance=_quiet)


def _quiet(*_: Any) -> None:
    """What a process other than 0 says and shows: nothing (process 0 speaks for the run)."""


def _run_plan(scope: Scope, taken: Taken, reporter: Reporter) -> None:
    """Every pending cell of the plan, phase by phase, then the report (also when a cell raised
    past its own error record, e.g. Ctrl-C: every finished cell is in the file already)."""
    results_path = taken.results_path
    if not taken.todo:
        cells = len(scope.config.workloads) * len(scope.config.variants)
        reporter.say(f"all {cells} cells already in {results_path}; nothing to run")
        if scope.report:
            _write_report(results_path, reporter.say)
        return
    run = _start(scope, taken, reporter.say)
    try:
        _run_phases(run, taken.plan, advance=reporter.advance)
    except BaseException:
        if scope.report:  # the cells recorded so far, reported; the run's own error wins
            _report_after_failure(results_path, reporter.say)
        raise
    if scope.report:
        _write_report(results_path, reporter.say)


def _following(scope: Scope, results_path: Path) -> _Run:
    """The run of a process other than 0: it writes no record, so it measures no ceilings,
    and it says nothing."""
    env = run_environment.environment(config_hash=scope.config.config_hash())
    return _Run(scope=scope, results_path=results_path, env=env, ceilings=None, say=_quiet)


def _start(scope: Scope, taken: Taken, say: Callable[[str], None]) -> _Run:
    """The run of process 0 (or of the only process): its first line said, its ceilings
    found (`_ceilings`)."""
    config, results_path = scope.config, taken.results_path
    say(
        f"{config.name}: {taken.todo} cells to run on {scope.backend} ({scope.device_kind})"
        + (f", {taken.done} already done" if taken.done else "")
        + f" -> {results_path}"
    )
    ceilings = None
    if config.measure.calibrate:
        ceilings = _ceilings(results_path, scope.backend, say, scope.ceilings)
    env = run_environment.environment(config_hash=config.config_hash())
    return _Run(scope=scope, results_path=results_path, env=env, ceilings=ceilings, say=say)


def _ceilings(results_path: Path, backend: str, say, given=None) -> parts.CeilingsRecord:
    """The results file's calibration when it has one (a resume never mixes two), else the
    one `given`, else a new one (`xlafuse.measurement.calibrate`)."""
    earlier = records.parse_file(results_path)[0] if results_path.exists() else []
    kept = next((r.ceilings for r in earlier if r.ceilings.copy_bytes_per_s), None)
    ceilings = kept or given or fields_lib.ceilings_part(calibrate(backend=backend))
    flops = ceilings.matmul_flops_per_s
    say(
        f"ceilings{' (reused from the results file)' if kept else ''}: "
        f"copy {ceilings.copy_bytes_per_s / 1e9:.4g} GB/s"
        + (f", matmul {flops / 1e12:.2f} TFLOP/s" if flops else "")
    )
    return ceilings


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Outcome:
    """What one workload's cells left (`_run_workload`).

    Attributes:
      records: the records made now, in order.
      profiles: its reference cell's DeviceProfile by cell id when that cell was traced now:
        its torch cells, measured in a later phase, need it (jax's profiler cannot trace the
        reference again once torch's has run).
    """

    records: tuple[CellResult, ...] = ()
    profiles: Mapping[str, DeviceProfile] = dataclasses.field(default_factory=dict)


def _run_phases(run: _Run, plan: Plan, *, advance: Callable[[], None]) -> list[CellResult]:
    """Every cell of `plan`, phase by phase (`phases`); the records made, in order."""
    made: list[CellResult] = []
    profiles: dict[str, DeviceProfile] = {}
    for phase in phases(plan):
        done = records.finished_cells(run.results_path) if run.layout.writer else {}
        for w, cells in phase:
            outcome = _run_workload(run, w, cells, done=done, profiles=profiles, advance=advance)
            made += outcome.records
            profiles.update(outcome.profiles)
    return made


def _run_workload(
    run: _Run,
    w: WorkloadConfig,
    cells: list[RunCell],
    *,
    done: Mapping[str, CellResult],
    profiles: Mapping[str, DeviceProfile],
    advance: Callable[[], None],
) -> _Outcome:
    """Every pending cell of one workload: the reference first (`_reference`), then each
    other variant against it."""
    if not cells:
        return _Outcome()
    watch.doing(f"building {w.label}")
    try:
        workload = run.scope.built[w.name] if w.name in run.scope.built else w.build()
    except Exception as err:  # a workload that cannot be built: each cell's record says why
        watch.on_failure(err)  # ...but a lost process ends the run (its line names it)
        failed = [_error_record(run, cell, None, err) for cell in cells]
        return _Outcome(records=tuple(_finish(run, r, None, advance) for r in failed))
    referenced = _reference(run, w, workload, cells, done, profiles, advance)
    made = [referenced.record] if referenced.new else []
    for cell in cells:
        if cell.variant.name != run.config.reference:
            record, _ = _measured_cell(run, cell, workload, referenced.reference)
            made.append(_finish(run, record, referenced.record, advance))
    profile = referenced.reference.profile
    new = referenced.record if referenced.new else None
    kept = {new.cell_id: profile} if new is not None and profile is not None else {}
    del workload, referenced
    gc.collect()
    return _Outcome(records=tuple(made), profiles=kept)


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Referenced:
    """A workload's reference as `_reference` makes it.

    Attributes:
      reference: what its other cells are judged and timed against.
      record: the reference cell's record; None when no run recorded it.
      new: whether the reference cell was measured now (its record is one of this run's).
    """

    reference: Reference
    record: CellResult | None
    new: bool


def _reference(run: _Run, w, workload, cells, done, profiles, advance) -> _Referenced:
    """The workload's Reference and its reference cell's record.

    The reference cell is measured now when it is pending (its record is appended at once);
    when it is recorded already, its program is compiled again (`_recompiled_reference`). Either
    way the other cells get its compiled program (they are timed in alternation with it) and
    its outputs (their numerics are judged against them).
    """
    name = run.config.reference
    pending = next((c for c in cells if c.variant.name == name), None)
    if pending is None:
        cell = run.scope.cell(w, run.config.variant(name))
        watch.doing(f"compiling the reference of {w.label} again ({name})")
        reference = _recompiled_reference(run, workload, cell.variant, profiles.get(cell.id))
        return _Referenced(reference=reference, record=done.get(cell.id), new=False)
    record, reference = _measured_cell(run, pending, workload, None)
    return _Referenced(reference=reference, record=_finish(run, record, None, advance), new=True)


def _recompiled_reference(run: _Run, workload, variant, profile) -> Reference:
    """The Reference of a reference cell recorded earlier: its program compiled again and
    called once (its timing is the record's, not this process's); when that fails, the error,
    which every other cell's record then carries."""
    try:
        workload = workload.with_implementation(variant.resolve().implementation)
        request = _measure_request(run, workload)
        compiled = compile_workload(workload, variant.resolve(), measure=request)
        outputs = _first_outputs(compiled, workload)
    except Exception as err:  # the error becomes each other cell's `reference_error`
        watch.on_failure(err)
        message = f"recompiling the reference failed: {error_line(err)}"
        return Reference(profile=profile, error=message)
    fresh_args, interpreted = workload.fresh_args, workload.interpreted
    return Reference(
        compiled=compiled,
        fresh_args=fresh_args,
        outputs=outputs,
        profile=profile,
        interpreted=interpreted,
    )


def _measured_cell(
    run: _Run, cell: RunCell, workload, reference: Reference | None
) -> tuple[CellResult, Reference]:
    """Measure one cell against `reference` (None: it is the reference cell); its record, and
    what it gives the workload's other cells as their Reference."""
    start = time.perf_counter()
    trace_dir = _new_trace_dir(run, cell.id)
    watch.doing(f"measuring {cell.w.label} under {cell.variant.name}")
    try:
        measured, mine = _measure(run, cell, workload, reference, trace_dir)
    except Exception as err:  # one cell's failure must not end the sweep
        watch.on_failure(err)  # ...but a lost process ends the run (its line names it)
        gc.collect()
        return _error_record(run, cell, workload, err), Reference()
    finally:
        if trace_dir is not None and not run.config.measure.keep_traces:
            shutil.rmtree(trace_dir, ignore_errors=True)
    measured["wall_s"] = time.perf_counter() - start
    record = _record(run, cell, workload, Status.OK, measured)
    return fields_lib.with_rates(record, run.backend), mine


def _measure_request(run: _Run, workload, trace_dir: Path | None = None) -> MeasureRequest:
    profile_calls = PROFILE_CALLS if run.config.measure.profile else 0
    folder = str(trace_dir) if trace_dir is not None else None
    return MeasureRequest(
        settings=run.config.timing,
        train=workload.mode == Mode.TRAIN,
        profile_calls=profile_calls,
        trace_dir=folder,
    )


def _first_outputs(compiled, workload):
    """One call's outputs on the host, in the form the numerics rule compares."""
    if compiled.measured is not None:
        return host_outputs(workload, compiled.measured.outputs)
    return host_outputs(workload, compiled(*workload.fresh_args()))


def _measure(
    run: _Run, cell: RunCell, workload, reference: Reference | None, trace_dir=None
) -> tuple[dict[str, Any], Reference]:
    """The cell's measured parts, by CellResult field name (`fields_lib` makes each), and the
    Reference its program would be to the workload's other cells.

    Steps, each returning its value: compile, first call, numerics against the reference
    (`judge_against`), timing against it (`_time` -> `time_against`), the traced kernels
    (`_kernel_fields`), then the record part of each (`fields_lib`)."""
    variant = cell.variant
    resolved = variant.resolve()
    if resolved.framework == Framework.TORCH:  # the workload's PyTorch twin (xlafuse.torch)
        return _measure_twin(run, resolved, workload, reference), Reference()
    _check_in_process(run, variant.name, resolved)
    workload = workload.with_implementation(resolved.implementation)  # impl=NAME (issue 46)
    request = _measure_request(run, workload, trace_dir)
    compiled = compile_workload(workload, resolved, measure=request)
    outputs = _first_outputs(compiled, workload)
    diff = judge_against(reference, workload, outputs, compiled=compiled)
    against = timed_against(reference, workload.interpreted)  # interpreted: timed alone
    timed, comparison, profile = _time(run, compiled, workload, against, request)
    kernels, baseline = _kernel_fields(run, compiled, workload, trace_dir, against, variant.name)
    mine = Reference(
        compiled=compiled,
        fresh_args=workload.fresh_args,
        outputs=outputs,
        timing=timed,
        profile=profile,
        kernels=baseline,
        interpreted=workload.interpreted,
    )
    measured = {
        "compile": fields_lib.compile_part(compiled),
        "numerics": fields_lib.numerics_part(diff, reference.error if reference else None),
        "timing": fields_lib.timing_part(timed),
        "per_process": _per_process(run, timed, comparison, request, profile),
        "speedup": _speedup_part(run, request, comparison, reference, compared=against is not None),
        "trace": parts.TraceRecord.from_flat(kernels),
        "fusion": fields_lib.fusion_part(
            compiled.report,
            missed_fusions=_missed(variant, workload, compiled),
            hlo_text=None if "kernel_times" in kernels else compiled.hlo_text,
        ),
        "interpreted": workload.interpreted,
        **_optional_parts(run, cell, workload, compiled, profile, against),
    }
    return measured, mine


def _optional_parts(
    run: _Run, cell: RunCell, workload, compiled, profile, against: Reference | None
) -> dict[str, Any]:
    """The parts of `_measure` that only some cells have: collectives (a cell sharded over
    devices), device and comm time (a profiled cell), cold start (`[measure] cold_start`)."""
    measured: dict[str, Any] = {}
    if workload.devices > 1:
        measured["collectives"] = fields_lib.collectives_part(compiled.collectives)
    if profile is not None:
        own_reference = against.profile if against is not None else None
        measured["device"] = fields_lib.device_part(profile, own_reference)
        measured["comm"] = fields_lib.comm_part(profile.comm)
    if run.config.measure.cold_start:
        # the config's cell, which a child rebuilds with an entry's implementations
        measured["cold_start"] = fields_lib.cold_start_part(cell.w.cell, cell.variant)
    return measured


def _speedup_part(
    run: _Run, request, comparison, reference: Reference | None, *, compared: bool = True
):
    """The reference cell's 1.0 on the figure it leads with, or this cell's `comparison`; for a
    cell not timed against its reference (`compared` False: `timed_against`), why not."""
    lead = timing.leading_figure(request.train, run.backend)
    if reference is None:
        return fields_lib.reference_speedup_part(lead)
    if not compared:
        return parts.SpeedupRecord(lead=lead, basis=INTERPRETED_BASIS)
    return fields_lib.speedup_part(comparison, lead)


def _measure_twin(run: _Run, resolved, workload, reference: Reference | None) -> dict[str, Any]:
    """A torch variant's parts: its PyTorch twin measured by the XLA cells' rules."""
    # deferred: torch is an optional extra
    from xlafuse.torch.measure import COMPARISON, measure_cell

    reference = reference or Reference()
    request = _measure_request(run, workload)
    cold_start = run.config.measure.cold_start
    flat = measure_cell(workload, resolved, request, reference, cold_start=cold_start)
    comparison = flat.pop(COMPARISON, None)
    measured, unknown = records.unflatten(flat)
    if unknown:
        raise ValueError(f"torch cell fields that no record part holds: {sorted(unknown)}")
    measured["speedup"] = _speedup_part(run, request, comparison, reference)
    return measured


def _check_in_process(run: _Run, name: str, resolved) -> None:
    """Refuse a variant measured in a child process (process-wide XLA flags) when this run
    has several processes: a child cannot join their `jax.distributed` run."""
    if run.layout.distributed and resolved.process_flags:
        raise XlafuseError(
            f"variant {name!r} sets process-wide XLA flags, so a child process measures it, "
            "and a child cannot join jax.distributed: run it on one process"
        )


def _time(run: _Run, compiled, workload, reference: Reference | None, request):
    """(Timing, Comparison or None, DeviceProfile or None) of a cell, timed against its
    reference (`time_against`). A variant measured in its child process brings its own Timing
    and profile; its speedups compare with the reference cell's samples (`compared_apart`)."""
    if compiled.measured is not None:
        timed = timing.Timing(**compiled.measured.timing)
        profile = compiled.measured.profile
        profile = DeviceProfile.from_dict(profile) if profile else None
        return timed, compared_apart(reference, timed), profile
    advance = timing.thread_state if request.train else timing.same_args
    lead = timing.leading_figure(request.train, run.backend)
    args, settings = workload.fresh_args(), request.settings
    timed, comparison = time_against(
        reference, compiled, args, settings, advance=advance, lead=lead
    )
    return timed, comparison, _profile(compiled, workload, request, advance)


def _missed(variant: VariantConfig, workload, compiled) -> dict[str, Any] | None:
    """The missed fusions of MISSED_FUSIONS_VARIANT's program; None for the other variants."""
    if variant.name != MISSED_FUSIONS_VARIANT:
        return None
    return _missed_fusions(workload, compiled)


def _per_process(run: _Run, timed, comparison, request, profile) -> parts.ProcessesRecord:
    """Each process's own figures (`fields_lib.processes_part`); empty on one process."""
    if not run.layout.distributed:
        return parts.ProcessesRecord()
    lead = timing.leading_figure(request.train, run.backend)
    lead = comparison.lead(lead) if comparison is not None else lead
    device_times = None
    if run.config.measure.profile:  # every process profiled: gather each one's device time
        own = profile.time_s if profile is not None and profile.time_s else float("nan")
        gathered = lockstep.current().gather([own])[:, 0]
        device_times = [None if t != t else float(t) for t in gathered]
    return fields_lib.processes_part(timed, lead, device_times=device_times)


def _missed_fusions(workload, compiled) -> dict[str, Any]:
    """The top kernel boundaries of the default program (`xlafuse.inspect.explain.missed_fusions`).

    A failure is recorded in the summary, never lost and never fatal to the cell.
    """
    try:
        unoptimized = compiled.unoptimized_hlo() or unoptimized_hlo(workload)
        return missed_fusions(unoptimized, compiled.hlo_text, top=MISSED_FUSIONS_TOP)
    except Exception as err:
        return {"error": error_line(err)}


def _profile(compiled, workload, request: MeasureRequest, advance):
    if not request.profile_calls:
        return None
    args, calls = workload.fresh_args(), request.profile_calls
    return profile_device_time(
        compiled, args, calls=calls, advance=advance, log_dir=request.trace_dir
    )


def _new_trace_dir(run: _Run, cell_id: str) -> Path | None:
    measure = run.config.measure
    if not measure.profile:
        return None
    process = run.layout.index if run.layout.distributed else None
    folder = run.results_path.parent
    return cell_kernels.new_trace_dir(folder, cell_id, measure.keep_traces, process=process)


def _kernel_fields(run: _Run, compiled, workload, trace_dir, reference, variant: str):
    """(trace_path, kernel_times and, for a cell other than the reference, kernel_diff; the
    cell's traced kernels as a Baseline): `cell_kernels.kernel_fields`."""
    if trace_dir is None:
        return {}, None
    ceilings = run.ceilings
    return cell_kernels.kernel_fields(
        trace_dir,
        compiled,
        workload,
        results_dir=run.results_path.parent if run.config.measure.keep_traces else None,
        calls=PROFILE_CALLS,
        labels=(run.config.reference, variant),
        baseline=reference.kernels if reference is not None else None,
        ceilings_bytes_flops=(
            (ceilings.copy_bytes_per_s, ceilings.matmul_flops_per_s) if ceilings else (None, None)
        ),
        twin=_twin(run, compiled, workload),
    )


def _twin(run: _Run, compiled, workload):
    """XLA's estimates of a traced GPU cell's program, from a twin compile
    (`xlafuse.measurement.predicted`: the timed compile is left without the option); None on a
    CPU and for a variant compiled in a child process. A failure is recorded, never fatal."""
    if run.backend != Backend.GPU or compiled.compiled is None:
        return None
    try:
        return compile_twin(workload, compiled.variant, compiled.report)
    except Exception as err:
        return {"error": error_line(err)}


def _identity(run: _Run, cell: RunCell, workload) -> dict[str, Any]:
    w, variant, name = cell.w, cell.variant, cell.w.cell
    layout = run.layout
    return {
        "workload": name.name,
        "size": name.size,
        "mode": name.mode,
        "dtype": workload.dtype if workload is not None else name.dtype,
        "dtype_requested": name.dtype,
        "overrides": dict(name.overrides),
        "entry": name.entry,
        "source_sha256": w.source_sha256,
        "source_files": source_files(w),
        "devices": name.devices,
        "parallelism": name.parallelism if name.mesh else None,
        "processes": layout.processes,
        "process_devices": layout.process_devices if layout.distributed else None,
        "variant": variant.name,
        "variant_options": variant.to_dict(),
        **framework_of(variant),
        "implementation": _implementation(variant, workload),
        "reference": run.config.reference,
        "backend": run.backend,
        "device_kind": run.scope.device_kind,
        "cell_id": cell.id,
        "experiment": run.config.name,
        "model": fields_lib.model_part(workload),
        "ceilings": run.ceilings or parts.CeilingsRecord(),
        "env": run.env,
        "settings": run_environment.cell_settings(run.scope.settings, variant),
    }


def _record(run: _Run, cell: RunCell, workload, status: Status, fields) -> CellResult:
    return CellResult(**_identity(run, cell, workload), status=status, **fields)


def _implementation(variant: VariantConfig, workload) -> str | None:
    """The implementation a cell runs (`impl=NAME`, else the workload's own: "xla"); None for
    a PyTorch twin, and a variant that no longer resolves."""
    try:
        resolved = variant.resolve()
    except ValueError:
        return None
    if resolved.framework != Framework.JAX:
        return None
    own = workload.implementation if workload is not None else implementations.OWN
    return resolved.implementation or own


def _error_record(run: _Run, cell: RunCell, workload, err: BaseException) -> CellResult:
    message = (str(err).strip() or type(err).__name__).splitlines()[0][:2000]
    fields = {"error": message, "error_type": type(err).__name__}
    return _record(run, cell, workload, Status.ERROR, fields)


def _finish(run: _Run, record: CellResult, reference: CellResult | None, advance) -> CellResult:
    """The record, appended and its line said (on a process other than 0: neither)."""
    if run.layout.writer:
        watch.doing(f"writing the record of {record.cell_id}")
        append_result(run.results_path, record)
        run.say(cell_line(record, reference=reference))
        advance()
        interrupts.check()  # a Ctrl-C that Python swallowed stops the run here
    return record


def _write_report(results_path: Path, say: Callable[[str], None]) -> None:
    """report.md and the plots of the results file (`write_report`); nothing while it holds
    no record yet."""
    if not results_path.exists() or not results_path.stat().st_size:
        return
    watch.doing(f"writing the report into {results_path.parent}")
    say(f"report: {write_report(results_path, out_dir=results_path.parent)}")


def _report_after_failure(results_path: Path, say) -> None:
    """The report of a run that is ending on an error or an interrupt: a report that cannot be
    written is said, so that the run's own error is the one raised."""
    try:
        _write_report(results_path, say)
    except Exception as err:
        why = str(err).splitlines()[0] if isinstance(err, XlafuseError) else error_line(err)
        say(f"report not written: {why}")
