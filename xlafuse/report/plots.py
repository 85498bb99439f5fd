"""The report's cell plots: speedup per workload and variant, kernels against time, a roofline.

Each plot shows the statistic the tables show, named in its title: the speedup is the one in
the tables (the reference's time over the variant's, on the figure the cell leads with), and
kernels_vs_time plots each cell's time on that same figure. The roofline leaves out the cells
whose arrays fit in the last-level cache (they never reach main memory, so the copy ceiling
does not bound them) and says how many it left out; its legend sits outside the data.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from xlafuse.kinds import Figure
from xlafuse.report.cells import throughput_text
from xlafuse.report.figure import new_figure, save
from xlafuse.report.lines import cell_label, lead, lead_time
from xlafuse.results.records import CellResult

SPEEDUP_PNG = "speedup.png"
KERNELS_PNG = "kernels_vs_time.png"
ROOFLINE_PNG = "roofline.png"
THROUGHPUT_PNG = "throughput.png"
_NOTE = {"fontsize": 7, "xytext": (4, 3), "textcoords": "offset points"}
_OUTSIDE = {"loc": "upper left", "bbox_to_anchor": (1.01, 1)}  # a legend right of the axes


def _device(records: Sequence[CellResult]) -> str:
    r = records[0]
    return f"{r.device_kind}, {r.backend}" if r.device_kind != r.backend else r.backend


def _figures(records: Sequence[CellResult]) -> str:
    """`latency`, `pipelined time`, or both with where each is used."""
    used = list(dict.fromkeys(lead(r) for r in records))
    if len(used) == 1:
        return {Figure.LATENCY: "latency", Figure.PIPELINED: "pipelined time"}[used[0]]
    return "latency (forward calls on a GPU) or pipelined time (the others)"


def _grouped_bars(rows: Sequence[CellResult], value, labels):
    """A figure of bars per workload, one per variant, each bar `value(record)` and labelled
    by `labels(values)`: (figure, axes, the workloads in order, their tick positions)."""
    workloads = list(dict.fromkeys(cell_label(r) for r in rows))
    variants = list(dict.fromkeys(r.variant for r in rows))
    width = 0.8 / len(variants)
    fig, ax = new_figure((max(6.5, 0.9 * len(workloads) * len(variants) / 2 + 2), 5))
    x = np.arange(len(workloads))
    for i, variant in enumerate(variants):
        values = {cell_label(r): value(r) for r in rows if r.variant == variant}
        shown = [values.get(w, 0.0) for w in workloads]
        bars = ax.bar(x + i * width, shown, width, label=variant)
        ax.bar_label(bars, labels(shown), fontsize=7)
    return fig, ax, workloads, x + width * (len(variants) - 1) / 2


def plot_speedup(records: Sequence[CellResult], path: Path) -> bool:
    """Bars of each variant's speedup over the reference, per workload."""
    rows = [r for r in records if r.speedup.vs_reference is not None]
    if not rows:
        return False
    fig, ax, workloads, ticks = _grouped_bars(
        rows, lambda r: r.speedup.vs_reference, lambda values: [f"{v:.2f}" for v in values]
    )
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(ticks, workloads, rotation=30, ha="right")
    reference = rows[0].reference
    ax.set_ylim(0, max(r.speedup.vs_reference for r in rows) * 1.12)
    ax.set_xlabel("workload / size / mode")
    ax.set_ylabel(f"speedup vs {reference} (x)")
    ax.set_title(
        f"Speedup over {reference} = {reference}'s median / the variant's median, same rounds\n"
        f"on {_figures(rows)} ({_device(rows)})",
        fontsize=10,
    )
    ax.legend(title="variant", **_OUTSIDE)
    return save(fig, path)


def plot_throughput(records: Sequence[CellResult], path: Path) -> bool:
    """Bars of each variant's items per second, per workload, each in its own unit (the
    record's `items_per_s`: items per call over the median call); drawn when some workload
    counts its items in a unit other than calls."""
    rows = [r for r in records if r.rates.items_per_s]
    if not any(r.model.items_unit not in (None, "calls") for r in rows):
        return False
    units = {cell_label(r): r.model.items_unit or "items" for r in rows}
    fig, ax, workloads, ticks = _grouped_bars(
        rows,
        lambda r: r.rates.items_per_s,
        lambda values: [throughput_text(v, None).split()[0] if v else "" for v in values],
    )
    labels = [f"{w}\n({units[w]}/s)" for w in workloads]
    ax.set_xticks(ticks, labels, rotation=30, ha="right")
    ax.set_yscale("log")
    ax.set_xlabel("workload / size / mode (its unit)")
    ax.set_ylabel("items per second (each workload's unit, log scale)")
    ax.set_title(
        f"Throughput: items per call / median time per call ({_device(rows)})", fontsize=10
    )
    ax.legend(title="variant", **_OUTSIDE)
    return save(fig, path)


def plot_kernels(records: Sequence[CellResult], path: Path) -> bool:
    """Each cell's kernels per call against its time per call, one line per workload."""
    rows = [r for r in records if r.fusion.kernels and lead_time(r)]
    if not rows:
        return False
    fig, ax = new_figure((9, 5.5))
    for variant in dict.fromkeys(r.variant for r in rows):
        chosen = [r for r in rows if r.variant == variant]
        ax.scatter(
            [r.fusion.kernels for r in chosen], [lead_time(r) * 1e3 for r in chosen], label=variant
        )
    for workload in dict.fromkeys(cell_label(r) for r in rows):
        same = [r for r in rows if cell_label(r) == workload]
        points = [(r.fusion.kernels, lead_time(r) * 1e3) for r in same]
        # A workload's variants joined by a line; the label sits at its first (reference) point.
        ax.plot(*zip(*points, strict=True), "-", c="0.8")
        ax.annotate(workload, points[0], **_NOTE)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("kernels per call (count, log scale)")
    ax.set_ylabel("median time per call (ms, log scale)")
    ax.set_title(f"Kernels per call vs {_figures(rows)} per call ({_device(rows)})", fontsize=10)
    ax.legend(title="variant\n(a line joins one\nworkload's variants)", fontsize=8, **_OUTSIDE)
    return save(fig, path)


