"""`parse_hlo`: optimized HLO text -> an `HloModule` (the frozen dataclasses of `hlo.ir`).

The reading itself (one pass over the lines, XLA's own renaming of repeated names) is
`hlo._reader.Reader`; this module checks the input and runs it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from xlafuse.errors import HloParseError
from xlafuse.hlo._reader import Reader
from xlafuse.hlo.ir import HloModule


def parse_hlo(text: str, source: str | None = None) -> HloModule:
    """Parses HLO text into an `HloModule`.

    Args:
        text: HLO as printed by `Compiled.as_text()`, written by `--xla_dump_to`, or by hand.
        source: where the text came from (a path), used in error messages and kept on the module.

    Returns:
        The parsed module. Instruction names are made unique across the module as XLA's own
        parser makes them (a second `param` becomes `param.1`) when the text repeats a name.

    Raises:
        HloParseError: the text is empty, binary, truncated or not well-formed HLO; the message
            names the line and the reason.
    """
    if not isinstance(text, str):
        raise HloParseError(f"expected HLO text (str), got {type(text).__name__}", 1, source)
    nul = text.find("\x00")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        raise HloParseError("binary data (NUL byte), not HLO text", line, source)
    with gc_paused():
        return Reader(text, source).run()


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pauses the cyclic GC: parsing makes ~1e5 objects and no cycles; each GC pass would rescan
    them all (a quarter of the parse time on the XLA corpus)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
