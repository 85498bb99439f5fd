"""Run an experiment config cell by cell (workload x variant) and append a record per cell.

Per workload: build its cell once (`Cell.build`), then its reference (`_reference`: the frozen
`xlafuse.measure.reference.Reference` that every other cell of the workload is judged and
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

import contextlib
import dataclasses
import gc
import shutil
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import jax

from xlafuse.compile.jit import MeasureRequest, compile_workload, unoptimized_hlo
from xlafuse.distributed import lockstep, messages, runtime, watch
from xlafuse.errors import XlafuseError, check_selected, error_line
from xlafuse.experiment import environment as run_environment
from xlafuse.experiment import fields as fields_lib
from xlafuse.experiment import interrupts
from xlafuse.experiment.config import ExperimentConfig, VariantConfig, WorkloadConfig, load_config
from xlafuse.experiment.progress import Reporter
from xlafuse.inspect.explain import missed_fusions
from xlafuse.kinds import Framework, Status
from xlafuse.measure import cell_kernels, timing
from xlafuse.measure.calibrate import calibrate
from xlafuse.measure.numerics import host_outputs
from xlafuse.measure.predicted import compile_twin
from xlafuse.measure.profile import DeviceProfile, profile_device_time
from xlafuse.measure.reference import (
    INTERPRETED_BASIS,
    Reference,
    compared_apart,
    judge_against,
    time_against,
    timed_against,
)
from xlafuse.models import implementations, registry, user
from xlafuse.models.sharding import check_device_count
from xlafuse.report.lines import cell_line
from xlafuse.report.markdown import write_report
from xlafuse.results import parts, records
from xlafuse.results.records import CellResult, append_result
from xlafuse.results.settings import check_resumable

PROFILE_CALLS = 10
MISSED_FUSIONS_VARIANT = "default"  # the program whose missed fusions the report lists
MISSED_FUSIONS_TOP = 5


@dataclasses.dataclass
class _Run:
    """What every cell of one run shares."""

    config: ExperimentConfig
    results_path: Path
    backend: str
    device_kind: str
    env: dict[str, Any]
    ceilings: parts.CeilingsRecord | None
    say: Callable[[str], None]
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Workloads already built, by name (`xlafuse.measure` hands its function in this way).
    built: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # The references' DeviceProfiles by cell id, from the XLA phase: the twins' device speedups
    # need them, and jax's profiler cannot trace the reference again once torch's has run.
    reference_profiles: dict[str, Any] = dataclasses.field(default_factory=dict)
    layout: runtime.Layout = runtime.SINGLE
    # A process other than 0 (`jax.distributed`) writes nothing: its records stay here.
    kept: list[CellResult] = dataclasses.field(default_factory=list)

    @property
    def writer(self) -> bool:
        return self.layout.writer


def run_experiment(
    config: ExperimentConfig | str | Path,
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
      XlafuseError: an invalid config, `only`/`variants` naming nothing in it, an output
        folder that cannot be written, one that another run holds, a results file there of
        another program (`records.check_appendable`) or written under other settings or from
        other source files of the user's (resuming would mix them); all before any cell is
        measured. A record that cannot be written (a full disk) ends the run, naming the file;
        the records before it are kept.

    Warns:
      SkippedLineWarning: once per line of the results file that is not a record (a field of
        the wrong type, say), at the start; that cell is measured again. `xlafuse run` prints
        each as one line (`xlafuse: FILE:LINE: skipping a record that is ...`).
    """
    config, backend = _for_this_run(config, only, variants)
    layout = runtime.layout()
    for w in config.workloads:
        runtime.check_spans_processes(w.devices, f"workload {w.label!r}")
    settings = _settings(config, backend, layout)
    given = _Given(dict(built or {}), ceilings, report, layout)
    folder = out if out is not None else config.output
    if not layout.writer:
        return _follow(config, Path(folder), settings, given)
    with _folder_and_plan(config, folder, fresh, settings, layout) as taken:
        results_path, plan = taken.results_path, taken.plan
        for line in taken.skipped:
            warnings.warn(line, records.SkippedLineWarning, stacklevel=2)
        with Reporter(progress, sum(len(cells) for _, cells in plan), stream) as reporter:
            if taken.torn is not None:
                reporter.say(f"a torn last line of {results_path} was moved aside to {taken.torn}")
            _run_plan(config, plan, results_path, settings, reporter, taken.done, given)
    return _selected_records(config, results_path, backend, layout)


