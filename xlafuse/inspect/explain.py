"""`xlafuse explain` and `xlafuse diff --workload`: get the HLO they need, then call `xlafuse.hlo`.

A target is a workload (lowered once for the unoptimized module, `Lowered.as_text("hlo",
debug_info=True)`, then compiled under each variant; on the GPU the compile also writes XLA's
priority-fusion dump to a temporary folder) or an `--xla_dump_to` folder holding one module's
`*.before_optimizations.txt`, `*after_optimizations.txt` and `*.priority_fusion_dump.txt`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from xlafuse.errors import FOLDER, REGULAR_FILE, XlafuseError, check_path_kind
from xlafuse.hlo.diff import FusionDiff, diff_modules
from xlafuse.hlo.dump import read_hlo
from xlafuse.hlo.estimates import COST_MODEL_OPTION
from xlafuse.hlo.explain import Boundary, Explanation, explain_module, removed_boundaries
from xlafuse.hlo.parse import parse_hlo
from xlafuse.hlo.priority_dump import (
    DUMP_OPTIONS,
    DUMP_SUFFIX,
    PriorityDump,
    find_priority_dump,
    read_priority_dump,
)
from xlafuse.inspect.targets import ACCEPTED, load_module
from xlafuse.kinds import Backend
from xlafuse.models.names import Cell

if TYPE_CHECKING:
    from xlafuse.hlo.ir import HloModule
    from xlafuse.models.workload import Workload


@dataclass(frozen=True)
class CompiledHlo:
    """One program's unoptimized HLO and its optimized HLO under some variants.

    Attributes:
        label: what was compiled ("workload mlp (tiny, forward)" or a folder).
        backend: "cpu" or "gpu".
        unoptimized: HLO text before optimization.
        optimized: variant -> optimized HLO text.
        dumps: variant -> its priority-fusion dump (GPU compiles; absent elsewhere).
    """

    label: str
    backend: str
    unoptimized: str
    optimized: dict[str, str]
    dumps: dict[str, PriorityDump] = field(default_factory=dict)


@dataclass(frozen=True)
class ExplainReport:
    """What `explain_target` found.

    Attributes:
        target: what was explained.
        backend: "cpu", "gpu" or None (unknown, from a folder).
        variant: the variant explained (None for a folder).
        explanation: its boundaries, reasons and fusion steps.
        against: the variant compared with, if any (e.g. "no-fusion").
        removed: boundaries of `against` that `variant` fused away, largest first.
        optimized_text: the HLO text explained (a workload's; None for a folder).
    """

    target: str
    backend: str | None
    variant: str | None
    explanation: Explanation
    against: str | None = None
    removed: tuple[Boundary, ...] = ()
    optimized_text: str | None = None


def compile_for_explain(
    cell: Cell,
    variants: tuple[str, ...],
    *,
    on_step: Callable[[str], None] | None = None,
    workload: Workload | None = None,
    estimates: bool = False,
) -> CompiledHlo:
    """Lowers a cell's workload once and compiles it under each variant (dumping on the GPU).

    A cell on several devices is sharded (`Cell.build`). `on_step` is called with a line
    ("compiling mlp/tiny/forward @ no-fusion") before each compile. `workload`: the cell's
    workload already built (else built here). `estimates`: on the GPU, also XLA's estimate of
    each fusion (`xlafuse.hlo.estimates`: the option changes no kernel).

    Raises:
        UnknownNameError: an unknown workload, size, mode or variant.
    """
    # JAX and the compiler, imported here: reading a dump folder needs neither
    import jax

    from xlafuse.compiler.jit import unoptimized_hlo
    from xlafuse.compiler.variants import get as get_variant

    work = workload if workload is not None else cell.build()
    backend = jax.default_backend()
    chosen = {v: get_variant(v) for v in variants}  # unknown names fail before any compile
    unoptimized = unoptimized_hlo(work)
    optimized, dumps = {}, {}
    for name, variant in chosen.items():
        if on_step is not None:
            on_step(f"compiling {cell.label} @ {name}")
        optimized[name], dump = _compile_with_reasons(work, variant, backend, estimates)
        if dump is not None:
            dumps[name] = dump
    return CompiledHlo(
        f"workload {cell.name} ({cell.size}, {work.mode})", backend, unoptimized, optimized, dumps
    )


def _compile_with_reasons(work, variant, backend: str, estimates: bool = False):
    """(optimized HLO, XLA's priority-fusion dump or None) of a workload under a variant. On a
    GPU, in process, the same program as `compile_workload` compiles (same jit arguments and
    options) with XLA's dump switched on (and with `estimates`, the cost model's stats):
    neither changes the program."""
    from xlafuse.compiler.jit import compile_lowered, compile_workload, lower_workload  # JAX

    if backend != Backend.GPU or variant.process_flags:
        return compile_workload(work, variant).hlo_text, None
    with tempfile.TemporaryDirectory(prefix="xlafuse-explain-") as folder:
        options = {
            **variant.compiler_options(backend=backend),
            **DUMP_OPTIONS,
            "xla_dump_to": folder,
        }
        if estimates:
            options[COST_MODEL_OPTION] = True
        text = compile_lowered(lower_workload(work), variant, options).as_text()
        found = sorted(Path(folder).glob(f"*{DUMP_SUFFIX}"))
        return text, read_priority_dump(found[-1]) if found else None


def _explained(hlo: CompiledHlo, unoptimized: HloModule, variant: str) -> Explanation:
    """The explanation of `variant`'s optimized module against the unoptimized one."""
    text = hlo.optimized[variant]
    return explain_module(
        unoptimized,
        parse_hlo(text, source=f"{hlo.label} ({variant})"),
        dump=hlo.dumps.get(variant),
        unoptimized_text=hlo.unoptimized,
        optimized_text=text,
    )


def explain_target(
    *,
    folder: str | Path | None = None,
    module: str | None = None,
    cell: Cell | None = None,
    variant: str = "default",
    against: str | None = "no-fusion",
    on_step: Callable[[str], None] | None = None,
    workload: Workload | None = None,
    estimates: bool = False,
) -> ExplainReport:
    """Explains a dump folder's module, or a cell's workload under `variant` (compared with
    `against`).

    The cell names a zoo workload or a program of the user's (`FILE.py:FUNCTION`) with its
    overrides. `on_step`, `workload` and `estimates`: as for `compile_for_explain`, whose
    `on_step` gets one line per variant of `explained_variants`.

    Raises:
        XlafuseError: no target or both; a folder without the three files; unknown names.
        FileNotFoundError: a missing folder.
        HloParseError: unreadable HLO.
    """
    if (folder is None) == (cell is None):
        raise XlafuseError("give a dump folder or --workload NAME (exactly one)")
    if folder is not None:
        return _explain_folder(Path(folder), module)
    variants = explained_variants(variant, against)
    hlo = compile_for_explain(
        cell, variants, on_step=on_step, workload=workload, estimates=estimates
    )
    unopt = parse_hlo(hlo.unoptimized, source=f"{hlo.label} (unoptimized)")
    main = _explained(hlo, unopt, variant)
    other = _explained(hlo, unopt, variants[1]) if len(variants) == 2 else None
    removed = removed_boundaries(main, other) if other else ()
    return ExplainReport(
        hlo.label,
        hlo.backend,
        variant,
        main,
        other and variants[1],
        removed,
        hlo.optimized[variant],
    )


def explained_variants(variant: str, against: str | None) -> tuple[str, ...]:
    """The variants `explain_target` compiles a workload under: `variant`, then `against`."""
    return (variant,) if against in (None, "", variant) else (variant, against)


def _explain_folder(folder: Path, module: str | None) -> ExplainReport:
    check_path_kind(folder, FOLDER, "expected an --xla_dump_to folder, or --workload NAME")
    if folder.is_file():
        raise XlafuseError(
            f"{str(folder)!r} is a file; explain reads an --xla_dump_to folder (with a "
            "priority-fusion dump), or --workload NAME; one HLO file: `xlafuse inspect FILE`"
        )
    if not folder.is_dir():
        raise FileNotFoundError(
            f"no such folder: {str(folder)!r} (expected an --xla_dump_to folder)"
        )
    try:
        dump_path = find_priority_dump(folder, module=module)
    except ValueError as err:
        raise XlafuseError(str(err)) from None
    prefix = dump_path.name[: -len(DUMP_SUFFIX)]
    before = folder / f"{prefix}.before_optimizations.txt"
    after = sorted(folder.glob(f"{prefix}.*after_optimizations.txt"))
    if not before.is_file() or not after:
        raise XlafuseError(
            f"folder {str(folder)!r} has {dump_path.name} but not {prefix}.before_optimizations.txt "
            f"and {prefix}.*after_optimizations.txt; dump with xla_dump_to and the default "
            "xla_dump_hlo_as_text"
        )
    u_text, o_text = read_hlo(before)[0], read_hlo(after[0])[0]
    explanation = explain_module(
        parse_hlo(u_text, source=str(before)),
        parse_hlo(o_text, source=str(after[0])),
        dump=read_priority_dump(dump_path),
        unoptimized_text=u_text,
        optimized_text=o_text,
    )
    return ExplainReport(f"{folder} (module {prefix})", "gpu", None, explanation)


def reference_beside(path: str | Path) -> Path | None:
    """The `*.before_optimizations.txt` of a dumped module file's own module, if it is there.

    `module_0012.jit_f.sm_9.0a_gpu_after_optimizations.txt` -> `module_0012.jit_f.before_optimizations.txt`.
    """
    path = Path(path)
    parts = path.name.split(".")
    if len(parts) < 3 or not path.name.endswith("after_optimizations.txt"):
        return None
    found = path.with_name(f"{parts[0]}.{parts[1]}.before_optimizations.txt")
    return found if found.is_file() else None


def missed_fusions(unoptimized_text: str, optimized_text: str, *, top: int = 5) -> dict:
    """A small JSON-able summary of one compiled cell's largest kernel boundaries.

    Meant to be recorded per result cell (default variant) and rendered by
    `xlafuse.report.explain_text.missed_fusions_markdown`.

    Args:
        unoptimized_text: `Lowered.as_text(dialect="hlo", debug_info=True)` of the cell.
        optimized_text: the cell's optimized HLO (`Compiled.as_text()`).
        top: how many boundaries to keep, largest `boundary_bytes` first.

    Returns:
        {"schema": "xlafuse.missed_fusions/1", "boundaries": total count, "boundary_bytes":
        their sum, "instructions": traced, "lost": untraced, "top": [{boundary_bytes, producer,
        producer_kernel, producer_source, consumer, consumer_kernel, consumer_source, readers}]}.
    """
    e = explain_module(
        parse_hlo(unoptimized_text, source="unoptimized"),
        parse_hlo(optimized_text, source="optimized"),
        dump=None,
        unoptimized_text=unoptimized_text,
        optimized_text=optimized_text,
    )
    rows = [
        {
            "boundary_bytes": b.boundary_bytes,
            "producer": b.producer,
            "producer_kernel": b.producer_kernel,
            "producer_source": b.producer_source,
            "consumer": b.consumers[0],
            "consumer_kernel": b.consumer_kernel,
            "consumer_source": b.consumer_source,
            "readers": b.readers,
        }
        for b in e.boundaries[:top]
    ]
    return {
        "schema": "xlafuse.missed_fusions/1",
        "boundaries": len(e.boundaries),
        "boundary_bytes": sum(b.boundary_bytes for b in e.boundaries),
        "instructions": len(e.lineage.traces),
        "lost": e.lineage.counts()["lost"],
        "top": rows,
    }


def _check_files(a, b) -> None:
    """Both of A and B given, and files.

    Raises:
        XlafuseError: one missing, a folder, a path that does not exist or is not a regular
            file (a device, a FIFO, a symlink loop).
    """
    if a is None or b is None:
        raise XlafuseError("give two HLO files A B, or --workload NAME --variants V1,V2")
    for path in (a, b):
        check_path_kind(path, REGULAR_FILE, ACCEPTED)
        if Path(path).is_dir():
            raise XlafuseError(
                f"diff compares two HLO files; {str(path)!r} is a dump folder "
                "(give one of its *after_optimizations.txt files)"
            )
        if not Path(path).exists():
            raise XlafuseError(f"no such file or folder: {str(path)!r}; {ACCEPTED}")


def _two(variants) -> tuple[str, str]:
    """Two variant names, or one line saying what was given."""
    if not variants or len(variants) != 2:
        raise XlafuseError(f"--variants needs two names like default,no-fusion; got {variants}")
    return tuple(variants)


def diff_targets(
    *,
    a: str | Path | None = None,
    b: str | Path | None = None,
    cell: Cell | None = None,
    variants: tuple[str, str] | None = None,
    reference: str | Path | None = None,
    on_step: Callable[[str], None] | None = None,
) -> FusionDiff:
    """Diffs two HLO files, or one cell's workload under two variants (see `xlafuse.hlo.diff`).

    Args:
        a: the first HLO file (with `b`).
        b: the second HLO file.
        cell: instead of files, the cell (workload, size, mode, overrides, devices) to compile
            under both `variants`.
        variants: two variant names, e.g. ("default", "no-fusion").
        reference: with files, the program's unoptimized HLO; by default the dumped
            `*.before_optimizations.txt` beside A, if any, else B is traced to A.
        on_step: with a cell, called with a line before each of its two compiles.

    Returns:
        The `xlafuse.hlo.diff.FusionDiff` of A to B.

    Raises:
        XlafuseError: a missing or extra target, a folder, unknown names.
        HloParseError: a file that is not HLO text.
    """
    if cell is not None:
        if a is not None or b is not None or reference is not None:
            raise XlafuseError("give two HLO files, or --workload with --variants, not both")
        hlo = compile_for_explain(cell, _two(variants), on_step=on_step)
        texts = (hlo.unoptimized, *(hlo.optimized[v] for v in _two(variants)))
        ref, module_a, module_b = (parse_hlo(t, source=hlo.label) for t in texts)
        return diff_modules(module_a, module_b, labels=_two(variants), reference=ref, texts=texts)
    _check_files(a, b)
    reference = reference if reference is not None else reference_beside(a)
    ref, module_a, module_b = (load_module(p) if p else None for p in (reference, a, b))
    texts = tuple(read_hlo(Path(p))[0] if p else None for p in (reference, a, b))
    labels = (Path(a).name, Path(b).name)
    return diff_modules(module_a, module_b, labels=labels, reference=ref, texts=texts)
