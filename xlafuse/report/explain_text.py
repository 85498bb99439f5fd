"""Text and markdown for `xlafuse diff`, `xlafuse explain` and the run report's missed fusions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from xlafuse.hlo.diff import FusionDiff, KernelGroup
from xlafuse.hlo.explain import Boundary, Explanation, ResolvedStep
from xlafuse.inspect.explain import ExplainReport
from xlafuse.report.format import format_bytes

if TYPE_CHECKING:  # a type only: reading a dump folder imports no JAX (docs/architecture.md)
    from xlafuse.measurement.costmodel import BoundaryCost

NO_REASONS = (
    "XLA wrote no reasons for this compile (the CPU writes no priority-fusion dump; on the GPU "
    "it comes with the options xla_dump_to and xla_dump_hlo_pass_re=priority-fusion)"
)


def check_top(top: int | None) -> None:
    """Raises ValueError unless `top` is None or at least 1."""
    if top is not None and top < 1:
        raise ValueError(f"--top must be 1 or more, got {top}")


def render_diff(diff: FusionDiff, *, top: int | None = 10) -> str:
    """The counts A -> B, then each group that changed (largest byte change first).

    Every kernel of A and B is in exactly one group, so the groups' deltas add up to the
    modeled-bytes delta; the last line says so with the sum of those not shown.
    """
    check_top(top)
    lines = [f"A: {diff.label_a}", f"B: {diff.label_b}"]
    for key, fmt in (("kernels", str), ("real_fusions", str), ("modeled_bytes", _mb)):
        a, b = getattr(diff, f"{key}_a"), getattr(diff, f"{key}_b")
        line = f"{key.replace('_', ' ')}: {fmt(a)} -> {fmt(b)} ({_signed(b - a, fmt)})"
        lines.append(line + (f" {diff.bytes_basis}" if key == "modeled_bytes" else ""))
    ca, cb = diff.collectives_a, diff.collectives_b
    if ca.count or cb.count:
        lines.append(
            f"collectives: {ca.count} -> {cb.count} ({_signed(cb.count - ca.count, str)}); "
            f"logical {ca.logical} -> {cb.logical}; async {ca.async_pairs} -> {cb.async_pairs}; "
            f"operands {_mb(ca.operand_bytes)} -> {_mb(cb.operand_bytes)} per device"
        )
    ref = "the unoptimized module" if diff.reference == "unoptimized" else "A's instructions"
    ca, cb = diff.lineage_a.counts(), diff.lineage_b.counts()
    lines.append(
        f"traced to {ref}: {len(diff.lineage_a.traces)} instructions; "
        f"A holds {ca['kernel']} in kernels ({ca['lost']} lost), "
        f"B holds {cb['kernel']} ({cb['lost']} lost)"
    )
    for side, lineage in (("A", diff.lineage_a), ("B", diff.lineage_b)):
        if lineage.counts()["lost"]:
            lines.append(f"  lost in {side}: {lineage.lost_summary(limit=8)}")
    unlinked = diff.unlinked_dots
    if unlinked:
        lines.append(
            f"dots/convolutions in no group of the other side: {len(unlinked)} "
            f"({', '.join(unlinked[:5])}{' ...' if len(unlinked) > 5 else ''})"
        )
    changes = diff.changes
    lines.append(f"\nkernel groups that differ: {len(changes)} of {len(diff.groups)}")
    shown = changes[:top] if top is not None else changes
    lines.extend(_group_line(g) for g in shown)
    rest = changes[len(shown) :]
    if rest:
        lines.append(
            f"  ... {len(rest)} more groups: {_signed(sum(g.bytes_delta for g in rest), _mb)}"
        )
    total = sum(g.bytes_delta for g in diff.groups)
    lines.append(f"sum of the groups: {_signed(total, _mb)} (= the modeled bytes difference)")
    return "\n".join(lines)


def _group_line(g: KernelGroup) -> str:
    return (
        f"  {g.kind}: {_names(g.kernels_a)} -> {_names(g.kernels_b)}: "
        f"{format_bytes(g.bytes_a)} -> {format_bytes(g.bytes_b)} ({_signed(g.bytes_delta, _mb)})"
    )


def _names(names: tuple[str, ...], limit: int = 3) -> str:
    if not names:
        return "(none)"
    shown = ", ".join(names[:limit])
    more = f" +{len(names) - limit}" if len(names) > limit else ""
    return f"{len(names)} [{shown}{more}]" if len(names) > 1 else shown


def render_explain(
    report: ExplainReport,
    *,
    top: int | None = 10,
    kernel: str | None = None,
    costs: Sequence[BoundaryCost] | None = None,
    basis: str | None = None,
) -> str:
    """The summary, the boundaries (largest first), what the variant fused, XLA's steps.

    `costs`: one per boundary (`xlafuse explain --measure`), its kernels' measured time on
    `basis` ("device kernels" or "host thunks") beside XLA's estimate, under each boundary."""
    check_top(top)
    e = report.explanation
    if kernel is not None:
        return render_history(e, kernel)
    counts = e.lineage.counts()
    lines = [f"target: {report.target}"]
    if report.variant:
        lines.append(f"variant: {report.variant}  backend: {report.backend}")
    lines.append(
        f"unoptimized instructions: {len(e.lineage.traces)}; in kernels {counts['kernel']}, "
        f"outside kernels {counts['outside']}, lost {counts['lost']}{_lost(e.lineage)}"
    )
    if not e.has_dump:
        lines.append(f"reasons: {NO_REASONS}")
    lines.append(f"\nkernel boundaries (missed fusions): {len(e.boundaries)}, largest first")
    shown = e.boundaries[:top] if top else e.boundaries
    measured = costs[: len(shown)] if costs is not None else None
    lines.extend(_boundary_rows(shown, e.has_dump, measured, basis))
    _more(lines, len(e.boundaries), top)
    if e.unjudged_edges:
        lines.append(f"not judged: {e.unjudged_edges} reads through an op XLA rewrote")
    if report.against:
        lines.append(
            f"\nboundaries of {report.against} that {report.variant} fused away: "
            f"{len(report.removed)}, {format_bytes(sum(b.boundary_bytes for b in report.removed))}"
        )
        lines.extend(_boundary_rows(report.removed[:top] if top else report.removed, False))
        _more(lines, len(report.removed), top)
    if e.has_dump:
        lines.extend(_dump_lines(e))
    return "\n".join(lines)


