"""Report section of XLA's cost model against the measured kernels (issue 28).

Reads the records' `trace.cost_model` (`xlafuse.measurement.costmodel.cost_model_record`, with
`decisions` from `xlafuse.measurement.decisions.decisions_record`): per traced GPU cell, how many
kernels have a prediction and a measurement, the error figures, the largest mispredictions,
and XLA's fusion decisions scored by the measured kernel groups. Nothing without those records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xlafuse.measurement.costmodel import (
    KernelCost,
    accuracy,
    accuracy_by,
    implied_rate,
    pairs_of_rows,
)
from xlafuse.report.figure import new_figure, save
from xlafuse.report.format import markdown_table
from xlafuse.results.records import CellResult

ROWS = 10
# The pooled table by measured time: (upper bound in seconds, label), shortest first. A kernel
# takes about a microsecond on a GPU however little it does; the estimates carry no such floor.
TIME_BANDS = (
    (3e-6, "under 3 µs"),
    (10e-6, "3 to 10 µs"),
    (100e-6, "10 to 100 µs"),
    (float("inf"), "100 µs or more"),
)
COST_MODEL_PNG = "cost_model.png"
INTRO = (
    "XLA's estimate of each kernel (`xla_gpu_collect_cost_model_stats`, from a second compile "
    "of the cell's program; see docs/cost-model.md) beside its traced time per call. Error = "
    "(predicted - measured) / measured; Spearman's rank correlation says whether the model "
    'orders the kernels as the GPU does. "TFLOP/s predicted": the kernel\'s FLOPs over its '
    "predicted time, the rate the estimate implies (for a matmul, to hold against the matmul "
    "ceiling)."
)


def cost_model_section(group: Sequence[CellResult]) -> list[str]:
    """One workload's cells with a cost-model record: the summary table, then per cell its
    largest mispredictions and its scored fusion decisions (empty without such records)."""
    scored = [r for r in group if r.trace.cost_model]
    if not scored:
        return []
    lines = ["### XLA's cost model against the measured kernels", "", INTRO, ""]
    lines += summary_table(scored)
    for r in scored:
        cost = r.trace.cost_model
        lines += _coverage_note(r.variant, cost)
        lines += _models_note(r.variant, cost.get("by_model") or {})
        if cost.get("worst"):
            lines += ["", f"{r.variant}: the {len(cost['worst'])} largest mispredictions", ""]
            lines += worst_table(worst_rows(r))
        if cost.get("decisions"):
            lines += ["", *decisions_lines(cost["decisions"])]
    return [*lines, ""]


def summary_table(records: Sequence[CellResult]) -> list[str]:
    """One row per cell: coverage, the error figures, the sums."""
    lines = [
        "| variant | kernels with both | median abs error | p90 abs error | Spearman | "
        "median predicted/measured | predicted µs | measured µs |",
        "|" + "---|" * 8,
    ]
    for r in records:
        c = r.trace.cost_model
        if "paired" not in c:  # the twin failed, or only the decisions were scored
            lines.append(f"| {r.variant} | {c.get('error', 'no estimates')} |" + " |" * 6)
            continue
        lines.append(
            f"| {r.variant} | {c['paired']} of {c['kernels']} | "
            f"{_pct(c['median_abs_error_pct'])} | {_pct(c['p90_abs_error_pct'])} | "
            f"{_num(c['spearman'], 1, '.3f')} | {_num(c['median_ratio'], 1, '.3g')} | "
            f"{c['predicted_s'] * 1e6:.4g} | {c['measured_s'] * 1e6:.4g} |"
        )
    return lines


def _coverage_note(variant: str, cost: Mapping[str, Any]) -> list[str]:
    """Which kernels have no pair and why; a twin whose kernels differ from the traced ones."""
    notes = [f"{n} {reason}" for reason, n in (cost.get("uncovered") or {}).items()]
    if cost.get("same_kernels") is False:
        notes.append("the second compile's kernels differ from the traced program's")
    if not notes:
        return []
    return ["", f"{variant}, without a pair: " + "; ".join(notes) + "."]


def _models_note(variant: str, models: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Each cost model's figures over the kernels it estimated (records since `by_model`)."""
    if not models:
        return []
    shown = [
        f"`{model}` {m['kernels']} kernels, median abs error {_pct(m['median_abs_error_pct'])}, "
        f"Spearman {_num(m['spearman'], 1, '.3f')}"
        for model, m in models.items()
    ]
    return [
        "",
        f"{variant}, each cost model on the kernels it estimated: " + "; ".join(shown) + ".",
    ]


