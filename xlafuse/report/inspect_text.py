"""The text of `xlafuse inspect`: summary lines, the kernel table, a dump folder's module list."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xlafuse.errors import XlafuseError
from xlafuse.hlo import FusionReport, KernelInfo
from xlafuse.hlo.collectives import CollectiveReport
from xlafuse.hlo.dump import module_label
from xlafuse.hlo.loops import PER_CALL
from xlafuse.inspect.schema import InspectResult, traffic_share
from xlafuse.report.format import format_bytes, text_table

SORT_KEYS = ("bytes", "ops", "name")
# Ops that ride along in almost every fusion; the "main ops" column names the others first.
_MINOR_OPS = frozenset({"broadcast", "convert", "reshape", "bitcast", "copy", "slice", "iota"})


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
    if report.launches_per_call is not None and report.launches_per_call != report.kernels:
        kernels += f"  launches per call: {report.launches_per_call}"
    if result.thunk_launches is not None:
        kernels += f"  (thunk sequence: {result.thunk_launches} launches)"
    lines.append(kernels)
    lines.append(
        f"fusions: {report.fusions}  real fusions: {report.real_fusions}  "
        f"entry fusions: {report.entry_fusions}"
    )
    lines.append(f"kinds: {_counts(report.kinds)}")
    if result.static_leaves:
        lines.append(static_line(result.static_leaves))
    lines.append(f"custom-calls: {report.custom_calls}" + _targets(report.custom_call_targets))
    lines.append(per_call_traffic(report))
    if result.collectives is not None and result.collectives.count:
        lines.extend(render_collectives(result.collectives))
    lines.extend(f"warning: {w}" for w in result.warnings)
    return "\n".join(lines)


def static_line(leaves: Sequence[Any], *, shown: int = 8) -> str:
    """`static: 3 leaves (relu, ravel, 3)`: a program's arguments' leaves made static."""
    names = [leaf.name for leaf in leaves[:shown]] + (["..."] if len(leaves) > shown else [])
    return f"static: {len(leaves)} {'leaf' if len(leaves) == 1 else 'leaves'} ({', '.join(names)})"


def per_call_traffic(report: FusionReport) -> str:
    """The modeled traffic line: per call, and what that counts (one run of each kernel where
    a trip count is unknown)."""
    if report.modeled_bytes_per_call is None:
        return f"modeled traffic: {report.modeled_bytes / 1e6:.2f} MB {report.per_call_basis}"
    line = f"modeled traffic: {report.modeled_bytes_per_call / 1e6:.2f} MB per call"
    if report.per_call_basis != PER_CALL:
        line += f" ({report.per_call_basis.removeprefix(PER_CALL + ', ')})"
    return line


def render_collectives(report: CollectiveReport, *, limit: int = 12) -> list[str]:
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


def sort_kernels(report: FusionReport, *, sort: str = "bytes") -> list[KernelInfo]:
    """The report's kernels ordered by `sort`: "bytes" (most traffic per call first, as
    `traffic_share` counts it), "ops" (most first) or "name".

    Raises:
        XlafuseError: an unknown sort key.
    """
    kernels = report.kernel_details
    if sort not in SORT_KEYS:
        raise XlafuseError(f"unknown sort key {sort!r}; accepted: {', '.join(SORT_KEYS)}")
    if sort == "name":
        return sorted(kernels, key=lambda k: k.name)
    if sort == "ops":
        return sorted(kernels, key=lambda k: (-k.num_ops, k.name))
    return sorted(kernels, key=lambda k: (-traffic_share(k, report), k.name))


def main_ops(kernel: KernelInfo, *, limit: int = 3) -> str:
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


def render_kerneltext_table(
    result: InspectResult, *, top: int | None = None, sort: str = "bytes"
) -> str:
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
    kernels = sort_kernels(report, sort=sort)
    rows = [_row(k, report) for k in kernels[:top]]
    header = ("kernel", "kind", "ops", "main ops", "in", "out", "launches", "traffic", "source")
    text = text_table(header, rows, right={2, 4, 5, 6, 7})
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
        _launches(report.runs_of(kernel)),
        f"{100 * traffic_share(kernel, report):.1f}%",
        _source_label(kernel),
    )


def _launches(runs: int | None) -> str:
    return "?" if runs is None else f"x{runs}"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


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
    return "\n".join([title, text_table(header, rows, right={1, 2, 3, 4, 5}), hint, *notes])


def render_text(result: InspectResult, *, top: int | None = None, sort: str = "bytes") -> str:
    """The full text report: the folder listing, or the summary and the kernel table."""
    if result.report is None:
        return render_modules(result)
    return render_summary(result) + "\n\n" + render_kerneltext_table(result, top=top, sort=sort)
