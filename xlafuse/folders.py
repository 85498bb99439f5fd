"""A folder xlafuse writes into (results, a compilation cache): created, checked writable, early.

Bottom layer beside `errors.py`: anything that writes files asks here before its work starts,
so a bad path is one clear line instead of a failure after minutes of measuring.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

from xlafuse.errors import XlafuseError


def writable_folder(folder: str | os.PathLike, noun: str) -> Path:
    """Create `folder` if needed and check that a file can be written in it.

    Args:
      folder: the path.
      noun: what it is, for the message ("output folder", "cache folder").

    Raises:
      XlafuseError: an empty name, a file, a path through a file, or a folder that cannot be
        created or written to; the message names the folder and the reason.
    """
    if not str(folder).strip():
        raise XlafuseError(f"the {noun} is an empty name; give a folder")
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise XlafuseError(f"{noun} {str(path)!r} is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".xlafuse-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except (FileExistsError, NotADirectoryError):
        parent = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
        raise XlafuseError(
            f"cannot create {noun} {str(path)!r}: {str(parent)!r} is a file"
        ) from None
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise XlafuseError(f"cannot write to {noun} {str(path)!r}: {reason}") from None
    return path


def writable_file(file: str | os.PathLike, noun: str) -> Path:
    """Check, before any work, that `file` can be written later (its folder is created).

    Args:
      file: the path.
      noun: what it is, for the message ("--dot file").

    Raises:
      XlafuseError: an empty name, a folder, a file that cannot be written, or a folder that
        cannot be created or written to (`writable_folder`); the message names the path.
    """
    if not str(file).strip():
        raise XlafuseError(f"the {noun} is an empty name; give a file")
    path = Path(file)
    if path.is_dir():
        raise XlafuseError(f"{noun} {str(path)!r} is a folder, not a file")
    writable_folder(path.parent, f"folder of the {noun}")
    if path.exists() and not os.access(path, os.W_OK):
        raise XlafuseError(f"cannot write to {noun} {str(path)!r}: Permission denied")
    return path


def write_atomically(
    path: str | os.PathLike, write: Callable[[Path], object], *, noun: str
) -> Path:
    """Write a file whole or not at all: `write(temp)` fills a temporary file beside `path`,
    which is synced and renamed over `path` only once it is complete.

    An interrupt or a full disk leaves `path` as it was (an earlier file, or none), never a
    file cut short; the temporary file is removed (a kill -9 may leave it, as a dot file). A
    `write` that makes no file leaves `path` alone too.

    Args:
      path: the file to write.
      write: a callable that writes the whole file to the path it is given.
      noun: what it is, for the message ("report", "plot").

    Returns:
      `path`.

    Raises:
      XlafuseError: the file could not be written; the message names it and the OS's reason.
    """
    path = Path(path)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(temp)
        if not temp.exists():  # the writer made no file: nothing to put in place
            return path
        fd = os.open(temp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            temp.unlink(missing_ok=True)
        if not isinstance(err, OSError):
            raise
        reason = err.strerror or type(err).__name__
        raise XlafuseError(
            f"cannot write {noun} {str(path)!r}: {reason} (any earlier {path.name} is kept)"
        ) from None
    return path
