"""A run's plan: what it runs, where, and which of its cells are still to do.

`scope_of` reads the config as this run takes it (the selected workloads and variants of this
backend, its processes, its settings) into a frozen `Scope`, whose `cell` makes each cell's one
id. `take_folder` takes the output folder (its lock held, a torn last line set aside, a results
file of other settings or other sources of the user's refused) and yields the plan: each
workload with its cells still to run, which process 0 of a distributed run sends to the others
(`received_plan`). `phases` puts the XLA cells before the PyTorch twins';
`selected_records` reads back the latest record of every selected cell.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax

from xlafuse.distributed import messages, runtime
from xlafuse.errors import XlafuseError, check_selected
from xlafuse.experiment import environment as run_environment
from xlafuse.experiment.config import ExperimentConfig, VariantConfig, WorkloadConfig, load_config
from xlafuse.kinds import Framework
from xlafuse.models import registry, user
from xlafuse.models.sharding import check_device_count
from xlafuse.results import parts, records
from xlafuse.results.records import CellResult
from xlafuse.results.settings import check_resumable


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunCell:
    """One cell of a run: its workload's config, its variant and its id (`Scope.cell`)."""

    w: WorkloadConfig
    variant: VariantConfig
    id: str


Plan = list[tuple[WorkloadConfig, list[RunCell]]]  # each workload with its cells still to run


@dataclasses.dataclass(frozen=True, kw_only=True)
class Scope:
    """A run as it is known before its output folder is taken (`scope_of`); never changed.

    Attributes:
      config: the config as this run takes it (`_for_this_run`: the selected workloads and
        variants, those of this backend).
      backend, device_kind: where it runs. layout: its processes (`runtime.layout`).
      settings: its settings (`run_environment.run_settings` and the layout's), which a results
        file must share to be resumed.
      built: workloads already built, by the config's name (`xlafuse.measure`'s function).
      ceilings: the calibration given for a results file that has none.
      report: whether report.md and the plots are written.
    """

    config: ExperimentConfig
    backend: str
    device_kind: str
    layout: runtime.Layout
    settings: Mapping[str, Any]
    built: Mapping[str, Any]
    ceilings: parts.CeilingsRecord | None
    report: bool

    def cell(self, w: WorkloadConfig, variant: VariantConfig) -> RunCell:
        """The cell of `w` under `variant`, with its id: the one place a cell id is made
        (`Cell.cell_id`, its processes appended under `jax.distributed`)."""
        processes = self.layout.label if self.layout.distributed else None
        return RunCell(
            w=w, variant=variant, id=w.cell.cell_id(variant.name, self.backend, processes=processes)
        )


