"""A results JSONL -> `report.md` (environment, ceilings, a table per workload) and PNG plots.

Plots (matplotlib, Agg backend): speedup per workload and variant, kernels vs time, and a roofline
(arithmetic intensity = flops / modeled bytes against achieved FLOP/s, under the measured copy
bandwidth and matmul ceilings). A plot whose data is missing (no flops, no ok cells) is skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from xlafuse.report.coldstart import (
    GRAPHS_SKIPPED,
    coldstart_plot,
    coldstart_section,
    graphs_section,
)
from xlafuse.report.explain_text import missed_fusions_markdown
from xlafuse.report.kernels import (
    KERNEL_ROOFLINE_PNG,
    choose_roofline_cell,
    kernel_sections,
    plot_kernel_roofline,
    traces_section,
)
from xlafuse.report.lines import cell_label, speedup_text
from xlafuse.report.sharded import sharded_section
from xlafuse.report.torch import FRAMEWORKS_PNG, frameworks_plot, frameworks_section
from xlafuse.results.records import CellResult, latest_per_cell, read_results

SPEEDUP_PNG = "speedup.png"
KERNELS_PNG = "kernels_vs_time.png"
ROOFLINE_PNG = "roofline.png"
COLD_START_PNG = "cold_start.png"


def write_report(
    results_path: str | Path, out_dir: str | Path | None = None, roofline_cell: str | None = None
) -> Path:
    """Write `report.md` and its PNG plots for a results file.

    Args:
      results_path: the JSONL file of cell records, or a folder holding results.jsonl.
      out_dir: where to write; the results file's folder when None.
      roofline_cell: the traced cell whose kernels the per-kernel roofline plots (a cell_id or
        `label@variant`); None: the traced reference cell with the longest time per call.

    Returns:
      The path of report.md.

    Raises:
      XlafuseError: no such file, or not a results file (`xlafuse.results.records.read_results`), or a
        `roofline_cell` that names no traced cell.
    """
    data = read_results(results_path)
    out_dir = Path(out_dir) if out_dir is not None else data.path.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    records = latest_per_cell(data.records)
    plots = write_plots(records, out_dir) + _kernel_plot(records, out_dir, roofline_cell)
    text = render_markdown(records, data.path, plots, data.skipped_note())
    path = out_dir / "report.md"
    path.write_text(text, encoding="utf-8")
    return path


def render_markdown(
    records: Sequence[CellResult],
    source: Path | None = None,
    plots: Iterable[str] = (),
    skipped: str | None = None,
) -> str:
    """The report as markdown text (`skipped`: a note on lines of the file that were skipped)."""
    lines = ["# xlafuse report", ""]
    if source is not None:
        lines += [f"Results: `{source}` ({len(records)} cells)", ""]
    if skipped:
        lines += [f"_{skipped}_", ""]
    lines += _environment(records) + _ceilings(records) + [READING_NOTES, ""]
    lines += traces_section(records)
    for key, group in _by_workload(records).items():
        lines += [f"## {key}", "", *_table(group), "", *kernel_sections(group), *_missed(group)]
    lines += _errors(records)
    lines += sharded_section(records)
    lines += _study_sections(records)
    if plots:
        lines += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
        above = roofline_points_above([r for r in records if r.ok])
        if ROOFLINE_PNG in plots and above:
            names = ", ".join(f"{cell_label(r)} {r.variant}" for r in above)
            lines += [f"Roofline: {_above_note(len(above))} ({names})", ""]
    return "\n".join(lines)


def _kernel_plot(records: Sequence[CellResult], out_dir: Path, wanted: str | None) -> list[str]:
    """The per-kernel roofline of one traced cell (`xlafuse.report.kernels`), if any."""
    cell = choose_roofline_cell([r for r in records if r.ok], wanted)
    if cell is None:
        return []
    # deferred: matplotlib is heavy to import and only plots need it
    import matplotlib

    matplotlib.use("Agg")
    return (
        [KERNEL_ROOFLINE_PNG] if plot_kernel_roofline(cell, out_dir / KERNEL_ROOFLINE_PNG) else []
    )


def _study_sections(records: Sequence[CellResult]) -> list[str]:
    """Cold start, CUDA graphs, XLA beside PyTorch: each only where its cells exist."""
    ok = [r for r in records if r.ok]
    graphs = graphs_section(ok)
    if not graphs and ok and all(r.backend == "cpu" for r in ok):
        graphs = f"## Graph capture (CUDA graphs)\n\n_{GRAPHS_SKIPPED}_\n"
    sections = (coldstart_section(ok), graphs, frameworks_section(ok))
    return [s for s in sections if s]


def _environment(records: Sequence[CellResult]) -> list[str]:
    env = next((r.env for r in records if r.env), {})
    if not env:
        return []
    keys = ("device_kind", "backend", "device_count", "driver", "jax", "jaxlib", "flax", "optax")
    keys += ("python", "host_cpu", "host_cpus", "XLA_FLAGS", "git_commit", "config_hash")
    rows = [f"- {k}: `{env.get(k)}`" for k in keys if env.get(k) not in (None, "")]
    return ["## Environment", "", *rows, ""]


def _ceilings(records: Sequence[CellResult]) -> list[str]:
    record = next((r for r in records if r.ceilings.copy_bytes_per_s), None)
    if record is None:
        return []
    rows = [
        f"- copy bandwidth: {record.ceilings.copy_bytes_per_s / 1e9:.1f} GB/s (x + 1, read + write"
        + (f", per {record.ceilings.copy_basis})" if record.ceilings.copy_basis else ")")
    ]
    if record.ceilings.matmul_flops_per_s:
        rows.append(f"- matmul: {record.ceilings.matmul_flops_per_s / 1e12:.3f} TFLOP/s")
    note = (
        "Modeled bytes assume every kernel reads its inputs from and writes its outputs to main "
        "memory once. More than 100% of the copy ceiling means either cache hits (arrays smaller "
        "than the caches) or a read-heavy kernel: the ceiling is a copy, one byte written per byte "
        "read, and memory serves reads faster than writes."
    )
    return ["## Measured ceilings", "", *rows, "", note, ""]


def _by_workload(records: Sequence[CellResult]) -> dict[str, list[CellResult]]:
    groups: dict[str, list[CellResult]] = {}
    for r in records:
        extra = ",".join(f"{k}={v}" for k, v in sorted(r.overrides.items()))
        key = f"{r.workload}{f'[{extra}]' if extra else ''} / {r.size} / {r.mode} / {r.dtype}"
        if r.devices > 1:
            key += f" / {r.parallelism}-parallel on {r.devices} devices"
        groups.setdefault(key, []).append(r)
    return groups


_COLUMNS = (
    "variant", "kernels", "real fusions", "modeled MB", "median ms", "p10-p90 ms", "speedup",
    "95% CI", "device speedup", "host ms/call", "GB/s", "% copy ceiling", "TFLOP/s",
    "compile s", "numerics",
)  # fmt: skip

READING_NOTES = (
    "How to read the tables: a speedup is the reference's median time per call over the "
    "variant's, with its 95% bootstrap interval; its verdict is `same` when the interval "
    "contains 1.0 or the change is under 3%, else `faster` or `slower`. In-process variants are "
    "timed in alternation with the reference (paired), so a drift of the machine affects both. "
    "The device speedup compares per-call kernel time from a profiler trace (GPU). `host ms/call` "
    "is the host time to issue one call of a pipelined burst; a cell marked HOST-BOUND has a "
    "pipelined time above 1.15x its device time: its wall-clock speedup measures the host, not "
    "the kernels. Numerics (`xlafuse.measure.numerics`): each output element within `atol + rtol x "
    "|ref|` (float32 1e-4/1e-5, bfloat16 5e-2/1e-2, float16 1e-2/1e-3, atol relative to the "
    "output's largest magnitude); a train step is judged by its loss, gradient, batch "
    "statistics and updated parameters."
)


def _table(group: Sequence[CellResult]) -> list[str]:
    lines = ["| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
    for r in group:
        lines.append("| " + " | ".join(_row(r)) + " |")
    return lines


def _row(r: CellResult) -> list[str]:
    if not r.ok:
        return [r.variant, "error", *[""] * (len(_COLUMNS) - 2)]
    t = r.timing
    spread = f"{t.p10_s * 1e3:.3g}-{t.p90_s * 1e3:.3g}" if t.p10_s is not None else ""
    return [
        r.variant,
        _fmt(r.fusion.kernels),
        _fmt(r.fusion.real_fusions),
        _fmt(r.fusion.modeled_bytes, 1e-6),
        _fmt(r.timing.median_s, 1e3, ".3g"),
        spread,
        speedup_text(r.speedup.vs_reference, r.speedup.verdict),
        _interval(r.speedup.ci),
        speedup_text(r.device.speedup, r.device.speedup_verdict),
        _fmt(r.timing.host_s_per_call, 1e3, ".3g") + (" HOST-BOUND" if r.rates.host_bound else ""),
        _fmt(r.rates.achieved_bytes_per_s, 1e-9),
        _fmt(r.rates.pct_of_copy_ceiling, 1, ".1f", "%"),
        _fmt(r.rates.tflops, 1, ".3g"),
        _fmt(r.compile.compile_s, 1, ".2f"),
        _numerics(r),
    ]


def _missed(group: Sequence[CellResult]) -> list[str]:
    """The top missed fusions of the group's default cell, when it recorded them."""
    summary = next(
        (r.fusion.missed_fusions for r in group if r.ok and r.fusion.missed_fusions), None
    )
    if not summary:
        return []
    if "error" in summary:
        return [f"Missed fusions could not be traced: {summary['error']}", ""]
    return [*missed_fusions_markdown(summary), ""]


