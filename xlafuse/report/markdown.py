"""A results JSONL -> `report.md` (environment, ceilings, two tables per workload), PNG plots and
`report.html` (the same report to explore in a browser: `xlafuse.report.html`).

The tables are `xlafuse.report.cells`'s, the plots `xlafuse.report.plots`' (speedup per workload
and variant, kernels vs time, a roofline) and the study sections' (cold start, PyTorch, kernels).
A plot whose data is missing (no flops, no ok cells) is skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from xlafuse.folders import writable_folder, write_atomically
from xlafuse.kinds import Backend
from xlafuse.measurement.rules import (
    HOST_BOUND,
    TF32,
    TF32_MIN_COMPUTE_CAPABILITY,
    TOLERANCES,
    TRACE_PERTURBED,
)
from xlafuse.measurement.stats import SAME_WITHIN
from xlafuse.report.cells import cell_tables
from xlafuse.report.coldstart import (
    GRAPHS_SKIPPED,
    coldstart_plot,
    coldstart_section,
    graphs_section,
)
from xlafuse.report.costmodel import (
    COST_MODEL_PNG,
    cost_model_plot,
    cost_model_section,
    study_section,
)
from xlafuse.report.explain_text import missed_fusions_markdown
from xlafuse.report.html import MARKDOWN_TITLE, NO_CELLS, REPORT_HTML, write_html
from xlafuse.report.kernels import (
    KERNEL_ROOFLINE_PNG,
    choose_roofline_cell,
    kernel_sections,
    plot_kernel_roofline,
    traces_section,
)
from xlafuse.report.lines import cell_label, record_cell
from xlafuse.report.plots import (
    KERNELS_PNG,
    ROOFLINE_PNG,
    SPEEDUP_PNG,
    THROUGHPUT_PNG,
    above_note,
    plot_kernels,
    plot_roofline,
    plot_speedup,
    plot_throughput,
    roofline_points_above,
)
from xlafuse.report.sharded import processes_section, sharded_section
from xlafuse.report.torch import FRAMEWORKS_PNG, frameworks_plot, frameworks_section
from xlafuse.results.records import CellResult, latest_per_cell, read_results

COLD_START_PNG = "cold_start.png"


def write_report(
    results_path: str | Path, *, out_dir: str | Path | None = None, roofline_cell: str | None = None
) -> Path:
    """Write `report.md`, its PNG plots and `report.html` (`xlafuse.report.html`) for a
    results file.

    Args:
      results_path: the JSONL file of cell records, or a folder holding results.jsonl.
      out_dir: where to write; the results file's folder when None.
      roofline_cell: the traced cell whose kernels the per-kernel roofline plots (a cell_id or
        `label@variant`); None: the traced reference cell with the longest time per call.

    Returns:
      The path of report.md. An empty results file gives a report of no cell that says so
      (`xlafuse.report.html.NO_CELLS`), report.html too.

    Raises:
      XlafuseError: no such file, or not a results file (`xlafuse.results.records.read_results`), or a
        `roofline_cell` that names no traced cell, or an output folder that cannot be written
        (`xlafuse.folders.writable_folder`): each before any file is written; or a file that
        could not be written (a full disk), named. Each file is written whole or not at all
        (`xlafuse.folders.write_atomically`): one that fails keeps its earlier version.
    """
    data = read_results(results_path, empty_ok=True)
    records = latest_per_cell(data.records)
    choose_roofline_cell([r for r in records if r.ok], roofline_cell)
    out_dir = writable_folder(data.path.parent if out_dir is None else out_dir, "output folder")
    plots = write_plots(records, out_dir) + _kernel_plot(records, out_dir, roofline_cell)
    text = render_markdown(records, source=data.path, plots=plots, skipped=data.skipped_note())
    path = out_dir / "report.md"
    write_atomically(path, lambda temp: temp.write_text(text, encoding="utf-8"), noun="report")
    groups = by_workload(records)
    write_html(out_dir / REPORT_HTML, records, groups, markdown=text, title=str(data.path))
    return path


def render_markdown(
    records: Sequence[CellResult],
    *,
    source: Path | None = None,
    plots: Iterable[str] = (),
    skipped: str | None = None,
) -> str:
    """The report as markdown text (`skipped`: a note on lines of the file that were skipped)."""
    lines = [MARKDOWN_TITLE, ""]
    if source is not None:
        lines += [f"Results: `{source}` ({len(records)} cells)", ""]
    if skipped:
        lines += [f"_{skipped}_", ""]
    if not records:
        return "\n".join([*lines, NO_CELLS, ""])
    lines += _environment(records) + _ceilings(records) + [reading_notes(), ""]
    lines += traces_section(records)
    for key, group in by_workload(records).items():
        lines += [f"## {key}", "", *cell_tables(group), ""]
        lines += _traced_sections(group)
    lines += _errors(records)
    lines += study_section(records)
    lines += sharded_section(records)
    lines += processes_section(records)
    lines += _study_sections(records)
    if plots:
        lines += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    lines += _roofline_lines([r for r in records if r.ok], plots)
    return "\n".join(lines)


def _roofline_lines(records: Sequence[CellResult], plots: Iterable[str]) -> list[str]:
    """What the roofline left out or could not bound."""
    with_flops = [r for r in records if r.model.flops and r.rates.tflops]
    if ROOFLINE_PNG not in plots:
        if with_flops and all(r.rates.cache_resident for r in with_flops):
            count = len(with_flops)
            return [f"Roofline: not drawn, all {count} cells with FLOPs are cache-resident.", ""]
        return []
    above = roofline_points_above(records)
    if not above:
        return []
    names = ", ".join(f"{cell_label(r)} {r.variant}" for r in above)
    return [f"Roofline: {above_note(len(above))} ({names})", ""]


# What a record's nested objects (a trace's kernel times and groups, the missed fusions) raise
# when a hand-edited or cut-short file lacks a key or holds a value of another type: the record
# reads (its own fields are checked), the sections made from those objects say so instead.
_MALFORMED = (KeyError, TypeError, ValueError, IndexError, AttributeError)


def _traced_sections(group: Sequence[CellResult]) -> list[str]:
    """A workload's kernel times, cost model and missed fusions; one line where a record's
    nested objects are malformed, so the rest of the report is still written."""
    try:
        return [*kernel_sections(group), *cost_model_section(group), *_missed(group)]
    except _MALFORMED as err:
        return [
            "_This workload's traced sections are not shown: a record's trace or missed "
            f"fusions are malformed ({type(err).__name__}: {err})._",
            "",
        ]


def _kernel_plot(records: Sequence[CellResult], out_dir: Path, wanted: str | None) -> list[str]:
    """The per-kernel roofline of one traced cell (`xlafuse.report.kernels`), if any; none
    where that cell's kernel times are malformed."""
    cell = choose_roofline_cell([r for r in records if r.ok], wanted)
    if cell is None:
        return []
    try:
        drawn = plot_kernel_roofline(cell, out_dir / KERNEL_ROOFLINE_PNG)
    except _MALFORMED:
        return []
    return [KERNEL_ROOFLINE_PNG] if drawn else []