def _settings(config: ExperimentConfig, backend: str, layout: runtime.Layout) -> dict[str, Any]:
    """The run's settings (`run_environment.run_settings`) with its process layout."""
    device_kind = jax.devices()[0].device_kind
    return {**run_environment.run_settings(config, backend, device_kind), **layout.settings()}


@dataclasses.dataclass(frozen=True)
class _Taken:
    """The output folder as a run takes it (`_folder_and_plan`).

    Attributes:
      results_path: its results file. torn: where its torn last line was set aside, or None.
      plan: each workload with its variants still to run. done: the cells already recorded.
      skipped: one line per line of the file that is not a record (`records.skipped_line`).
    """

    results_path: Path
    torn: Path | None
    plan: list
    done: int
    skipped: tuple[str, ...]


@contextlib.contextmanager
def _folder_and_plan(config, folder, fresh: bool, settings, layout: runtime.Layout):
    """The output folder taken (its lock held for the `with` block), fresh or repaired, and
    the plan: yields a `_Taken`. A results file of another program is refused before its torn
    tail is touched. The plan, or why there is none, goes to the other processes of a
    distributed run."""
    with contextlib.ExitStack() as held:
        try:
            out_dir = records.prepare_output(folder)
            held.enter_context(records.lock_folder(out_dir))
            results_path = out_dir / records.RESULTS_FILE
            if fresh:
                _move_aside(results_path)
            records.check_appendable(results_path)
            torn = records.repair_tail(results_path)
            plan, done = _plan(config, results_path, settings, settings["backend"], layout)
            skipped = _skipped_lines(results_path)
        except Exception as err:
            _share_plan(layout, config, None, err)
            raise
        _share_plan(layout, config, plan, None)
        yield _Taken(results_path, torn, plan, done, skipped)


def _skipped_lines(results_path: Path) -> tuple[str, ...]:
    """`FILE:LINE: skipping a record that is ...` for each line of the file that is no record."""
    if not results_path.exists():
        return ()
    return tuple(
        records.skipped_line(results_path, number, reason)
        for number, reason in records.parse_file(results_path)[1]
    )


def _share_plan(layout: runtime.Layout, config, plan, err: BaseException | None) -> None:
    """Process 0's plan (each workload's index in the config and its variants still to run),
    or the first line of why it has none, sent to the other processes (`_follow`)."""
    if not layout.distributed:
        return
    if err is not None:
        message: dict[str, Any] = {"error": (str(err).strip() or type(err).__name__)}
    else:
        index = {id(w): i for i, w in enumerate(config.workloads)}
        message = {"todo": [[index[id(w)], [v.name for v in cells]] for w, cells in plan]}
    messages.share(message, layout.processes)


def _follow(config, out_dir: Path, settings, given) -> list[CellResult]:
    """A process other than 0: run the cells of process 0's plan, in step with it; write
    nothing (its traces excepted, in their own folders); return its records."""
    message = messages.share(None, given.layout.processes)
    if "error" in message:
        raise XlafuseError(message["error"].splitlines()[0])
    plan = [
        (config.workloads[i], [config.variant(name) for name in names])
        for i, names in message["todo"]
    ]
    results_path = out_dir / records.RESULTS_FILE
    run = _start(config, results_path, settings, _quiet, 0, 0, None, given.layout)
    run.built = given.built
    for phase in _phases(plan):
        for workload_config, cells in phase:
            _run_workload(run, workload_config, cells, {}, _quiet)
    return run.kept


def _quiet(*_: Any) -> None:
    """What a process other than 0 says and shows: nothing (process 0 speaks for the run)."""


def _for_this_run(config, only, variants) -> tuple[ExperimentConfig, str]:
    """The config (read, when a path) as this run takes it: the selected workloads and
    variants of this backend; and the backend. Refuses more devices than the backend has."""
    if not isinstance(config, ExperimentConfig):
        config = load_config(config)
    backend = jax.default_backend()
    config = _for_backend(select(config, only, variants), backend, print)
    check_device_count(max((w.devices for w in config.workloads), default=1))
    return config, backend


