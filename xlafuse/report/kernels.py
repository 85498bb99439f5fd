"""Report sections of traced cells: where the traces are, each kernel's time, time saved by fusion.

Reads only the records (their `trace` part: path, kernel_times, kernel_diff; see
`xlafuse.measurement.cell_kernels`): no HLO, no recompilation. Also the per-kernel roofline plot of
one cell and the text of `xlafuse diff --measure`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xlafuse.errors import XlafuseError
from xlafuse.hlo.lineage import lost_summary
from xlafuse.kinds import Verdict
from xlafuse.measurement.stats import SAME_WITHIN
from xlafuse.report.figure import new_figure, save
from xlafuse.report.lines import cell_label
from xlafuse.results.records import CellResult

KERNEL_ROOFLINE_PNG = "kernel_roofline.png"
DETAIL_ROWS = 10
CPU_NOTE = (
    "On the CPU there are no device kernels: the times are the host thunks XLA:CPU runs per "
    "HLO instruction (the trace's `hlo_op` events), measured with the profiler on (it adds "
    "microseconds per op); thunks run on several threads may overlap, and no bandwidth ceiling "
    "applies to arrays that stay in the caches. They rank the ops; they are not device times."
)


def traces_section(records: Sequence[CellResult]) -> list[str]:
    """How to open the kept traces (empty when no record kept one)."""
    kept = [r for r in records if r.trace.path]
    if not kept:
        return []
    example = kept[0].trace.path
    return [
        "## Traces",
        "",
        "Each profiled cell's `jax.profiler` trace is kept in `traces/<cell>/` of the results "
        "folder (the record's `trace_path`; paths below are relative to that folder). Open one "
        "in XProf/TensorBoard: `pip install tensorboard xprof`, then "
        f"`tensorboard --logdir {example}` (Profile tab: trace viewer, kernel stats), or in "
        f"Perfetto: load `{example}/plugins/profile/*/*.trace.json.gz` at https://ui.perfetto.dev.",
        "",
    ]


def kernel_sections(group: Sequence[CellResult]) -> list[str]:
    """One workload's traced kernels: totals per cell, top kernels, top fusions by time saved."""
    traced = [r for r in group if r.trace.kernel_times]
    if not traced:
        return []
    lines = ["### Kernel times (traced, each joined to its HLO kernel)", ""]
    lines += _totals_table(traced)
    if any(r.trace.kernel_times.get("basis") == "host thunks" for r in traced):
        lines += ["", f"_{CPU_NOTE}_"]
    for r in traced:
        title = f"{r.variant}: top kernels by time"
        if r.rates.trace_perturbed:
            title += " (TRACE-PERTURBED: times of the traced program, not of the one that runs)"
        lines += ["", f"<details><summary>{title}</summary>", ""]
        lines += top_kernels_table(r.trace.kernel_times)
        lines += ["", "</details>"]
    for r in group:
        diff = r.trace.kernel_diff
        if diff:
            lines += ["", *savings_section(diff)]
    return [*lines, ""]


def _totals_table(traced: Sequence[CellResult]) -> list[str]:
    head = "| variant | basis | µs/call | kernels seen | launches/call | unattributed | longest |"
    lines = [head, "|" + "---|" * 7]
    for r in traced:
        kt = r.trace.kernel_times
        top = kt.get("top") or [{}]
        lines.append(
            f"| {r.variant} | {kt['basis']} | {kt['time_s'] * 1e6:.4g} | "
            f"{kt['kernels_seen']} of {kt['kernels']} | {kt['launches_per_call']:.4g} | "
            f"{100 * kt['unattributed_share']:.2f}% | `{top[0].get('name', '-')}` |"
        )
    return lines


