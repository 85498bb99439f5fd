"""`xlafuse.measure(fn, *args)`: the runner's cell measurement of any function, from Python.

`xlafuse.compare` compiles each variant and calls it once (kernels, modeled bytes, compile
seconds, numerics: quick). `measure` runs the cells a config's run would: one per variant,
through the same runner (`xlafuse.experiment.runner.run_experiment`), so each is compiled on
the one compile path, judged against the first variant by the one numerics rule, timed in
rounds paired with it (latency and pipelined, each speedup with its interval and verdict) and,
on a GPU, traced: device time, every kernel's time joined to its HLO kernel, and the kernel
groups of each variant timed against the first's. The records are `CellResult`s, the schema of
`results.jsonl`: `xlafuse report` and `write_report` read them.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import io
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax

from xlafuse.errors import XlafuseError
from xlafuse.experiment.config import (
    ExperimentConfig,
    MeasureConfig,
    VariantConfig,
    WorkloadConfig,
    timing_problems,
    variant_problem,
)
from xlafuse.experiment.fields import ceilings_part
from xlafuse.experiment.runner import run_experiment
from xlafuse.kinds import Framework
from xlafuse.measure.calibrate import calibrate as calibrate_ceilings
from xlafuse.measure.timing import TimingSettings
from xlafuse.models import user
from xlafuse.models.workload import Workload
from xlafuse.report.cells import cell_tables
from xlafuse.report.lines import cell_label, cell_line
from xlafuse.results import records as records_lib
from xlafuse.results.parts import CeilingsRecord
from xlafuse.results.records import CellResult
from xlafuse.results.settings import check_resumable


@dataclasses.dataclass(frozen=True)
class Measurement:
    """What `measure` measured: one record per variant, the reference's first.

    Print it for the run's lines and the report's two tables (times, then work).

    Attributes:
      records: the cells' `CellResult`s, in variant order (the first is the reference).
      results_path: the results.jsonl they were written to (`out`), or None.
    """

    records: tuple[CellResult, ...]
    results_path: Path | None = None

    def record(self, variant: str) -> CellResult:
        """The record of one variant, by name.

        Raises:
          KeyError: no such variant here (the message lists them).
        """
        for r in self.records:
            if r.variant == variant:
                return r
        raise KeyError(f"no variant {variant!r} measured here: {[r.variant for r in self.records]}")

    def to_dict(self) -> list[dict[str, Any]]:
        """The records as results.jsonl holds them (flat JSON objects)."""
        return [r.to_dict() for r in self.records]

    def write(self, folder: str | Path) -> Path:
        """Appends the records to `folder`/results.jsonl and writes report.md and the plots
        there (`xlafuse.write_report`); returns the report's path.

        Raises:
          XlafuseError: the folder's results were measured under other settings (as a run
            refuses to resume there).
        """
        from xlafuse.report.markdown import write_report  # matplotlib: on use

        folder = records_lib.prepare_output(folder)
        path = folder / records_lib.RESULTS_FILE
        if self.records:
            shared = {k: v for k, v in self.records[0].settings.items() if k != "variant"}
            check_resumable(path, shared)
        for record in self.records:
            records_lib.append_result(path, record)
        return write_report(path, folder)

    def __str__(self) -> str:
        if not self.records:
            return "nothing measured"
        first = self.records[0]
        label = cell_label(first)
        reference = first if first.ok else None
        lines = [f"{label} on {first.backend} ({first.device_kind})"]
        lines += [cell_line(r, None if r is first else reference) for r in self.records]
        return "\n".join([*lines, "", *cell_tables(self.records)])


def measure(
    fn: Callable[..., Any] | Workload,
    *args: Any,
    variants: Sequence[str | Mapping[str, Any] | Any] = ("default", "no-fusion"),
    timing: TimingSettings | Mapping[str, Any] | None = None,
    profile: bool | None = None,
    donate_argnums: int | Sequence[int] = (),
    name: str | None = None,
    out: str | Path | None = None,
    fresh: bool = False,
    calibrate: bool = True,
    verbose: bool = False,
) -> Measurement:
    """Measure `fn(*args)` under each variant as `xlafuse run` measures a cell.

    Args:
      fn: a jit-able function, or an `xlafuse.models.Workload` (then no `args`). *args: its
        example arguments.
      variants: preset names ("a+b" composes), dicts of XLA options (named by a "name" key)
        or `Variant`s; the first is the reference every other is judged and timed against.
      timing: `TimingSettings` (or a dict of its fields); a config's `[timing]` defaults.
      profile: trace each cell for device and per-kernel times (None: on a GPU only).
      donate_argnums: a step that consumes its state: argument 0 is the state, donated, and
        `fn` returns `(new_state, ...)`; each timed call then gets the previous new state.
      name: what the records call the program (default: `fn.__name__`).
      out: a folder for results.jsonl, report.md, plots and traces; a later call with the same
        program and folder resumes there unless `fresh` (None: nothing is written).
      fresh: with `out`, move earlier results aside. verbose: print each cell's line (stderr).
      calibrate: measure the copy ceiling once per process (a results folder keeps its own).

    Returns:
      A Measurement: print it; `.records` are CellResults.

    Raises:
      XlafuseError: no variant, a variant twice, a variant that does not apply here or that
        XLA rejects, a PyTorch variant (it runs a zoo workload's twin), bad timing settings,
        or a program that jax cannot trace with its arguments (checked before any compile).
    """
    workload = _workload(fn, args, donate_argnums, name)
    config = _config(workload, _source_sha256(fn), variants, timing, profile, out, calibrate)
    ceilings = _process_ceilings(jax.default_backend()) if calibrate else None
    stream = sys.stderr if verbose else io.StringIO()
    kwargs = {"built": {workload.name: workload}, "ceilings": ceilings, "stream": stream}
    if out is not None:
        found = run_experiment(config, out=out, fresh=fresh, progress=False, **kwargs)
        return Measurement(tuple(found), Path(out) / records_lib.RESULTS_FILE)
    with tempfile.TemporaryDirectory(prefix="xlafuse-measure-") as folder:
        found = run_experiment(config, out=folder, progress=False, report=False, **kwargs)
    return Measurement(tuple(found))


def _config(workload, source_sha256, variants, timing, profile, out, calibrate):
    """The one-workload ExperimentConfig a run of `measure`'s cells takes (validated here)."""
    backend = jax.default_backend()
    chosen = _variants(variants, backend)
    cell = WorkloadConfig(workload.name, workload.size, workload.mode, source_sha256=source_sha256)
    return ExperimentConfig(
        name="measure",
        output=Path(out) if out is not None else Path("."),
        workloads=(cell,),
        variants=tuple(chosen),
        reference=chosen[0].name,
        timing=_timing(timing),
        measure=MeasureConfig(
            profile=backend == "gpu" if profile is None else bool(profile),
            keep_traces=out is not None,
            calibrate=calibrate,
        ),
    )


@functools.cache
def _process_ceilings(backend: str) -> CeilingsRecord:
    """This process's calibration (`xlafuse.measure.calibrate`), measured on first use."""
    return ceilings_part(calibrate_ceilings(backend))


def _workload(fn, args, donate_argnums, name) -> Workload:
    if isinstance(fn, Workload):
        if args or donate_argnums:
            raise XlafuseError("measure(workload) takes no arguments: the workload has its own")
        return dataclasses.replace(fn, name=name) if name else fn
    if not callable(fn):
        raise XlafuseError(f"measure needs a function or a Workload, not {type(fn).__name__}")
    label = name or getattr(fn, "__name__", None) or type(fn).__name__
    if not label.isidentifier():  # a lambda's "<lambda>" is no label
        label = "function"
    return user.workload_from((fn, args, donate_argnums), label)


def _variants(given: Sequence[Any], backend: str) -> list[VariantConfig]:
    if isinstance(given, str | Mapping) or not given:
        raise XlafuseError(
            f"variants must be a non-empty list of presets, option dicts or Variants, not "
            f"{given!r}; e.g. variants=['default', 'no-fusion']"
        )
    chosen = [VariantConfig.of(spec) for spec in given]
    names = [v.name for v in chosen]
    for config in chosen:
        if names.count(config.name) > 1:
            raise XlafuseError(f"variant {config.name!r} is given twice (names: {names})")
        if config.resolve().framework != Framework.JAX:
            raise XlafuseError(
                f"variant {config.name!r} runs a zoo workload's PyTorch twin; a function has "
                "none (use xlafuse run or compare on a zoo workload)"
            )
        problem = variant_problem(config, backend)
        if problem:
            raise XlafuseError(problem)
    return chosen


def _timing(timing: TimingSettings | Mapping[str, Any] | None) -> TimingSettings:
    if timing is None:
        return TimingSettings()
    if isinstance(timing, Mapping):
        fields = {f.name for f in dataclasses.fields(TimingSettings)}
        unknown = sorted(set(timing) - fields)
        if unknown:
            raise XlafuseError(f"timing: unknown {unknown}; accepted: {sorted(fields)}")
        timing = TimingSettings(**timing)
    found = timing_problems(timing)
    if found:
        where, message = found[0]
        raise XlafuseError(f"{where} {message}")
    return timing


def _source_sha256(fn: Any) -> str | None:
    """The hash of the file that defines `fn` (None where it has none, e.g. a notebook's)."""
    try:
        path = inspect.getsourcefile(fn)
    except TypeError:
        return None
    if path is None or not Path(path).is_file():
        return None
    return user.file_sha256(path)
