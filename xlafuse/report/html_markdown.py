"""report.md's text as HTML: the subset of Markdown that xlafuse's reports write.

Headings (`#` to `####`), tables (`| a | b |` rows under a `|---|` rule), lists (`- `),
paragraphs, images on a line of their own (`![name](file)`), the `<details><summary>` and
`</details>` lines the kernel sections write, and inline `code`, **bold** and whole-line
_emphasis_. Everything else is text: it is escaped, so a name or an error message never
becomes markup.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence

_HEADING = re.compile(r"^(#{1,4}) (.*)$")
_IMAGE = re.compile(r"^!\[([^\]]*)\]\(([^)]*)\)$")
_SUMMARY = re.compile(r"^<details><summary>(.*)</summary>$")
_RULE = re.compile(r"^\|(\s*:?-+:?\s*\|)+$")
_BOLD = re.compile(r"\*\*(.+?)\*\*")


def markdown_html(text: str, image: Callable[[str, str], str]) -> str:
    """The HTML of `text`.

    Args:
      text: Markdown as `xlafuse.report.markdown.render_markdown` writes it.
      image: (alt, file) -> the HTML that stands for an image line.

    Returns:
      HTML: block elements, one per line.
    """
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        block = _block(lines, i)
        if block is not None:
            html_text, i = block
            out.append(html_text)
            continue
        out.append(_line(line, image))
        i += 1
    return "\n".join(x for x in out if x)


def _block(lines: Sequence[str], i: int) -> tuple[str, int] | None:
    """A table or a list starting at line `i`: (its HTML, the line after it); None otherwise."""
    if lines[i].startswith("|"):
        end = _run(lines, i, lambda s: s.startswith("|"))
        return _table(lines[i:end]), end
    if lines[i].startswith("- "):
        end = _run(lines, i, lambda s: s.startswith("- "))
        items = "".join(f"<li>{inline(s[2:])}</li>" for s in lines[i:end])
        return f"<ul>{items}</ul>", end
    return None


def _run(lines: Sequence[str], i: int, belongs: Callable[[str], bool]) -> int:
    while i < len(lines) and belongs(lines[i]):
        i += 1
    return i


def _line(line: str, image: Callable[[str, str], str]) -> str:
    if not line.strip():
        return ""
    heading = _HEADING.match(line)
    if heading:
        level = len(heading.group(1))
        return f"<h{level}>{inline(heading.group(2))}</h{level}>"
    picture = _IMAGE.match(line)
    if picture:
        return image(picture.group(1), picture.group(2))
    summary = _SUMMARY.match(line)
    if summary:
        return f"<details><summary>{inline(summary.group(1))}</summary>"
    if line == "</details>":
        return line
    return f"<p>{inline(line)}</p>"


def _table(rows: Sequence[str]) -> str:
    """A Markdown table's rows (its rule the second) as an HTML table."""
    cells = [_cells(r) for r in rows if not _RULE.match(r)]
    if not cells:
        return ""
    head = "".join(f"<th>{inline(c)}</th>" for c in cells[0])
    body = "".join(
        "<tr>" + "".join(f"<td>{inline(c)}</td>" for c in row) + "</tr>" for row in cells[1:]
    )
    return f'<table class="md"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _cells(row: str) -> list[str]:
    inner = row.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") else inner
    return [c.strip() for c in inner.split(" | ")]


def inline(text: str) -> str:
    """`code`, **bold** and a whole-line _emphasis_ of one line as HTML; the rest escaped."""
    emphasis = len(text) > 2 and text.startswith("_") and text.endswith("_")
    if emphasis:
        text = text[1:-1]
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick is text
        parts = [*parts[:-2], parts[-2] + "`" + parts[-1]]
    shown = []
    for n, part in enumerate(parts):
        escaped = html.escape(part, quote=False)
        shown.append(f"<code>{escaped}</code>" if n % 2 else _BOLD.sub(r"<b>\1</b>", escaped))
    joined = "".join(shown)
    return f"<em>{joined}</em>" if emphasis else joined