def top_kernels_table(kernel_times: Mapping[str, Any], *, rows: int = DETAIL_ROWS) -> list[str]:
    """The top kernels of a `kernel_times` record as a markdown table; with both ceilings,
    each kernel's bound and the kernels furthest above theirs (headroom)."""
    bounded = kernel_times.get("matmul_ceiling_flops_per_s") is not None
    head = "| kernel | kind | µs/call | launches | modeled MB | GB/s | % copy ceiling |"
    head += " GFLOP | bound | % of bound | source |" if bounded else " source |"
    lines = [head, "|" + "---|" * (11 if bounded else 8)]
    for k in kernel_times.get("top", [])[:rows]:
        lines.append(_kernel_row(k, bounded))
    lost = kernel_times.get("unattributed_top") or []
    if lost:
        shown = ", ".join(f"`{n}` {t * 1e6:.3g} µs" for n, t in lost)
        lines += ["", f"Unattributed (no HLO kernel): {shown}."]
    headroom = [k for k in kernel_times.get("headroom_top", []) if k.get("headroom_s")]
    if headroom:
        lines += [
            "",
            "Headroom: the kernels with the most time above their bound (the larger of modeled "
            "bytes over the copy ceiling and FLOPs over the matmul ceiling).",
            "",
            "| kernel | kind | µs/call | bound µs | bound | headroom µs | source |",
            "|" + "---|" * 7,
        ]
        lines += [
            f"| `{k['name']}` | {k['kind']} | {k['time_s'] * 1e6:.4g} | "
            f"{k['bound_s'] * 1e6:.4g} | {k['bound']} | {k['headroom_s'] * 1e6:.4g} | "
            f"{_source(k['source_lines'])} |"
            for k in headroom[:rows]
        ]
    return lines


def _kernel_row(k: Mapping[str, Any], bounded: bool) -> str:
    row = (
        f"| `{k['name']}` | {k['kind']} | {k['time_s'] * 1e6:.4g} | "
        f"{k['launches_per_call']:.3g} | {k['modeled_bytes'] / 1e6:.4g} | "
        f"{_num(k['achieved_bytes_per_s'], 1e-9)} | {_num(k['pct_of_copy_ceiling'], 1)} |"
    )
    if bounded:
        flops = k.get("flops")
        row += (
            f" {_num(flops, 1e-9)} | {k.get('bound') or '-'} | {_num(k.get('pct_of_bound'), 1)} |"
        )
    return f"{row} {_source(k['source_lines'])} |"


def savings_section(diff: Mapping[str, Any]) -> list[str]:
    """The groups of a `kernel_diff` record where B gains and where it loses, each with its
    interval and verdict (records without intervals: the top groups by time saved)."""
    if "error" in diff:
        return [f"Kernel diff not available: {diff['error']}"]
    a, b = diff["a"], diff["b"]
    intro = (
        f"Each row is a group of `xlafuse diff`: the kernels of {a} and of {b} that hold the same "
        f"instructions, with their traced time per call. All {diff['groups']} "
        f"group{'s' if diff['groups'] != 1 else ''} plus the "
        f"unattributed time ({_us(diff['unattributed_a_s'])} / {_us(diff['unattributed_b_s'])}) "
        f"add up to {_us(diff['time_a_s'])} ({a}) and {_us(diff['time_b_s'])} ({b})."
    )
    if "gains" not in diff:
        return [
            f"#### Top {len(diff['top'])} fusions by time saved: {a} vs {b}",
            "",
            f"{intro} saved = {b} - {a}.",
            "",
            *_groups_table(diff["top"], a, b, "saved µs", with_interval=False),
        ]
    sums, counts = diff["changed_s"], diff["changed_groups"]
    lines = [
        f"#### Where {b} gains and loses against {a}",
        "",
        f"{intro} {b} - {a} per group, with its 95% interval from the per-call times of the "
        f"traced calls. The first column says how the kernels of the two sides pair up; a group "
        f"whose verdict is `same` (within the noise, or under {SAME_WITHIN:.0%}) is left out of both "
        f"tables. {b} gains {_us(-sums['faster'])} in {counts['faster']} groups, loses "
        f"{_us(sums['slower'])} in {counts['slower']}, and {_us(sums['same'])} is in "
        f"{counts['same']} `same` groups; the total {b} - {a} is "
        f"{_us(diff['time_b_s'] - diff['time_a_s'])}.",
    ]
    lines += _lineage_lines(diff)
    for title, rows in (
        (f"{b} gains (faster)", diff["gains"]),
        (f"{b} loses (slower)", diff["losses"]),
    ):
        lines += ["", f"{title}: {len(rows) or 'no'} group{'s' if len(rows) != 1 else ''}"]
        if rows:
            lines += ["", *_groups_table(rows, a, b, f"{b} - {a} µs", with_interval=True)]
    return lines