def plot_roofline(records: Sequence[CellResult], path: Path) -> bool:
    """Achieved FLOP/s against arithmetic intensity under the measured ceilings."""
    candidates = [r for r in records if intensity(r) and r.rates.tflops]
    rows = [r for r in candidates if not r.rates.cache_resident]
    if not rows:
        return False
    fig, ax = new_figure((10, 6))
    for variant in dict.fromkeys(r.variant for r in rows):
        chosen = [r for r in rows if r.variant == variant]
        xs, ys = [intensity(r) for r in chosen], [r.rates.tflops * 1e12 for r in chosen]
        ax.scatter(xs, ys, label=variant, zorder=3)
    # Points of one family crowd together: each workload gets a number at its points, and the
    # legend says which workload a number stands for.
    for number, workload in enumerate(dict.fromkeys(cell_label(r) for r in rows), start=1):
        points = [(intensity(r), r.rates.tflops * 1e12) for r in rows if cell_label(r) == workload]
        ax.plot(*zip(*points, strict=True), "-", c="0.8", zorder=1)
        for point in points:
            ax.annotate(str(number), point, **_NOTE)
        ax.plot([], [], " ", label=f"{number}: {workload}")
    _ceiling_lines(ax, rows)
    notes = _roofline_notes(rows, len(candidates) - len(rows))
    if notes:
        fig.text(0.01, 0.01, notes, fontsize=7, wrap=True, va="bottom")
        fig.subplots_adjust(left=0.08, right=0.62, bottom=0.22)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / modeled byte)")
    ax.set_ylabel(f"achieved FLOP/s (analytic FLOPs / {rows[0].rates.basis or 'time_median_s'})")
    ax.set_title(f"Roofline under the measured ceilings ({_device(rows)})")
    ax.legend(fontsize=7, title="variant, ceiling, workload", title_fontsize=7, **_OUTSIDE)
    return save(fig, path, tight=not notes)


def _ceiling_lines(ax, rows: Sequence[CellResult]) -> None:
    """The copy ceiling's slope and the matmul ceiling's flat line."""
    xs_all = [intensity(r) for r in rows]
    xs = np.logspace(np.log10(min(xs_all) / 10), np.log10(max(xs_all) * 10), 200)
    copy = next((r for r in rows if r.ceilings.copy_bytes_per_s), None)
    peak = next((r.ceilings.matmul_flops_per_s for r in rows if r.ceilings.matmul_flops_per_s), 0)
    if copy is not None:
        ys = xs * copy.ceilings.copy_bytes_per_s
        under = ys <= peak if peak else ys > 0
        ax.plot(xs[under], ys[under], "k--", linewidth=1, label=_copy_label(copy))
    if peak:
        flat = xs * copy.ceilings.copy_bytes_per_s >= peak if copy is not None else xs > 0
        label = f"matmul ceiling {peak / 1e12:.3g} TFLOP/s (measured: large square matmul)"
        ax.plot(xs[flat], [peak] * int(flat.sum()), "k:", linewidth=1.2, label=label)


def _roofline_notes(rows: Sequence[CellResult], left_out: int) -> str:
    notes = []
    if left_out:
        notes.append(
            f"{left_out} cache-resident cell{'s' if left_out > 1 else ''} left out (arrays that "
            "fit in the last-level cache: main memory's ceiling does not bound them)."
        )
    above = roofline_points_above(rows)
    if above:
        notes.append(above_note(len(above)))
    return " ".join(notes)


def intensity(r: CellResult) -> float | None:
    """FLOPs per modeled byte of one call (the workload's FLOPs, else the HLO's per call); None
    without both."""
    flops, modeled = r.model.flops or r.fusion.flops_per_call, r.fusion.bytes_per_call
    return flops / modeled if flops and modeled else None


def _copy_label(r: CellResult) -> str:
    basis = r.ceilings.copy_basis or "pipelined_s_per_call"
    return (
        f"copy ceiling {r.ceilings.copy_bytes_per_s / 1e9:.4g} GB/s\n"
        f"(measured: x + 1, read + write, per {basis})"
    )


def roofline_points_above(records: Sequence[CellResult]) -> list[CellResult]:
    """The cells (not cache-resident) whose achieved FLOP/s lie above the measured roofline."""
    above = []
    for r in records:
        if r.rates.cache_resident or not (intensity(r) and r.rates.tflops):
            continue
        if not r.ceilings.copy_bytes_per_s:
            continue
        roof = intensity(r) * r.ceilings.copy_bytes_per_s
        if r.ceilings.matmul_flops_per_s:
            roof = min(roof, r.ceilings.matmul_flops_per_s)
        if r.rates.tflops * 1e12 > roof:
            above.append(r)
    return above


def above_note(count: int) -> str:
    return (
        f"{count} point{'s lie' if count > 1 else ' lies'} above the measured ceilings: modeled "
        "bytes count every kernel's inputs and outputs once in main memory, and the copy ceiling "
        "writes one byte per byte read, which is slower than mostly reading (or the cell's "
        "working set was not known, so it could not be marked cache-resident)."
    )
