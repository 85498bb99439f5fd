"""`xlafuse inspect`: what XLA fused in one HLO file, a `--xla_dump_to` folder, or a workload.

A target is one of:

* an optimized HLO text file (`Compiled.as_text()`, or a dumped `*after_optimizations.txt`);
* a `--xla_dump_to` folder: its optimized modules (`*after_optimizations.txt`, with or without a
  GPU prefix such as `sm_9.0a_gpu_`) are listed largest first (most kernels, then most modeled
  bytes, then file name); `module=NAME` picks one of them by a substring of its file name;
* a workload from `xlafuse.models`, built and compiled under a fusion variant.

When a dumped module has a `*.thunk_sequence.txt` beside it (XLA's list of GPU launches), its
launch count is reported next to the modeled kernel count, with a warning when they differ.

JSON schema (`InspectResult.to_json()`, `xlafuse inspect --json`), version "xlafuse.inspect/1".
Every key is always present; values are null where they do not apply::

    schema          "xlafuse.inspect/1"
    target          str: the path, or "workload NAME (SIZE, MODE)"
    target_kind     "file" | "folder" | "workload"
    path            str | null: the HLO file inspected (null for a workload or a folder listing)
    module          str | null: the HLO module name
    backend         "gpu" | "cpu" | null (null when the HLO does not say)
    variant         str | null: the variant a workload was compiled under
    thunk_launches  int | null: launches in the thunk sequence file beside the HLO, if any
    warnings        [str]
    -- the FusionReport's summary (null for a folder listing without a chosen module) --
    kernels, fusions, real_fusions, custom_calls, entry_fusions, modeled_bytes    int
    kinds                {fusion kind ("kLoop", "kInput", "kOutput", "kCustom"): count}
    custom_call_targets  {custom-call target: count}
    kernels_detail  [ {name, computation, opcode, kind, sub_kind, num_ops, ops: [opcode],
                       is_real_fusion, bytes_in, bytes_out, traffic_share (0..1 of
                       modeled_bytes), op_names: [str], source_lines: ["file:line"]} ]
                    in the module's execution order ([] for a folder listing)
    modules         [ {file, module, kernels, fusions, real_fusions, modeled_bytes,
                       thunk_launches} ] largest first ([] unless the target is a folder)
    devices         int | null: devices a workload was compiled for (null for HLO files)
    parallelism     "data" | "model" | null: how a sharded workload is laid out
    collectives     {count, logical, async_pairs, operand_bytes, ring_bytes, by_kind: {kind:
                     {count, sync, async_pairs, logical, operand_bytes, ring_bytes}},
                     collectives: [ {name, kind, is_async, operand_bytes, logical, group_size,
                     ring_bytes, operand_shapes, computation, op_name} ]} | null (folder listing)
                    see `xlafuse.hlo.collectives` for what counts

Bytes are modeled HBM bytes (see `xlafuse.hlo.traffic`), not measurements.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xlafuse.errors import HloParseError, XlafuseError
from xlafuse.hlo import (
    FusionReport,
    HloModule,
    KernelInfo,
    analyze_module,
    find_optimized_modules,
    parse_hlo,
    thunk_launch_count,
)
from xlafuse.hlo.collectives import CollectiveReport, analyze_collectives

SCHEMA = "xlafuse.inspect/1"
SORT_KEYS = ("bytes", "ops", "name")
HLO_TEXT = "expected optimized HLO text (Compiled.as_text() or a dumped *after_optimizations.txt)"
ACCEPTED = (
    "expected an optimized HLO text file (Compiled.as_text() or *after_optimizations.txt), "
    "an --xla_dump_to folder, or --workload NAME"
)
SUMMARY_KEYS = (
    "kernels",
    "fusions",
    "real_fusions",
    "custom_calls",
    "custom_call_targets",
    "kinds",
    "entry_fusions",
    "modeled_bytes",
)
_DUMP_SUFFIX = re.compile(r"\.(?:[a-z]+_[\d.]+[a-z]?_)?(?:[a-z]+_)?after_optimizations\.txt$")
# Ops that ride along in almost every fusion; the "main ops" column names the others first.
_MINOR_OPS = frozenset({"broadcast", "convert", "reshape", "bitcast", "copy", "slice", "iota"})


@dataclass(frozen=True)
class ModuleSummary:
    """One optimized module of a dump folder."""

    file: str
    module: str
    kernels: int
    fusions: int
    real_fusions: int
    modeled_bytes: int
    thunk_launches: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict of the fields."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class InspectResult:
    """What `inspect_target` found.

    Attributes:
        target: what was inspected, for people (a path or "workload NAME (SIZE, MODE)").
        target_kind: "file", "folder" or "workload".
        report: the inspected module's FusionReport; None for a folder listing.
        hlo: the parsed module behind `report` (for `xlafuse.hlo.graph`); None with `report`.
        path: the HLO file inspected, if it came from a file.
        variant: the variant a workload was compiled under.
        thunk_launches: launches listed in the thunk sequence file beside the HLO, if any.
        modules: a folder's modules, largest first (empty unless target_kind is "folder").
        warnings: things a reader should know (launch count mismatch, skipped files).
        collectives: the module's collectives (`xlafuse.hlo.collectives`); None for a folder.
        devices: devices a workload was compiled for (1 unless sharded); None for HLO files.
        parallelism: "data" or "model" for a sharded workload, else None.
    """

    target: str
    target_kind: str
    report: FusionReport | None = None
    hlo: HloModule | None = field(default=None, repr=False, compare=False)
    path: str | None = None
    variant: str | None = None
    thunk_launches: int | None = None
    modules: tuple[ModuleSummary, ...] = ()
    warnings: tuple[str, ...] = ()
    collectives: CollectiveReport | None = None
    devices: int | None = None
    parallelism: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The result in the stable schema of the module docstring (JSON-able)."""
        report = self.report
        out: dict[str, Any] = {
            "schema": SCHEMA,
            "target": self.target,
            "target_kind": self.target_kind,
            "path": self.path,
            "module": report.module if report else None,
            "backend": report.backend if report else None,
            "variant": self.variant,
            "thunk_launches": self.thunk_launches,
            "warnings": list(self.warnings),
        }
        for key in SUMMARY_KEYS:
            value = getattr(report, key) if report else None
            out[key] = dict(value) if isinstance(value, Mapping) else value
        out["kernels_detail"] = (
            [_kernel_json(k, report) for k in report.kernel_details] if report else []
        )
        out["modules"] = [m.to_dict() for m in self.modules]
        out["devices"] = self.devices
        out["parallelism"] = self.parallelism
        out["collectives"] = self.collectives.to_dict() if self.collectives else None
        return out