def worst_rows(record: CellResult) -> list[dict[str, Any]]:
    """A cell's largest mispredictions, each with its FLOPs per launch where known: the row's
    own, else (records before `KernelCost.flops`) its traced kernel row's, where it is among the
    cell's top kernels."""
    times = record.trace.kernel_times or {}
    known = {
        k["name"]: k.get("flops") for key in ("top", "headroom_top") for k in times.get(key) or ()
    }
    return [
        {**k, "flops": k.get("flops") or known.get(k["name"])}
        for k in record.trace.cost_model.get("worst") or ()
    ]


def worst_table(rows: Sequence[Mapping[str, Any]], *, cells: Sequence[str] = ()) -> list[str]:
    """The largest mispredictions: most µs per call between predicted and measured (`cells`:
    each row's cell, a first column, where rows of several cells are pooled)."""
    columns = ("kernel", "kind", "model", "predicted µs", "measured µs", "error",
               "TFLOP/s predicted", "source")  # fmt: skip
    return markdown_table(
        (*(("cell",) if cells else ()), *columns),
        [
            (*cells[i : i + 1], f"`{k['name']}`", k["kind"], k["model"],
             f"{k['predicted_s'] * 1e6:.4g}", f"{k['measured_s'] * 1e6:.4g}",
             _pct(k["error_pct"], signed=True),
             _num(implied_rate(k.get("flops"), k.get("runs"), k["predicted_s"]), 1e-12, ".3g"),
             _first(k["source_lines"]))
            for i, k in enumerate(rows[:ROWS])
        ],
    )  # fmt: skip


def decisions_lines(d: Mapping[str, Any]) -> list[str]:
    """XLA's fusion decisions against the measured groups: the sign agreement and the
    decisions where prediction and measurement disagree."""
    if "error" in d:
        return [f"Fusion decisions not scored: {d['error']}"]
    agreement = "-" if d["agreement"] is None else f"{100 * d['agreement']:.0f}%"
    lines = [
        f"#### XLA's fusion decisions against the measured groups ({d['a']} vs {d['b']})",
        "",
        f"{d['decisions']} fusion steps in XLA's priority-fusion dump, {d['with_estimate']} "
        f"with a predicted gain, {d['measured']} in a timed group ({d['noise']} within the "
        f"noise). The sign of the predicted gain agrees with the measured one in "
        f"{d['agree']} of {d['decided']} decisions judged ({agreement}). Decisions in one "
        "kernel share its group's measured gain.",
    ]
    for title, rows in (
        (
            "Predicted a gain, measured a loss (candidates to un-fuse)",
            d["predicted_gain_measured_loss"],
        ),
        ("Predicted a loss, measured a gain", d["predicted_loss_measured_gain"]),
    ):
        lines += ["", f"{title}: {len(rows) or 'none'}"]
        if rows:
            lines += ["", *_decisions_table(rows)]
    return lines


def _decisions_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    columns = ("step", "producer -> consumer", "kernel", "predicted gain µs", "measured gain µs",
               "source")  # fmt: skip
    return markdown_table(
        columns,
        [
            (str(r["step"]), f"`{r['producer']}` -> `{r['consumer']}`", f"`{r['kernel']}`",
             f"{r['predicted_gain_s'] * 1e6:.4g}", f"{r['measured_gain_s'] * 1e6:.4g}",
             ", ".join(r["sources"]) or "-")
            for r in rows[:ROWS]
        ],
    )  # fmt: skip


def _pct(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.0f}%" if signed else f"{value:.0f}%"


def _num(value: float | None, scale: float, spec: str) -> str:
    return "-" if value is None else format(value * scale, spec)


def _first(lines: Sequence[str]) -> str:
    if not lines:
        return "-"
    return lines[0] + (f" +{len(lines) - 1}" if len(lines) > 1 else "")


def study_section(records: Sequence[CellResult]) -> list[str]:
    """Every cell's kernels pooled: the error figures over all of them, per kernel kind and per
    cost model that gave the prediction, the largest mispredictions of all cells, and XLA's
    fusion decisions scored over all cells (empty without cost-model records that hold pairs)."""
    cells = [r for r in records if (r.trace.cost_model or {}).get("pairs")]
    if not cells:
        return []
    pairs = pairs_of_rows([row for r in cells for row in r.trace.cost_model["pairs"]])
    uncovered: dict[str, int] = {}
    for r in cells:
        for reason, n in r.trace.cost_model.get("uncovered", {}).items():
            uncovered[reason] = uncovered.get(reason, 0) + n
    lines = [
        "## XLA's cost model, every traced cell",
        "",
        f"{len(pairs)} kernels of {len(cells)} cells with a prediction and a measured time "
        "(see docs/cost-model.md). Without a pair: "
        + ("; ".join(f"{n} {reason}" for reason, n in uncovered.items()) or "none")
        + ".",
    ]
    for head, field in (("kernels", "kind"), ("prediction from", "model")):
        lines += ["", *_pooled_table(head, accuracy_by(pairs, field=field))]
    lines += ["", *_pooled_table("variant", _by_variant(cells))]
    lines += ["", *_pooled_table("measured per call", _by_time(pairs))]
    lines += _pooled_worst(cells)
    lines += _pooled_decisions([(r.trace.cost_model or {}).get("decisions") for r in records])
    return [*lines, ""]