def _lineage_lines(diff: Mapping[str, Any]) -> list[str]:
    """What the grouping could not follow (records from before the lineage was kept: none)."""
    if "lost_by_opcode" not in diff:
        return []
    lines = []
    for side in ("a", "b"):
        lost = diff["lost_by_opcode"][side]
        if lost:  # with the share of each opcode where the record has the total (newer ones)
            lines.append(
                f"Instructions of the program not traced to a kernel of {diff[side]}: "
                f"{lost_summary(lost, diff.get('instructions'))}."
            )
    unlinked = diff["unlinked_dots"]
    lines.append(
        f"Dots and convolutions in a group of one side only: {len(unlinked)}"
        + (
            f" ({', '.join(f'`{k}`' for k in unlinked[:5])}{' ...' if len(unlinked) > 5 else ''})."
            if unlinked
            else "."
        )
    )
    return ["", " ".join(lines)]


# How a group's kernels pair up, in words that do not read as the verdict `same`: the diff's
# kinds "same" and "changed" are one kernel on each side, with equal or different modeled bytes.
PAIRING = {"same": "one to one", "changed": "one to one, bytes differ"}


def _groups_table(rows, a: str, b: str, change: str, with_interval: bool) -> list[str]:
    interval = " 95% CI µs |" if with_interval else ""
    lines = [
        f"| pairing | {a} kernels | {b} kernels | {a} µs | {b} µs | {change} |{interval} "
        f"{a} MB | {b} MB |",
        "|" + "---|" * (9 if with_interval else 8),
    ]
    for g in rows:
        ci = g.get("ci_s")
        shown = f" {ci[0] * 1e6:.4g} to {ci[1] * 1e6:.4g} |" if with_interval and ci else ""
        lines.append(
            f"| {PAIRING.get(g['kind'], g['kind'])} | {_names(g['kernels_a'], g['n_a'])} | "
            f"{_names(g['kernels_b'], g['n_b'])} | {g['time_a_s'] * 1e6:.4g} | "
            f"{g['time_b_s'] * 1e6:.4g} | {g['saved_s'] * 1e6:.4g} |{shown} "
            f"{g['bytes_a'] / 1e6:.4g} | {g['bytes_b'] / 1e6:.4g} |"
        )
    return lines


def _names(names: Sequence[str], count: int) -> str:
    if not count:
        return "(none)"
    shown = ", ".join(f"`{n}`" for n in names[:3])
    return f"{count}: {shown}" + (f" +{count - 3}" if count > 3 else "") if count > 1 else shown


def _source(lines: Sequence[str]) -> str:
    if not lines:
        return "-"
    first = "/".join(Path(lines[0]).parts[-2:])
    return first + (f" +{len(lines) - 1}" if len(lines) > 1 else "")


def _num(value: float | None, scale: float) -> str:
    return "-" if value is None else f"{value * scale:.4g}"


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.4g} µs"


def cell_name(record: CellResult) -> str:
    """`chain[ops=4]/tiny/forward@no-fusion`: what `--roofline-cell` accepts (or the cell_id)."""
    return f"{cell_label(record)}@{record.variant}"


def choose_roofline_cell(records: Sequence[CellResult], wanted: str | None) -> CellResult | None:
    """The cell of the per-kernel roofline: `wanted` (a cell_id or `label@variant`), else the
    traced reference cell with the longest time per call; None when no cell was traced.

    Raises:
      XlafuseError: `wanted` names no traced cell (the message lists them).
    """
    traced = [r for r in records if r.trace.kernel_times]
    if wanted is None:
        ref = [r for r in traced if r.variant == r.reference] or traced
        return max(ref, key=lambda r: r.trace.kernel_times.get("time_s") or 0.0, default=None)
    for r in traced:
        if wanted in (r.cell_id, cell_name(r)):
            return r
    names = ", ".join(cell_name(r) for r in traced) or "none"
    raise XlafuseError(f"--roofline-cell {wanted!r} is no traced cell; traced cells: {names}")