def inspect_target(
    path: str | Path | None = None,
    module: str | None = None,
    workload: str | None = None,
    size: str = "tiny",
    mode: str = "forward",
    variant: str = "default",
    overrides: Mapping[str, Any] | None = None,
    devices: int = 1,
    parallelism: str = "data",
) -> InspectResult:
    """Inspects an HLO file, a dump folder (or one module of it), or a compiled workload.

    Args:
        path: an optimized HLO text file or an `--xla_dump_to` folder.
        module: in a folder, the module whose file name contains this text.
        workload: instead of `path`, a workload name from `xlafuse.models`.
        size: the workload size ("tiny", "small", "full").
        mode: the workload mode ("forward", "train").
        variant: the fusion variant to compile the workload under.
        overrides: workload overrides (e.g. `{"batch": 4}`).
        devices: shard the workload over this many devices (`xlafuse.models.build`).
        parallelism: "data" or "model", with devices > 1.

    Returns:
        The InspectResult.

    Raises:
        XlafuseError: no target, both targets, a missing path, a folder without optimized HLO,
            a module name matching no file or several, an unknown workload or variant.
        HloParseError: the file is binary, truncated or not HLO.
    """
    if (path is None) == (workload is None):
        raise XlafuseError(f"give exactly one target: {ACCEPTED}")
    if workload is not None:
        if module is not None:
            raise XlafuseError("--module picks a module of a dump folder, not of a workload")
        mesh = (devices, parallelism)
        return _inspect_workload(workload, size, mode, variant, dict(overrides or {}), mesh)
    target = Path(path)
    if target.is_dir():
        return _inspect_folder(target, module)
    if not target.exists():
        raise XlafuseError(f"no such file or folder: {str(target)!r}; {ACCEPTED}")
    if module is not None:
        raise XlafuseError(f"--module picks a module of a dump folder; {str(target)!r} is a file")
    return _inspect_file(target, "file")


