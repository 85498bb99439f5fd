"""report.html (issue 47): written beside report.md from the same records; its data are the
records' (read back from the page's JSON), its markup escapes what the records hold, its graph
is the links the records keep, and a file with no cell or only failed ones still gives a page.

The page in a real browser: tests/test_report_html_browser.py.
"""

import json
import pathlib
import re

import pytest
from helpers import GPT2_TRAIN, recorded_kernel_times, with_recorded_table

from xlafuse.cli import main
from xlafuse.experiment import plan
from xlafuse.hlo.dataflow import producer_names
from xlafuse.measurement.kernel_table import read_kernel_table
from xlafuse.measurement.kernels import hlo_kernel_table
from xlafuse.report.html import ALL_FAILED, NO_CELLS, REPORT_HTML, render_html
from xlafuse.report.html_data import KERNEL_COLUMNS, kernel_rows
from xlafuse.report.html_graph import workload_graph
from xlafuse.report.html_markdown import markdown_html
from xlafuse.report.markdown import by_workload, write_report
from xlafuse.results.parts import FusionRecord, TraceRecord
from xlafuse.results.records import CellResult, append_result, latest_per_cell, read_results

ROOT = pathlib.Path(__file__).resolve().parent.parent
TRANSFORMER = ROOT / "experiments" / "h200" / "transformer" / "results.jsonl"
TRAIN_KERNELS = ROOT / "experiments" / "h200" / "train_kernels" / "results.jsonl"
QUICKSTART = ROOT / "experiments" / "cpu" / "quickstart" / "results.jsonl"
FIVE_MB = 5 * 1024 * 1024
# What the note of a record from before the kernel table adds.
OLDER = (
    " The record predates `xlafuse.kernel_times/2`, which keeps every kernel and the kernels "
    "each reads."
)
_DATA = re.compile(r'<script type="application/json" id="data">(.*?)</script>', re.S)


def page_json(text: str) -> dict:
    """The page's data, as its script reads them."""
    return json.loads(_DATA.search(text).group(1))


def _records(path):
    return latest_per_cell(read_results(path).records)


def _page(records, markdown="") -> str:
    return render_html(records, by_workload(records), markdown=markdown, title="t")


def _cell(records, label_variant):
    return next(
        r for r in records if f"{r.workload}/{r.size}/{r.mode}@{r.variant}" == label_variant
    )


def test_the_page_data_are_the_records():
    records = _records(TRANSFORMER)
    data = page_json(_page(records))
    assert data["kernel_columns"] == list(KERNEL_COLUMNS)
    assert [c["id"] for c in data["cells"]] == [r.cell_id for r in records]
    cells = {c["id"]: c for c in data["cells"]}
    train = _cell(records, "gpt2/full/train@default")
    page = cells[train.cell_id]
    kt = train.trace.kernel_times
    # every kernel the trace joined: 864, each once, their times the cost model's pairs
    assert len(page["kernels"]) == kt["kernels"] == 864
    assert len({row[0] for row in page["kernels"]}) == 864
    assert page["totals"]["time_s"] == kt["time_s"] == 0.0341692436
    times = {row[0]: row[3] for row in page["kernels"]}
    assert times == {p[0]: p[4] for p in train.trace.cost_model["pairs"]}
    assert sum(times.values()) == pytest.approx(kt["time_s"], rel=1e-9)
    # the longest first, with every figure the record keeps for it
    longest = max(kt["top"], key=lambda k: k["time_s"])
    row = dict(zip(KERNEL_COLUMNS, page["kernels"][0], strict=True))
    assert row["name"] == longest["name"] == "gemm_fusion_dot.169"
    for key in ("kind", "launches_per_call", "time_s", "modeled_bytes", "flops", "pct_of_bound"):
        assert row[key] == longest[key]
    assert row["headroom_s"] == kt["headroom_top"][0]["headroom_s"]
    assert row["predicted_s"] == _predicted(train, "gemm_fusion_dot.169")
    names = {k["name"] for k in [*kt["top"], *kt["headroom_top"]]}
    assert sum(row[4] is not None for row in page["kernels"]) == len(names) == 12
    assert page["kernels_note"] == (
        "All 864 kernels of the trace, their times from the cost model's join "
        "(`cost_model.pairs`). The record keeps every figure (launches, bytes, FLOPs, bound, "
        "headroom, source) for 12 of them, the top ones by time and by headroom, and FLOPs and "
        "source for XLA's largest mispredictions: `-` where it holds none." + OLDER
    )
    # the groups of the diff against no-fusion, with their sums
    other = cells[_cell(records, "gpt2/full/train@no-fusion").cell_id]
    diff = _cell(records, "gpt2/full/train@no-fusion").trace.kernel_diff
    assert other["diff"]["changed_s"] == diff["changed_s"]
    assert other["diff"]["changed_groups"] == {"faster": 165, "slower": 577, "same": 88}
    assert other["diff"]["groups"] == 830
    assert other["diff"]["gains"] == diff["gains"] and other["diff"]["losses"] == diff["losses"]
    assert page["missed"] == dict(train.fusion.missed_fusions)
    assert page["missed"]["boundaries"] == 1801


