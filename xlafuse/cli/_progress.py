"""A one-line progress display on stderr for the commands that compile: step, cell, elapsed time.

Shown only when stderr is a terminal, so pipes, files and `--json` output stay clean; it is
transient (erased when the command ends) and never writes to stdout.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import TextIO

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn


def is_tty(stream: TextIO) -> bool:
    """Whether `stream` is an interactive terminal."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real file
        return False


@contextlib.contextmanager
def steps(
    total: int | None = None, stream: TextIO | None = None, force: bool = False
) -> Iterator[Callable[[str], None]]:
    """Yield `step(line)`, which shows `[i/total] line` with a spinner and the elapsed time.

    Nothing is drawn until the first step, and the display is erased at the end.

    Args:
      total: the number of steps when known (shown as i/total), else only i.
      stream: where to draw; stderr when None.
      force: draw even when the stream is not a terminal (tests).
    """
    stream = stream if stream is not None else sys.stderr
    if not (force or is_tty(stream)):
        yield lambda line: None
        return

    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=Console(file=stream, force_terminal=force or None, width=160 if force else None),
        transient=True,
    )
    state = {"task": None, "done": 0}  # drawn from the first step: no slow step, nothing drawn

    def step(line: str) -> None:
        if state["task"] is None:
            progress.start()
            state["task"] = progress.add_task("", total=None)
        state["done"] += 1
        of = f"/{total}" if total else ""
        progress.update(state["task"], description=escape(f"[{state['done']}{of}] {line}"))
        progress.refresh()

    try:
        yield step
    finally:
        if state["task"] is not None:
            progress.stop()
