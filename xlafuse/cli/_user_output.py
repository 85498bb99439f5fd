"""What the user's program may not do to a command's output: write on its stdout, or repeat its
warnings through it.

A command's stdout is its own (`--json` is the only thing there). While a command runs,
`sys.stdout` takes what xlafuse's own code writes (a module of the `xlafuse` package, or rich,
which draws `run`'s progress bar) and sends everything else to stderr: the user's program and
the libraries it uses, when imported, built, traced or run (JAX's debug prints while the program
runs too). What their C code writes to file descriptor 1 while they are imported, called or
traced goes to stderr as well (`xlafuse.models.user.stdout_to_stderr`).

Warnings are counted by kind (category and first line of the message) and shown once per kind
on stderr when the command ends, with where the first was raised and how many there were;
`--debug` shows every one. A warning that the filters ignore (Python's default for a
DeprecationWarning) stays ignored, one they make an error stays an error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

_OWN = ("xlafuse", "rich")  # the packages whose writes are the command's output


@contextlib.contextmanager
def user_output(command: str, *, debug: bool) -> Iterator[None]:
    """For a command's run: its stdout kept to xlafuse's own writes, and the warnings raised
    counted and shown at the end (see the module docstring).

    Args:
      command: the subcommand, which the warning lines name (`xlafuse inspect: warning: ...`).
      debug: show every warning, not one per kind.
    """
    own = sys.stdout
    seen = _Warnings()
    with warnings.catch_warnings():
        _each_occurrence()
        warnings.showwarning = seen.show
        sys.stdout = _CommandStdout(own)
        try:
            yield
        finally:
            if isinstance(sys.stdout, _CommandStdout):  # else the command replaced it
                sys.stdout = own
            for line in seen.lines(command, debug=debug):
                print(line, file=sys.stderr)


def _each_occurrence() -> None:
    """Filters that show a warning once per place show it each time (the count says how often);
    ignored ones stay ignored, errors stay errors."""
    once = ("default", "module", "once")
    warnings.filters[:] = [("always" if f[0] in once else f[0], *f[1:]) for f in warnings.filters]
    warnings.simplefilter("always", append=True)  # no filter matched: Python's "default"


class _CommandStdout:
    """`sys.stdout` during a command: xlafuse's writes go to the command's stdout, any other
    code's to stderr (decided by the module of the code that writes)."""

    def __init__(self, own: TextIO):
        self._own = own

    def write(self, text: str) -> int:
        return self._stream(sys._getframe(1)).write(text)

    def writelines(self, lines) -> None:
        stream = self._stream(sys._getframe(1))
        for line in lines:
            stream.write(line)

    def _stream(self, frame) -> TextIO:
        module = frame.f_globals.get("__name__") or ""
        return self._own if module.split(".")[0] in _OWN else sys.stderr

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, buffer, ...
        return getattr(self._own, name)


@dataclasses.dataclass
class _Warnings:
    """The warnings shown during a command, by kind: (category, message) -> where each was."""

    seen: dict[tuple[str, str], list[str]] = dataclasses.field(default_factory=dict)

    def show(self, message, category, filename, lineno, file=None, line=None) -> None:
        """`warnings.showwarning`: counts the warning instead of printing it."""
        text = str(message).strip()
        kind = (category.__name__, text.splitlines()[0] if text else "")
        self.seen.setdefault(kind, []).append(f"{_where(filename)}:{lineno}")

    def lines(self, command: str, *, debug: bool) -> Iterator[str]:
        """One line per kind (`... (first place; N times, --debug shows each)`), or with
        `debug` one per warning."""
        for (category, text), places in self.seen.items():
            head = f"xlafuse {command}: warning: {category}: {text}"
            if debug:
                yield from (f"{head} ({place})" for place in places)
            elif len(places) == 1:
                yield f"{head} ({places[0]})"
            else:
                yield f"{head} ({places[0]}; {len(places)} times, --debug shows each)"


def _where(filename: str) -> str:
    """A warning's file, short: under the working directory relative to it, in an installed
    package from the package on (`jax_md/space.py`), else as it is."""
    path = Path(filename)
    with contextlib.suppress(ValueError):
        return str(path.resolve().relative_to(Path(os.getcwd()).resolve()))
    parts = path.parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            return "/".join(parts[parts.index(marker) + 1 :])
    return filename