def _predicted(record, name):
    return next(p[3] for p in record.trace.cost_model["pairs"] if p[0] == name)


def test_a_record_of_top_kernels_says_which_are_absent():
    records = _records(TRAIN_KERNELS)
    train = _cell(records, "gpt2/full/train@default")
    rows = kernel_rows(train)
    kt = train.trace.kernel_times
    names = {k["name"] for k in [*kt["top"], *kt["headroom_top"]]}
    assert [r["name"] for r in rows] == sorted(names, key=lambda n: -_time(kt, n))
    page = {c["id"]: c for c in page_json(_page(records))["cells"]}[train.cell_id]
    assert page["kernels_note"] == (
        f"The record keeps {len(names)} of the 840 kernels the trace joined to the HLO (the top "
        f"ones by time and by headroom); the other {840 - len(names)} are in the kept trace, "
        "`traces/gpt2_full_train_auto_default_gpu` of the results folder." + OLDER
    )


def _time(kt, name):
    return next(k["time_s"] for k in [*kt["top"], *kt["headroom_top"]] if k["name"] == name)


def test_a_record_with_a_kernel_table_shows_every_kernel():
    records = with_recorded_table(_records(TRAIN_KERNELS))
    train = _cell(records, "gpt2/full/train@default")
    table = read_kernel_table(train.trace.kernel_times)
    page = {c["id"]: c for c in page_json(_page(records))["cells"]}[train.cell_id]
    rows = [dict(zip(KERNEL_COLUMNS, row, strict=True)) for row in page["kernels"]]
    assert len(rows) == len(table) == train.trace.kernel_times["kernels"] == 840
    assert sum(r["time_s"] for r in rows) == train.trace.kernel_times["attributed_s"]
    # a kernel far from the top ten, with every figure of its row and the rows it reads
    far = next(i for i, r in enumerate(table) if i > 100 and len(r["producers"]) > 1)
    row, kept = rows[far], table[far]
    for key in ("name", "kind", "launches_per_call", "time_s", "modeled_bytes", "flops", "bound",
                "pct_of_bound", "headroom_s", "producers"):  # fmt: skip
        assert row[key] == kept[key], key
    assert row["source_lines"] == [kept["source"]]
    assert page["kernels_note"] == (
        "All 840 kernels of the trace, each with its figures and the kernels whose outputs it "
        "reads (the Graph tab draws them)."
    )
    # its neighbours too: a cell of a record before the table keeps its named kernels
    other = {c["id"]: c for c in page_json(_page(records))["cells"]}
    older = other[_cell(records, "gpt2/full/train@no-fusion").cell_id]
    assert len(older["kernels"]) == 20 and {r[-1] for r in older["kernels"]} == {None}


def test_an_untraced_cell_with_its_hlo_table_shows_every_kernel_without_times():
    _, _, report, text = recorded_kernel_times(GPT2_TRAIN, "default")
    table = hlo_kernel_table(report, producer_names(text, report.kernel_details))
    cell = {"workload": "gpt2", "size": "full", "mode": "train", "dtype": "bfloat16"}
    record = CellResult(**cell, variant="default", backend="gpu", device_kind="H200",
                        fusion=FusionRecord(kernels=840, kernel_table=table))  # fmt: skip
    page = page_json(_page([record]))["cells"][0]
    rows = [dict(zip(KERNEL_COLUMNS, row, strict=True)) for row in page["kernels"]]
    assert [r["name"] for r in rows] == [k.name for k in report.kernel_details]
    assert page["totals"] is None
    assert {r["time_s"] for r in rows} == {r["headroom_s"] for r in rows} == {None}
    assert sum(r["modeled_bytes"] for r in rows) == report.modeled_bytes
    gemm = next(r for r in rows if r["name"] == "gemm_fusion_dot.169")
    assert sorted(rows[p]["name"] for p in gemm["producers"]) == [
        "wrapped_convert", "wrapped_convert.61",
    ]  # fmt: skip
    assert page["kernels_note"].startswith(
        "Not traced: all 840 kernels of the program from its HLO"
    )


