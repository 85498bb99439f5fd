"""Run an experiment config cell by cell (workload x variant) and append a record per cell.

Per workload: build it once, then for each variant, the reference first (so speedups and numeric
differences have something to compare with): compile under the variant, read the fusion report and
XLA's cost and memory analyses, run once for the outputs, compare them with the reference's,
time the calls, trace them on a GPU if asked, derive rates, and append the record at once.

A cell that raises (an out-of-memory, a compile error, XLA rejecting an option) becomes a record
with status "error" and the sweep goes on. Re-running a config skips the cells already recorded
as "ok" (`fresh=True` moves the old results aside); a Ctrl-C keeps every finished cell.
"""

from __future__ import annotations

import dataclasses
import difflib
import gc
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import jax

from xlafuse import results as results_lib
from xlafuse.compile import compile_variant
from xlafuse.config import ExperimentConfig, VariantConfig, WorkloadConfig, load_config
from xlafuse.errors import XlafuseError
from xlafuse.measure import timing
from xlafuse.measure.calibrate import Ceilings, calibrate
from xlafuse.measure.profile import profile_device_time
from xlafuse.numerics import compare_outputs
from xlafuse.results import CellResult, append_result, cell_id

PROFILE_CALLS = 10


@dataclasses.dataclass
class _Run:
    """What every cell of one run shares."""

    config: ExperimentConfig
    results_path: Path
    backend: str
    device_kind: str
    env: dict[str, Any]
    ceilings: Ceilings | None
    say: Callable[[str], None]
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _Reference:
    """The reference variant's outputs (on the host) and its record, for the other cells."""

    outputs: Any = None
    record: CellResult | None = None


def run_experiment(
    config: ExperimentConfig | str | Path,
    out: str | Path | None = None,
    only: Sequence[str] | None = None,
    variants: Sequence[str] | None = None,
    fresh: bool = False,
    progress: bool = True,
) -> list[CellResult]:
    """Run every cell of an experiment, resuming where an earlier run of it stopped.

    Args:
      config: an ExperimentConfig or the path of its TOML file.
      out: results folder; the config's `experiment.output` when None.
      only: workload names (or labels like "mlp/tiny/train") to run; all when None.
      variants: variant names to run (the reference is always included); all when None.
      fresh: move earlier results aside and start over instead of resuming.
      progress: show a progress bar with an ETA (a line per cell is printed either way).

    Returns:
      The latest record of every selected cell, earlier runs' included, in sweep order.

    Raises:
      XlafuseError: an invalid config, `only`/`variants` naming nothing in it, an output
        folder that cannot be written, one that another run holds, or a results file there
        written under other settings (resuming would mix them).
    """
    if not isinstance(config, ExperimentConfig):
        config = load_config(config)
    config = select(config, only, variants)
    backend = jax.default_backend()
    config = _for_backend(config, backend, print)
    out_dir = results_lib.prepare_output(out if out is not None else config.output)
    results_path = out_dir / results_lib.RESULTS_FILE
    settings = results_lib.run_settings(config, backend, jax.devices()[0].device_kind)
    with results_lib.lock_folder(out_dir):
        if fresh:
            _move_aside(results_path)
        torn = results_lib.repair_tail(results_path)
        results_lib.check_resumable(results_path, settings, config.variants)
        done = results_lib.finished_cells(results_path)
        plan = [(w, _todo(config, w, backend, done)) for w in config.workloads]
        todo = sum(len(cells) for _, cells in plan)
        with _Reporter(progress, todo) as reporter:
            if torn is not None:
                reporter.say(f"a torn last line of {results_path} was moved aside to {torn}")
            if todo:
                run = _start(config, results_path, settings, reporter.say, todo, len(done))
                try:
                    for workload_config, cells in plan:
                        _run_workload(run, workload_config, cells, done, reporter.advance)
                finally:
                    _write_report(results_path, out_dir, reporter.say)
            else:
                cells = len(config.workloads) * len(config.variants)
                reporter.say(f"all {cells} cells already in {results_path}; nothing to run")
                _write_report(results_path, out_dir, reporter.say)
    return _selected_records(config, results_path, backend)


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
        _check_names("workload", only, labels)
        workloads = tuple(w for w in workloads if w.name in only or w.label in only)
    chosen = config.variants
    if variants:
        _check_names("variant", variants, [v.name for v in config.variants])
        chosen = tuple(v for v in chosen if v.name in variants or v.name == config.reference)
    return dataclasses.replace(config, workloads=workloads, variants=chosen)