def _study_sections(records: Sequence[CellResult]) -> list[str]:
    """Cold start, CUDA graphs, XLA beside PyTorch: each only where its cells exist."""
    ok = [r for r in records if r.ok]
    graphs = graphs_section(ok)
    if not graphs and ok and all(r.backend == Backend.CPU for r in ok):
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
    """The file's calibration; every distinct one where a file holds several (a file written
    before a resume reused its calibration)."""
    measured = {}
    for r in records:
        if r.ceilings.copy_bytes_per_s:
            measured.setdefault(_calibration_line(r), []).append(r)
    if not measured:
        return []
    rows = list(measured)
    if len(rows) > 1:
        rows = [f"{line} ({len(cells)} cells)" for line, cells in measured.items()]
        rows.insert(0, f"_{len(measured)} calibrations in this file: each cell used its run's._")
    note = (
        "Modeled bytes assume every kernel reads its inputs from and writes its outputs to main "
        "memory once. A cell whose memory (arguments, outputs and temporaries) fits in the "
        "last-level cache is marked cache-resident and gets no % of the copy ceiling: its data "
        "need never reach main memory. Above 100% otherwise means a read-heavy kernel: the "
        "ceiling is a copy, one byte written per byte read, and memory serves reads faster."
    )
    return ["## Measured ceilings", "", *rows, "", note, ""]


def _calibration_line(r: CellResult) -> str:
    c = r.ceilings
    line = f"- copy bandwidth: {c.copy_bytes_per_s / 1e9:.4g} GB/s (x + 1, read + write"
    if c.copy_array_bytes:
        line += f", on {c.copy_array_bytes / (1 << 20):,.0f} MiB"
    line += f", per {c.copy_basis})" if c.copy_basis else ")"
    if c.copy_range:
        low, high = (value / 1e9 for value in c.copy_range)
        line += f", range {low:.4g}-{high:.4g} GB/s"
    if c.cache_bytes:
        line += f"; last-level cache {c.cache_bytes / (1 << 20):.3g} MiB"
    if c.matmul_flops_per_s:
        line += f"; matmul: {c.matmul_flops_per_s / 1e12:.3f} TFLOP/s"
    return line