def _plan(config, results_path: Path, settings, backend: str, layout) -> tuple[list, int]:
    """(each workload with its variants still to run, the cells already done), once the
    results file is known to hold cells of these settings only (`check_resumable`)."""
    sources = {w.name: (w.entry, w.source_sha256) for w in config.workloads}
    _check_source_files(results_path, config)
    check_resumable(results_path, settings, run_environment.by_name(config.variants), sources)
    done = records.finished_cells(results_path)
    return [(w, _todo(config, w, backend, done, layout)) for w in config.workloads], len(done)


def _check_source_files(results_path: Path, config: ExperimentConfig) -> None:
    """Refuse to resume a workload whose source files changed, naming the files: a record's
    `source_files` against this run's (`_source_files`). A program of one file, and a record
    without them (older, or the zoo's), are left to `check_resumable`, which compares
    `source_sha256` alone ("its source file changed")."""
    if not results_path.exists():
        return
    now = {w.name: (w.entry, w.source_sha256, w) for w in config.workloads if w.source_sha256}
    for record in records.parse_file(results_path)[0]:
        entry, sha, w = now.get(record.workload, (None, None, None))
        if w is None or record.entry != entry or record.source_sha256 == sha:
            continue
        files = _source_files(w)
        if not record.source_files or not files or len({*record.source_files, *files}) < 2:
            continue
        changed = user.changed_sources(record.source_files, files)
        raise XlafuseError(
            f"{results_path} holds results measured under other settings (workload "
            f"{record.workload!r}: its source changed: {changed}): resuming would mix them; "
            "pass --fresh to move that file aside and start over, or write to another --out"
        )


def _source_files(w: WorkloadConfig) -> dict[str, str]:
    """The files hashed into `w.source_sha256`, path -> SHA-256 (`user.source_files`): an
    entry's file or the imported file that registered the workload, and the user's modules it
    imports. Empty for the zoo's workloads, and where they no longer make that hash (a file
    that changed since the config was read, a function `xlafuse.measure` was given)."""
    if w.source_sha256 is None:
        return {}
    try:
        if w.entry:
            files = user.entry_sources(user.parse_entry(w.entry, w.base))
        else:
            files = registry.source_files(w.name)
    except XlafuseError:
        return {}
    return files if files and user.sources_sha256(files) == w.source_sha256 else {}


@dataclasses.dataclass(frozen=True)
class _Given:
    """What a caller hands a run besides its config (`run_experiment`'s arguments)."""

    built: Mapping[str, Any]
    ceilings: parts.CeilingsRecord | None
    report: bool
    layout: runtime.Layout = runtime.SINGLE


def _run_plan(config, plan, results_path: Path, settings, reporter, skipped: int, given) -> None:
    """Every pending cell of `plan`, phase by phase, then the report (also when a cell raised
    past its own error record, e.g. Ctrl-C: every finished cell is in the file already)."""
    todo = sum(len(cells) for _, cells in plan)
    if not todo:
        cells = len(config.workloads) * len(config.variants)
        reporter.say(f"all {cells} cells already in {results_path}; nothing to run")
        if given.report:
            _write_report(results_path, results_path.parent, reporter.say)
        return
    run = _start(config, results_path, settings, reporter.say, todo, skipped, given.ceilings)
    run.built, run.layout = given.built, given.layout
    try:
        for phase in _phases(plan):
            done = records.finished_cells(results_path)
            for workload_config, cells in phase:
                _run_workload(run, workload_config, cells, done, reporter.advance)
    except BaseException:
        if given.report:  # the cells recorded so far, reported; the run's own error wins
            _report_after_failure(results_path, reporter.say)
        raise
    if given.report:
        _write_report(results_path, results_path.parent, reporter.say)


