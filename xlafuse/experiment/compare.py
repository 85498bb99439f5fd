"""`xlafuse.compare`: one function, several variants, one table of what fusion changed."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import jax

from xlafuse.compiler.jit import compile_variant, compile_workload
from xlafuse.compiler.variants import get as get_variant
from xlafuse.errors import XlafuseError
from xlafuse.hlo.loops import PER_CALL
from xlafuse.kinds import Framework
from xlafuse.measurement.numerics import (
    compare_outputs,
    computed_precision,
    host_outputs,
    judge_workload,
)
from xlafuse.models.names import Cell
from xlafuse.models.workload import built_implementation_problem
from xlafuse.report.format import text_table

if TYPE_CHECKING:
    from xlafuse.models.workload import Workload


@dataclasses.dataclass(frozen=True)
class VariantRow:
    """One variant's line of a comparison.

    Attributes:
      variant: the variant's name.
      kernels: distinct kernels of the optimized HLO, a loop body's once (a torch variant:
        its `kernels_basis`, `xlafuse.torch.measure`).
      fusions: fusion instructions of the program text (None for a torch variant).
      real_fusions: fusions of two or more compute ops (None for a torch variant).
      modeled_bytes: modeled HBM traffic per call (operands read + outputs written per kernel,
        times its launches per call; None where a trip count is unknown; a torch variant:
        Inductor's count or eager's op operands, None where unknown).
      lower_s: seconds to trace and lower (None for a torch variant).
      compile_s: seconds to compile (a torch variant: the first call under torch.compile,
        Inductor's cache empty; None when eager, and when `compile_cached`).
      max_abs_diff: largest absolute difference of its outputs from the first variant's.
      max_rel_diff: largest relative difference from the first variant's.
      within_tolerance: whether every output agrees within its dtype's tolerance.
      collectives: collective instructions per call (a combined one counts once).
      logical_collectives: logical collectives they carry (the count without combining).
      collective_bytes: their operand bytes per device per call.
      launches_per_call: kernel launches in one call, a loop body's times its trip count
        (None where a trip count is unknown, and for a torch variant).
      per_call_basis: what the per-call figures count (`xlafuse.hlo.loops.per_call_basis`);
        None for a torch variant.
      bytes_per_iteration: one run of each kernel's modeled bytes, where a trip count is
        unknown (else None).
      compile_cached: whether a cache served the executable (the persistent cache, or JAX's
        in-memory one: `CompiledVariant.compile_cached`); the table says "cached".
    """

    variant: str
    kernels: int | None
    fusions: int | None
    real_fusions: int | None
    modeled_bytes: int | None
    lower_s: float | None
    compile_s: float | None
    max_abs_diff: float
    max_rel_diff: float
    within_tolerance: bool
    collectives: int = 0
    logical_collectives: int = 0
    collective_bytes: int = 0
    launches_per_call: int | None = None
    per_call_basis: str | None = None
    bytes_per_iteration: int | None = None
    compile_cached: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Comparison:
    """The rows of `compare`, the first being the reference."""

    function: str
    backend: str
    rows: tuple[VariantRow, ...]

    def row(self, variant: str) -> VariantRow:
        """The row of one variant, by name."""
        for r in self.rows:
            if r.variant == variant:
                return r
        raise KeyError(
            f"no variant {variant!r} in this comparison: {[r.variant for r in self.rows]}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "function": self.function,
            "backend": self.backend,
            "rows": [r.to_dict() for r in self.rows],
        }

    def __str__(self) -> str:
        header = (
            "variant",
            "kernels",
            "launches/call",
            "real fusions",
            "modeled MB/call",
            "compile s",
            "max |diff|",
            "agree",
        )
        sharded = any(r.collectives for r in self.rows)
        if sharded:
            header = (*header, "collectives", "logical", "coll. MB")
        lines = [
            (
                r.variant,
                _text(r.kernels),
                _text(r.launches_per_call if r.per_call_basis else r.kernels),
                _text(r.real_fusions),
                _text(r.modeled_bytes, 1e-6, ".3f"),
                "cached" if r.compile_cached else _text(r.compile_s, spec=".3f"),
                f"{r.max_abs_diff:.2e}",
                "yes" if r.within_tolerance else "NO",
            )
            + (
                (str(r.collectives), str(r.logical_collectives), f"{r.collective_bytes / 1e6:.3f}")
                if sharded
                else ()
            )
            for r in self.rows
        ]
        right = range(1, len(header))
        table = text_table(header, lines, right=right)
        return f"{self.function} on {self.backend}\n" + "\n".join([table, *self._basis_notes()])

    def _basis_notes(self) -> list[str]:
        """A line per variant whose per-call figures are not plainly per call."""
        notes = []
        for r in self.rows:
            if r.per_call_basis is None or r.per_call_basis == PER_CALL:
                continue
            if r.bytes_per_iteration is not None:
                mb = r.bytes_per_iteration / 1e6
                notes.append(f"{r.variant}: {r.per_call_basis} ({mb:.3f} MB per iteration)")
            else:
                notes.append(f"{r.variant}: {r.per_call_basis}")
        return notes


def _text(value: float | None, scale: float = 1.0, spec: str = "") -> str:
    if value is None:
        return "-"
    return format(value * scale if scale != 1.0 else value, spec)


def compare(
    fn: Callable,
    *args: Any,
    variants: Sequence = ("default", "no-fusion"),
    label: str | None = None,
    **jit_kwargs: Any,
) -> Comparison:
    """Compile `fn` under each variant, run it once on `args`, and tabulate the differences.

    The fast, compile-only view: kernels, modeled bytes, compile seconds and whether the
    outputs agree, with no timing. `xlafuse.measure` measures the same function as a run's
    cells (paired timing with an interval and a verdict; device and per-kernel times on a GPU).

    Args:
      fn: a JAX-traceable function.
      *args: example inputs.
      variants: preset names, Variants or option dicts; the first is the numerical reference.
      label: what the table calls the function (default: its __name__).
      **jit_kwargs: passed to `jax.jit`.

    Returns:
      A Comparison (print it for a table; `to_dict()` for JSON).
    """
    if not variants:
        raise ValueError("compare needs at least one variant")
    for variant in variants:
        named = get_variant(variant)
        if named.implementation:
            raise XlafuseError(
                f"variant {named.name!r} names an implementation, and a function has none: "
                'measure implementations with xlafuse.measure({"xla": f, "mine": g}, *args), or '
                "compare a Workload (compare_workload)"
            )
    rows, reference = [], None
    backend = jax.default_backend()
    for variant in variants:
        compiled = compile_variant(fn, args, {}, variant, jit_kwargs=jit_kwargs)
        outputs = jax.block_until_ready(compiled(*args))
        reference = outputs if reference is None else reference
        diff = compare_outputs(reference, outputs, compute_dtype=computed_precision(compiled))
        rows.append(_row(compiled, diff))
    label = label or getattr(fn, "__name__", type(fn).__name__)
    return Comparison(label, backend, tuple(rows))


def compare_workload(
    workload: Workload,
    *,
    variants: Sequence = ("default", "no-fusion"),
    on_step: Callable | None = None,
    cell: Cell | None = None,
) -> Comparison:
    """`compare` for an `xlafuse.models.Workload`, on the same program and rule as `xlafuse run`.

    Each variant is compiled by `compile_workload` (train state donated) and called once; the
    numerics verdict is `xlafuse.measurement.numerics.judge_workload` (a train step: loss, gradient, batch
    statistics and updated parameters), exactly as the runner judges the same cell.

    Args:
      workload: the workload.
      variants: preset names, Variants or option dicts; the first is the reference.
      on_step: called with a line of progress before each compile (e.g. for a TTY).
      cell: the cell the workload was built from (`Cell.build`): the table is headed with its
        label, overrides included (`rollout[envs=64]/custom/train`), in the mode the workload
        has; None: the workload's own cell, which knows no overrides.
    """
    resolved = _checked_variants(workload, variants)
    cell = Cell.of(workload) if cell is None else dataclasses.replace(cell, mode=workload.mode)
    name = cell.label
    rows, reference = [], None
    for spec, variant in zip(variants, resolved, strict=True):
        if on_step is not None:
            on_step(f"compiling {name} under {spec}")
        if variant.framework == Framework.TORCH:
            rows.append(_torch_row(workload, variant, reference))
            continue
        compiled = compile_workload(workload, variant)
        raw = compiled.measured.outputs if compiled.measured else None
        outputs = host_outputs(
            workload, raw if raw is not None else compiled(*workload.fresh_args())
        )
        reference = outputs if reference is None else reference
        diff = judge_workload(workload, reference, outputs, precision=computed_precision(compiled))
        rows.append(_row(compiled, diff))
    label = f"{cell.short_label} ({cell.on_devices})" if cell.on_devices else cell.short_label
    return Comparison(label, jax.default_backend(), tuple(rows))


def _checked_variants(workload, variants: Sequence) -> list:
    """`variants` resolved (`get_variant`), every one checked before any compile.

    Raises:
      ValueError: no variant, a name that does not resolve, or a PyTorch variant first (the
        reference must be an XLA one).
      XlafuseError: an `impl=NAME` the workload does not have or the device cannot run.
    """
    if not variants:
        raise ValueError("compare needs at least one variant")
    resolved = [get_variant(spec) for spec in variants]  # every name checked before any compile
    for variant in resolved:  # impl=NAME: one the workload has and the device runs (issue 46)
        problem = variant.implementation and built_implementation_problem(
            workload, variant.implementation
        )
        if problem:
            raise XlafuseError(f"variant {variant.name!r}: {problem}")
    if resolved[0].framework == Framework.TORCH:
        raise ValueError(
            f"the first variant is the reference and must be an XLA one, not "
            f"{resolved[0].name!r} (e.g. default,{resolved[0].name})"
        )
    return resolved


def _torch_row(workload, variant, reference) -> VariantRow:
    """A torch variant's row: its twin built and called once (`xlafuse.torch.measure`)."""
    variant.check_framework()
    from xlafuse.torch.measure import fresh_inductor_cache, run_twin  # deferred: torch is optional

    with fresh_inductor_cache():
        twin = run_twin(workload, variant)
    diff = judge_workload(workload, reference, twin.outputs)
    counts = twin.counts
    return VariantRow(
        variant=variant.name,
        kernels=counts.get("kernels"),
        fusions=None,
        real_fusions=None,
        modeled_bytes=counts.get("modeled_bytes"),
        lower_s=None,
        compile_s=counts.get("compile_s"),
        max_abs_diff=diff.max_abs_diff,
        max_rel_diff=diff.max_rel_diff,
        within_tolerance=diff.within_tolerance,
    )


def _row(compiled, diff) -> VariantRow:
    report = compiled.report
    return VariantRow(
        variant=compiled.variant.name,
        kernels=report.kernels,
        fusions=report.fusions,
        real_fusions=report.real_fusions,
        modeled_bytes=report.modeled_bytes_per_call,
        launches_per_call=report.launches_per_call,
        per_call_basis=report.per_call_basis,
        bytes_per_iteration=(
            report.modeled_bytes if report.modeled_bytes_per_call is None else None
        ),
        lower_s=compiled.lower_s,
        compile_s=None if compiled.compile_cached else compiled.compile_s,
        compile_cached=compiled.compile_cached,
        max_abs_diff=diff.max_abs_diff,
        max_rel_diff=diff.max_rel_diff,
        within_tolerance=diff.within_tolerance,
        collectives=compiled.collectives.count,
        logical_collectives=compiled.collectives.logical,
        collective_bytes=compiled.collectives.operand_bytes,
    )