def load_module(path: str | Path) -> HloModule:
    """Reads and parses one HLO text file.

    Raises:
        XlafuseError: the file does not exist or is a folder.
        HloParseError: binary or non-UTF-8 data, or text that is not well-formed HLO.
    """
    path = Path(path)
    if not path.is_file():
        raise XlafuseError(f"no such file: {str(path)!r}; {ACCEPTED}")
    data = path.read_bytes()
    nul = data.find(b"\x00")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise HloParseError(f"binary file, not HLO text; {ACCEPTED}", line, str(path))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise HloParseError(f"not UTF-8 text; {ACCEPTED}", line, str(path)) from None
    try:
        return parse_hlo(text, str(path))
    except HloParseError as err:
        raise HloParseError(f"{err.reason}; {HLO_TEXT}", err.line, err.source) from err


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


def _inspect_workload(name, size, mode, variant, overrides, mesh=(1, "data")) -> InspectResult:
    from xlafuse import models
    from xlafuse.compile.jit import compile_workload

    devices, parallelism = mesh
    work = models.build(
        name, size=size, mode=mode, devices=devices, parallelism=parallelism, **overrides
    )
    compiled = compile_workload(work, variant)
    hlo = parse_hlo(compiled.hlo_text, f"workload {name}")
    report = analyze_module(hlo)
    if report.backend is None:
        report = _with_backend(report, compiled.backend)
    on = f", {parallelism}-parallel on {devices} devices" if devices > 1 else ""
    return InspectResult(
        target=f"workload {name} ({size}, {mode}{on})",
        target_kind="workload",
        report=report,
        hlo=hlo,
        variant=compiled.variant.name,
        collectives=analyze_collectives(hlo),
        devices=work.devices,
        parallelism=work.parallelism,
    )


def _with_backend(report: FusionReport, backend: str) -> FusionReport:
    from dataclasses import replace

    return replace(report, backend=backend)


def _kernel_json(kernel: KernelInfo, report: FusionReport) -> dict[str, Any]:
    out = kernel.to_dict()
    out["traffic_share"] = traffic_share(kernel, report)
    keys = [
        "name",
        "computation",
        "opcode",
        "kind",
        "sub_kind",
        "num_ops",
        "ops",
        "is_real_fusion",
        "bytes_in",
        "bytes_out",
        "traffic_share",
        "op_names",
        "source_lines",
    ]
    return {k: out[k] for k in keys}


def traffic_share(kernel: KernelInfo, report: FusionReport) -> float:
    """The kernel's share (0..1) of the module's modeled bytes; 0 when the module moves none."""
    total = report.modeled_bytes
    return (kernel.bytes_in + kernel.bytes_out) / total if total else 0.0


# ---------------------------------------------------------------------------------------------
# Text rendering