def _interval(ci: Sequence[float] | None) -> str:
    return f"{ci[0]:.2f}-{ci[1]:.2f}" if ci else "-"


def _numerics(r: CellResult) -> str:
    if r.variant == r.reference:
        return "reference"
    if r.numerics.reference_error:
        return f"not checked: {r.numerics.reference_error}"
    if r.numerics.within_tolerance is None:
        return "-"
    if r.numerics.within_tolerance:
        return "ok"
    part = f" in {r.numerics.worst_part}" if r.numerics.worst_part else ""
    return f"FLAGGED ({r.numerics.max_abs_diff:.2g}{part})"


def _fmt(value: Any, scale: float = 1, spec: str = "", suffix: str = "") -> str:
    """Scaled and formatted; without a spec, large numbers get thousands separators."""
    if value is None:
        return "-"
    scaled = value * scale
    if not spec:
        spec = ",.0f" if abs(scaled) >= 100 else ".3g"
    return f"{scaled:{spec}}{suffix}"


def _errors(records: Sequence[CellResult]) -> list[str]:
    errors = [r for r in records if not r.ok]
    if not errors:
        return []
    lines = ["## Errors", ""]
    for r in errors:
        lines.append(f"- `{cell_label(r)}` `{r.variant}`: {r.error_type}: {r.error}")
    return [*lines, ""]


