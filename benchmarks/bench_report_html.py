"""How large report.html is and how soon a browser can use it, for a published results folder.

Writes the report of RESULTS (default: the H200 GPT-2 and transformer-block records, whose
GPT-2 full train cells list every kernel) into a temporary folder, opens its report.html in
headless Chromium (Playwright, the test extra, with the system's `chromium`) several times and
prints its size and, per load, the milliseconds to DOMContentLoaded and to the page's script
having drawn its tabs (`body[data-ready]`); then the time to show the cell with the most
kernels, to sort it by time and to filter it. The budget: under 5 MB, usable within 2 s.
`--screenshot FILE` also saves the Kernels tab of that cell, sorted by time (1400x900), as
the README's picture (docs/report-html.png).

    python benchmarks/bench_report_html.py [RESULTS] [--repeat N] [--screenshot FILE]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from xlafuse.report.markdown import write_report

# relative to the working folder: the page's head names the file as it was given
DEFAULT = Path(
    os.path.relpath(Path(__file__).parent.parent / "experiments/h200/transformer/results.jsonl")
)
SCREENSHOT_CELL = "gpt2/full/train @ default"
_READY = (
    "(() => { const t = performance.getEntriesByType('navigation')[0];"
    " return t.domContentLoadedEventEnd; })()"
)


def load_ms(page, url: str) -> tuple[float, float]:
    """(ms to DOMContentLoaded, ms until the script has drawn the tabs) of one load, both
    from the page's navigation start, as the page measures them."""
    page.goto(url)
    page.wait_for_selector("body[data-ready]", state="attached")
    return page.evaluate(_READY), float(page.get_attribute("body", "data-ready"))


def timed(action) -> float:
    start = time.perf_counter()
    action()
    return 1e3 * (time.perf_counter() - start)


def largest_cell(page) -> tuple[str, str]:
    """The kernel-table option (value, text) of the cell with the most kernels."""
    counts = page.evaluate(
        "JSON.parse(document.getElementById('data').textContent).cells"
        ".map((c, i) => [String(i), c.label + ' @ ' + c.variant, (c.kernels || []).length])"
    )
    value, text, _ = max(counts, key=lambda c: c[2])
    return value, text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--screenshot", type=Path)
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="xlafuse-report-html-"))
    try:
        write_report(args.results, out_dir=out)
        html = out / "report.html"
        print(f"report.html of {args.results}: {html.stat().st_size / 1e6:.2f} MB (budget 5 MB)")
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=shutil.which("chromium"), args=["--no-sandbox"]
            )
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            loads = [load_ms(page, html.as_uri()) for _ in range(args.repeat)]
            for name, values in (("DOMContentLoaded", [d for d, _ in loads]),
                                 ("usable (tabs drawn)", [u for _, u in loads])):  # fmt: skip
                print(f"{name}: median {statistics.median(values):.0f} ms, "
                      f"max {max(values):.0f} ms over {args.repeat} loads (budget 2000 ms)")  # fmt: skip
            _interactions(page, args.screenshot)
            browser.close()
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _interactions(page, screenshot: Path | None) -> None:
    page.click("nav button[data-tab=kernels]")
    value, text = largest_cell(page)
    shown = timed(lambda: page.select_option("#kcell", value))
    ordered = timed(lambda: page.click("#ktable thead th:text-is('µs/call')"))
    filtered = timed(lambda: page.fill("#kfilter", "add"))
    print(f"{text} ({page.inner_text('#kcount')} after the filter): shown {shown:.0f} ms, "
          f"sorted by time {ordered:.0f} ms, filtered {filtered:.0f} ms")  # fmt: skip
    if screenshot is None:
        return
    page.fill("#kfilter", "")
    page.select_option("#kcell", label=SCREENSHOT_CELL)
    page.click("#ktable thead th:text-is('µs/call')")
    page.screenshot(path=str(screenshot))
    print(f"wrote {screenshot} ({screenshot.stat().st_size / 1e3:.0f} kB)")


if __name__ == "__main__":
    main()
