"""Every kernel of a cell in its record (issue 47): the kernel table of a CPU run's cells, traced
(`kernel_times/2`'s `kernel_table`, host thunk times) and untraced (`hlo_kernel_table`, from the
HLO alone), and report.html's Kernels tab showing every row of both.

The recorded GPU trace's table: tests/test_kernels.py; the page in a browser:
tests/test_report_html_browser.py.
"""

import json
import re

import pytest
from helpers import FAST_TIMING, run_in_new_folder

from xlafuse.compiler.jit import compile_workload
from xlafuse.compiler.variants import get as get_variant
from xlafuse.experiment.config import parse_config
from xlafuse.hlo import analyze_hlo
from xlafuse.hlo.dataflow import producer_names
from xlafuse.measurement.kernel_table import TABLE_COLUMNS, read_kernel_table, table_rows
from xlafuse.measurement.kernels import CPU_BASIS
from xlafuse.models.names import Cell
from xlafuse.report.html import render_html
from xlafuse.report.html_data import KERNEL_COLUMNS
from xlafuse.report.markdown import by_workload
from xlafuse.results.records import read_results

LAYERNORM = {"name": "layernorm", "size": "tiny"}
_DATA = re.compile(r'<script type="application/json" id="data">(.*?)</script>', re.S)


def _config(profile: bool, backend: str = "cpu", workload=LAYERNORM):
    def config(out):
        return parse_config(
            {
                "experiment": {
                    "name": "t",
                    "output": str(out),
                    "variants": ["default", "no-fusion"],
                },
                "workloads": [workload],
                "timing": FAST_TIMING,
                "measure": {"profile": profile, "keep_traces": False},
            },
            backend=backend,
        )

    return config


@pytest.fixture(scope="module")
def untraced(tmp_path_factory):
    return run_in_new_folder(tmp_path_factory, "untraced", _config(False))


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    return run_in_new_folder(tmp_path_factory, "traced", _config(True))


def _page_cells(records) -> list[dict]:
    text = render_html(records, by_workload(records), markdown="", title="t")
    return json.loads(_DATA.search(text).group(1))["cells"]


def test_an_untraced_cpu_cell_keeps_every_kernel_of_its_hlo(untraced):
    out, records = untraced
    assert [r.variant for r in records] == ["default", "no-fusion"]
    for record in records:
        assert record.ok and record.trace.kernel_times is None
        rows = table_rows(record.fusion.kernel_table)
        assert record.fusion.kernel_table["columns"] == list(TABLE_COLUMNS)
        assert len(rows) == record.fusion.kernels > 0
        assert sum(r["modeled_bytes"] for r in rows) == record.fusion.modeled_bytes
        assert sum(r["launches_per_call"] for r in rows) == record.fusion.launches_per_call
        untimed = ("time_s", "bound", "bound_s", "match", "pct_of_bound", "headroom_s")
        assert {r[c] for r in rows for c in untimed} == {None}
        assert all(
            0 <= p < len(rows) and p != i for i, r in enumerate(rows) for p in r["producers"]
        )
    unfused = table_rows(records[1].fusion.kernel_table)
    assert len(unfused) > len(table_rows(records[0].fusion.kernel_table))
    assert any(r["producers"] for r in unfused)  # separate kernels: one reads another's output
    # on disk as one flat key, read back into the same part
    again = read_results(out / "results.jsonl").records
    assert [r.fusion.kernel_table for r in again] == [r.fusion.kernel_table for r in records]
    assert "hlo_kernel_table" in json.loads((out / "results.jsonl").read_text().splitlines()[0])


def test_the_untraced_hlo_table_is_the_programs_dataflow(untraced):
    # the same table again from the program's HLO, its producers by name
    _, records = untraced
    record = records[1]
    rows = table_rows(record.fusion.kernel_table)
    hlo = _hlo_of(record)
    report = analyze_hlo(hlo)
    assert [r["name"] for r in rows] == [k.name for k in report.kernel_details]
    producers = producer_names(hlo, report.kernel_details)
    assert {r["name"]: tuple(rows[p]["name"] for p in r["producers"]) for r in rows} == producers


def _hlo_of(record) -> str:
    """The record's program compiled again (the same jax, the same machine)."""
    work = Cell(record.workload, record.size, record.mode).build()
    return compile_workload(work, get_variant(record.variant)).hlo_text


def test_a_traced_cpu_cell_keeps_every_kernel_with_its_time(traced):
    _, records = traced
    for record in records:
        kt = record.trace.kernel_times
        assert kt["schema"] == "xlafuse.kernel_times/2" and kt["basis"] == CPU_BASIS
        assert record.fusion.kernel_table is None  # the trace's table has them all
        rows = read_kernel_table(kt)
        assert len(rows) == kt["kernels"] == record.fusion.kernels
        assert sum(r["time_s"] for r in rows) == kt["attributed_s"]
        assert sum(r["launches_per_call"] for r in rows) == kt["launches_per_call"]
        times = [r["time_s"] for r in rows]
        assert times == sorted(times, reverse=True)  # longest first
        assert [r["name"] for r in rows[: len(kt["top"])]] == [k["name"] for k in kt["top"]]


def test_the_page_shows_every_kernel_of_both(untraced, traced):
    records = [*untraced[1], *traced[1]]
    cells = _page_cells(records)
    for record, cell in zip(records, cells, strict=True):
        table = read_kernel_table(record.trace.kernel_times) or table_rows(
            record.fusion.kernel_table
        )
        shown = [dict(zip(KERNEL_COLUMNS, row, strict=True)) for row in cell["kernels"]]
        assert [r["name"] for r in shown] == [r["name"] for r in table]
        assert [r["time_s"] for r in shown] == [r["time_s"] for r in table]
        assert [r["producers"] for r in shown] == [r["producers"] for r in table]
    untimed = cells[1]
    assert untimed["totals"] is None and len(untimed["kernels"]) == records[1].fusion.kernels
    assert untimed["kernels_note"] == (
        f"Not traced: all {records[1].fusion.kernels} kernels of the program from its HLO, each "
        "with its modeled bytes, FLOPs, first source line and the kernels whose outputs it "
        "reads; launches per call are the HLO's (the runs of the kernel's computation per "
        "call). No time, share, bound or headroom: a run with `[measure] profile = true` keeps "
        "them."
    )
    assert cells[3]["kernels_note"] == (
        f"All {len(cells[3]['kernels'])} kernels of the trace, each with its figures and the "
        "kernels whose outputs it reads (the Graph tab draws them)."
    )


@pytest.mark.gpu
def test_a_profiled_gpu_run_records_every_kernel_and_what_it_reads(tmp_path_factory):
    config = _config(True, "gpu", {"name": "gpt2", "size": "tiny", "mode": "train"})
    _, records = run_in_new_folder(tmp_path_factory, "gpu", config)
    for record in records:
        kt = record.trace.kernel_times
        rows = read_kernel_table(kt)
        assert record.ok and record.fusion.kernel_table is None
        assert len(rows) == kt["kernels"] == record.fusion.kernels
        assert sum(r["time_s"] for r in rows) == kt["attributed_s"]
        seen = [r for r in rows if r["launches_per_call"] and r["flops"] is not None]
        assert seen and all(r["bound_s"] is not None for r in seen)
        assert sum(len(r["producers"]) for r in rows) > len(rows) / 2
        size = len(json.dumps(kt["kernel_table"]))
        print(f"{record.cell_id}: {len(rows)} kernels, kernel_table {size / 1e3:.1f} KB")
