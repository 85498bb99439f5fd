"""The formatting every report shares: byte counts and plain-text tables.

Plain text, not `rich` tables: these tables are printed, piped into files and compared in tests
line by line, and rich pads and wraps to the terminal's width. `rich` draws only the live
progress bars (`cli/_progress.py`, the runner).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence


def format_bytes(n: int) -> str:
    """Decimal units, three significant figures: 512 B, 4.19 MB, 21.0 MB, 1.07 GB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            value = n / scale
            decimals = 2 if value < 10 else 1 if value < 100 else 0
            return f"{value:.{decimals}f} {unit}"
    return f"{n} B"


def text_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], right: Collection[int] = ()
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
