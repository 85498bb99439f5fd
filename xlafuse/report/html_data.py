"""The data of report.html: what the records hold, as one JSON-able value the page's script reads.

Every figure is a record's own (`CellResult` and the objects its trace part keeps: kernel
times, the kernel diff, the cost model, the missed fusions); nothing is derived here but the
order of rows and which record a row came from. A record's kernel table (`kernel_times/2`'s
`kernel_table`, or an untraced cell's `hlo_kernel_table`: `xlafuse.measurement.kernels`) gives every
kernel of the cell and, in each row's `producers`, the rows of the kernels whose outputs it
reads, which the page's graph draws. Where a record does not hold a figure, the value is None and
the page shows `-`; where it holds fewer kernels than the cell ran (a record from before the
table), the cell's `kernels_note` says which are absent and where they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from xlafuse.measurement.kernel_table import read_kernel_table, table_rows
from xlafuse.report.html_graph import workload_graph
from xlafuse.report.lines import cell_label
from xlafuse.results.records import CellResult

SCHEMA = "xlafuse.report_html/1"
# One kernel row of the page, in this order (the script names the columns by these keys).
KERNEL_COLUMNS = (
    "name", "kind", "launches_per_call", "time_s", "modeled_bytes", "flops", "pct_of_bound",
    "bound", "headroom_s", "source_lines", "predicted_s", "producers",
)  # fmt: skip
_TOTALS = (
    "basis", "calls", "time_s", "attributed_s", "unattributed_s", "unattributed_share",
    "kernels", "kernels_seen", "launches_per_call",
)  # fmt: skip
_DIFF_KEYS = (
    "a", "b", "basis", "time_a_s", "time_b_s", "unattributed_a_s", "unattributed_b_s",
    "kernels_a", "kernels_b", "groups", "changed_s", "changed_groups", "top", "gains", "losses",
    "error",
)  # fmt: skip
_DECISION_LISTS = ("predicted_gain_measured_loss", "predicted_loss_measured_gain")
# What a record's nested objects raise when a hand-edited file holds another shape there
# (`xlafuse.report.markdown` says the same of its sections): that part of the page says so.
MALFORMED = (KeyError, TypeError, ValueError, IndexError, AttributeError)


def page_data(
    records: Sequence[CellResult], groups: Mapping[str, Sequence[CellResult]]
) -> dict[str, Any]:
    """The page's data: each cell (in `records`' order) and each workload's graph.

    Args:
      records: the latest record of each cell.
      groups: the same records by their workload's section header (`markdown.by_workload`).

    Returns:
      {"schema", "kernel_columns", "cells": [cell_data ...], "workloads": [{"key", "cells":
      [index into cells]}], "graphs": {workload key: workload_graph}}.
    """
    index = {id(r): i for i, r in enumerate(records)}
    workload_of = {id(r): key for key, group in groups.items() for r in group}
    return {
        "schema": SCHEMA,
        "kernel_columns": list(KERNEL_COLUMNS),
        "cells": [cell_data(r, workload_of.get(id(r), "")) for r in records],
        "workloads": [
            {"key": key, "cells": [index[id(r)] for r in group]} for key, group in groups.items()
        ],
        "graphs": {key: _graph(group) for key, group in groups.items()},
    }


def cell_data(record: CellResult, workload: str) -> dict[str, Any]:
    """One cell: its name and status, its traced kernels, groups, missed fusions and XLA's
    scored decisions (each None where the record holds none)."""
    data = {
        "id": record.cell_id,
        "label": cell_label(record),
        "variant": record.variant,
        "workload": workload,
        "reference": record.variant == record.reference,
        "status": str(record.status),
        "error": f"{record.error_type}: {record.error}" if not record.ok else None,
        "trace_path": record.trace.path,
        "kernels_in_program": record.fusion.kernels,
        "kinds": dict(record.fusion.kinds),
        "device_top": [list(k) for k in record.device.top_kernels or []],
    }
    try:
        data.update(_traced(record))
    except MALFORMED as err:
        data["malformed"] = f"{type(err).__name__}: {err}"
    return data


def _traced(record: CellResult) -> dict[str, Any]:
    kt = record.trace.kernel_times
    cost = record.trace.cost_model or {}
    diff = record.trace.kernel_diff
    decisions = cost.get("decisions")
    rows = kernel_rows(record)
    return {
        "totals": {k: kt.get(k) for k in _TOTALS} if kt else None,
        "kernels": [[row.get(c) for c in KERNEL_COLUMNS] for row in rows],
        "kernels_note": kernels_note(record, rows) if rows or kt else None,
        "diff": {k: diff[k] for k in _DIFF_KEYS if k in diff} if diff else None,
        "missed": _missed(record.fusion.missed_fusions),
        "decisions": _decisions(decisions) if decisions else None,
    }


def kernel_rows(record: CellResult) -> list[dict[str, Any]]:
    """Every kernel a record names: its kernel table's rows (a traced cell's longest first, an
    untraced cell's from its HLO in program order), with XLA's predicted time where the cost
    model has one; a record without a table, the kernels it names (`named_kernel_rows`)."""
    table = read_kernel_table(record.trace.kernel_times)
    if table is None and not record.trace.kernel_times:
        table = table_rows(record.fusion.kernel_table)
    if table is None:
        return named_kernel_rows(record) if record.trace.kernel_times else []
    predicted = {p[0]: p[3] for p in (record.trace.cost_model or {}).get("pairs", [])}
    for row in table:
        row["source_lines"] = [row["source"]] if row.get("source") else []
        row["predicted_s"] = predicted.get(row["name"])
    return table


def named_kernel_rows(record: CellResult) -> list[dict[str, Any]]:
    """The kernels a traced record without a kernel table names, longest time first: the top
    kernels by time and by headroom with all their figures, then each kernel of the cost
    model's join (name, kind, measured and predicted time) and its largest mispredictions
    (source lines, FLOPs)."""
    kt = record.trace.kernel_times or {}
    cost = record.trace.cost_model or {}
    rows: dict[str, dict[str, Any]] = {}
    for k in [*kt.get("top", []), *kt.get("headroom_top", [])]:
        rows[k["name"]] = {**rows.get(k["name"], {}), **k}
    for name, kind, _model, predicted_s, measured_s in cost.get("pairs", []):
        row = rows.setdefault(name, {"name": name, "kind": kind, "time_s": measured_s})
        row["predicted_s"] = predicted_s
    for k in cost.get("worst", []):
        row = rows.setdefault(k["name"], {"name": k["name"], "kind": k["kind"]})
        row.setdefault("time_s", k["measured_s"])
        row.setdefault("predicted_s", k["predicted_s"])
        row.setdefault("source_lines", k.get("source_lines"))
        row.setdefault("flops", k.get("flops"))
    return sorted(rows.values(), key=lambda r: -(r.get("time_s") or 0.0))


def kernels_note(record: CellResult, rows: Sequence[Mapping[str, Any]]) -> str:
    """What the kernel table holds of the cell's kernels, and where the rest are."""
    kt = record.trace.kernel_times or {}
    if not kt:
        return (
            f"Not traced: all {len(rows)} kernels of the program from its HLO, each with its "
            "modeled bytes, FLOPs, first source line and the kernels whose outputs it reads; "
            "launches per call are the HLO's (the runs of the kernel's computation per call). "
            "No time, share, bound or headroom: a run with `[measure] profile = true` keeps them."
        )
    if kt.get("kernel_table"):
        return (
            f"All {len(rows)} kernels of the trace, each with its figures and the kernels whose "
            "outputs it reads (the Graph tab draws them)."
        )
    return _older_note(record, rows)


