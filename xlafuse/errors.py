"""Exceptions xlafuse raises, and the one "did you mean" message for names that match nothing.

Each exception is a ValueError so callers can catch bad input in one place.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class XlafuseError(ValueError):
    """Base class: bad input that a user can fix (the message says what and how)."""


class HloParseError(XlafuseError):
    """Text that is not well-formed optimized HLO. The message names the line and the reason."""

    def __init__(self, reason: str, line: int | None = None, source: str | None = None):
        where = f"{source}: " if source else ""
        at = f"line {line}: " if line is not None else ""
        super().__init__(f"{where}{at}{reason}")
        self.reason = reason
        self.line = line
        self.source = source


class UnknownPassError(XlafuseError):
    """A pass name that the running XLA does not have (XLA itself would silently ignore it)."""


class UnknownNameError(XlafuseError):
    """A registry look-up (variant, workload, size, ...) that matched nothing."""


def error_line(err: BaseException) -> str:
    """`TypeName: the first line of its message` (the type alone without a message)."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def did_you_mean(value: object, accepted: Iterable[object]) -> str:
    """` (did you mean 'x'?)` for the accepted name closest to `value`; "" when none is close."""
    close = difflib.get_close_matches(str(value), [str(a) for a in accepted], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_name(kind: str, value: object, accepted: Iterable[object], where: str = "") -> str:
    """The message for a look-up that matched nothing: what, the closest name, what is accepted.

    Example: "unknown size 'smal' for workload 'mlp' (did you mean 'small'?); accepted: tiny,
    small, full".
    """
    accepted = list(accepted)
    listed = ", ".join(map(str, accepted)) or "none"
    return f"unknown {kind} {value!r}{where}{did_you_mean(value, accepted)}; accepted: {listed}"


def check_selected(kind: str, names: Iterable[str], accepted: Iterable[str], among: str) -> None:
    """Raise XlafuseError for the first of `names` (a user's selection) not in `accepted`.

    Example: "no workload 'mpl' in the config (did you mean 'mlp'?); it has: mlp, chain".
    """
    accepted = list(dict.fromkeys(accepted))
    for name in names:
        if name not in accepted:
            raise XlafuseError(
                f"no {kind} {name!r} {among}{did_you_mean(name, accepted)}; "
                f"it has: {', '.join(accepted)}"
            )
