"""Exceptions xlafuse raises, the one "did you mean" message for names that match nothing, and
the one answer to "what kind of path is this" (`path_kind`) for messages about a user's path.

Each exception is a ValueError so callers can catch bad input in one place.
"""

from __future__ import annotations

import difflib
import errno
import os
import stat
from collections.abc import Iterable


class XlafuseError(ValueError):
    """Base class: bad input that a user can fix (the message says what and how)."""


class HloParseError(XlafuseError):
    """Text that is not well-formed optimized HLO. The message names the line and the reason."""

    def __init__(self, reason: str, *, line: int | None = None, source: str | None = None):
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


def unknown_name(kind: str, value: object, accepted: Iterable[object], *, where: str = "") -> str:
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


REGULAR_FILE = "a regular file"
FOLDER = "a folder"
NOTHING = "nothing"  # no such path
_KINDS = (
    (stat.S_ISREG, REGULAR_FILE),
    (stat.S_ISDIR, FOLDER),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


def path_kind(path: str | os.PathLike) -> str:
    """What `path` names, from `os.stat` alone: it is never opened (opening a FIFO blocks).

    Returns:
      `REGULAR_FILE`, `FOLDER`, "a character device" (`/dev/null`), "a block device", "a FIFO",
      "a socket", "a symlink loop", "a broken symlink to 'TARGET'", `NOTHING` (no such path),
      or "a path that cannot be looked at: REASON" (e.g. a folder on the way without
      permission).
    """
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        if err.errno == errno.ELOOP:
            return "a symlink loop"
        if os.path.islink(path):
            return f"a broken symlink to {os.readlink(path)!r}"
        if err.errno in (errno.ENOENT, errno.ENOTDIR):
            return NOTHING
        return f"a path that cannot be looked at: {err.strerror or type(err).__name__}"
    except ValueError:  # a NUL byte in the name
        return NOTHING
    return next((kind for is_kind, kind in _KINDS if is_kind(mode)), "a special file")


def check_path_kind(path: str | os.PathLike, wanted: str, expected: str) -> str:
    """`path_kind(path)`, after refusing a path that is there but neither a file nor a folder.

    A regular file, a folder and nothing at all are left to the caller, whose messages for a
    missing path or a folder in place of a file say more.

    Args:
      path: a path the user gave.
      wanted: what the caller reads there, for the message ("a regular file", "a folder").
      expected: the end of the message: what is accepted ("expected an --xla_dump_to folder").

    Raises:
      XlafuseError: e.g. "'/dev/null' is not a regular file (a character device); expected ...".
    """
    kind = path_kind(path)
    if kind in (REGULAR_FILE, FOLDER, NOTHING):
        return kind
    raise XlafuseError(f"{str(path)!r} is not {wanted} ({kind}); {expected}")
