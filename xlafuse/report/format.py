"""The formatting every report shares: byte counts, plain-text tables, lines that fit.

Plain text, not `rich` tables: these tables are printed, piped into files and compared in tests
line by line, and rich pads and wraps to the terminal's width. `rich` draws only the live
progress bars (`cli/_progress.py`, the runner).
"""

from __future__ import annotations

import textwrap
from collections.abc import Collection, Sequence

LINE_WIDTH = 100  # what a command prints stays within this many columns


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The lines of a Markdown table: the header, its rule, one line per row."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def format_bytes(n: int) -> str:
    """Decimal units, three significant figures: 512 B, 4.19 MB, 21.0 MB, 1.07 GB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            value = n / scale
            decimals = 2 if value < 10 else 1 if value < 100 else 0
            return f"{value:.{decimals}f} {unit}"
    return f"{n} B"


def text_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], *, right: Collection[int] = ()
) -> str:
    """Columns two spaces apart, as wide as their widest cell; `right`: right-aligned columns.

    Trailing spaces are stripped from every line.
    """
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(header), *(line(r) for r in rows)])


def fit(text: str, *, width: int = LINE_WIDTH) -> str:
    """`text` with every line of prose longer than `width` wrapped at spaces; a continuation is
    indented four columns past its line's own indent (a word longer than the line is left
    whole). A table row (two spaces between its cells) is left as it is: wrapped, its columns
    would no longer line up, and the command's `--json` has the same data."""
    out = []
    for line in text.splitlines():
        if len(line) <= width or "  " in line.strip():
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip()))
        out += textwrap.wrap(
            line.strip(),
            width,
            initial_indent=indent,
            subsequent_indent=indent + "    ",
            break_long_words=False,
            break_on_hyphens=False,
        )
    return "\n".join(out)
