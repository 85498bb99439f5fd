"""A folder xlafuse writes into (results, a compilation cache): created, checked writable, early.

Bottom layer beside `errors.py`: anything that writes files asks here before its work starts,
so a bad path is one clear line instead of a failure after minutes of measuring.
"""

from __future__ import annotations

import os
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