def _by_variant(cells: Sequence[CellResult]) -> dict[str, Any]:
    """`accuracy` of the pooled pairs of each variant's cells, in the order first seen."""
    groups: dict[str, list[KernelCost]] = {}
    for r in cells:
        groups.setdefault(r.variant, []).extend(pairs_of_rows(r.trace.cost_model["pairs"]))
    return {variant: accuracy(pairs) for variant, pairs in groups.items()}


def _by_time(pairs: Sequence[KernelCost]) -> dict[str, Any]:
    """`accuracy` of the pairs in each of `TIME_BANDS` (by measured time), empty bands left out."""
    groups: dict[str, list[KernelCost]] = {label: [] for _, label in TIME_BANDS}
    for p in pairs:
        label = next(label for bound, label in TIME_BANDS if p.measured_s < bound)
        groups[label].append(p)
    return {label: accuracy(rows) for label, rows in groups.items() if rows}


def _pooled_table(head: str, by: Mapping[str, Any]) -> list[str]:
    lines = [
        f"| {head} | n | median abs error | p90 abs error | Spearman | "
        "median predicted/measured | predicted ms | measured ms |",
        "|" + "---|" * 8,
    ]
    for key, a in by.items():
        lines.append(
            f"| {key} | {a.kernels} | {_pct(a.median_abs_error_pct)} | "
            f"{_pct(a.p90_abs_error_pct)} | {_num(a.spearman, 1, '.3f')} | "
            f"{_num(a.median_ratio, 1, '.3g')} | {a.predicted_s * 1e3:.4g} | "
            f"{a.measured_s * 1e3:.4g} |"
        )
    return lines


def _pooled_worst(cells: Sequence[CellResult]) -> list[str]:
    """The largest mispredictions of all cells (each cell keeps its own largest)."""
    rows = [(r, k) for r in cells for k in worst_rows(r)]
    rows.sort(key=lambda rk: -abs(rk[1]["predicted_s"] - rk[1]["measured_s"]))
    if not rows:
        return []
    labels = [f"{r.workload}/{r.mode} {r.variant}" for r, _ in rows[:ROWS]]
    title = f"The {min(ROWS, len(rows))} largest mispredictions of all cells (µs per call apart)"
    return ["", title, "", *worst_table([k for _, k in rows], cells=labels)]


def _pooled_decisions(decisions: Sequence[Mapping[str, Any]]) -> list[str]:
    """XLA's fusion decisions of every scored cell, summed: the sign agreement over all."""
    scored = [d for d in decisions if d and "error" not in d]
    if not scored:
        return []
    total = {k: sum(d[k] for d in scored) for k in ("decisions", "decided", "agree", "noise")}
    agreement = f"{100 * total['agree'] / total['decided']:.0f}%" if total["decided"] else "-"
    return [
        "",
        f"XLA's fusion decisions, {len(scored)} cells scored: {total['decisions']} fusion steps; "
        f"of the {total['decided']} whose measured gain is outside the noise, the sign of XLA's "
        f"predicted gain agrees in {total['agree']} ({agreement}); {total['noise']} within the "
        "noise. Each cell's section lists its decisions where prediction and measurement "
        "disagree.",
    ]


def cost_model_plot(records: Sequence[CellResult], path: str | Path) -> bool:
    """Predicted against measured time of every paired kernel, log-log, by kernel kind, with the
    line predicted = measured; False (nothing written) without pairs."""
    rows = [row for r in records for row in (r.trace.cost_model or {}).get("pairs", ())]
    pairs = [p for p in pairs_of_rows(rows) if p.predicted_s > 0 and p.measured_s > 0]
    if not pairs:
        return False
    fig, ax = new_figure((7, 6))
    for kind in sorted({p.kind for p in pairs}):
        mine = [p for p in pairs if p.kind == kind]
        xs, ys = [p.measured_s * 1e6 for p in mine], [p.predicted_s * 1e6 for p in mine]
        ax.scatter(xs, ys, s=12, alpha=0.6, label=f"{kind} ({len(mine)})")
    every = [p.measured_s * 1e6 for p in pairs] + [p.predicted_s * 1e6 for p in pairs]
    low, high = min(every) / 2, max(every) * 2
    ax.plot([low, high], [low, high], color="black", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured µs per call (traced)")
    ax.set_ylabel("XLA's estimate, µs per call")
    ax.set_title(f"XLA's cost model against {len(pairs)} measured kernels", fontsize=9)
    ax.legend(fontsize=7, title="kind", title_fontsize=7)
    return save(fig, path)
