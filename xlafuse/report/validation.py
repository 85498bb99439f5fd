"""Render `xlafuse validate` results: a terminal table, and `validation.md` + `validation.json`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from xlafuse.measurement.ncu import DETAIL_METRICS
from xlafuse.measurement.validate import (
    BYTES_TOLERANCE,
    L2_ASSUMED,
    L2_CARRY_OVER,
    L2_FACTOR,
    TIME_TOLERANCE,
    KernelRow,
    ValidationResult,
)
from xlafuse.report.format import text_table

_COLUMNS = (
    "#", "HLO kernel", "kind", "ncu kernel", "match", "modeled MB", "DRAM read MB",
    "DRAM write MB", "DRAM vs model", "ncu us", "profiler us", "ncu vs profiler", "verdict",
)  # fmt: skip
_FIRST_NUMERIC = 5  # "modeled MB"; every column from there to the verdict is a number
_DETAIL = {  # `KernelRow.detail`'s fields, in DETAIL_METRICS order: (column, what it measures)
    "sm_pct": ("SM %", "compute throughput, % of peak"),
    "memory_pct": ("memory %", "memory throughput, % of peak"),
    "occupancy_pct": ("occupancy %", "achieved occupancy"),
    "l2_hit_pct": ("L2 hit %", "L2 sector hit rate"),
    "grid_size": ("grid", "grid size in blocks"),
}
_LISTED = 8  # unmatched kernels named in a cell's summary line


def has_detail(result: ValidationResult) -> bool:
    """Whether any row of `result` has ncu's detail metrics (`xlafuse validate --detail`)."""
    return any(r.detail for r in result.rows)


def kernel_columns(*, detail: bool = False) -> tuple[str, ...]:
    """The kernel table's columns: `_COLUMNS`, with `detail` the detail columns before the
    verdict."""
    if not detail:
        return _COLUMNS
    return (*_COLUMNS[:-1], *(column for column, _ in _DETAIL.values()), _COLUMNS[-1])


def kernel_cells(index: int, row: KernelRow, *, detail: bool = False) -> list[str]:
    """The table cells of one kernel row, in `kernel_columns(detail)` order."""
    measured = [
        str(index),
        row.name or "-",
        row.kind or "-",
        " + ".join(row.ncu_names) or "-",
        row.match,
        _mb(row.modeled_bytes),
        _mb(row.dram_read_bytes),
        _mb(row.dram_write_bytes),
        _pct(row.bytes_error),
        _us(row.ncu_time_s),
        _us(row.profiler_time_s),
        _pct(row.time_error),
    ]
    if detail:
        measured += detail_cells(row)
    return [*measured, row.verdict + (" (explained: L2 carry-over)" if row.explanation else "")]


def detail_cells(row: KernelRow) -> list[str]:
    """The detail columns of one kernel row: percents with one decimal, the grid's blocks with
    thousands separators, "-" where ncu gave none."""
    cells = []
    for field in _DETAIL:
        value = row.detail.get(field)
        if value is None:
            cells.append("-")
        else:
            cells.append(f"{value:,.0f}" if field == "grid_size" else f"{value:.1f}")
    return cells


def summary_lines(result: ValidationResult) -> list[str]:
    """The lines under a cell's heading: counts, bytes, time, how the program was compiled."""
    if result.error is not None:
        return [f"- failed: {result.error}"]
    equal = "equal" if result.kernels_equal else "NOT equal"
    if result.kernels_explained and not result.kernels_equal:
        equal = "equal once " + _count_differences(result)
    unmatched = [*result.unmatched_hlo, *(f"{n} (ncu)" for n in result.unmatched_ncu)]
    if len(unmatched) > _LISTED:
        unmatched = [*unmatched[:_LISTED], f"... {len(unmatched) - _LISTED} more (see the table)"]
    threshold = f"{L2_FACTOR} x {_mb(result.l2_size)} MB L2 = {_mb(result.judged_min_bytes)} MB"
    if result.l2_assumed:
        threshold += f"; {L2_ASSUMED}"
    time = f"- time of the call (listed): ncu {_us(result.ncu_time_s)} us"
    if result.profiler_time_s:
        time += f", profiler {_us(result.profiler_time_s)} us ({_pct(result.time_error)})"
    if result.judged_times is not None:
        ncu_s, profiler_s = result.judged_times
        time += (
            f"; judged kernels: ncu {_us(ncu_s)} us, profiler {_us(profiler_s)} us "
            f"({_pct(result.judged_time_error)})"
        )
    explained = [r.name for r in result.rows if r.explanation]
    compiled = {True: "yes (cache miss)", False: "no (cache hit)", None: "unknown"}
    same = {True: "yes", False: "NO", None: "unknown"}
    return [
        f"- kernels: {result.hlo_kernels} in the HLO, {result.ncu_kernels} launched under ncu "
        f"({equal}); unmatched: {', '.join(unmatched) or 'none'}",
        f"- bytes: {result.judged_ok} of {result.judged} judged kernels within "
        f"{BYTES_TOLERANCE:.0%} (judged: modeled bytes >= {threshold})",
        time,
        f"- compiled under ncu: {compiled[result.compiled_under_ncu]}; same kernels as the "
        f"warm-up: {same[result.same_kernels]}",
    ] + ([f"- explained misses ({len(explained)}): {L2_CARRY_OVER}"] if explained else [])