def _for_backend(config: ExperimentConfig, backend: str, say) -> ExperimentConfig:
    """The config without the workloads whose `backends` exclude this backend."""
    kept = tuple(w for w in config.workloads if w.applies_to(backend))
    skipped = [w.label for w in config.workloads if not w.applies_to(backend)]
    if skipped:
        say(f"skipped on {backend} (the config's backends key): {', '.join(skipped)}")
    return dataclasses.replace(config, workloads=kept)


def _check_names(kind: str, names: Iterable[str], accepted: list[str]) -> None:
    for name in names:
        if name not in accepted:
            close = difflib.get_close_matches(name, accepted, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise XlafuseError(
                f"no {kind} {name!r} in the config{hint}; it has: {', '.join(dict.fromkeys(accepted))}"
            )


def _ordered_variants(config: ExperimentConfig) -> list[VariantConfig]:
    """The reference first, then the others in config order."""
    reference = [v for v in config.variants if v.name == config.reference]
    return reference + [v for v in config.variants if v.name != config.reference]


def _cell_id(w: WorkloadConfig, variant: str, backend: str) -> str:
    return cell_id(w.name, w.size, w.mode, w.dtype, w.overrides, variant, backend)


def _todo(config, w: WorkloadConfig, backend: str, done) -> list[VariantConfig]:
    return [v for v in _ordered_variants(config) if _cell_id(w, v.name, backend) not in done]


def _move_aside(path: Path) -> None:
    results_lib.move_aside(path)


def _start(config, results_path, settings, say, todo: int, skipped: int) -> _Run:
    backend, device_kind = settings["backend"], settings["device_kind"]
    say(
        f"{config.name}: {todo} cells to run on {backend} ({device_kind})"
        + (f", {skipped} already done" if skipped else "")
        + f" -> {results_path}"
    )
    ceilings = None
    if config.measure.calibrate:
        ceilings = calibrate(backend)
        flops = ceilings.matmul_flops_per_s
        say(
            f"ceilings: copy {ceilings.copy_bytes_per_s / 1e9:.1f} GB/s"
            + (f", matmul {flops / 1e12:.2f} TFLOP/s" if flops else "")
        )
    env = results_lib.environment(config.config_hash())
    return _Run(config, results_path, backend, device_kind, env, ceilings, say, settings)


def _run_workload(run: _Run, w: WorkloadConfig, cells, done, advance) -> None:
    """Every pending variant of one workload, the reference first."""
    if not cells:
        return
    from xlafuse import models

    try:
        workload = models.build(w.name, w.size, w.mode, w.dtype, **w.overrides)
    except Exception as err:
        for variant in cells:
            _finish(run, _error_record(run, w, variant, None, err), None, advance)
        return
    reference = _reference(run, w, workload, cells, done, advance)
    for variant in cells:
        if variant.name == run.config.reference:
            continue
        record, _ = _cell(run, w, variant, workload, reference)
        _finish(run, record, reference.record, advance)
    del workload, reference
    gc.collect()


def _reference(run: _Run, w, workload, cells, done, advance) -> _Reference:
    """Run the reference cell, or (already recorded) only compile and call it for its outputs."""
    name = run.config.reference
    if any(v.name == name for v in cells):
        record, outputs = _cell(run, w, run.config.variant(name), workload, _Reference())
        _finish(run, record, None, advance)
        return _Reference(outputs, record)
    record = done.get(_cell_id(w, name, run.backend))
    try:
        compiled = compile_variant(
            workload.fn, workload.args, {}, run.config.variant(name).resolve(), {}
        )
        outputs = _checked_outputs(workload, compiled(*workload.args))
    except Exception:
        outputs = None
    return _Reference(outputs, record)


def _cell(run: _Run, w, variant: VariantConfig, workload, reference: _Reference):
    """Measure one cell; returns (record, outputs on the host or None)."""
    start = time.perf_counter()
    try:
        fields, outputs = _measure(run, variant, workload, reference)
    except Exception as err:  # one cell's failure must not end the sweep
        gc.collect()
        return _error_record(run, w, variant, workload, err), None
    fields["wall_s"] = time.perf_counter() - start
    return _record(run, w, variant, workload, "ok", fields), outputs


def _measure(run: _Run, variant: VariantConfig, workload, reference: _Reference):
    compiled = compile_variant(workload.fn, workload.args, {}, variant.resolve(), {})
    fields = {"lower_s": compiled.lower_s, "compile_s": compiled.compile_s}
    fields.update(_report_fields(compiled.report))
    fields.update(_analysis_fields(compiled))
    outputs = _checked_outputs(workload, compiled(*workload.args))
    if reference.outputs is not None:
        diff = compare_outputs(reference.outputs, outputs, compute_dtype=workload.dtype)
        fields.update(
            max_abs_diff=diff.max_abs_diff,
            max_rel_diff=diff.max_rel_diff,
            within_tolerance=diff.within_tolerance,
        )
    advance = timing.thread_state if workload.mode == "train" else timing.same_args
    settings = timing.TimingSettings.from_config(run.config.timing)
    measured = timing.measure(compiled, workload.args, settings, advance)
    fields.update(dataclasses.asdict(measured))
    if run.config.measure.profile:
        profile = profile_device_time(compiled, workload.args, PROFILE_CALLS, advance)
        if profile is not None:
            fields["device_time_s"] = profile.device_time_s
            fields["device_kernels_per_call"] = profile.device_kernels_per_call
    if run.config.measure.cold_start:
        fields.update(_cold_start_fields(workload, variant))
    is_reference = variant.name == run.config.reference
    fields.update(_derived(run, workload, fields, None if is_reference else reference.record))
    if is_reference:
        fields["speedup_vs_reference"] = 1.0
    return fields, outputs


_COLD_START_KEYS = (
    "import_s", "cold_compile_s", "warm_compile_s", "first_call_s", "steady_call_s",
    "aot_export_s", "aot_load_s", "cache_hit", "cache_entries", "cache_speedup",
)  # fmt: skip


def _cold_start_fields(workload, variant: VariantConfig) -> dict[str, Any]:
    """Cold/warm-cache compile and AOT load of this cell, measured in fresh processes."""
    from xlafuse.measure.coldstart import measure_cold_start

    measured = measure_cold_start(workload, variant.resolve()).to_dict()
    return {key: measured[key] for key in _COLD_START_KEYS}


def _checked_outputs(workload, outputs):
    """What the numeric check compares, copied to the host.

    A train step is judged by its loss. Its updated state is not compared: AdamW's first step
    divides each gradient by its own magnitude, so a gradient that is rounding noise in both
    variants moves a parameter by up to the learning rate either way, which would flag every
    fused-vs-unfused pair without any real difference.
    """
    if workload.mode == "train":
        _, loss = outputs
        return jax.device_get(loss)
    return jax.device_get(outputs)


def _report_fields(report) -> dict[str, Any]:
    return {
        "kernels": report.kernels,
        "fusions": report.fusions,
        "real_fusions": report.real_fusions,
        "custom_calls": report.custom_calls,
        "custom_call_targets": dict(report.custom_call_targets),
        "kinds": dict(report.kinds),
        "modeled_bytes": report.modeled_bytes,
    }


def _analysis_fields(compiled) -> dict[str, Any]:
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


def _derived(run: _Run, workload, fields, reference: CellResult | None) -> dict[str, Any]:
    """Rates from the measured times: items/s, bandwidth, % of the copy ceiling, TFLOP/s."""
    wall = fields["time_median_s"]
    basis, seconds = _rate_basis(run.backend, fields)
    derived: dict[str, Any] = {
        "items_per_s": workload.items_per_call / wall if wall else None,
        "rate_basis": basis,
    }
    if fields.get("modeled_bytes") and seconds:
        derived["achieved_bytes_per_s"] = fields["modeled_bytes"] / seconds
        if run.ceilings is not None:
            ceiling = run.ceilings.copy_bytes_per_s
            derived["pct_of_copy_ceiling"] = 100.0 * derived["achieved_bytes_per_s"] / ceiling
    if workload.flops and seconds:
        derived["tflops"] = workload.flops / seconds / 1e12
    if reference is not None and reference.ok and reference.time_median_s and wall:
        derived["speedup_vs_reference"] = reference.time_median_s / wall
    return derived


def _rate_basis(backend: str, fields: dict[str, Any]) -> tuple[str, float | None]:
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


def _identity(run: _Run, w: WorkloadConfig, variant: VariantConfig, workload) -> dict[str, Any]:
    ceilings = run.ceilings
    return {
        "workload": w.name,
        "size": w.size,
        "mode": w.mode,
        "dtype": workload.dtype if workload is not None else w.dtype,
        "dtype_requested": w.dtype,
        "overrides": dict(w.overrides),
        "variant": variant.name,
        "variant_options": variant.to_dict(),
        "reference": run.config.reference,
        "backend": run.backend,
        "device_kind": run.device_kind,
        "cell_id": _cell_id(w, variant.name, run.backend),
        "experiment": run.config.name,
        "num_params": getattr(workload, "num_params", None),
        "items_per_call": getattr(workload, "items_per_call", None),
        "items_unit": getattr(workload, "items_unit", None),
        "flops": getattr(workload, "flops", None),
        "copy_ceiling_bytes_per_s": ceilings.copy_bytes_per_s if ceilings else None,
        "copy_ceiling_basis": ceilings.copy_basis if ceilings else None,
        "matmul_ceiling_flops_per_s": ceilings.matmul_flops_per_s if ceilings else None,
        "env": run.env,
        "settings": results_lib.cell_settings(run.settings, variant),
    }


def _record(run, w, variant, workload, status, fields) -> CellResult:
    return CellResult(**_identity(run, w, variant, workload), status=status, **fields)


def _error_record(run, w, variant, workload, err: BaseException) -> CellResult:
    message = (str(err).strip() or type(err).__name__).splitlines()[0][:2000]
    fields = {"error": message, "error_type": type(err).__name__}
    return _record(run, w, variant, workload, "error", fields)


def _finish(run: _Run, record: CellResult, reference: CellResult | None, advance) -> None:
    append_result(run.results_path, record)
    run.say(cell_line(record, reference))
    advance()


def cell_line(record: CellResult, reference: CellResult | None = None) -> str:
    """One concise line per cell: `mlp/tiny/forward  no-fusion  kernels 9 (+5)  0.12 ms  0.61x  ok`."""
    extra = ",".join(f"{k}={v}" for k, v in sorted(record.overrides.items()))
    name = f"{record.workload}{f'[{extra}]' if extra else ''}/{record.size}/{record.mode}"
    if not record.ok:
        return f"{name}  {record.variant}  ERROR {record.error_type}: {record.error}"
    kernels = f"kernels {record.kernels}"
    if reference is not None and reference.kernels is not None and record.kernels is not None:
        kernels += f" ({record.kernels - reference.kernels:+d})"
    parts = [name, record.variant, kernels, f"{record.time_median_s * 1e3:.3g} ms"]
    if record.speedup_vs_reference is not None:
        parts.append(f"{record.speedup_vs_reference:.2f}x")
    if record.within_tolerance is False:
        parts.append(f"numerics FLAGGED (max abs diff {record.max_abs_diff:.2g})")
    parts.append("ok")
    return "  ".join(parts)


def _selected_records(
    config: ExperimentConfig, results_path: Path, backend: str
) -> list[CellResult]:
    if not results_path.exists():
        return []
    latest = {
        r.cell_id: r for r in results_lib.latest_per_cell(results_lib.load_results(results_path))
    }
    keys = [
        _cell_id(w, v.name, backend) for w in config.workloads for v in _ordered_variants(config)
    ]
    return [latest[k] for k in keys if k in latest]


def _write_report(results_path: Path, out_dir: Path, say) -> None:
    if not results_path.exists():
        return
    from xlafuse.report import write_report

    say(f"report: {write_report(results_path, out_dir)}")


class _Reporter:
    """A rich progress bar with an ETA (optional) and one printed line per finished cell."""

    def __init__(self, enabled: bool, total: int):
        self._enabled = enabled and total > 1
        self._total = total
        self._progress = None
        self._task = None
        self._closed = False  # stdout went away (`| head`): stop printing, not the sweep

    def __enter__(self) -> _Reporter:
        if self._enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("cells"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                transient=True,
                console=_console(),
            )
            self._progress.__enter__()
            self._task = self._progress.add_task("cells", total=self._total)
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def say(self, line: str) -> None:
        if self._closed:
            return
        try:
            if self._progress is not None:
                self._progress.console.print(line, markup=False, highlight=False)
            else:
                print(line, flush=True)
        except BrokenPipeError:
            self._closed = True
            _silence_stdout()

    def advance(self) -> None:
        if self._progress is not None:
            self._progress.advance(self._task)


def _console():
    """A rich console that goes quiet when stdout closes (rich's default exits the process)."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            _silence_stdout()

    return _Console()


def _silence_stdout() -> None:
    """Point a closed stdout at /dev/null so later writes and the exit flush do not fail."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