def test_a_kernel_table_of_a_newer_schema_is_said_on_its_cell():
    cell = {"workload": "chain", "size": "tiny", "mode": "forward", "dtype": "float32"}
    trace = TraceRecord(kernel_times={"schema": "xlafuse.kernel_times/3", "time_s": 1.0})
    record = CellResult(**cell, variant="default", backend="gpu", device_kind="H200", trace=trace)
    assert page_json(_page([record]))["cells"][0]["malformed"] == (
        "ValueError: kernel_times schema 'xlafuse.kernel_times/3' is not one this xlafuse reads "
        "(xlafuse.kernel_times/1, xlafuse.kernel_times/2)"
    )


def test_the_graph_holds_the_links_of_the_records():
    records = [
        r
        for r in _records(TRANSFORMER)
        if (r.workload, r.size, r.mode) == ("gpt2", "full", "train")
    ]
    graph = workload_graph(records)
    edges = {(s, t, kind) for s, t, kind, *_ in graph["edges"]}
    no_fusion = _cell(records, "gpt2/full/train@no-fusion").trace.kernel_diff
    split = no_fusion["losses"][0]  # input_reduce_fusion.25 -> 5 kernels, 4 of them named
    assert (split["kernels_a"], split["n_b"]) == (["input_reduce_fusion.25"], 5)
    group = next(t for s, t, k in edges if s == "default:input_reduce_fusion.25" and k == "group"
                 and all((t, f"no-fusion:{n}", "group") in edges for n in split["kernels_b"]))  # fmt: skip
    assert graph["nodes"][group]["label"] == "split: no-fusion - default 3208 µs (slower)"
    assert (group, f"{group}:no-fusion:more", "group") in edges
    assert graph["nodes"][f"{group}:no-fusion:more"]["label"] == "+1 more of no-fusion"
    missed = _cell(records, "gpt2/full/train@default").fusion.missed_fusions["top"][0]
    label = next(e[3:] for e in graph["edges"] if e[2] == "missed")
    assert label == [
        "3.29 GB",
        f"missed fusion: 3.29 GB from {missed['producer']} to {missed['consumer']}",
    ]
    decided = no_fusion and _cell(records, "gpt2/full/train@no-fusion").trace.cost_model
    first = decided["decisions"]["predicted_loss_measured_gain"][0]
    node = f"decision:default:predicted_loss_measured_gain:{first['kernel']}"
    assert (node, f"default:{first['kernel']}", "decision") in edges


def test_markdown_becomes_html_with_what_records_hold_escaped():
    text = "\n".join([
        "# title", "", "| a | b |", "|---|---:|", "| `x<y>` | **1.5** |", "",
        "- one `<b>`", "- two", "", "_a note_", "",
        "<details><summary>top <kernels></summary>", "", "</details>", "![p.png](p.png)",
    ])  # fmt: skip
    shown = markdown_html(text, lambda alt, name: f"[{alt}|{name}]")
    assert shown.splitlines() == [
        "<h1>title</h1>",
        '<table class="md"><thead><tr><th>a</th><th>b</th></tr></thead><tbody><tr>'
        "<td><code>x&lt;y&gt;</code></td><td><b>1.5</b></td></tr></tbody></table>",
        "<ul><li>one <code>&lt;b&gt;</code></li><li>two</li></ul>",
        "<p><em>a note</em></p>",
        "<details><summary>top &lt;kernels&gt;</summary>",
        "</details>",
        "[p.png|p.png]",
    ]


