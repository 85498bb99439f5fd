"""Matplotlib figures drawn off screen, without touching the caller's backend.

A `matplotlib.figure.Figure` made directly (not through pyplot) draws with the Agg canvas when
saved, so a notebook user's backend stays as it was and no window or global figure is left.
matplotlib is imported here, on first use: it is heavy and only plots need it. A plot is
written whole or not at all (`xlafuse.folders.write_atomically`): a full disk or an interrupt
never leaves a PNG cut short.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from xlafuse.folders import write_atomically


def new_figure(figsize: tuple[float, float], *, subplots: tuple[int, int] = (1, 1)) -> tuple:
    """(figure, axes) of a new off-screen figure; axes as `Figure.subplots` gives them."""
    from matplotlib.figure import Figure  # deferred: see the module doc

    fig = Figure(figsize=figsize)
    return fig, fig.subplots(*subplots)


def save(fig: Any, path: str | Path, *, tight: bool = True, dpi: int = 110) -> bool:
    """Write `fig` as an image of its file's kind (PNG by default), laid out tightly unless
    `tight` is False, whole or not at all; returns True.

    Raises:
      XlafuseError: the file could not be written (its name and the OS's reason); any earlier
        file of that name is kept.
    """
    if tight:
        fig.tight_layout()
    kind = Path(path).suffix.lstrip(".") or "png"
    write_atomically(path, lambda temp: fig.savefig(temp, dpi=dpi, format=kind), noun="plot")
    return True