def plot_kernel_roofline(record: CellResult, path: Path) -> bool:
    """Per-kernel roofline of one cell's top kernels (area ~ share of time). With FLOPs per
    kernel and both ceilings (a GPU run): arithmetic intensity (FLOPs / modeled bytes) against
    achieved FLOP/s, under the roofline min(matmul ceiling, copy ceiling x intensity). Else its
    memory side: modeled bytes against achieved bandwidth, under the copy ceiling."""
    kt = record.trace.kernel_times
    matmul, copy = kt.get("matmul_ceiling_flops_per_s"), kt.get("copy_ceiling_bytes_per_s")
    compute = [
        k for k in kt.get("top", [])
        if k.get("flops") and k["modeled_bytes"] and k["time_s"] and matmul and copy
    ]  # fmt: skip
    fig, ax = new_figure((8, 5.5))
    if compute:
        _flop_roofline(ax, compute, kt, matmul, copy)
    elif not _memory_roofline(ax, kt, copy or record.ceilings.copy_bytes_per_s):
        return False
    ax.set_xscale("log")
    ax.set_yscale("log")
    shown = len(compute) if compute else len(kt.get("top", []))
    ax.set_title(
        f"Per-kernel roofline, top {shown} kernels by time (area ~ share of time)\n"
        f"{cell_name(record)} ({record.device_kind})",
        fontsize=9,
    )
    ax.legend(fontsize=7, title="kind", title_fontsize=7)
    return save(fig, path)


def _flop_roofline(ax, rows, kt, matmul: float, copy: float) -> None:
    def point(k):
        return k["flops"] / k["modeled_bytes"], k["flops"] * k["launches_per_call"] / k["time_s"]

    _scatter(ax, rows, kt, point, scale=1e-12)
    low = min(point(k)[0] for k in rows) / 4
    high = max(max(point(k)[0] for k in rows) * 4, 4 * matmul / copy)
    xs = [low * (high / low) ** (n / 99) for n in range(100)]
    ax.plot(xs, [min(matmul, copy * x) / 1e12 for x in xs], color="black", linestyle="--",
            linewidth=1, label=f"roofline: {matmul / 1e12:.4g} TFLOP/s, {copy / 1e9:.4g} GB/s")  # fmt: skip
    ax.set_xlabel("arithmetic intensity (FLOPs / modeled bytes, log scale)")
    ax.set_ylabel(f"achieved TFLOP/s (FLOPs / traced time, {kt['basis']})")


def _memory_roofline(ax, kt, ceiling: float | None) -> bool:
    rows = [k for k in kt.get("top", []) if k["achieved_bytes_per_s"] and k["modeled_bytes"]]
    if not rows:
        return False
    _scatter(ax, rows, kt, lambda k: (k["modeled_bytes"], k["achieved_bytes_per_s"]), 1e-9)
    if ceiling and kt.get("basis") != "host thunks":
        ax.axhline(ceiling / 1e9, color="black", linestyle="--", linewidth=1,
                   label=f"copy ceiling {ceiling / 1e9:.4g} GB/s (measured)")  # fmt: skip
    ax.set_xlabel("modeled bytes of the kernel (inputs + outputs, log scale)")
    ax.set_ylabel(f"achieved GB/s (modeled bytes / traced time, {kt['basis']})")
    return True


def _scatter(ax, rows, kt, point, scale: float) -> None:
    """The kernels as points by kind, named, their area their share of the traced time."""
    for kind in dict.fromkeys(k["kind"] for k in rows):
        chosen = [k for k in rows if k["kind"] == kind]
        ax.scatter(
            [point(k)[0] for k in chosen],
            [point(k)[1] * scale for k in chosen],
            s=[max(12.0, 400 * k["time_s"] / kt["time_s"]) for k in chosen],
            label=kind,
            zorder=3,
        )
    for k in rows:
        x, y = point(k)
        ax.annotate(k["name"], (x, y * scale), fontsize=6, xytext=(4, 3),
                    textcoords="offset points")  # fmt: skip