def write_plots(records: Sequence[CellResult], out_dir: Path) -> list[str]:
    """Write the PNG plots that the data allows; returns their file names."""
    ok = [r for r in records if r.ok and r.timing.median_s]
    if not ok:
        return []
    # deferred: matplotlib is heavy to import and only plots need it
    import matplotlib

    matplotlib.use("Agg")
    written = []
    for name, plot in (
        (SPEEDUP_PNG, _plot_speedup),
        (KERNELS_PNG, _plot_kernels),
        (ROOFLINE_PNG, _plot_roofline),
        (COLD_START_PNG, coldstart_plot),
        (FRAMEWORKS_PNG, frameworks_plot),
    ):
        if plot(ok, out_dir / name):
            written.append(name)
    return written


def _device(records: Sequence[CellResult]) -> str:
    r = records[0]
    return f"{r.device_kind}, {r.backend}" if r.device_kind != r.backend else r.backend


def _plot_speedup(records: Sequence[CellResult], path: Path) -> bool:
    # deferred: matplotlib is heavy to import and only plots need it
    import matplotlib.pyplot as plt

    rows = [r for r in records if r.speedup.vs_reference is not None]
    if not rows:
        return False
    workloads = list(dict.fromkeys(cell_label(r) for r in rows))
    variants = list(dict.fromkeys(r.variant for r in rows))
    width = 0.8 / len(variants)
    fig, ax = plt.subplots(figsize=(max(6.5, 0.9 * len(workloads) * len(variants) / 2 + 2), 5))
    x = np.arange(len(workloads))
    for i, variant in enumerate(variants):
        values = {cell_label(r): r.speedup.vs_reference for r in rows if r.variant == variant}
        heights = [values.get(w, 0.0) for w in workloads]
        bars = ax.bar(x + i * width, heights, width, label=variant)
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(x + width * (len(variants) - 1) / 2, workloads, rotation=30, ha="right")
    reference = rows[0].reference
    ax.set_ylim(0, max(r.speedup.vs_reference for r in rows) * 1.12)
    ax.set_xlabel("workload / size / mode")
    ax.set_ylabel(f"speedup vs {reference} (x)")
    ax.set_title(
        f"Speedup over {reference} = {reference} median time / variant median time"
        f"\n({_device(rows)})",
        fontsize=10,
    )
    ax.legend(title="variant", loc="upper left", bbox_to_anchor=(1.01, 1))
    return _save(fig, path)