def format_bytes(n: int) -> str:
    """Decimal units, three significant figures: 512 B, 4.19 MB, 21.0 MB, 1.07 GB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            value = n / scale
            decimals = 2 if value < 10 else 1 if value < 100 else 0
            return f"{value:.{decimals}f} {unit}"
    return f"{n} B"


def render_summary(result: InspectResult) -> str:
    """The summary lines: target, backend, kernels, fusions, kinds, custom-calls, traffic."""
    lines = [f"target: {result.target}"]
    if result.variant:
        lines.append(f"variant: {result.variant}")
    report = result.report
    if report is None:
        return "\n".join(lines)
    lines.append(
        f"module: {report.module}" + (f"  backend: {report.backend}" if report.backend else "")
    )
    kernels = f"kernels: {report.kernels}"
    if result.thunk_launches is not None:
        kernels += f"  (thunk sequence: {result.thunk_launches} launches)"
    lines.append(kernels)
    lines.append(
        f"fusions: {report.fusions}  real fusions: {report.real_fusions}  "
        f"entry fusions: {report.entry_fusions}"
    )
    lines.append(f"kinds: {_counts(report.kinds)}")
    lines.append(f"custom-calls: {report.custom_calls}" + _targets(report.custom_call_targets))
    lines.append(f"modeled traffic: {report.modeled_bytes / 1e6:.2f} MB")
    if result.collectives is not None and result.collectives.count:
        lines.extend(render_collectives(result.collectives))
    lines.extend(f"warning: {w}" for w in result.warnings)
    return "\n".join(lines)


def render_collectives(report: CollectiveReport, limit: int = 12) -> list[str]:
    """Lines for the collectives: totals per kind, then each collective (the first `limit`)."""
    ring = report.ring_bytes
    lines = [
        f"collectives: {report.count} ({report.logical} logical, {report.async_pairs} async)  "
        f"operands {format_bytes(report.operand_bytes)} per device"
        + (f"  ring model {format_bytes(ring)} sent per device" if ring is not None else "")
    ]
    for kind, totals in report.by_kind().items():
        lines.append(
            f"  {kind}: {totals.count} ({totals.sync} sync, {totals.async_pairs} async), "
            f"{totals.logical} logical, {format_bytes(totals.operand_bytes)}"
        )
    for c in report.collectives[:limit]:
        mode = "async" if c.is_async else "sync"
        group = f" group {c.group_size}" if c.group_size else ""
        shapes = ", ".join(c.operand_shapes[:3]) + (" ..." if len(c.operand_shapes) > 3 else "")
        lines.append(
            f"    {c.name}: {c.kind} {mode}{group}, {c.logical} operand(s) "
            f"{format_bytes(c.operand_bytes)}: {shapes}"
        )
    if report.count > limit:
        lines.append(f"    ... {report.count - limit} more (--json lists them all)")
    return lines


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"


def _targets(targets: Mapping[str, int]) -> str:
    return f" ({_counts(targets)})" if targets else ""


def sort_kernels(kernels, sort: str = "bytes") -> list[KernelInfo]:
    """Kernels ordered by `sort`: "bytes" (most traffic first), "ops" (most first) or "name".

    Raises:
        XlafuseError: an unknown sort key.
    """
    if sort not in SORT_KEYS:
        raise XlafuseError(f"unknown sort key {sort!r}; accepted: {', '.join(SORT_KEYS)}")
    if sort == "name":
        return sorted(kernels, key=lambda k: k.name)
    if sort == "ops":
        return sorted(kernels, key=lambda k: (-k.num_ops, k.name))
    return sorted(kernels, key=lambda k: (-(k.bytes_in + k.bytes_out), k.name))


def main_ops(kernel: KernelInfo, limit: int = 3) -> str:
    """The kernel's most frequent ops, the ubiquitous ones (broadcast, convert, ...) last."""
    counts = Counter(kernel.ops)
    order = sorted(counts, key=lambda op: (op in _MINOR_OPS, -counts[op], op))
    shown = [op if counts[op] == 1 else f"{op}x{counts[op]}" for op in order[:limit]]
    more = f" +{len(order) - limit}" if len(order) > limit else ""
    return " ".join(shown) + more


