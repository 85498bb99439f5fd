"""HLO files and `--xla_dump_to` folders on disk: reading text, finding modules, thunk launches.

The one place that touches HLO files: `analyze_hlo`, `xlafuse inspect`, `diff` and `explain` read
through it, so a binary, non-UTF-8 or missing file gives the same error everywhere.
"""

from __future__ import annotations

import re
from pathlib import Path

from xlafuse.errors import REGULAR_FILE, HloParseError, XlafuseError, check_path_kind, path_kind

_THUNK_LINE = re.compile(r"^\s*\d+:\s+(k\w+)", re.MULTILINE)
_NON_LAUNCH_THUNKS = frozenset(
    {"kWhile", "kConditional", "kSequential", "kCommandBuffer", "kWaitForStreams", "kCopyDone"}
)
_DUMP_SUFFIX = re.compile(r"\.(?:[a-z]+_[\d.]+[a-z]?_)?(?:[a-z]+_)?after_optimizations\.txt$")


def read_hlo(text_or_path: str | Path) -> tuple[str, str | None]:
    """(HLO text, the file it came from or None): `text_or_path` itself, or a file's text.

    Raises:
        HloParseError: a path that cannot be read, does not exist or is not a regular file (a
            device, a FIFO, a symlink loop: never opened), a binary (NUL byte) or non-UTF-8
            file; the message names the line.
    """
    if isinstance(text_or_path, str) and not _looks_like_path(text_or_path):
        return text_or_path, None
    path = Path(text_or_path)
    text = read_text_file(path, "HLO text", "expected HLO text or a path to an HLO text file")
    return text, str(path)


def read_text_file(path: str | Path, what: str, expected: str) -> str:
    """The text of a file a user named, checked before and after reading: a regular file (looked
    at with `os.stat` first, so that a FIFO is never opened), no NUL byte, UTF-8.

    Args:
        path: the file.
        what: what the text should be, for the messages ("HLO text").
        expected: the end of a message about the path: what is accepted.

    Returns:
        The text, a leading byte-order mark (an editor's) dropped.

    Raises:
        HloParseError: no such file, a folder or anything but a regular file, a file that
            cannot be read, a binary (NUL byte) or non-UTF-8 file; the message names the line
            and never echoes the bytes.
    """
    path = Path(path)
    try:
        kind = check_path_kind(path, REGULAR_FILE, expected)
        data = path.read_bytes() if kind == REGULAR_FILE else b""
    except XlafuseError as err:
        raise HloParseError(str(err)) from None
    except OSError as exc:  # too long a name, no permission, ...
        raise HloParseError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    if kind != REGULAR_FILE:
        raise HloParseError(f"no such file: {str(path)!r} ({expected})")
    source = str(path)
    nul = data.find(b"\x00")
    if nul >= 0:
        raise HloParseError(
            f"binary file (NUL byte), not {what}", line=data.count(b"\n", 0, nul) + 1, source=source
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise HloParseError(
            f"not UTF-8 text ({exc.reason} at byte {exc.start})", line=line, source=source
        ) from None


def _looks_like_path(text: str) -> bool:
    """A str is a path when it could name a file: one line, no NUL, OS name limits kept."""
    if not text or "\n" in text or "\x00" in text or "HloModule" in text or len(text) > 4096:
        return False
    return all(len(part) <= 255 for part in text.replace("\\", "/").split("/"))


def find_optimized_modules(folder: str | Path) -> list[Path]:
    """The optimized-module files of a `--xla_dump_to` folder, sorted by name.

    Args:
        folder: the dump folder.

    Returns:
        Paths ending in `after_optimizations.txt` (e.g. `*.sm_9.0a_gpu_after_optimizations.txt`),
        not the `-buffer-assignment`/`-memory-usage-report` companions.

    Raises:
        HloParseError: when `folder` is not a directory.
    """
    path = Path(folder)
    if not path.is_dir():
        raise HloParseError(f"not a directory: {str(path)!r} (expected an --xla_dump_to folder)")
    return sorted(p for p in path.iterdir() if p.name.endswith("after_optimizations.txt"))


def thunk_launch_count(path: str | Path) -> int | None:
    """Launches listed in the `*.thunk_sequence.txt` next to a dumped module file.

    Args:
        path: a module file from `find_optimized_modules`.

    Returns:
        The number of listed thunks that launch work (kernels, library calls), not control
        thunks (kWhile, kConditional, kSequential, kCommandBuffer, ...); None when no thunk
        sequence file exists for that module.
    """
    path = Path(path)
    module_id = path.name.split(".", 1)[0]
    found = sorted(path.parent.glob(f"{module_id}.*thunk_sequence.txt"))
    found = [p for p in found if path_kind(p) == REGULAR_FILE]  # a FIFO would block a reader
    if not found:
        return None
    kinds = _THUNK_LINE.findall(found[0].read_text(errors="replace"))
    return sum(k not in _NON_LAUNCH_THUNKS for k in kinds)


def module_label(file_name: str) -> str:
    """A dumped module's file name without the `[GPU prefix_]after_optimizations.txt` tail."""
    return _DUMP_SUFFIX.sub("", file_name)