def _plot_kernels(records: Sequence[CellResult], path: Path) -> bool:
    # deferred: matplotlib is heavy to import and only plots need it
    import matplotlib.pyplot as plt

    rows = [r for r in records if r.fusion.kernels]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for variant in dict.fromkeys(r.variant for r in rows):
        chosen = [r for r in rows if r.variant == variant]
        ax.scatter(
            [r.fusion.kernels for r in chosen],
            [r.timing.median_s * 1e3 for r in chosen],
            label=variant,
        )
    for workload in dict.fromkeys(cell_label(r) for r in rows):
        same = [r for r in rows if cell_label(r) == workload]
        # A workload's variants joined by a line; the label sits at its first (reference) point.
        ax.plot(
            [r.fusion.kernels for r in same], [r.timing.median_s * 1e3 for r in same], "-", c="0.8"
        )
        ax.annotate(workload, (same[0].fusion.kernels, same[0].timing.median_s * 1e3), **_NOTE)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("kernels per call (count, log scale)")
    ax.set_ylabel("median time per call (ms, log scale)")
    ax.set_title(f"Kernels per call vs time per call ({_device(rows)})")
    ax.legend(title="variant (a line joins one workload's variants)", fontsize=8)
    return _save(fig, path)


_NOTE = {"fontsize": 7, "xytext": (4, 3), "textcoords": "offset points"}


