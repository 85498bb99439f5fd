"""`parse_hlo`: optimized HLO text -> an `HloModule` (the frozen dataclasses of `hlo.ir`).

The reading itself (one pass over the lines, XLA's own renaming of repeated names) is
`hlo._reader.Reader`; this module checks the input and runs it. `gc_paused` is for
applications (the CLI, the benchmarks) to wrap around their reading: no library function
switches the process's GC.
"""

from __future__ import annotations

import gc

from xlafuse.errors import HloParseError
from xlafuse.hlo._reader import Reader
from xlafuse.hlo.ir import HloModule


def parse_hlo(text: str, *, source: str | None = None) -> HloModule:
    """Parses HLO text into an `HloModule`.

    Leaves the process's GC as it was; an application that reads many modules may read them
    faster inside `gc_paused`.

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
        raise HloParseError(
            f"expected HLO text (str), got {type(text).__name__}", line=1, source=source
        )
    nul = text.find("\x00")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        raise HloParseError("binary data (NUL byte), not HLO text", line=line, source=source)
    return Reader(text, source).run()


class gc_paused:
    """Pauses the cyclic GC while modules are read or analyzed (`with gc_paused(): ...`), and
    files what was made then with the oldest generation.

    For application code only (the `xlafuse` command around a command that reads HLO files,
    the benchmarks): it switches the GC of the whole process, which a library call must not do
    behind its caller's back (issue 30).

    Reading makes ~1e5 objects and no cycles. Each GC pass during the read would rescan them
    all (a quarter of the read time on the XLA corpus); and after a plain pause, the first
    young-generation pass walks them all once more (a tenth). `gc.freeze()` then
    `gc.unfreeze()` moves every tracked object to the oldest generation at no cost per object
    (a full collection still visits them). Objects other code made just before are promoted
    too: a cycle among them is freed at the next full collection rather than sooner. Skipped
    where objects are frozen already (a pre-fork server's): unfreeze would thaw them.
    A class, not a `@contextmanager` generator: entered once per module, it costs a quarter.
    What it buys, measured: benchmarks/README.md ("The cyclic GC paused while HLO is read").
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