def _lost(lineage, limit: int = 4) -> str:
    """ " (12 reshape, 7 broadcast, ...)": what XLA rewrote or removed past recognition."""
    items = list(lineage.lost_by_opcode().items())
    if not items:
        return ""
    shown = ", ".join(f"{n} {op}" for op, n in items[:limit])
    return f" ({shown}{', ...' if len(items) > limit else ''})"


def _more(lines: list[str], n: int, top: int | None) -> None:
    if top is not None and n > top:
        lines.append(f"  ... {n - top} more (--top {n} or --json shows all)")


def _boundary_rows(boundaries, with_reasons: bool, costs=None, basis=None) -> list[str]:
    rows = []
    for i, b in enumerate(boundaries):
        row = (
            f"  {format_bytes(b.boundary_bytes):>9}  {b.producer} ({b.producer_kernel}, "
            f"{b.producer_source or '?'}) -> {', '.join(b.consumers[:3])} ({b.consumer_kernel}, "
            f"{b.consumer_source or '?'})"
        )
        if b.readers > 1:
            row += f" [read by {b.readers} kernels]"
        rows.append(row)
        if with_reasons:
            rows.append(f"             why: {_why(b)}")
        if costs is not None:
            rows.append(f"             measured: {_measured(costs[i], basis)}")
    return rows


def _measured(cost: BoundaryCost, basis: str | None) -> str:
    """The two kernels' traced time per call, and XLA's estimate of the same two kernels."""
    a, b = cost.producer_kernel_s, cost.consumer_kernel_s
    if a is None or b is None:
        return "a kernel of the two was not seen in the trace"
    text = f"{a * 1e6:.4g} us + {b * 1e6:.4g} us = {(a + b) * 1e6:.4g} us per call ({basis})"
    if cost.predicted_s is not None:
        text += f"; XLA's estimate of the two kernels: {cost.predicted_s * 1e6:.4g} us"
    return text


def _why(b: Boundary) -> str:
    parts = []
    if b.reason:
        parts.append(f'"{b.reason}"')
    if b.us_fused is not None:
        parts.append(f"cost model {b.us_fused:g} us fused vs {b.us_unfused:g} us unfused")
    return "; ".join(parts) or "no reason in the dump (priority-fusion did not consider it)"


def _dump_lines(e: Explanation) -> list[str]:
    fusions = [s for s in e.steps if s.step.kind == "fusion"]
    pairs = {(s.producer, s.reason) for s in e.ineligible}
    lines = [
        f"\nXLA producer_ineligible: {len(e.ineligible)} steps, {len(pairs)} distinct",
        *(f'  {p}: "{r}"' for p, r in sorted(pairs)),
        f"fusion steps: {len(fusions)}; names not found in the HLO: {len(e.missing_names)}",
    ]
    return lines


def render_history(e: Explanation, kernel: str) -> str:
    """The fusion steps that built `kernel`, in XLA's order ("how was fusion.12 built")."""
    steps = e.history(kernel)
    lines = [f"kernel {kernel}: {len(steps)} fusion steps"]
    if not e.has_dump:
        lines.append(f"  {NO_REASONS}")
    lines.extend(_step_line(s, e) for s in steps)
    return "\n".join(lines)


def _step_line(s: ResolvedStep, e: Explanation) -> str:
    step = s.step
    text = (
        f"  #{step.index}: {step.producer} into {', '.join(step.consumers)} -> {step.fusion_name}"
    )
    priority = next(
        (
            p.step
            for p in reversed(e.steps[: step.index])
            if p.step.kind == "update_priority" and p.step.producer == step.producer
        ),
        None,
    )
    if priority is not None:
        text += f" (cost model {priority.us_fused:g} us fused vs {priority.us_unfused:g} us)"
    return text


def missed_fusions_markdown(summary: dict, *, top: int = 5) -> list[str]:
    """Markdown lines: one cell's largest kernel boundaries, from `xlafuse.inspect.explain.missed_fusions`.

    Args:
        summary: the dict `missed_fusions(unoptimized_text, optimized_text)` returned.
        top: how many rows to show (at most those the summary kept).

    Returns:
        A title line, a blank line and a markdown table (one row per boundary), or one line
        when the cell has no boundary.
    """
    check_top(top)
    rows = summary["top"][:top]
    if not rows:
        return ["No kernel boundary between ops of the program: nothing left to fuse."]
    lines = [
        f"Top {len(rows)} of {summary['boundaries']} missed fusions (modeled bytes: the "
        f"intermediate written and read back; {summary['lost']} of {summary['instructions']} "
        "instructions not traced):",
        "",
        "| bytes | producer (kernel, source) | consumer (kernel, source) |",
        "|---:|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {format_bytes(r['boundary_bytes'])} | `{r['producer']}` ({r['producer_kernel']}, "
            f"{r['producer_source'] or '?'}) | `{r['consumer']}` ({r['consumer_kernel']}, "
            f"{r['consumer_source'] or '?'}) |"
        )
    return lines


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def _signed(n: int, fmt) -> str:
    return ("-" if n < 0 else "+") + fmt(abs(n))