def select(
    config: ExperimentConfig, only: Sequence[str] | None, variants: Sequence[str] | None
) -> ExperimentConfig:
    """The config restricted to some workloads and variants (the reference variant stays).

    Raises:
      XlafuseError: a name that matches no workload or variant of the config.
    """
    workloads = config.workloads
    if only:
        labels = [w.name for w in workloads] + [w.label for w in workloads]
        check_selected("workload", only, labels, "in the config")
        workloads = tuple(w for w in workloads if w.name in only or w.label in only)
    chosen = config.variants
    if variants:
        check_selected("variant", variants, [v.name for v in config.variants], "in the config")
        chosen = tuple(v for v in chosen if v.name in variants or v.name == config.reference)
    return dataclasses.replace(config, workloads=workloads, variants=chosen)


def _for_backend(config: ExperimentConfig, backend: str, say) -> ExperimentConfig:
    """The config without the workloads whose `backends` exclude this backend."""
    kept = tuple(w for w in config.workloads if w.applies_to(backend))
    skipped = [w.label for w in config.workloads if not w.applies_to(backend)]
    if skipped:
        say(f"skipped on {backend} (the config's backends key): {', '.join(skipped)}")
    return dataclasses.replace(config, workloads=kept)


def _ordered_variants(config: ExperimentConfig) -> list[VariantConfig]:
    """The reference first, then the others in config order."""
    reference = [v for v in config.variants if v.name == config.reference]
    return reference + [v for v in config.variants if v.name != config.reference]


def _phases(plan: list[tuple[WorkloadConfig, list[VariantConfig]]]) -> list[list[tuple]]:
    """The XLA cells of every workload first, then the cells of the PyTorch twins.

    Once torch's profiler has run, it keeps CUPTI for the rest of the process and jax's profiler
    can no longer subscribe: an XLA cell measured after a torch cell would have no device time.
    The torch cells of a workload find its reference recorded and compile it again.
    """
    xla = [(w, [v for v in cells if not _is_torch(v)]) for w, cells in plan]
    twins = [(w, [v for v in cells if _is_torch(v)]) for w, cells in plan]
    return [xla, twins] if any(cells for _, cells in twins) else [xla]


def _is_torch(variant: VariantConfig) -> bool:
    return _framework(variant)["framework"] == Framework.TORCH


def _processes(layout: runtime.Layout) -> str | None:
    """What a cell id ends with under `jax.distributed` (`Cell.cell_id`); None on one process."""
    return layout.label if layout.distributed else None


def _todo(config, w: WorkloadConfig, backend: str, done, layout) -> list[VariantConfig]:
    ids = {v.name: w.cell.cell_id(v.name, backend, _processes(layout)) for v in config.variants}
    return [v for v in _ordered_variants(config) if ids[v.name] not in done]


def _move_aside(path: Path) -> None:
    """Move the results aside (`fresh`), and report.md and the plots made from them: a fresh
    run cut short must not leave the old report beside the new results."""
    aside = records.move_aside(path)
    if aside is None:
        return
    stem = aside.name.removesuffix(".jsonl.old")  # results.<time>
    for made in [
        path.parent / "report.md",
        path.parent / "report.html",
        *sorted(path.parent.glob("*.png")),
    ]:
        if made.is_file():
            made.rename(path.parent / f"{stem}.{made.name}.old")


def _start(
    config, results_path, settings, say, todo: int, skipped: int, given=None, layout=None
) -> _Run:
    backend, device_kind = settings["backend"], settings["device_kind"]
    layout = layout or runtime.SINGLE
    if not layout.writer:  # its records are not written: no ceilings to measure
        env = run_environment.environment(config.config_hash())
        run = _Run(config, results_path, backend, device_kind, env, None, say, settings)
        return dataclasses.replace(run, layout=layout)
    say(
        f"{config.name}: {todo} cells to run on {backend} ({device_kind})"
        + (f", {skipped} already done" if skipped else "")
        + f" -> {results_path}"
    )
    ceilings = _ceilings(results_path, backend, say, given) if config.measure.calibrate else None
    env = run_environment.environment(config.config_hash())
    return _Run(config, results_path, backend, device_kind, env, ceilings, say, settings)


