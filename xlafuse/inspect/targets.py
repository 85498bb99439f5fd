"""`xlafuse inspect`: what XLA fused in one HLO file, a `--xla_dump_to` folder, or a workload.

A target is one of:

* an optimized HLO text file (`Compiled.as_text()`, or a dumped `*after_optimizations.txt`);
* a `--xla_dump_to` folder: its optimized modules (`*after_optimizations.txt`, with or without a
  GPU prefix such as `sm_9.0a_gpu_`) are listed largest first (most kernels, then most modeled
  bytes, then file name); `module=NAME` picks one of them by a substring of its file name;
* a workload from `xlafuse.models` (a zoo name or a program of the user's, `FILE.py:FUNCTION`),
  built and compiled under a fusion variant.

When a dumped module has a `*.thunk_sequence.txt` beside it (XLA's list of GPU launches), its
launch count is reported next to the modeled kernel count, with a warning when they differ.

The result and its JSON schema are `xlafuse.inspect.schema`; the text is `xlafuse.report.inspect_text`.

A workload's compile can be kept and read again (`xlafuse inspect`'s cache,
`xlafuse.compiler.cache`): `on_compiled` gets the optimized HLO text, `stored_fields` what the
result holds besides it, and `inspect_stored` makes the same result again from the two.

Bytes are modeled HBM bytes (see `xlafuse.hlo.traffic`), not measurements.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from xlafuse.errors import REGULAR_FILE, HloParseError, XlafuseError, check_path_kind
from xlafuse.hlo import (
    FusionReport,
    HloModule,
    analyze_module,
    find_optimized_modules,
    parse_hlo,
    thunk_launch_count,
)
from xlafuse.hlo.collectives import analyze_collectives
from xlafuse.hlo.dump import module_label, read_hlo
from xlafuse.inspect.schema import InspectResult, ModuleSummary
from xlafuse.models.names import Cell

HLO_TEXT = "expected optimized HLO text (Compiled.as_text() or a dumped *after_optimizations.txt)"
ACCEPTED = (
    "expected an optimized HLO text file (Compiled.as_text() or *after_optimizations.txt), "
    "an --xla_dump_to folder, or --workload NAME"
)


def inspect_target(
    *,
    path: str | Path | None = None,
    module: str | None = None,
    cell: Cell | None = None,
    variant: str = "default",
    on_step: Callable[[str], None] | None = None,
    on_compiled: Callable[[InspectResult, str], None] | None = None,
) -> InspectResult:
    """Inspects an HLO file, a dump folder (or one module of it), or a compiled cell.

    Args:
        path: an optimized HLO text file or an `--xla_dump_to` folder.
        module: in a folder, the module whose file name contains this text.
        cell: instead of `path`, a workload cell (`xlafuse.models.names.Cell`: its workload,
            size, mode, overrides, and the devices it is sharded over).
        variant: the fusion variant to compile the cell under.
        on_step: called with a line ("compiling mlp/tiny/forward @ default") before a compile.
        on_compiled: called after a workload's compile with the result and the optimized HLO
            text it was read from (what `inspect_stored` reads again).

    Returns:
        The InspectResult.

    Raises:
        XlafuseError: no target, both targets, a missing path or one that is neither a regular
            file nor a folder, a folder without optimized HLO, a module name matching no file
            or several, an unknown workload or variant.
        HloParseError: the file is binary, truncated or not HLO.
    """
    if (path is None) == (cell is None):
        raise XlafuseError(f"give exactly one target: {ACCEPTED}")
    if cell is not None:
        if module is not None:
            raise XlafuseError("--module picks a module of a dump folder, not of a workload")
        return _inspect_workload(cell, variant, on_step, on_compiled)
    target = Path(path)
    check_path_kind(target, "a regular file or a folder", ACCEPTED)
    if target.is_dir():
        return _inspect_folder(target, module)
    if not target.exists():
        raise XlafuseError(f"no such file or folder: {str(target)!r}; {ACCEPTED}")
    if module is not None:
        raise XlafuseError(f"--module picks a module of a dump folder; {str(target)!r} is a file")
    return _inspect_file(target, "file")


def load_module(path: str | Path) -> HloModule:
    """Reads and parses one HLO text file (errors say what a target can be).

    Raises:
        XlafuseError: the file does not exist or is a folder.
        HloParseError: not a regular file (a device, a FIFO, a symlink loop: never opened),
            binary or non-UTF-8 data, or text that is not well-formed HLO.
    """
    path = Path(path)
    try:
        kind = check_path_kind(path, REGULAR_FILE, ACCEPTED)
    except XlafuseError as err:  # in a dump folder, a module skipped like an unreadable one
        raise HloParseError(str(err)) from None
    if kind != REGULAR_FILE:
        raise XlafuseError(f"no such file: {str(path)!r}; {ACCEPTED}")
    try:
        text, source = read_hlo(path)
    except HloParseError as err:
        raise HloParseError(f"{err.reason}; {ACCEPTED}", line=err.line, source=err.source) from None
    try:
        return parse_hlo(text, source=source)
    except HloParseError as err:
        raise HloParseError(f"{err.reason}; {HLO_TEXT}", line=err.line, source=err.source) from err


def _inspect_file(path: Path, kind: str, target: str | None = None) -> InspectResult:
    hlo = load_module(path)
    report = analyze_module(hlo)
    launches = thunk_launch_count(path)
    return InspectResult(
        target=target or str(path),
        target_kind=kind,
        report=report,
        hlo=hlo,
        path=str(path),
        thunk_launches=launches,
        warnings=_launch_warning(report.kernels, launches),
        collectives=analyze_collectives(hlo),
    )


def _launch_warning(kernels: int, launches: int | None) -> tuple[str, ...]:
    if launches is None or launches == kernels:
        return ()
    return (
        f"the thunk sequence lists {launches} launches but the model counts {kernels} kernels "
        "(XLA may have split, merged or added launches after the HLO was printed)",
    )


def _optimized_files(folder: Path) -> list[Path]:
    files = find_optimized_modules(folder)
    if not files:
        raise XlafuseError(
            f"folder {str(folder)!r} holds no optimized HLO modules (*after_optimizations.txt); "
            f"{ACCEPTED}"
        )
    return files


def _inspect_folder(folder: Path, module: str | None) -> InspectResult:
    files = _optimized_files(folder)
    if module is not None:
        chosen = _pick_module(files, module, folder)
        return _inspect_file(chosen, "folder", target=f"{folder} (module {chosen.name})")
    summaries, warnings = [], []
    for path in files:
        try:
            summaries.append(_summarize(path))
        except HloParseError as err:
            warnings.append(f"skipped {path.name}: {err}")
    if not summaries:
        raise XlafuseError(f"no module of folder {str(folder)!r} could be parsed: {warnings[0]}")
    summaries.sort(key=lambda s: (-s.kernels, -s.modeled_bytes, s.file))
    for s in summaries:
        warnings.extend(f"{s.file}: {w}" for w in _launch_warning(s.kernels, s.thunk_launches))
    return InspectResult(str(folder), "folder", modules=tuple(summaries), warnings=tuple(warnings))


def _pick_module(files: list[Path], text: str, folder: Path) -> Path:
    matches = [p for p in files if text in p.name]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        names = ", ".join(module_label(p.name) for p in files[:8])
        more = f" and {len(files) - 8} more" if len(files) > 8 else ""
        raise XlafuseError(
            f"no module file in {str(folder)!r} contains {text!r}; modules: {names}{more}"
        )
    names = ", ".join(p.name for p in matches[:8])
    raise XlafuseError(
        f"{len(matches)} module files in {str(folder)!r} contain {text!r}: {names}; "
        "give a longer part of the file name"
    )


def _summarize(path: Path) -> ModuleSummary:
    report = analyze_module(load_module(path))
    return ModuleSummary(
        file=path.name,
        module=report.module,
        kernels=report.kernels,
        fusions=report.fusions,
        real_fusions=report.real_fusions,
        modeled_bytes=report.modeled_bytes,
        thunk_launches=thunk_launch_count(path),
    )


def _inspect_workload(cell: Cell, variant, on_step=None, on_compiled=None) -> InspectResult:
    from xlafuse.compiler.jit import compile_workload  # JAX: only a workload needs it
    from xlafuse.compiler.variants import get as get_variant

    work = cell.build()
    chosen = get_variant(variant)  # an unknown name fails before the step is shown
    if on_step is not None:
        on_step(f"compiling {cell.label} @ {chosen.name}")
    compiled = compile_workload(work, chosen)
    hlo = parse_hlo(compiled.hlo_text, source=f"workload {cell.name}")
    report = analyze_module(hlo)
    if report.backend is None:
        report = _with_backend(report, compiled.backend)
    on = f", {cell.on_devices}" if cell.on_devices else ""
    result = InspectResult(
        target=f"workload {cell.name} ({work.size}, {work.mode}{on})",
        target_kind="workload",
        report=report,
        hlo=hlo,
        variant=compiled.variant.name,
        collectives=analyze_collectives(hlo),
        devices=work.devices,
        parallelism=work.parallelism,
        static_leaves=tuple(work.static),
    )
    if on_compiled is not None:
        on_compiled(result, compiled.hlo_text)
    return result


def stored_fields(result: InspectResult) -> dict[str, Any]:
    """What a workload's result holds besides its optimized HLO (JSON-able): its target line,
    variant, backend, devices, parallelism and static leaves (`inspect_stored` takes them)."""
    return {
        "target": result.target,
        "variant": result.variant,
        "backend": result.report.backend if result.report else None,
        "devices": result.devices,
        "parallelism": result.parallelism,
        "static_leaves": [leaf.to_dict() for leaf in result.static_leaves or ()],
    }


def inspect_stored(
    hlo_path: Path, hlo_sha256: str, fields: Mapping[str, Any], *, name: str
) -> InspectResult | None:
    """A workload's result again, from the optimized HLO text its compile gave
    (`on_compiled`) and its `stored_fields`: what `_inspect_workload` returned then.

    Args:
        hlo_path: the file of the HLO text.
        hlo_sha256: SHA-256 (hex) of the text as it was written.
        fields: `stored_fields` of the result.
        name: the workload's name (the parsed module's source, as a compile names it).

    Returns:
        The result; None when the file cannot be read or parsed, is not the text that was
        written, or `fields` lack a value (the entry is not used: compile again).
    """
    from xlafuse.compiler.static import StaticLeaf  # JAX: only a workload needs it

    try:
        text, _ = read_hlo(hlo_path)
        if hashlib.sha256(text.encode()).hexdigest() != hlo_sha256:
            return None
        hlo = parse_hlo(text, source=f"workload {name}")
        leaves = tuple(StaticLeaf(x["path"], x["name"]) for x in fields["static_leaves"])
        report = analyze_module(hlo)
        if report.backend is None:
            report = _with_backend(report, fields["backend"])
        return InspectResult(
            target=fields["target"],
            target_kind="workload",
            report=report,
            hlo=hlo,
            variant=fields["variant"],
            collectives=analyze_collectives(hlo),
            devices=fields["devices"],
            parallelism=fields["parallelism"],
            static_leaves=leaves,
        )
    except (XlafuseError, KeyError, TypeError):  # HloParseError is an XlafuseError
        return None


def _with_backend(report: FusionReport, backend: str) -> FusionReport:
    return replace(report, backend=backend)