def _count_differences(result: ValidationResult) -> str:
    """What makes the counts differ: library calls' extra launches, copies run as memcpys."""
    parts = []
    extra = result.extra_library_launches
    if extra:
        named = ", ".join(f"{name} +{n}" for name, n in list(extra.items())[:_LISTED])
        more = f", ... {len(extra) - _LISTED} more" if len(extra) > _LISTED else ""
        parts.append(
            f"{sum(extra.values())} extra launch(es) of library calls are counted ({named}{more})"
        )
    if result.memcpy_copies:
        parts.append(
            f"{len(result.memcpy_copies)} copy(ies) ran as memcpy ({', '.join(result.memcpy_copies)})"
        )
    return " and ".join(parts)


def _kernel_table(result: ValidationResult) -> tuple[tuple[str, ...], list[list[str]]]:
    """A cell's kernel table: its columns (with the detail ones when a row has detail), its rows."""
    detail = has_detail(result)
    rows = [kernel_cells(i, r, detail=detail) for i, r in enumerate(result.rows, 1)]
    return kernel_columns(detail=detail), rows


def format_text(results: Sequence[ValidationResult]) -> str:
    """A plain-text table per cell, for the terminal."""
    blocks = []
    for result in results:
        head = f"{result.label}  variant {result.variant}: {result.verdict}"
        lines = [head, *(line[2:] for line in summary_lines(result))]
        if result.rows:
            columns, rows = _kernel_table(result)
            lines += text_table(columns, rows, right=_numeric(columns)).splitlines()
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def render_markdown(results: Sequence[ValidationResult], *, command: str | None = None) -> str:
    """`validation.md`: what is judged, a summary table, then every cell's kernel table."""
    lines = ["# Validation against Nsight Compute", "", _intro(results), ""]
    if command:
        lines += ["```bash", command, "```", ""]
    lines += [
        f"| cell | variant | kernels HLO / ncu | judged within {BYTES_TOLERANCE:.0%} | "
        "worst bytes error | ncu vs profiler (judged kernels) | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [_summary_row(r) for r in results]
    for result in results:
        lines += ["", f"## {result.label}, {result.variant}: {result.verdict}", ""]
        lines += summary_lines(result)
        if result.rows:
            columns, rows = _kernel_table(result)
            lines += ["", _md_row(columns), _md_row(_align(columns)), *map(_md_row, rows)]
    return "\n".join(lines) + "\n"


def _intro(results: Sequence[ValidationResult]) -> str:
    """validation.md's first paragraph: what was measured and what is judged."""
    intro = (
        "One call of each cell profiled under `ncu` (`dram__bytes_read.sum`, "
        "`dram__bytes_write.sum`, `gpu__time_duration.sum`; `--clock-control none`), after a "
        "warm-up process filled the compilation cache. Judged: every kernel paired, and kernel "
        "counts equal once library calls' extra launches (cuDNN padding, cuBLAS split-K "
        "reductions) and copies run as memcpy (ncu sees kernels only) are counted; DRAM bytes "
        f"read + written within {BYTES_TOLERANCE:.0%} of the modeled bytes for kernels whose "
        f"modeled bytes are at least {L2_FACTOR}x the L2 (smaller kernels are listed, not "
        "judged: their data may stay in L2); ncu's time within "
        f"{TIME_TOLERANCE:.0%} of the profiler's device time for those judged kernels. The "
        "whole call's time is listed, not judged: ncu flushes the caches before each kernel, "
        "so kernels whose data stays in L2 in the run are slower under ncu. A judged kernel "
        "that misses by at most one L2 of traffic, in the direction of that flush, is "
        f"explained: {L2_CARRY_OVER}."
    )
    if not any(has_detail(r) for r in results):
        return intro
    measured = "; ".join(
        f"{column}: {what} (`{DETAIL_METRICS[field]}`)" for field, (column, what) in _DETAIL.items()
    )
    return (
        f"{intro} With `--detail`, ncu also measured per launch: {measured}. A row of several "
        "launches shows these for its longest launch."
    )


def write_validation(
    results: Sequence[ValidationResult], out_dir: str | Path, *, command: str | None = None
) -> tuple[Path, Path]:
    """Write `validation.md` and `validation.json` into `out_dir` (created if missing).

    Returns:
      The two paths.
    """
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    md, js = folder / "validation.md", folder / "validation.json"
    md.write_text(render_markdown(results, command=command))
    payload = {"command": command, "cells": [r.to_dict() for r in results]}
    js.write_text(json.dumps(payload, indent=1) + "\n")
    return md, js


def _summary_row(result: ValidationResult) -> str:
    errors = [r.bytes_error for r in result.rows if r.judged and r.bytes_error is not None]
    worst = max(errors, key=abs) if errors else None
    judged = f"{result.judged_ok} of {result.judged}" if result.error is None else "-"
    return _md_row(
        [
            result.label,
            result.variant,
            f"{result.hlo_kernels} / {result.ncu_kernels}",
            judged,
            _pct(worst),
            _pct(result.judged_time_error),
            result.verdict,
        ]
    )


def _numeric(columns: Sequence[str]) -> frozenset[int]:
    """The right-aligned columns: the numbers from "modeled MB" up to the verdict."""
    return frozenset(range(_FIRST_NUMERIC, len(columns) - 1))


def _align(columns: Sequence[str]) -> list[str]:
    numeric = _numeric(columns)
    return ["---:" if c in numeric or c == 0 else "---" for c in range(len(columns))]


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / 1e6:,.1f}"


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e6:,.1f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.1f}%"
