"""report.html in a real browser (issue 47): headless Chromium (Debian's `chromium`) driven by
Playwright (the test extra) opens a report written from the published GPT-2 records, sorts
the kernel table by time, filters it by a kernel's name, reads the kernel groups' sums and
opens a kernel's graph; each figure read back from the page's DOM is the records'. No request
leaves the file, and the console holds no error.

Skips itself, saying why, where Playwright or a Chromium binary is missing (`.ci/run` installs
both). The page's load time is printed, never asserted.
"""

import os
import pathlib
import shutil

import pytest
from helpers import GPT2_TRAIN, recorded_kernel_times, with_recorded_table

from xlafuse.hlo.dataflow import producer_names
from xlafuse.measurement.kernel_table import read_kernel_table, table_rows
from xlafuse.measurement.kernels import hlo_kernel_table
from xlafuse.report.html import ALL_FAILED, NO_CELLS, REPORT_HTML, render_html
from xlafuse.report.markdown import by_workload, write_report
from xlafuse.results.parts import FusionRecord
from xlafuse.results.records import CellResult, latest_per_cell, read_results

ROOT = pathlib.Path(__file__).resolve().parent.parent
TRANSFORMER = ROOT / "experiments" / "h200" / "transformer" / "results.jsonl"
QUICKSTART = ROOT / "experiments" / "cpu" / "quickstart" / "results.jsonl"
TRAIN_KERNELS = ROOT / "experiments" / "h200" / "train_kernels" / "results.jsonl"
CHROMIUM_ENV = "XLAFUSE_CHROMIUM"  # a Chromium binary elsewhere than on PATH
DEFAULT, NO_FUSION = "gpt2/full/train @ default", "gpt2/full/train @ no-fusion"


