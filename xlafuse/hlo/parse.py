"""`parse_hlo`: optimized HLO text -> an `HloModule` (the frozen dataclasses of `hlo.ir`).

The reading itself (one pass over the lines, XLA's own renaming of repeated names) is
`hlo._reader.Reader`; this module checks the input and runs it.
"""

from __future__ import annotations

import gc

from xlafuse.errors import HloParseError
from xlafuse.hlo._reader import Reader
from xlafuse.hlo.ir import HloModule


def parse_hlo(text: str, source: str | None = None) -> HloModule:
    """Parses HLO text into an `HloModule`.

    While it reads, the process's cyclic GC is paused: see `gc_paused` for what that does to the
    objects made meanwhile, the caller's included.

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


class gc_paused:
    """Pauses the cyclic GC while a module is read or analyzed (`with gc_paused(): ...`), and
    files what was made then with the oldest generation.

    Reading makes ~1e5 objects and no cycles. Each GC pass during the read would rescan them
    all (a quarter of the read time on the XLA corpus); and after a plain pause, the first
    young-generation pass walks them all once more (a tenth). `gc.freeze()` then
    `gc.unfreeze()` moves every tracked object to the oldest generation at no cost per object
    (a full collection still visits them). Objects other code made just before are promoted
    too: a cycle among them is freed at the next full collection rather than sooner. Skipped
    where objects are frozen already (a pre-fork server's): unfreeze would thaw them.
    A class, not a `@contextmanager` generator: entered twice per module, it costs a quarter.

    Kept process-wide for its speed (2026-12-01, parse + analyze of the corpus's canonical
    modules, best of nine alternating in one process, twice, CPU time): 0.86-0.91 s as it is,
    1.02-1.04 s paused with nothing frozen (enabled again as found), 1.16 s with no pause.
    """

    __slots__ = ("enabled",)

    def __enter__(self) -> None:
        self.enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc_info: object) -> None:
        if self.enabled:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()