def _kind_label(kernel: KernelInfo) -> str:
    return f"{kernel.kind}/{kernel.sub_kind}" if kernel.sub_kind else kernel.kind


def _source_label(kernel: KernelInfo, limit: int = 2) -> str:
    shown = [Path(s).name for s in kernel.source_lines[:limit]]
    more = f" +{len(kernel.source_lines) - limit}" if len(kernel.source_lines) > limit else ""
    return ", ".join(shown) + more


def render_kernel_table(result: InspectResult, top: int | None = None, sort: str = "bytes") -> str:
    """One row per kernel: name, kind, ops, main ops, bytes in/out, traffic %, source lines.

    Args:
        result: an InspectResult with a report (a file, a chosen module or a workload).
        top: show only the first `top` rows after sorting (None: all).
        sort: "bytes", "ops" or "name".

    Raises:
        XlafuseError: an unknown sort key or a `top` below 1.
    """
    if top is not None and top < 1:
        raise XlafuseError(f"--top must be 1 or more, got {top}")
    report = result.report
    if report is None:
        return ""
    kernels = sort_kernels(report.kernel_details, sort)
    rows = [_row(k, report) for k in kernels[:top]]
    header = ("kernel", "kind", "ops", "main ops", "in", "out", "traffic", "source")
    text = _table(header, rows, right={2, 4, 5, 6})
    if top is not None and len(kernels) > top:
        text += f"\n... {len(kernels) - top} more kernels (--top {len(kernels)} shows all)"
    return text


def _row(kernel: KernelInfo, report: FusionReport) -> tuple[str, ...]:
    return (
        _clip(kernel.name, 36),
        _clip(_kind_label(kernel), 36),
        str(kernel.num_ops),
        main_ops(kernel),
        format_bytes(kernel.bytes_in),
        format_bytes(kernel.bytes_out),
        f"{100 * traffic_share(kernel, report):.1f}%",
        _source_label(kernel),
    )


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _table(header, rows, right=frozenset()) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells):
        parts = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(header), *(line(r) for r in rows)])


def module_label(file_name: str) -> str:
    """A dumped module's file name without the `[GPU prefix_]after_optimizations.txt` tail."""
    return _DUMP_SUFFIX.sub("", file_name)


def render_modules(result: InspectResult) -> str:
    """The folder listing: one row per module, largest first, with launches when dumped."""
    rows = [
        (
            _clip(module_label(m.file), 48),
            str(m.kernels),
            str(m.fusions),
            str(m.real_fusions),
            format_bytes(m.modeled_bytes),
            "" if m.thunk_launches is None else str(m.thunk_launches),
        )
        for m in result.modules
    ]
    header = ("module", "kernels", "fusions", "real", "traffic", "launches")
    title = f"{len(result.modules)} optimized modules in {result.target} (largest first)"
    notes = [f"warning: {w}" for w in result.warnings]
    hint = "pick one with --module NAME (a part of its file name)"
    return "\n".join([title, _table(header, rows, right={1, 2, 3, 4, 5}), hint, *notes])


def render_text(result: InspectResult, top: int | None = None, sort: str = "bytes") -> str:
    """The full text report: the folder listing, or the summary and the kernel table."""
    if result.report is None:
        return render_modules(result)
    return render_summary(result) + "\n\n" + render_kernel_table(result, top, sort)


def diff_targets(
    a: str | Path | None = None,
    b: str | Path | None = None,
    workload: str | None = None,
    variants: tuple[str, str] | None = None,
    size: str = "tiny",
    mode: str = "forward",
    reference: str | Path | None = None,
):
    """Diffs two HLO files, or one workload under two variants: `xlafuse.explain.diff_targets`."""
    from xlafuse.inspect.explain import diff_targets as diff

    return diff(a, b, workload, variants, size, mode, reference)
