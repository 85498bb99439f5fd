"""A Ctrl-C that is never lost.

Python raises KeyboardInterrupt at the next bytecode of the main thread. When that bytecode is
a garbage-collection callback (jax registers one), Python prints "Exception ignored in ..." and
the interrupt is gone: a tune or a run goes on to its end and exits 0. While `sticky()` holds,
the handler also records the interrupt, and `check()`, called each time a measurement has been
written (a run's record, a tune's trial), raises it again.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

_pending = False


def _on_sigint(signum, frame) -> None:
    global _pending
    _pending = True
    raise KeyboardInterrupt


@contextlib.contextmanager
def sticky() -> Iterator[None]:
    """Ctrl-C recorded as well as raised, for the `with` block; nothing changes off the main
    thread, or where SIGINT is ignored (a background job) or has a handler of another's."""
    global _pending
    _pending = False
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler:
        yield
        return
    signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def check() -> None:
    """Raises KeyboardInterrupt if a Ctrl-C arrived under `sticky()`, swallowed or not.

    Raises:
      KeyboardInterrupt: a Ctrl-C arrived.
    """
    if _pending:
        raise KeyboardInterrupt