def _plot_roofline(records: Sequence[CellResult], path: Path) -> bool:
    # deferred: matplotlib is heavy to import and only plots need it
    import matplotlib.pyplot as plt

    rows = [r for r in records if _intensity(r) and r.rates.tflops]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(8, 6))
    for variant in dict.fromkeys(r.variant for r in rows):
        chosen = [r for r in rows if r.variant == variant]
        ax.scatter(
            [_intensity(r) for r in chosen],
            [r.rates.tflops * 1e12 for r in chosen],
            label=variant,
            zorder=3,
        )
    # Points of one family crowd together: each workload gets a number at its points, and the
    # legend says which workload a number stands for.
    for number, workload in enumerate(dict.fromkeys(cell_label(r) for r in rows), start=1):
        same = [r for r in rows if cell_label(r) == workload]
        points = [(_intensity(r), r.rates.tflops * 1e12) for r in same]
        ax.plot(*zip(*points, strict=True), "-", c="0.8", zorder=1)
        for point in points:
            ax.annotate(str(number), point, **_NOTE)
        ax.plot([], [], " ", label=f"{number}: {workload}")
    intensity = [_intensity(r) for r in rows]
    xs = np.logspace(np.log10(min(intensity) / 10), np.log10(max(intensity) * 10), 200)
    copy = next((r for r in rows if r.ceilings.copy_bytes_per_s), None)
    peak = next(
        (r.ceilings.matmul_flops_per_s for r in rows if r.ceilings.matmul_flops_per_s), None
    )
    if copy is not None:
        ys = xs * copy.ceilings.copy_bytes_per_s
        under = ys <= peak if peak else ys > 0
        ax.plot(xs[under], ys[under], "k--", linewidth=1, label=_copy_label(copy))
    if peak:
        flat = xs * copy.ceilings.copy_bytes_per_s >= peak if copy is not None else xs > 0
        ax.plot(
            xs[flat], [peak] * int(flat.sum()), "k:", linewidth=1.2,
            label=f"matmul ceiling {peak / 1e12:.3g} TFLOP/s (measured: large square matmul)",
        )  # fmt: skip
    above = roofline_points_above(rows)
    if above:
        fig.text(0.01, 0.01, _above_note(len(above)), fontsize=7, wrap=True, va="bottom")
        fig.subplots_adjust(bottom=0.2)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / modeled byte)")
    basis = rows[0].rates.basis or "time_median_s"
    ax.set_ylabel(f"achieved FLOP/s (analytic FLOPs / {basis})")
    ax.set_title(f"Roofline under the measured ceilings ({_device(rows)})")
    ax.legend(fontsize=7, loc="upper left", title="variant, ceiling, workload", title_fontsize=7)
    return _save(fig, path, tight=not above)


def _intensity(r: CellResult) -> float | None:
    """Analytic FLOPs per modeled byte; None without both."""
    flops, modeled = r.model.flops, r.fusion.modeled_bytes
    return flops / modeled if flops and modeled else None


def _copy_label(r: CellResult) -> str:
    basis = r.ceilings.copy_basis or "pipelined_s_per_call"
    return (
        f"copy ceiling {r.ceilings.copy_bytes_per_s / 1e9:.3g} GB/s "
        f"(measured: x + 1, read + write, per {basis})"
    )


def roofline_points_above(records: Sequence[CellResult]) -> list[CellResult]:
    """The cells whose achieved FLOP/s lie above the measured roofline at their intensity."""
    above = []
    for r in records:
        if not (_intensity(r) and r.rates.tflops and r.ceilings.copy_bytes_per_s):
            continue
        roof = _intensity(r) * r.ceilings.copy_bytes_per_s
        if r.ceilings.matmul_flops_per_s:
            roof = min(roof, r.ceilings.matmul_flops_per_s)
        if r.rates.tflops * 1e12 > roof:
            above.append(r)
    return above


def _above_note(count: int) -> str:
    return (
        f"{count} point{'s lie' if count > 1 else ' lies'} above the measured ceilings: modeled "
        "bytes count every kernel's inputs and outputs once in main memory, but arrays that fit "
        "in the caches (tiny sizes) never go there, and the copy ceiling writes one byte per byte "
        "read, which is slower than mostly reading. Such a point means 'faster than main memory "
        "allows', i.e. cache-resident, not a measuring error."
    )


def _save(fig, path: Path, tight: bool = True) -> bool:
    # deferred: matplotlib is heavy to import and only plots need it
    import matplotlib.pyplot as plt

    if tight:
        fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