def _chromium() -> str | None:
    named = os.environ.get(CHROMIUM_ENV)
    if named:
        return named
    return next(
        (
            shutil.which(n)
            for n in ("chromium", "chromium-browser", "google-chrome")
            if shutil.which(n)
        ),
        None,
    )


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="Playwright is not installed (pip install -e '.[test]')"
    )
    binary = _chromium()
    if binary is None:
        pytest.skip(f"no Chromium binary on PATH or in ${CHROMIUM_ENV} (apt-get install chromium)")
    with sync_api.sync_playwright() as p:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start
        chromium = p.chromium.launch(executable_path=binary, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """report.html of the published GPT-2 (and transformer block) records, plots included."""
    out = tmp_path_factory.mktemp("report")
    write_report(TRANSFORMER, out_dir=out)
    return out / REPORT_HTML


@pytest.fixture(scope="module")
def records():
    found = latest_per_cell(read_results(TRANSFORMER).records)
    return {f"{r.workload}/{r.size}/{r.mode} @ {r.variant}": r for r in found}


@pytest.fixture(scope="module")
def page(browser, report):
    """The page, loaded once; its console errors and the requests it made kept."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.errors, page.requests = [], []
    page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda err: page.errors.append(str(err)))
    page.on("request", lambda request: page.requests.append(request.url))
    page.goto(report.as_uri())
    page.wait_for_selector("body[data-ready]", state="attached")
    loaded = page.evaluate("performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd")
    ready = page.get_attribute("body", "data-ready")
    size = report.stat().st_size / 1e6
    print(
        f"\nreport.html ({size:.2f} MB): DOM content loaded {loaded:.0f} ms, tabs drawn {ready} ms"
    )
    yield page
    context.close()


def _select_cell(page, select: str, label: str) -> None:
    value = page.eval_on_selector_all(
        f"{select} option", "(os, label) => os.find(o => o.textContent === label).value", label
    )
    page.select_option(select, value)


def _value(page, selector: str) -> float:
    return float(page.get_attribute(selector, "data-v"))


def test_the_page_loads_from_disk_alone(page):
    assert page.get_attribute("body", "data-ready").isdigit()  # ms to the tabs drawn
    assert {url.split(":", 1)[0] for url in page.requests} <= {"file", "data"}
    assert page.errors == []


def test_sorted_by_time_the_first_kernel_is_the_longest(page, records):
    page.click("nav button[data-tab=kernels]")
    _select_cell(page, "#kcell", DEFAULT)
    kt = records[DEFAULT].trace.kernel_times
    times = {p[0]: p[4] for p in records[DEFAULT].trace.cost_model["pairs"]}
    page.click("#ktable thead th:text-is('kernel')")  # by name first: the order is the click's
    assert page.inner_text("#ktable tbody tr:first-child td:first-child") == min(times)
    page.click("#ktable thead th:text-is('µs/call')")
    first = page.inner_text("#ktable tbody tr:first-child td:first-child")
    assert first == max(times, key=times.get) == max(kt["top"], key=lambda k: k["time_s"])["name"]
    assert _value(page, "#ktable tbody tr:first-child td:nth-child(4)") == times[first]
    # the cell's figures, read back from the DOM
    assert _value(page, "#ktime") == kt["time_s"]
    assert _value(page, "#kran") == kt["kernels"] == 864
    assert page.get_attribute("#kcount", "data-n") == "864"
    assert page.errors == []


def test_filtered_by_name_the_rows_are_those_kernels(page, records):
    page.click("nav button[data-tab=kernels]")
    _select_cell(page, "#kcell", DEFAULT)
    names = [p[0] for p in records[DEFAULT].trace.cost_model["pairs"]]
    page.fill("#kfilter", "GEMM_fusion_dot")
    expected = sorted(n for n in names if "gemm_fusion_dot" in n)
    assert len(expected) == 87
    shown = page.eval_on_selector_all(
        "#ktable tbody tr:not(.more) td:first-child", "tds => tds.map(td => td.textContent)"
    )
    assert sorted(shown) == expected
    assert page.inner_text("#kcount") == "87 of 864 kernels"
    page.fill("#kfilter", "")
    assert page.get_attribute("#kcount", "data-n") == "864"
    assert page.errors == []


def test_the_groups_sums_are_the_diffs(page, records):
    page.click("nav button[data-tab=groups]")
    _select_cell(page, "#gcell", NO_FUSION)
    diff = records[NO_FUSION].trace.kernel_diff
    assert _value(page, "#gcount") == diff["groups"] == 830
    assert _value(page, "#gtime-a") == diff["time_a_s"]
    assert _value(page, "#gtime-b") == diff["time_b_s"]
    for verdict in ("faster", "slower", "same"):
        assert _value(page, f"#g{verdict}") == diff["changed_s"][verdict]
        assert _value(page, f"#g{verdict}-n") == diff["changed_groups"][verdict]
    heads = page.eval_on_selector_all("#ginfo h3", "hs => hs.map(h => h.textContent)")
    assert heads == [
        f"Where no-fusion gains (faster): {len(diff['gains'])} groups",
        f"Where no-fusion loses (slower): {len(diff['losses'])} groups",
    ]
    assert page.errors == []


def test_a_kernels_graph_opens_around_it(page, records):
    page.click("nav button[data-tab=groups]")
    _select_cell(page, "#gcell", NO_FUSION)
    kernel = records[NO_FUSION].trace.kernel_diff["losses"][0]["kernels_a"][0]
    page.click(f"#ginfo .kernel-link[data-graph='default:{kernel}'] >> nth=0")
    assert page.is_visible("#tab-graph")
    node = page.locator(f"#gview svg g.node.center[data-id='default:{kernel}']")
    assert node.count() == 1 and node.locator("text").first.text_content() == kernel
    group = page.locator("#gview svg g.node.group text").first.text_content()
    assert group == "split: no-fusion - default 3208 µs (slower)"
    assert page.errors == []


def _small_page(browser, path, records):
    """A page of `records` (no plots) loaded in a new tab; (page, its console errors)."""
    path.write_text(
        render_html(records, by_workload(records), markdown="# xlafuse report\n", title="t"),
        encoding="utf-8",
    )
    page = browser.new_page()
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready]", state="attached")
    return page, errors


def test_untraced_cells_say_what_they_have(browser, tmp_path):
    records = latest_per_cell(read_results(QUICKSTART).records)
    page, errors = _small_page(browser, tmp_path / "q.html", records)
    page.click("nav button[data-tab=kernels]")
    first = records[0]
    assert page.inner_text("#kinfo p.banner").startswith(
        f"{first.workload}/{first.size}/{first.mode} @ {first.variant} was not traced: its "
        "record holds no kernel times"
    )
    assert "What the record has: 1 kernel in the program (kLoop 1)." in page.inner_text("#kinfo")
    page.click("nav button[data-tab=groups]")
    assert page.inner_text("#ginfo").startswith("No record of this file holds a kernel diff")
    page.click("nav button[data-tab=graph]")
    page.fill("#gkernel", "default:fusion")
    page.dispatch_event("#gkernel", "change")
    assert page.locator("#gview svg g.node.center[data-id='default:fusion']").count() == 1
    assert page.inner_text("#gview p.banner").startswith("No record of this workload links fusion")
    assert errors == []
    page.close()


@pytest.mark.parametrize("failed", [0, 2])
def test_no_cell_or_only_failed_cells_give_a_page_that_says_so(browser, tmp_path, failed):
    cell = {"workload": "chain", "size": "tiny", "mode": "forward", "dtype": "float32"}
    records = [
        CellResult(**cell, variant=v, backend="cpu", device_kind="cpu", status="error",
                   error="out of memory", error_type="RuntimeError")
        for v in ("default", "no-fusion")[:failed]
    ]  # fmt: skip
    page, errors = _small_page(browser, tmp_path / "e.html", records)
    shown = ALL_FAILED.format(count=failed) if failed else NO_CELLS
    assert page.inner_text("#banner") == shown
    page.click("nav button[data-tab=kernels]")
    assert (
        page.inner_text("#kinfo") == "No cell of this file measured anything: no kernels to show."
    )
    page.click("nav button[data-tab=missed]")
    assert page.inner_text("#minfo").startswith("No record of this file holds missed fusions")
    assert errors == []
    page.close()


def _rows_shown(page) -> list[str]:
    return page.eval_on_selector_all(
        "#ktable tbody tr:not(.more) td:first-child", "tds => tds.map(td => td.textContent)"
    )


@pytest.fixture(scope="module")
def table_records():
    """The published GPT-2 train records, the default cell's with every kernel in its table."""
    return with_recorded_table(latest_per_cell(read_results(TRAIN_KERNELS).records))


def test_every_kernel_of_a_table_is_shown_sorted_and_filtered(browser, tmp_path, table_records):
    page, errors = _small_page(browser, tmp_path / "t.html", table_records)
    train = next(r for r in table_records if r.trace.kernel_times.get("kernel_table"))
    table = read_kernel_table(train.trace.kernel_times)
    page.click("nav button[data-tab=kernels]")
    _select_cell(page, "#kcell", DEFAULT)
    assert page.inner_text("#kcount") == "840 of 840 kernels"
    assert len(_rows_shown(page)) == 400  # the first 400, then a button
    page.click("#ktable tr.more button")
    assert _rows_shown(page) == [r["name"] for r in table]  # longest first, all 840
    page.click("#ktable thead th:text-is('µs/call')")  # the longest first
    page.click("#ktable thead th:text-is('µs/call')")  # then the shortest
    shortest = min(table, key=lambda r: r["time_s"])
    assert _rows_shown(page)[0] == shortest["name"]
    assert _value(page, "#ktable tbody tr:first-child td:nth-child(4)") == shortest["time_s"]
    page.fill("#kfilter", "loop_add_fusion")
    expected = sorted(r["name"] for r in table if "loop_add_fusion" in r["name"])
    assert sorted(_rows_shown(page)) == expected and len(expected) > 10
    assert page.inner_text("#kcount") == f"{len(expected)} of 840 kernels"
    assert errors == []
    page.close()


@pytest.mark.parametrize("hops", [1, 2])
def test_the_graph_of_a_kernel_outside_the_top_ten_holds_its_buffers(
    browser, tmp_path, table_records, hops
):
    page, errors = _small_page(browser, tmp_path / "g.html", table_records)
    train = next(r for r in table_records if r.trace.kernel_times.get("kernel_table"))
    table = read_kernel_table(train.trace.kernel_times)
    far = next(i for i, r in enumerate(table) if i > 100 and len(r["producers"]) > 1)
    name = table[far]["name"]
    producers = {f"default:{table[p]['name']}" for p in table[far]["producers"]}
    consumers = {f"default:{r['name']}" for r in table if far in r["producers"]}
    assert producers and consumers
    page.click("nav button[data-tab=graph]")
    page.select_option("#ghops", str(hops))
    page.click("nav button[data-tab=kernels]")
    _select_cell(page, "#kcell", DEFAULT)
    page.fill("#kfilter", name)
    page.click(f"#ktable .kernel-link[data-graph='default:{name}']")
    assert page.is_visible("#tab-graph")
    assert page.locator(f"#gview svg g.node.center[data-id='default:{name}']").count() == 1
    ids = set(page.eval_on_selector_all("#gview svg g.node", "gs => gs.map(g => g.dataset.id)"))
    assert producers | consumers <= ids
    drawn = page.eval_on_selector_all(
        "#gview svg path.edge.data title", "ts => ts.map(t => t.textContent)"
    )
    for p in producers:
        assert f"{p.split(':', 1)[1]} -> {name}: reads the buffer it writes" in drawn
    if hops == 1:  # one hop: the kernel, what it reads, what reads it, and the records' links
        kernels = {i for i in ids if not i.startswith(("group:", "decision:"))}
        assert kernels == producers | consumers | {f"default:{name}"}
    assert errors == []
    page.close()


def test_an_untraced_cells_kernels_are_all_shown_without_times(browser, tmp_path):
    _, _, report, text = recorded_kernel_times(GPT2_TRAIN, "default")
    table = hlo_kernel_table(report, producer_names(text, report.kernel_details))
    cell = {"workload": "gpt2", "size": "full", "mode": "train", "dtype": "bfloat16"}
    record = CellResult(**cell, variant="default", backend="gpu", device_kind="H200",
                        fusion=FusionRecord(kernels=840, kernel_table=table))  # fmt: skip
    page, errors = _small_page(browser, tmp_path / "u.html", [record])
    page.click("nav button[data-tab=kernels]")
    assert page.inner_text("#kuntraced") == (
        "gpt2/full/train @ default was not traced: the times, shares, bounds and headroom "
        "columns are empty."
    )
    assert page.inner_text("#kcount") == "840 of 840 kernels"
    page.click("#ktable tr.more button")
    assert _rows_shown(page) == [r["name"] for r in table_rows(table)]
    times = page.eval_on_selector_all(
        "#ktable tbody td:nth-child(4)", "tds => tds.map(td => td.textContent)"
    )
    assert set(times) == {"-"}
    page.click("#ktable .kernel-link[data-graph='default:gemm_fusion_dot.169']")
    ids = set(page.eval_on_selector_all("#gview svg g.node", "gs => gs.map(g => g.dataset.id)"))
    assert {"default:wrapped_convert", "default:wrapped_convert.61"} <= ids
    assert errors == []
    page.close()
