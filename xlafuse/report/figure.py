"""Matplotlib figures drawn off screen, without touching the caller's backend.

A `matplotlib.figure.Figure` made directly (not through pyplot) draws with the Agg canvas when
saved, so a notebook user's backend stays as it was and no window or global figure is left.
matplotlib is imported here, on first use: it is heavy and only plots need it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def new_figure(figsize: tuple[float, float], subplots: tuple[int, int] = (1, 1)) -> tuple:
    """(figure, axes) of a new off-screen figure; axes as `Figure.subplots` gives them."""
    from matplotlib.figure import Figure  # deferred: see the module doc

    fig = Figure(figsize=figsize)
    return fig, fig.subplots(*subplots)


def save(fig: Any, path: str | Path, tight: bool = True, dpi: int = 110) -> bool:
    """Write `fig` as a PNG (laid out tightly unless `tight` is False); returns True."""
    if tight:
        fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    return True
