"""Report sections for the cold-start and graph-capture studies (markdown, optional PNG).

Both take records as dicts (or objects with `to_dict()`): runner cells that carry the cold-start
fields (`cold_compile_s`, `warm_compile_s`, `first_call_s`, `steady_call_s`, `aot_load_s`) or the
`ColdStartResult.to_dict()` of `xlafuse.measure.coldstart`; the graphs table is made of runner
cells of the GRAPH_FLAGS variants (`configs/graphs.toml`). Records without those fields are ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from xlafuse.models.workload import workload_label

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


def coldstart_section(records: Iterable[Any]) -> str:
    """Markdown section: compile time vs steady time and the persistent-cache speedup.

    Args:
      records: result records; those without cold-start fields are skipped.

    Returns:
      The section ("" when no record has cold-start fields).
    """
    rows = [r for r in map(_as_dict, records) if _has_cold_fields(r)]
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


def graphs_section(records: Iterable[Any]) -> str:
    """Markdown section: per-call latency with CUDA graphs on/off x fusion on/off.

    Args:
      records: `GraphsResult.to_records()` (or runner cells of the graph variants).

    Returns:
      The section; on a CPU the skip note; "" when no record belongs to the study.
    """
    rows = _graph_rows([_as_dict(r) for r in records])
    if not rows:
        return ""
    lines = ["## Graph capture (CUDA graphs)", ""]
    skipped = [r["skipped"] for r in rows if r.get("skipped")]
    if skipped:
        return "\n".join([*lines, f"_{skipped[0]}_ (backend {rows[0].get('backend')}).", ""])
    lines += [
        "Synchronized per-call latency on dispatch-bound workloads; graphs gain = off / on.",
        "",
        "| " + " | ".join(_GRAPH_COLUMNS) + " |",
        "|" + "---|" * len(_GRAPH_COLUMNS),
    ]
    for (workload, fusion), pair in _graph_pairs(rows).items():
        on, off = pair.get(True), pair.get(False)
        gain = _ratio(off and off["time_median_s"], on and on["time_median_s"])
        cells = [workload, "on" if fusion else "off", _latency(on), _latency(off), gain]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join([*lines, ""])


def coldstart_plot(records: Iterable[Any], path: str | Path) -> bool:
    """Bar chart of cold vs warm compile seconds (log scale); False when nothing to plot."""
    rows = [r for r in map(_as_dict, records) if r.get("warm_compile_s") is not None]
    if not rows:
        return False
    # deferred: matplotlib is heavy to import and only plots need it
    import matplotlib

    matplotlib.use("Agg")
    # deferred: matplotlib is heavy to import and only plots need it
    import matplotlib.pyplot as plt

    labels = [f"{record_label(r)}\n{r.get('variant')}" for r in rows]
    xs = range(len(rows))
    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(rows) + 3), 4))
    ax.bar(
        [x - 0.2 for x in xs],
        [r.get("cold_compile_s") or 0 for r in rows],
        0.4,
        label="cold (empty cache, new process)",
    )
    ax.bar(
        [x + 0.2 for x in xs],
        [r["warm_compile_s"] for r in rows],
        0.4,
        label="warm (filled cache, new process)",
    )
    ax.set_yscale("log")
    ax.set_ylabel("compile time (s, log scale)")
    ax.set_xlabel("workload / size / mode, variant")
    ax.set_xticks(list(xs), labels, fontsize=7)
    backend = rows[0].get("backend", "")
    ax.set_title(f"Compile time, empty vs filled persistent cache ({backend})", fontsize=10)
    for bars in ax.containers:
        ax.bar_label(bars, fmt="%.3g s", fontsize=7)
    ax.legend(title="compile", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def _as_dict(record: Any) -> dict[str, Any]:
    if isinstance(record, Mapping):
        return dict(record)
    return dict(record.to_dict())


def _has_cold_fields(record: Mapping[str, Any]) -> bool:
    return any(record.get(k) is not None for k in COLD_FIELDS)


def record_label(record: Mapping[str, Any]) -> str:
    """The workload label of a record dict (a runner cell, or a cold-start result's nested spec)."""
    workload = record.get("workload")
    if isinstance(workload, Mapping):
        record = {**record, **workload, "workload": workload.get("name")}
    size, mode = record.get("size"), record.get("mode")
    return workload_label(record.get("workload"), size, mode, record.get("overrides"))


def _cold_row(r: Mapping[str, Any]) -> list[str]:
    cold, warm, steady = r.get("cold_compile_s"), r.get("warm_compile_s"), r.get("steady_call_s")
    hit = r.get("cache_hit")
    return [
        record_label(r),
        str(r.get("variant", "")),
        _fmt(cold, ".3f"),
        _fmt(warm, ".3f"),
        _ratio(cold, warm),
        _fmt(r.get("aot_load_s"), ".3f"),
        _fmt(r.get("first_call_s"), ".3f"),
        _fmt(steady and steady * 1e3, ".3f"),
        _fmt(cold / steady if cold and steady else None, ",.0f"),
        "-" if hit is None else ("yes" if hit else "NO"),
    ]


def _graph_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runner cells of the workloads that were timed with graphs off as well as on."""
    rows = []
    cells = [
        r for r in records if r.get("variant") in GRAPH_FLAGS and r.get("time_median_s") is not None
    ]
    with_off = {record_label(r) for r in cells if not GRAPH_FLAGS[r["variant"]][0]}
    for r in cells:
        if record_label(r) in with_off:
            graphs, fusion = GRAPH_FLAGS[r["variant"]]
            rows.append({**r, "workload": record_label(r), "graphs": graphs, "fusion": fusion})
    return rows


def _graph_pairs(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, bool], dict[bool, Any]]:
    pairs: dict[tuple[str, bool], dict[bool, Any]] = {}
    for r in rows:
        pairs.setdefault((r["workload"], bool(r["fusion"])), {})[bool(r["graphs"])] = r
    return pairs


def _latency(r: Mapping[str, Any] | None) -> str:
    if not r:
        return "-"
    us = [r[k] * 1e6 for k in ("time_median_s", "time_p10_s", "time_p90_s")]
    return f"{us[0]:.1f} ({us[1]:.1f}-{us[2]:.1f})"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.1f}x" if a and b else "-"


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def coldstart_text(result) -> str:
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