def _ceilings(results_path: Path, backend: str, say, given=None) -> parts.CeilingsRecord:
    """The results file's calibration when it has one (a resume never mixes two), else the
    one `given`, else a new one (`xlafuse.measure.calibrate`)."""
    earlier = records.parse_file(results_path)[0] if results_path.exists() else []
    kept = next((r.ceilings for r in earlier if r.ceilings.copy_bytes_per_s), None)
    ceilings = kept or given or fields_lib.ceilings_part(calibrate(backend))
    flops = ceilings.matmul_flops_per_s
    say(
        f"ceilings{' (reused from the results file)' if kept else ''}: "
        f"copy {ceilings.copy_bytes_per_s / 1e9:.4g} GB/s"
        + (f", matmul {flops / 1e12:.2f} TFLOP/s" if flops else "")
    )
    return ceilings


def _run_workload(run: _Run, w: WorkloadConfig, cells, done, advance) -> None:
    """Every pending variant of one workload: the reference first (`_reference`), then each
    other variant against it."""
    if not cells:
        return
    watch.doing(f"building {w.label}")
    try:
        workload = run.built[w.name] if w.name in run.built else w.build()
    except Exception as err:
        watch.on_failure(err)
        for variant in cells:
            _finish(run, _error_record(run, w, variant, None, err), None, advance)
        return
    reference, reference_record = _reference(run, w, workload, cells, done, advance)
    for variant in cells:
        if variant.name == run.config.reference:
            continue
        record, _ = _cell(run, w, variant, workload, reference)
        _finish(run, record, reference_record, advance)
    del workload, reference
    gc.collect()


def _reference(run: _Run, w, workload, cells, done, advance) -> tuple[Reference, CellResult | None]:
    """The workload's Reference and its reference cell's record.

    The reference cell is measured now when it is pending (its record is appended at once);
    when it is recorded already, its program is compiled again (`_recompiled_reference`). Either
    way the other cells get its compiled program (they are timed in alternation with it) and
    its outputs (their numerics are judged against them).
    """
    variant = run.config.variant(run.config.reference)
    cell = w.cell.cell_id(variant.name, run.backend, _processes(run.layout))
    profile = run.reference_profiles.get(cell)
    if not any(v.name == variant.name for v in cells):
        watch.doing(f"compiling the reference of {w.label} again ({variant.name})")
        return _recompiled_reference(run, workload, variant, profile), done.get(cell)
    record, reference = _cell(run, w, variant, workload, None)
    _finish(run, record, None, advance)
    if reference.profile is not None:
        run.reference_profiles[cell] = reference.profile
    return reference, record


def _recompiled_reference(run: _Run, workload, variant, profile) -> Reference:
    """The Reference of a reference cell recorded earlier: its program compiled again and
    called once (its timing is the record's, not this process's); when that fails, the error,
    which every other cell's record then carries."""
    try:
        workload = workload.with_implementation(variant.resolve().implementation)
        compiled = compile_workload(workload, variant.resolve(), _measure_request(run, workload))
        outputs = _first_outputs(compiled, workload)
    except Exception as err:
        watch.on_failure(err)
        message = f"recompiling the reference failed: {error_line(err)}"
        return Reference(profile=profile, error=message)
    interpreted = workload.interpreted
    return Reference(
        compiled, workload.fresh_args, outputs, profile=profile, interpreted=interpreted
    )


def _cell(
    run: _Run, w, variant: VariantConfig, workload, reference: Reference | None
) -> tuple[CellResult, Reference]:
    """Measure one cell against `reference` (None: it is the reference cell); its record, and
    what it gives the workload's other cells as their Reference."""
    start = time.perf_counter()
    trace_dir = _new_trace_dir(
        run, w.cell.cell_id(variant.name, run.backend, _processes(run.layout))
    )
    watch.doing(f"measuring {w.label} under {variant.name}")
    try:
        measured, mine = _measure(run, variant, workload, reference, trace_dir)
    except Exception as err:  # one cell's failure must not end the sweep
        watch.on_failure(err)  # ...but a lost process ends the run (its line names it)
        gc.collect()
        return _error_record(run, w, variant, workload, err), Reference()
    finally:
        if trace_dir is not None and not run.config.measure.keep_traces:
            shutil.rmtree(trace_dir, ignore_errors=True)
    measured["wall_s"] = time.perf_counter() - start
    record = _record(run, w, variant, workload, Status.OK, measured)
    return fields_lib.with_rates(record, run.backend), mine