def scope_of(
    config: ExperimentConfig | str | Path,
    *,
    only: Sequence[str] | None,
    variants: Sequence[str] | None,
    built: Mapping[str, Any] | None,
    ceilings: parts.CeilingsRecord | None,
    report: bool,
) -> Scope:
    """The run as known before its folder is taken: the config as this run takes it, where
    it runs, its processes and its settings.

    Raises:
      DeviceCountError, XlafuseError: as `run_experiment` (before any folder is touched).
    """
    config, backend = _for_this_run(config, only, variants)
    layout = runtime.layout()
    for w in config.workloads:
        runtime.check_spans_processes(w.devices, f"workload {w.label!r}")
    device_kind = jax.devices()[0].device_kind
    settings = {**run_environment.run_settings(config, backend, device_kind), **layout.settings()}
    return Scope(
        config=config,
        backend=backend,
        device_kind=device_kind,
        layout=layout,
        settings=settings,
        built=dict(built or {}),
        ceilings=ceilings,
        report=report,
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Taken:
    """The output folder as a run takes it (`take_folder`).

    Attributes:
      results_path: its results file. torn: where its torn last line was set aside, or None.
      plan: each workload with its cells still to run. done: the cells already recorded.
      skipped: one line per line of the file that is not a record (`records.skipped_line`).
    """

    results_path: Path
    torn: Path | None
    plan: Plan
    done: int
    skipped: tuple[str, ...]

    @property
    def todo(self) -> int:
        """The cells still to run."""
        return sum(len(cells) for _, cells in self.plan)


@contextlib.contextmanager
def take_folder(scope: Scope, folder: str | Path, *, fresh: bool) -> Iterator[Taken]:
    """The output folder taken (its lock held for the `with` block), fresh or repaired, and
    the plan: yields a `Taken`. A results file of another program is refused before its torn
    tail is touched. The plan, or why there is none, goes to the other processes of a
    distributed run."""
    with contextlib.ExitStack() as held:
        try:
            out_dir = records.prepare_output(folder)
            held.enter_context(records.lock_folder(out_dir))
            results_path = out_dir / records.RESULTS_FILE
            if fresh:
                move_aside(results_path)
            records.check_appendable(results_path)
            torn = records.repair_tail(results_path)
            plan, done = _plan(scope, results_path)
            skipped = _skipped_lines(results_path)
        except Exception as err:  # whatever stops process 0 stops the others: sent, raised
            _share_plan(scope, None, err)
            raise
        _share_plan(scope, plan, None)
        yield Taken(results_path=results_path, torn=torn, plan=plan, done=done, skipped=skipped)


def _skipped_lines(results_path: Path) -> tuple[str, ...]:
    """`FILE:LINE: skipping a record that is ...` for each line of the file that is no record."""
    if not results_path.exists():
        return ()
    return tuple(
        records.skipped_line(results_path, number, reason)
        for number, reason in records.parse_file(results_path)[1]
    )


def _share_plan(scope: Scope, plan: Plan | None, err: BaseException | None) -> None:
    """Process 0's plan (each workload's index in the config and its variants still to run),
    or the first line of why it has none, sent to the other processes (`received_plan`)."""
    if not scope.layout.distributed:
        return
    if err is not None:
        message: dict[str, Any] = {"error": (str(err).strip() or type(err).__name__)}
    else:
        index = {id(w): i for i, w in enumerate(scope.config.workloads)}
        todo = [[index[id(w)], [c.variant.name for c in cells]] for w, cells in plan or []]
        message = {"todo": todo}
    messages.share(message, scope.layout.processes)


def received_plan(scope: Scope) -> Plan:
    """On a process other than 0: process 0's plan (`_share_plan`), its cells made here.

    Raises:
      XlafuseError: process 0 has no plan (the first line of its reason).
    """
    message = messages.share(None, scope.layout.processes)
    if "error" in message:
        raise XlafuseError(message["error"].splitlines()[0])
    config = scope.config
    return [
        (config.workloads[i], [scope.cell(config.workloads[i], config.variant(n)) for n in names])
        for i, names in message["todo"]
    ]


def _for_this_run(config, only, variants) -> tuple[ExperimentConfig, str]:
    """The config (read, when a path) as this run takes it: the selected workloads and
    variants of this backend; and the backend. Refuses more devices than the backend has."""
    if not isinstance(config, ExperimentConfig):
        config = load_config(config)
    backend = jax.default_backend()
    config = _for_backend(select(config, only, variants), backend, print)
    check_device_count(max((w.devices for w in config.workloads), default=1))
    return config, backend


def _plan(scope: Scope, results_path: Path) -> tuple[Plan, int]:
    """(each workload with its cells still to run, the cells already done), once the results
    file is known to hold cells of these settings only (`check_resumable`)."""
    config = scope.config
    sources = {w.name: (w.entry, w.source_sha256) for w in config.workloads}
    _check_source_files(results_path, config)
    check_resumable(
        results_path,
        scope.settings,
        variants=run_environment.by_name(config.variants),
        sources=sources,
    )
    done = records.finished_cells(results_path)
    return [(w, _todo(scope, w, done)) for w in config.workloads], len(done)


def _check_source_files(results_path: Path, config: ExperimentConfig) -> None:
    """Refuse to resume a workload whose source files changed, naming the files: a record's
    `source_files` against this run's (`source_files`). A program of one file, and a record
    without them (older, or the zoo's), are left to `check_resumable`, which compares
    `source_sha256` alone ("its source file changed")."""
    if not results_path.exists():
        return
    now = {w.name: (w.entry, w.source_sha256, w) for w in config.workloads if w.source_sha256}
    for record in records.parse_file(results_path)[0]:
        entry, sha, w = now.get(record.workload, (None, None, None))
        if w is None or record.entry != entry or record.source_sha256 == sha:
            continue
        files = source_files(w)
        if not record.source_files or not files or len({*record.source_files, *files}) < 2:
            continue
        changed = user.changed_sources(record.source_files, files)
        raise XlafuseError(
            f"{results_path} holds results measured under other settings (workload "
            f"{record.workload!r}: its source changed: {changed}): resuming would mix them; "
            "pass --fresh to move that file aside and start over, or write to another --out"
        )


def source_files(w: WorkloadConfig) -> dict[str, str]:
    """The files hashed into `w.source_sha256`, path -> SHA-256 (`user.source_files`): an
    entry's file or the imported file that registered the workload, and the user's modules it
    imports. Empty for the zoo's workloads, and where they no longer make that hash (a file
    that changed since the config was read, a function `xlafuse.measure` was given)."""
    if w.source_sha256 is None:
        return {}
    try:
        if w.entry:
            files = user.entry_sources(user.parse_entry(w.entry, base=w.base))
        else:
            files = registry.source_files(w.name)
    except XlafuseError:
        return {}
    return files if files and user.sources_sha256(files) == w.source_sha256 else {}


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


def ordered_variants(config: ExperimentConfig) -> list[VariantConfig]:
    """The reference first, then the others in config order."""
    reference = [v for v in config.variants if v.name == config.reference]
    return reference + [v for v in config.variants if v.name != config.reference]


def phases(plan: Plan) -> list[Plan]:
    """The XLA cells of every workload first, then the cells of the PyTorch twins.

    Once torch's profiler has run, it keeps CUPTI for the rest of the process and jax's profiler
    can no longer subscribe: an XLA cell measured after a torch cell would have no device time.
    The torch cells of a workload find its reference recorded and compile it again.
    """
    xla = [(w, [c for c in cells if not is_torch(c.variant)]) for w, cells in plan]
    twins = [(w, [c for c in cells if is_torch(c.variant)]) for w, cells in plan]
    return [xla, twins] if any(cells for _, cells in twins) else [xla]


def is_torch(variant: VariantConfig) -> bool:
    return framework_of(variant)["framework"] == Framework.TORCH


def _todo(scope: Scope, w: WorkloadConfig, done: Mapping[str, CellResult]) -> list[RunCell]:
    cells = (scope.cell(w, v) for v in ordered_variants(scope.config))
    return [c for c in cells if c.id not in done]


def move_aside(path: Path) -> None:
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


def framework_of(variant: VariantConfig) -> dict[str, Any]:
    """The framework a cell runs on and its version (XLA's for a variant that no longer
    resolves)."""
    try:
        resolved = variant.resolve()
    except ValueError:
        return {"framework": Framework.JAX, "framework_version": jax.__version__}
    return {"framework": resolved.framework, "framework_version": resolved.framework_version()}


def selected_records(scope: Scope, results_path: Path) -> list[CellResult]:
    if not results_path.exists():
        return []
    # its lines that are no record were said at the start (`run_experiment`)
    latest = {r.cell_id: r for r in records.latest_per_cell(records.parse_file(results_path)[0])}
    variants = ordered_variants(scope.config)
    keys = [scope.cell(w, v).id for w in scope.config.workloads for v in variants]
    return [latest[k] for k in keys if k in latest]
