"""What a run prints: one line per finished cell, and on a terminal a progress bar with an ETA.

The lines are never wrapped: piped (`xlafuse run ... | tee log`), they are plain `print`s, one
record a line; on a terminal rich prints them in soft-wrap mode, so the terminal folds a long
line, not rich at its idea of the width (80 columns off a terminal).
"""

from __future__ import annotations

import os
import sys
from typing import TextIO


def is_terminal(stream: TextIO) -> bool:
    """Whether `stream` is an interactive terminal."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real file
        return False


class Reporter:
    """One printed line per finished cell; a progress bar with an ETA on a terminal (optional).

    Args:
      enabled: show the progress bar (on a terminal, for more than one cell).
      total: the cells to run.
      stream: where to print; stdout when None.
    """

    def __init__(self, enabled: bool, total: int, *, stream: TextIO | None = None):
        self._stream = stream if stream is not None else sys.stdout
        self._enabled = enabled and total > 1 and is_terminal(self._stream)
        self._total = total
        self._progress = None
        self._task = None
        self._closed = False  # stdout went away (`| head`): stop printing, not the sweep

    def __enter__(self) -> Reporter:
        if self._enabled:
            self._progress = _progress_bar(self._stream)
            self._progress.__enter__()
            self._task = self._progress.add_task("cells", total=self._total)
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def say(self, line: str) -> None:
        if self._closed:
            return
        try:
            if self._progress is not None:
                self._progress.console.print(line, markup=False, highlight=False)
            else:
                print(line, file=self._stream, flush=True)
        except BrokenPipeError:
            self._closed = True
            _silence_stdout()

    def advance(self) -> None:
        if self._progress is not None:
            self._progress.advance(self._task)


def _progress_bar(stream: TextIO):
    """rich's bar (cells, bar, done/total, elapsed, ETA) on a console that never wraps a line."""
    # rich on use: only a terminal draws a bar
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    class _Console(Console):
        """Goes quiet when stdout closes (rich's default exits the process)."""

        def on_broken_pipe(self) -> None:
            self.quiet = True
            _silence_stdout()

    return Progress(
        TextColumn("cells"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        transient=True,
        console=_Console(file=stream, soft_wrap=True),
    )


def _silence_stdout() -> None:
    """Point a closed stdout at /dev/null so later writes and the exit flush do not fail."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