def _measure_request(run: _Run, workload, trace_dir: Path | None = None) -> MeasureRequest:
    settings = run.config.timing
    profile_calls = PROFILE_CALLS if run.config.measure.profile else 0
    folder = str(trace_dir) if trace_dir is not None else None
    return MeasureRequest(settings, workload.mode == "train", profile_calls, folder)


def _first_outputs(compiled, workload):
    """One call's outputs on the host, in the form the numerics rule compares."""
    if compiled.measured is not None:
        return host_outputs(workload, compiled.measured.outputs)
    return host_outputs(workload, compiled(*workload.fresh_args()))


def _measure(
    run: _Run, variant: VariantConfig, workload, reference: Reference | None, trace_dir=None
) -> tuple[dict[str, Any], Reference]:
    """The cell's measured parts, by CellResult field name (`fields_lib` makes each), and the
    Reference its program would be to the workload's other cells.

    Steps, each returning its value: compile, first call, numerics against the reference
    (`judge_against`), timing against it (`_time` -> `time_against`), the traced kernels
    (`_kernel_fields`), then the record part of each (`fields_lib`)."""
    resolved = variant.resolve()
    if resolved.framework == Framework.TORCH:  # the workload's PyTorch twin (xlafuse.torch)
        return _measure_twin(run, resolved, workload, reference), Reference()
    _check_in_process(run, variant.name, resolved)
    workload = workload.with_implementation(resolved.implementation)  # impl=NAME (issue 46)
    request = _measure_request(run, workload, trace_dir)
    compiled = compile_workload(workload, resolved, request)
    outputs = _first_outputs(compiled, workload)
    diff = judge_against(reference, workload, outputs, compiled=compiled)
    against = timed_against(reference, workload.interpreted)  # interpreted: timed alone
    timed, comparison, profile = _time(run, compiled, workload, against, request)
    kernels, baseline = _kernel_fields(run, compiled, workload, trace_dir, against, variant.name)
    mine = Reference(
        compiled, workload.fresh_args, outputs, timed, profile, None, baseline, workload.interpreted
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
            _missed(variant, workload, compiled),
            hlo_text=None if "kernel_times" in kernels else compiled.hlo_text,
        ),
        "interpreted": workload.interpreted,
    }
    if workload.devices > 1:
        measured["collectives"] = fields_lib.collectives_part(compiled.collectives)
    if profile is not None:
        own_reference = against.profile if against is not None else None
        measured["device"] = fields_lib.device_part(profile, own_reference)
        measured["comm"] = fields_lib.comm_part(profile.comm)
    if run.config.measure.cold_start:
        measured["cold_start"] = fields_lib.cold_start_part(workload, variant)
    return measured, mine


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
    flat = measure_cell(workload, resolved, request, reference, cold_start)
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
    args = workload.fresh_args()
    timed, comparison = time_against(reference, compiled, args, request.settings, advance, lead)
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
    return fields_lib.processes_part(timed, lead, device_times)


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
    return profile_device_time(compiled, args, calls, advance, request.trace_dir)


def _new_trace_dir(run: _Run, cell: str) -> Path | None:
    measure = run.config.measure
    if not measure.profile:
        return None
    process = run.layout.index if run.layout.distributed else None
    return cell_kernels.new_trace_dir(run.results_path.parent, cell, measure.keep_traces, process)


def _kernel_fields(run: _Run, compiled, workload, trace_dir, reference, variant: str):
    """(trace_path, kernel_times and, for a cell other than the reference, kernel_diff; the
    cell's traced kernels as a Baseline): `cell_kernels.kernel_fields`."""
    if trace_dir is None:
        return {}, None
    ceilings = (
        (run.ceilings.copy_bytes_per_s, run.ceilings.matmul_flops_per_s)
        if run.ceilings
        else (None, None)
    )
    return cell_kernels.kernel_fields(
        trace_dir,
        run.results_path.parent if run.config.measure.keep_traces else None,
        compiled,
        workload,
        PROFILE_CALLS,
        ceilings,
        reference.kernels if reference is not None else None,
        (run.config.reference, variant),
        _twin(run, compiled, workload),
    )