def test_the_data_cannot_end_their_script():
    cell = {"workload": "chain", "size": "tiny", "mode": "forward", "dtype": "float32"}
    error = "</script><script>alert(1)</script> & NaN"
    record = CellResult(**cell, variant="default", backend="cpu", device_kind="cpu",
                        status="error", error=error, error_type="ValueError")  # fmt: skip
    text = _page([record])
    blob = _DATA.search(text).group(1)
    assert "</script" not in blob and "<" not in blob
    assert page_json(text)["cells"][0]["error"] == f"ValueError: {error}"


def test_a_file_of_failed_cells_gives_a_page_that_says_so(tmp_path, capsys):
    path = tmp_path / "results.jsonl"
    cell = {"workload": "chain", "size": "tiny", "mode": "forward", "dtype": "float32"}
    for variant in ("default", "no-fusion"):
        append_result(path, CellResult(**cell, variant=variant, backend="cpu", device_kind="cpu",
                                       status="error", error="out of memory",
                                       error_type="RuntimeError"))  # fmt: skip
    assert main(["report", str(path)]) == 0
    text = (tmp_path / REPORT_HTML).read_text()
    assert ALL_FAILED.format(count=2) in text
    assert (
        "<li><code>chain/tiny/forward</code> <code>no-fusion</code>: RuntimeError: out of memory</li>"
        in text
    )
    assert [c["status"] for c in page_json(text)["cells"]] == ["error", "error"]


def test_no_cell_gives_a_page_that_says_so():
    text = _page([])
    assert f'<p class="banner" id="banner">{NO_CELLS}</p>' in text
    assert page_json(text)["cells"] == [] and page_json(text)["graphs"] == {}


def test_every_writer_of_report_md_writes_report_html_beside_it(tmp_path):
    out = tmp_path / "out"
    assert write_report(QUICKSTART, out_dir=out) == out / "report.md"
    text = (out / REPORT_HTML).read_text()
    # self-contained: no script, style or picture from elsewhere
    assert not re.search(r'(src|href)="(?!data:)', text)
    plots = re.findall(r"^!\[([^]]+)\]", (out / "report.md").read_text(), re.M)
    assert plots == ["speedup.png", "kernels_vs_time.png", "throughput.png"]
    assert re.findall(r'<img class="plot" alt="([^"]+)" src="data:image/png;base64,', text) == plots
    records = _records(QUICKSTART)
    assert len(page_json(text)["cells"]) == len(records) == 14
    untraced = page_json(text)["cells"][0]
    assert (untraced["kernels"], untraced["totals"], untraced["kernels_in_program"]) == (
        [],
        None,
        1,
    )


def test_fresh_moves_the_old_report_html_aside(tmp_path):
    for name in ("results.jsonl", "report.md", REPORT_HTML):
        (tmp_path / name).write_text("{}\n")
    plan.move_aside(tmp_path / "results.jsonl")
    left = sorted(p.name for p in tmp_path.iterdir())
    stem = next(n for n in left if n.endswith(".jsonl.old")).removesuffix(".jsonl.old")
    assert left == sorted([f"{stem}.jsonl.old", f"{stem}.report.md.old", f"{stem}.report.html.old"])


def test_the_gpt2_full_train_report_is_under_five_megabytes(tmp_path):
    """The published GPT-2 records with every kernel of each cell (the cost model's join),
    plots included."""
    write_report(TRANSFORMER, out_dir=tmp_path)
    size = (tmp_path / REPORT_HTML).stat().st_size
    print(f"report.html of {TRANSFORMER.parent.name}: {size / 1e6:.2f} MB")
    assert size < FIVE_MB


def test_a_malformed_trace_is_said_and_the_rest_of_the_page_kept():
    cell = {"workload": "chain", "size": "tiny", "mode": "forward", "dtype": "float32"}
    trace = TraceRecord(kernel_times={"top": 5}, kernel_diff={"a": "default", "gains": []})
    bad = CellResult(**cell, variant="no-fusion", backend="cpu", device_kind="cpu",
                     reference="default", trace=trace)  # fmt: skip
    good = CellResult(**cell, variant="default", backend="cpu", device_kind="cpu")
    data = page_json(_page([good, bad]))
    assert data["cells"][1]["malformed"].startswith("TypeError: ")  # Python words the rest
    assert "malformed" not in data["cells"][0]
    graph = data["graphs"]["chain / tiny / forward / float32"]
    assert graph == {"nodes": {}, "edges": [], "malformed": "KeyError: 'b'"}
