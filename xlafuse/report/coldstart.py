"""Report sections for the cold-start and graph-capture studies (markdown, optional PNG).

Both read runner records (`CellResult`): the cold-start table those whose `cold_start` part was
measured (`measure.cold_start`, or a torch variant's warm compile), the graphs table the cells of
the GRAPH_FLAGS variants (`configs/graphs.toml`). Other records are ignored. `coldstart_text` is
the text of `xlafuse coldstart` (a `ColdStartResult` of `xlafuse.measurement.coldstart`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xlafuse.models.names import Cell
from xlafuse.report.figure import new_figure, save
from xlafuse.report.lines import cell_label
from xlafuse.results.records import CellResult

if TYPE_CHECKING:
    from xlafuse.measurement.coldstart import ColdStartResult

COLD_FIELDS = ("cold_compile_s", "warm_compile_s", "first_call_s", "steady_call_s", "aot_load_s")
_COLD_COLUMNS = (
    "workload",
    "variant",
    "cold compile s",
    "warm compile s",
    "cache speedup",
    "AOT load s",
    "first call s",
    "steady call ms",
    "compile/steady",
    "cache hit",
)
# Runner cells of these variants join the graphs table: (graphs on, fusion on).
GRAPH_FLAGS = {
    "default": (True, True),
    "no-cuda-graphs": (False, True),
    "no-fusion": (True, False),
    "no-fusion-no-graphs": (False, False),
}
GRAPHS_SKIPPED = "skipped: CUDA graphs exist only on the GPU"
_GRAPH_COLUMNS = (
    "workload",
    "fusion",
    "graphs on: median us (p10-p90)",
    "graphs off",
    "graphs gain",
)


def coldstart_section(records: Iterable[CellResult]) -> str:
    """Markdown section: compile time vs steady time and the persistent-cache speedup.

    Args:
      records: result records; those without cold-start figures (COLD_FIELDS) are skipped.

    Returns:
      The section ("" when no record has cold-start figures).
    """
    rows = [r for r in records if _has_cold_fields(r)]
    if not rows:
        return ""
    lines = [
        "## Cold start",
        "",
        "Fresh processes. Cold: empty persistent cache; warm: the cache a previous process "
        "filled; AOT: `jax.export` deserialize + compile + first call in a new process. "
        "compile/steady: how many steady-state calls one cold compile costs.",
        "",
        "| " + " | ".join(_COLD_COLUMNS) + " |",
        "|" + "---|" * len(_COLD_COLUMNS),
    ]
    lines += ["| " + " | ".join(_cold_row(r)) + " |" for r in rows]
    return "\n".join([*lines, ""])


def graphs_section(records: Iterable[CellResult]) -> str:
    """Markdown section: per-call latency with CUDA graphs on/off x fusion on/off.

    Args:
      records: result records; the cells of the GRAPH_FLAGS variants of workloads timed with
        graphs off as well as on make the table.

    Returns:
      The section; "" when no record belongs to the study.
    """
    pairs = _graph_pairs(records)
    if not pairs:
        return ""
    lines = [
        "## Graph capture (CUDA graphs)",
        "",
        "Synchronized per-call latency on dispatch-bound workloads; graphs gain = off / on.",
        "",
        "| " + " | ".join(_GRAPH_COLUMNS) + " |",
        "|" + "---|" * len(_GRAPH_COLUMNS),
    ]
    for (workload, fusion), pair in pairs.items():
        on, off = pair.get(True), pair.get(False)
        gain = _ratio(off and off.timing.median_s, on and on.timing.median_s)
        cells = [workload, "on" if fusion else "off", _latency(on), _latency(off), gain]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join([*lines, ""])


def coldstart_plot(records: Iterable[CellResult], path: str | Path) -> bool:
    """Bar chart of cold vs warm compile seconds (log scale); False when nothing to plot."""
    rows = [r for r in records if r.cold_start.warm_compile_s is not None]
    if not rows:
        return False
    labels = [f"{cell_label(r)}\n{r.variant}" for r in rows]
    xs = range(len(rows))
    fig, ax = new_figure((max(8, 1.6 * len(rows) + 3), 4))
    ax.bar(
        [x - 0.2 for x in xs],
        [r.cold_start.cold_compile_s or 0 for r in rows],
        0.4,
        label="cold (empty cache, new process)",
    )
    ax.bar(
        [x + 0.2 for x in xs],
        [r.cold_start.warm_compile_s for r in rows],
        0.4,
        label="warm (filled cache, new process)",
    )
    ax.set_yscale("log")
    ax.set_ylabel("compile time (s, log scale)")
    ax.set_xlabel("workload / size / mode, variant")
    ax.set_xticks(list(xs), labels, fontsize=7)
    ax.set_title(f"Compile time, empty vs filled persistent cache ({rows[0].backend})", fontsize=10)
    for bars in ax.containers:
        ax.bar_label(bars, fmt="%.3g s", fontsize=7)
    ax.legend(title="compile", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    return save(fig, path, dpi=120)


def _has_cold_fields(record: CellResult) -> bool:
    return any(getattr(record.cold_start, k) is not None for k in COLD_FIELDS)


def record_label(record: Mapping[str, Any]) -> str:
    """The workload label of a cold-start result's dict (its workload: a nested spec)."""
    workload = record.get("workload")
    if isinstance(workload, Mapping):
        record = {**record, **workload, "workload": workload.get("name")}
    return Cell.from_dict({**record, "name": record.get("workload")}).short_label