def render_measured_diff(measured: Any, *, top: int | None = 10) -> str:
    """The text of `xlafuse diff --measure`: every side's totals, then the top groups by time
    saved (`xlafuse.measurement.kernel_diff.MeasuredDiff`)."""
    a, b = measured.diff.label_a, measured.diff.label_b
    lines = []
    for label, kt, trace in (
        (a, measured.times_a, measured.traces.get(a)),
        (b, measured.times_b, measured.traces.get(b)),
    ):
        lines.append(
            f"{label}: {kt.time_s * 1e6:.4g} µs/call ({kt.basis}, {kt.calls} calls traced), "
            f"{kt.launches_per_call:.4g} launches/call, unattributed "
            f"{100 * kt.unattributed_share:.2f}%" + (f"; trace: {trace}" if trace else "")
        )
    if measured.times_a.basis == "host thunks":
        lines.append(CPU_NOTE)
    decided = [t for t in measured.timed if t.change is not None]
    if decided:
        lines += _text_changes(decided, a, b, top)
    else:
        shown = measured.timed[:top] if top is not None else measured.timed
        lines.append(
            f"\nkernel groups by time saved ({b} - {a}), {len(shown)} of {len(measured.timed)}:"
        )
        lines += _text_groups(shown)
    total_a = sum(t.time_a_s for t in measured.timed) + measured.times_a.unattributed_s
    total_b = sum(t.time_b_s for t in measured.timed) + measured.times_b.unattributed_s
    lines.append(
        f"groups + unattributed: {total_a * 1e6:.4g} of {measured.times_a.time_s * 1e6:.4g} µs "
        f"traced ({a}), {total_b * 1e6:.4g} of {measured.times_b.time_s * 1e6:.4g} µs ({b})"
    )
    return "\n".join(lines)


def _text_changes(decided, a: str, b: str, top: int | None) -> list[str]:
    """Where B gains and where it loses (B - A per group, with its interval), the `same` groups
    summed apart."""
    lines = []
    for verdict, title in ((Verdict.FASTER, "gains"), (Verdict.SLOWER, "loses")):
        rows = sorted(
            (t for t in decided if t.change.verdict == verdict),
            key=lambda t: t.change.delta_s if verdict == Verdict.FASTER else -t.change.delta_s,
        )
        total = sum(t.change.delta_s for t in rows)
        shown = rows[:top] if top is not None else rows
        lines.append(
            f"\nwhere {b} {title} ({b} - {a}, 95% interval), {len(shown)} of {len(rows)} "
            f"groups, {total * 1e6:.4g} µs in all:"
        )
        lines += _text_groups(shown)
    same = [t for t in decided if t.change.verdict == Verdict.SAME]
    lines.append(
        f"same within the noise or under {SAME_WITHIN:.0%}: {len(same)} groups, "
        f"{sum(t.change.delta_s for t in same) * 1e6:.4g} µs in all"
    )
    return lines


def _text_groups(shown) -> list[str]:
    width = max([len(_text_names(t.group.kernels_a)) for t in shown] + [10])
    lines = []
    for t in shown:
        ci = f" [{t.change.ci[0] * 1e6:.4g}, {t.change.ci[1] * 1e6:.4g}]" if t.change else ""
        lines.append(
            f"  {t.saved_s * 1e6:>9.3f} µs{ci}  {t.group.kind:<9} "
            f"{_text_names(t.group.kernels_a):<{width}} {t.time_a_s * 1e6:>9.3f} µs -> "
            f"{_text_names(t.group.kernels_b)} {t.time_b_s * 1e6:.3f} µs"
        )
    return lines


def _text_names(names: Sequence[str]) -> str:
    if len(names) <= 1:
        return names[0] if names else "(none)"
    more = f" +{len(names) - 2}" if len(names) > 2 else ""
    return f"{len(names)} [{', '.join(names[:2])}{more}]"