def by_workload(records: Sequence[CellResult]) -> dict[str, list[CellResult]]:
    """The records by their section's header, `mlp[batch=8] / tiny / train / float32` (and
    `/ data-parallel on 2 devices` when sharded). A cell that failed before it was built has no
    dtype: it goes under its cell's dtype where another record of the cell has one, else its
    header leaves the dtype out."""
    built = {}
    for r in records:
        if r.dtype:
            built.setdefault(record_cell(r), r.dtype)
    groups: dict[str, list[CellResult]] = {}
    for r in records:
        cell = record_cell(r)
        parts = (cell.head, r.size, r.mode, r.dtype or built.get(cell), cell.on_devices)
        groups.setdefault(" / ".join(str(p) for p in parts if p), []).append(r)
    return groups


READING_NOTES = (
    "How to read the tables. Three times, each a median over the cell's timing rounds: "
    "latency, a synchronized call (dispatch, the kernels and the sync); pipelined, the seconds "
    "per call of calls issued back to back with one sync (what a training loop sees); device, "
    "the profiled kernel time per call (GPU). A speedup is the reference's median over the "
    "variant's on the figure the cell leads with, in bold (pipelined for a train step and on a "
    "CPU, where a synchronized call mostly times the wake-up of the runtime's threads; latency "
    "for a forward call on a GPU), over the same rounds: `(ref ...)` beside a variant's time is the reference's "
    "figure in those rounds, so the speedup is exactly the one over the other. In-process "
    "variants are timed in rounds alternating with the reference (paired), so a drift of the "
    "machine affects both; `apart` marks a variant timed on its own. The 95% interval is the "
    "bootstrap over this run's rounds: it says how much the rounds scatter, not how far another "
    "run would land (see experiments/cpu/intervals for how often it covers other runs). The "
    "verdict is `same` when the interval contains 1.0 or the change is under {same:.0%}, else "
    "`faster` or `slower`. The device speedup compares per-call kernel time. `host ms/call` is "
    "the host time to issue one call of a pipelined burst; a cell marked HOST-BOUND has a "
    "pipelined time above {host:.2f}x its device time: its wall-clock speedup measures the host, "
    "not the kernels. A cell marked TRACE-PERTURBED has a traced kernel time per call above "
    "{perturbed:.2f}x its untraced pipelined time: the profiler ran another program (XLA turns "
    "command buffers off while tracing), so its device time and kernel times are those of the "
    "traced program, and its rates divide the pipelined time. Numerics (`xlafuse.measurement.numerics`): each output element within `atol + "
    "rtol x |ref|` ({tolerances}, atol relative to the output's largest magnitude), at the "
    "precision the program computed in, which the numerics column names: a float32 program "
    "whose dots and convolutions ran in TF32 (an NVIDIA GPU of compute capability "
    "{tf32_capability:.1f} or above, below HIGHEST precision: JAX's default) is judged at tf32 "
    "({tf32}). A train step is judged by its loss, gradient, batch statistics and updated "
    "parameters; a parameter whose gradient is zero within tolerance may take Adam's first "
    "step (+-lr) either way."
)


def reading_notes() -> str:
    """READING_NOTES with the constants they describe."""
    tolerances = ", ".join(
        f"{dtype} rtol {_power(rtol)}, atol {_power(atol)}"
        for dtype, (rtol, atol) in TOLERANCES.items()
    )
    return READING_NOTES.format(
        same=SAME_WITHIN,
        host=HOST_BOUND,
        perturbed=TRACE_PERTURBED,
        tolerances=tolerances,
        tf32=f"rtol {_power(TF32[0])}, atol {_power(TF32[1])}",
        tf32_capability=TF32_MIN_COMPUTE_CAPABILITY,
    )


def _power(value: float) -> str:
    """`1e-4` for 0.0001, `5e-2` for 0.05."""
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


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
    written = []
    for name, plot in (
        (SPEEDUP_PNG, plot_speedup),
        (KERNELS_PNG, plot_kernels),
        (ROOFLINE_PNG, plot_roofline),
        (THROUGHPUT_PNG, plot_throughput),
        (COLD_START_PNG, coldstart_plot),
        (FRAMEWORKS_PNG, frameworks_plot),
        (COST_MODEL_PNG, cost_model_plot),
    ):
        if plot(ok, out_dir / name):
            written.append(name)
    return written
