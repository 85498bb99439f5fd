"""Formatting shared by every report: byte counts, and (later) tables."""

from __future__ import annotations


def format_bytes(n: int) -> str:
    """Decimal units, three significant figures: 512 B, 4.19 MB, 21.0 MB, 1.07 GB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            value = n / scale
            decimals = 2 if value < 10 else 1 if value < 100 else 0
            return f"{value:.{decimals}f} {unit}"
    return f"{n} B"
