"""Exceptions xlafuse raises. Each is a ValueError so callers can catch bad input in one place."""


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
