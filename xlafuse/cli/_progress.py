"""Progress on stderr for the commands that compile: one line per step, never on stdout.

On a terminal, a transient line with a spinner and the elapsed time (erased when the command
ends); elsewhere (a pipe, a file, CI logs), one plain line per step, flushed as the step starts,
so a compile of a minute is not a minute of silence. stdout stays the command's output (JSON too).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import TextIO

from xlafuse.experiment.progress import is_terminal

# Set on a process other than 0 of a jax.distributed run: process 0 shows the progress.
_SILENT = [False]


def silence() -> None:
    """Show no progress from this process (`xlafuse.cli._distributed.start`)."""
    _SILENT[0] = True


@contextlib.contextmanager
def steps(
    command: str, *, total: int | None = None, stream: TextIO | None = None, force: bool = False
) -> Iterator[Callable[[str], None]]:
    """Yield `step(line)`, which shows `[i/total] line`: drawn on a terminal, else one line.

    Nothing is shown until the first step. Off a terminal the line reads
    `xlafuse COMMAND: [i/total] line`.

    Args:
      command: the subcommand, named in the plain lines.
      total: the number of steps when known (shown as i/total), else only i.
      stream: where to show; stderr when None.
      force: draw as on a terminal even when the stream is not one (tests).
    """
    if _SILENT[0]:
        yield lambda line: None
        return
    stream = stream if stream is not None else sys.stderr
    count = {"done": 0}

    def numbered(line: str) -> str:
        count["done"] += 1
        return f"[{count['done']}{f'/{total}' if total else ''}] {line}"

    if force or is_terminal(stream):
        with _drawn(stream, force) as draw:
            yield lambda line: draw(numbered(line))
        return
    yield lambda line: print(f"xlafuse {command}: {numbered(line)}", file=stream, flush=True)


@contextlib.contextmanager
def _drawn(stream: TextIO, force: bool) -> Iterator[Callable[[str], None]]:
    """A transient rich line (spinner, text, elapsed time) on `stream`, started by the first draw."""
    # rich on use: only a terminal draws, and `xlafuse --help` imports this module
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = Console(file=stream, force_terminal=force or None, width=160 if force else None)
    progress = Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
        console=console, transient=True,
    )  # fmt: skip
    task = []  # drawn from the first step: no slow step, nothing drawn

    def draw(text: str) -> None:
        if not task:
            progress.start()
            task.append(progress.add_task("", total=None))
        progress.update(task[0], description=escape(text))
        progress.refresh()

    try:
        yield draw
    finally:
        if task:
            progress.stop()
