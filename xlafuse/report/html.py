"""report.html: the report to explore, one self-contained file beside report.md.

Written by `xlafuse.report.markdown.write_report` from the same records, wherever report.md is
(`xlafuse run`, `xlafuse report`, `xlafuse.measure(...)`'s `.write`). One file that opens from
disk with no network: its style and script are inline (`xlafuse.report.html_assets`), its data
one JSON value in a `<script type="application/json" id="data">` (`xlafuse.report.html_data`),
its plots the PNGs written beside it, embedded as base64.

Tabs: Summary (report.md's text as HTML: every cell's times with their intervals and verdicts,
the work tables, every section, the plots), Kernels (every kernel of a cell where its record
keeps a kernel table, an untraced cell's without times; else every kernel the record names;
sortable and filterable), Groups (a diff's kernel groups where the variant gains and where it
loses, with their intervals), Missed fusions (with XLA's reasons where a record holds them, and
XLA's fusion decisions scored against the measurement), Graph (the links the records hold
around a chosen kernel, 1 to 3 hops, as SVG: the buffers between kernels that the kernel tables
keep, the diffs' groups, the missed fusions, XLA's contradicted decisions).
"""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xlafuse.folders import write_atomically
from xlafuse.report.html_assets import CSS, JS
from xlafuse.report.html_data import page_data
from xlafuse.report.html_markdown import markdown_html
from xlafuse.results.records import CellResult

REPORT_HTML = "report.html"
MARKDOWN_TITLE = "# xlafuse report"
TABS = (
    ("summary", "Summary"),
    ("kernels", "Kernels"),
    ("groups", "Groups"),
    ("missed", "Missed fusions"),
    ("graph", "Graph"),
)
NO_CELLS = "This results file holds no cell: there is nothing to show."
ALL_FAILED = (
    "Every cell of this results file failed ({count} of {count}): no times, kernels or groups "
    "to show. Each cell's error is under Errors below."
)


def write_html(
    path: str | Path,
    records: Sequence[CellResult],
    groups: Mapping[str, Sequence[CellResult]],
    *,
    markdown: str,
    title: str,
) -> Path:
    """Write report.html, whole or not at all (`xlafuse.folders.write_atomically`).

    Args:
      path: the file to write; the plots the markdown names are read from its folder.
      records: the latest record of each cell.
      groups: the same records by their workload's section header.
      markdown: report.md's text.
      title: what the page's head names (the results file).

    Returns:
      `path`.

    Raises:
      XlafuseError: the file could not be written (its name and the OS's reason).
    """
    path = Path(path)
    text = render_html(records, groups, markdown=markdown, title=title, folder=path.parent)
    return write_atomically(
        path, lambda temp: temp.write_text(text, encoding="utf-8"), noun="report"
    )


def render_html(
    records: Sequence[CellResult],
    groups: Mapping[str, Sequence[CellResult]],
    *,
    markdown: str,
    title: str,
    folder: Path | None = None,
) -> str:
    """The page as text (`folder`: where the plots the markdown names are; None: none shown)."""
    data = page_data(records, groups)
    body = markdown.removeprefix(f"{MARKDOWN_TITLE}\n")  # the page's head says it
    summary = markdown_html(body, lambda alt, name: _image(alt, name, folder))
    nav = "".join(
        f'<button data-tab="{key}"{" class=on" if key == "summary" else ""}>{name}</button>'
        for key, name in TABS
    )
    return _PAGE.format(
        title=html.escape(title),
        css=CSS,
        nav=nav,
        banner=_banner(records),
        summary=summary,
        data=_json(data),
        js=JS,
    )


def _banner(records: Sequence[CellResult]) -> str:
    """What the page says first where it has nothing to show: no cell, or only failed ones."""
    if not records:
        return f'<p class="banner" id="banner">{NO_CELLS}</p>'
    if not any(r.ok for r in records):
        return f'<p class="banner" id="banner">{ALL_FAILED.format(count=len(records))}</p>'
    return ""


def _image(alt: str, name: str, folder: Path | None) -> str:
    """A plot as an inline PNG; a note where its file is not there (it was not drawn)."""
    path = None if folder is None else folder / name
    if path is None or not path.is_file():
        return f'<p class="note">Plot {html.escape(name)} was not drawn: no such file.</p>'
    encoded = base64.b64encode(path.read_bytes()).decode("ascii")
    alt = html.escape(alt)
    return (
        f'<figure><img class="plot" alt="{alt}" src="data:image/png;base64,{encoded}">'
        f"<figcaption>{alt}</figcaption></figure>"
    )


def _json(data: Any) -> str:
    """JSON that a `<script>` element holds as it is: no `<` (so no `</script>`), and no
    NaN or infinity (JSON has none: they become null)."""
    text = json.dumps(_finite(data), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.replace("<", "\\u003c")


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>xlafuse report: {title}</title>
<style>{css}</style>
</head>
<body>
<header>
<h1>xlafuse report</h1>
<p class="source">{title}</p>
<nav>{nav}</nav>
</header>
<main>
<section id="tab-summary">
{banner}
{summary}
</section>
<section id="tab-kernels" hidden>
<div class="bar"><label>cell <select id="kcell"></select></label>
<input id="kfilter" type="search" placeholder="filter by kernel name">
<span id="kcount"></span></div>
<div id="kinfo"></div>
<div class="scroll"><table id="ktable" hidden><thead></thead><tbody></tbody></table></div>
</section>
<section id="tab-groups" hidden>
<div class="bar"><label>cell <select id="gcell"></select></label></div>
<div id="ginfo"></div>
</section>
<section id="tab-missed" hidden>
<div id="minfo"></div>
</section>
<section id="tab-graph" hidden>
<div class="bar"><label>workload <select id="gworkload"></select></label>
<label>kernel <input id="gkernel" list="gnodes" placeholder="VARIANT:KERNEL"></label>
<datalist id="gnodes"></datalist>
<label>hops <select id="ghops"><option>1</option><option selected>2</option><option>3</option>
</select></label></div>
<p class="note">The links the records hold around a kernel: a buffer one kernel writes and
another reads (blue: the producers a cell's kernel table keeps, for every kernel), a kernel group
of a diff (the reference's kernels, the group with its measured change, the variant's kernels
that hold the same instructions), a missed fusion (dashed red: the producer's kernel to the consumer's, with the bytes
between them) and XLA's fusion steps whose predicted gain the measurement contradicts (dotted:
the steps to the kernel they built; point at an edge for its detail). Click a kernel anywhere on the page, or a node
here, to centre the graph on it.</p>
<p class="legend"><span><i class="swatch" style="background:var(--loop)"></i>kLoop</span>
<span><i class="swatch" style="background:var(--input)"></i>kInput</span>
<span><i class="swatch" style="background:var(--output)"></i>kOutput</span>
<span><i class="swatch" style="background:var(--custom)"></i>kCustom</span>
<span><i class="swatch" style="background:var(--other)"></i>other or unknown</span></p>
<div id="gview"></div>
</section>
</main>
<script type="application/json" id="data">{data}</script>
<script>{js}</script>
</body>
</html>
"""
