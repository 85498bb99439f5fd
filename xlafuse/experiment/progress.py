"""What a run prints: a rich progress bar with an ETA and one line per finished cell."""

from __future__ import annotations

import os
import sys

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class Reporter:
    """A rich progress bar with an ETA (optional) and one printed line per finished cell."""

    def __init__(self, enabled: bool, total: int):
        self._enabled = enabled and total > 1
        self._total = total
        self._progress = None
        self._task = None
        self._closed = False  # stdout went away (`| head`): stop printing, not the sweep

    def __enter__(self) -> Reporter:
        if self._enabled:
            self._progress = Progress(
                TextColumn("cells"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                transient=True,
                console=_console(),
            )
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
                print(line, flush=True)
        except BrokenPipeError:
            self._closed = True
            _silence_stdout()

    def advance(self) -> None:
        if self._progress is not None:
            self._progress.advance(self._task)


def _console():
    """A rich console that goes quiet when stdout closes (rich's default exits the process)."""

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            _silence_stdout()

    return _Console()


def _silence_stdout() -> None:
    """Point a closed stdout at /dev/null so later writes and the exit flush do not fail."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