def _twin(run: _Run, compiled, workload):
    """XLA's estimates of a traced GPU cell's program, from a twin compile
    (`xlafuse.measure.predicted`: the timed compile is left without the option); None on a
    CPU and for a variant compiled in a child process. A failure is recorded, never fatal."""
    if run.backend != "gpu" or compiled.compiled is None:
        return None
    try:
        return compile_twin(workload, compiled.variant, compiled.report)
    except Exception as err:
        return {"error": error_line(err)}


def _identity(run: _Run, w: WorkloadConfig, variant: VariantConfig, workload) -> dict[str, Any]:
    cell = w.cell
    return {
        "workload": cell.name,
        "size": cell.size,
        "mode": cell.mode,
        "dtype": workload.dtype if workload is not None else cell.dtype,
        "dtype_requested": cell.dtype,
        "overrides": dict(cell.overrides),
        "entry": cell.entry,
        "source_sha256": w.source_sha256,
        "source_files": _source_files(w),
        "devices": cell.devices,
        "parallelism": cell.parallelism if cell.mesh else None,
        "processes": run.layout.processes,
        "process_devices": run.layout.process_devices if run.layout.distributed else None,
        "variant": variant.name,
        "variant_options": variant.to_dict(),
        **_framework(variant),
        "implementation": _implementation(variant, workload),
        "reference": run.config.reference,
        "backend": run.backend,
        "device_kind": run.device_kind,
        "cell_id": cell.cell_id(variant.name, run.backend, _processes(run.layout)),
        "experiment": run.config.name,
        "model": fields_lib.model_part(workload),
        "ceilings": run.ceilings or parts.CeilingsRecord(),
        "env": run.env,
        "settings": run_environment.cell_settings(run.settings, variant),
    }


def _framework(variant: VariantConfig) -> dict[str, Any]:
    """The framework a cell runs on and its version (XLA's for a variant that no longer
    resolves)."""
    try:
        resolved = variant.resolve()
    except ValueError:
        return {"framework": Framework.JAX, "framework_version": jax.__version__}
    return {"framework": resolved.framework, "framework_version": resolved.framework_version()}


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


def _record(run, w, variant, workload, status, fields) -> CellResult:
    return CellResult(**_identity(run, w, variant, workload), status=status, **fields)


def _error_record(run, w, variant, workload, err: BaseException) -> CellResult:
    message = (str(err).strip() or type(err).__name__).splitlines()[0][:2000]
    fields = {"error": message, "error_type": type(err).__name__}
    return _record(run, w, variant, workload, Status.ERROR, fields)


def _finish(run: _Run, record: CellResult, reference: CellResult | None, advance) -> None:
    if not run.writer:
        run.kept.append(record)
        return
    watch.doing(f"writing the record of {record.cell_id}")
    append_result(run.results_path, record)
    run.say(cell_line(record, reference))
    advance()
    interrupts.check()  # a Ctrl-C that Python swallowed stops the run here


def _selected_records(
    config: ExperimentConfig, results_path: Path, backend: str, layout=runtime.SINGLE
) -> list[CellResult]:
    if not results_path.exists():
        return []
    # its lines that are no record were said at the start (`run_experiment`)
    latest = {r.cell_id: r for r in records.latest_per_cell(records.parse_file(results_path)[0])}
    variants = _ordered_variants(config)
    processes = _processes(layout)
    keys = [w.cell.cell_id(v.name, backend, processes) for w in config.workloads for v in variants]
    return [latest[k] for k in keys if k in latest]


def _write_report(results_path: Path, out_dir: Path, say) -> None:
    """report.md and the plots of the results file (`write_report`); nothing while it holds
    no record yet."""
    if not results_path.exists() or not results_path.stat().st_size:
        return
    watch.doing(f"writing the report into {out_dir}")
    say(f"report: {write_report(results_path, out_dir)}")


def _report_after_failure(results_path: Path, say) -> None:
    """The report of a run that is ending on an error or an interrupt: a report that cannot be
    written is said, so that the run's own error is the one raised."""
    try:
        _write_report(results_path, results_path.parent, say)
    except Exception as err:
        why = str(err).splitlines()[0] if isinstance(err, XlafuseError) else error_line(err)
        say(f"report not written: {why}")