def _cold_row(r: CellResult) -> list[str]:
    c = r.cold_start
    cold, warm, steady = c.cold_compile_s, c.warm_compile_s, c.steady_call_s
    return [
        cell_label(r),
        r.variant,
        _fmt(cold, ".3f"),
        _fmt(warm, ".3f"),
        _ratio(cold, warm),
        _fmt(c.aot_load_s, ".3f"),
        _fmt(c.first_call_s, ".3f"),
        _fmt(steady and steady * 1e3, ".3f"),
        _fmt(cold / steady if cold and steady else None, ",.0f"),
        "-" if c.cache_hit is None else ("yes" if c.cache_hit else "NO"),
    ]


def _graph_pairs(records: Iterable[CellResult]) -> dict[tuple[str, bool], dict[bool, CellResult]]:
    """(workload label, fusion on) -> graphs on/off -> its cell, for the workloads that were
    timed with graphs off as well as on."""
    cells = [r for r in records if r.variant in GRAPH_FLAGS and r.timing.median_s is not None]
    with_off = {cell_label(r) for r in cells if not GRAPH_FLAGS[r.variant][0]}
    pairs: dict[tuple[str, bool], dict[bool, CellResult]] = {}
    for r in cells:
        if cell_label(r) in with_off:
            graphs, fusion = GRAPH_FLAGS[r.variant]
            pairs.setdefault((cell_label(r), fusion), {})[graphs] = r
    return pairs


def _latency(r: CellResult | None) -> str:
    if not r:
        return "-"
    t = r.timing
    return f"{t.median_s * 1e6:.1f} ({t.p10_s * 1e6:.1f}-{t.p90_s * 1e6:.1f})"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.1f}x" if a and b else "-"


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def coldstart_text(result: ColdStartResult) -> str:
    """Human-readable lines of a ColdStartResult."""

    def s(value, spec=".3f", unit=" s"):
        return "-" if value is None else f"{value:{spec}}{unit}"

    speedup = result.cache_speedup
    lines = [
        f"{record_label(result.to_dict())}  variant {result.variant}  backend {result.backend}",
        f"  import             {s(result.import_s)}",
        f"  trace + lower      {s(result.lower_s)}",
        f"  compile, cold      {s(result.cold_compile_s)}",
        f"  compile, warm      {s(result.warm_compile_s)}  (cache hit: "
        f"{'yes' if result.cache_hit else 'NO'}, {result.cache_entries} entries)",
        f"  cache speedup      {s(speedup, '.1f', 'x')}",
        f"  first call         {s(result.first_call_s)}",
        f"  steady call        {s(result.steady_call_s and result.steady_call_s * 1e3, '.3f', ' ms')}",
        f"  AOT export         {s(result.aot_export_s)}",
        f"  AOT load+1st call  {s(result.aot_load_s)}",
    ]
    return "\n".join(lines)