def _older_note(record: CellResult, rows: Sequence[Mapping[str, Any]]) -> str:
    """The note of a record without a kernel table (`xlafuse.kernel_times/1`)."""
    ran = (record.trace.kernel_times or {}).get("kernels")
    detailed = sum(1 for r in rows if r.get("modeled_bytes") is not None)
    where = (
        f"the kept trace, `{record.trace.path}` of the results folder"
        if record.trace.path
        else "no file: the trace was not kept"
    )
    older = (
        " The record predates `xlafuse.kernel_times/2`, which keeps every kernel and the "
        "kernels each reads."
    )
    if len(rows) < (ran or 0):
        return (
            f"The record keeps {len(rows)} of the {ran} kernels the trace joined to the HLO "
            f"(the top ones by time and by headroom); the other {ran - len(rows)} are in "
            f"{where}.{older}"
        )
    if detailed < len(rows):
        return (
            f"All {len(rows)} kernels of the trace, their times from the cost model's join "
            f"(`cost_model.pairs`). The record keeps every figure (launches, bytes, FLOPs, "
            f"bound, headroom, source) for {detailed} of them, the top ones by time and by "
            "headroom, and FLOPs and source for XLA's largest mispredictions: `-` where it "
            f"holds none.{older}"
        )
    return f"All {len(rows)} kernels of the trace, each with its figures.{older}"


def _missed(summary: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The record's missed fusions as they are (`inspect.explain.missed_fusions`); its rows'
    `reasons`, where a record holds them, go with them."""
    if not summary:
        return None
    return dict(summary)


def _decisions(d: Mapping[str, Any]) -> dict[str, Any]:
    """XLA's fusion decisions scored against the measured groups (`measure.decisions`)."""
    if "error" in d:
        return {"error": d["error"]}
    keys = ("a", "b", "decisions", "with_estimate", "measured", "decided", "agree", "agreement")
    return {**{k: d.get(k) for k in keys}, **{k: list(d.get(k) or []) for k in _DECISION_LISTS}}


def _graph(group: Sequence[CellResult]) -> dict[str, Any]:
    try:
        return workload_graph(group)
    except MALFORMED as err:
        return {"nodes": {}, "edges": [], "malformed": f"{type(err).__name__}: {err}"}
