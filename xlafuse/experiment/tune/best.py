"""best.toml: a config that `xlafuse run` reruns a tuning's default program and winner with, as
they were tuned.

It names the target as the tune had it: a zoo workload with its size, mode, dtype, devices and
parallelism, or an entry (its file relative to best.toml's folder, as a config's entries are
found), with its overrides, and the config's `imports` (the `--import` files, relative the same
way). Its experiment is named after the target and writes into `run/` of the tune's folder, so
the reruns of two tunings never share a results folder. A tune under `xlafuse launch` says so
in a comment with the command that reruns it the same way (a config holds no process count).
Every value is written as TOML (`toml_value`), any string included.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xlafuse.models import user

RUN_FOLDER = "run"  # where `xlafuse run best.toml` writes, inside the tune's folder
# The workload labels of a program of the user's (two workloads: its default and its winner).
# Not "default" and "tuned": those are the variants' names.
PROGRAM_LABELS = ("{function}-default", "{function}-tuned")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def best_toml(
    result: Any,
    *,
    folder: Path | None = None,
    imports: Sequence[str] = (),
    processes: int = 1,
) -> str:
    """The config that runs the default program and the best candidate with `xlafuse run`: one
    workload with both as variants when only XLA options differ, else the target twice (its own
    knobs, then the winning ones as overrides) under both variants.

    Args:
      result: the `tuner.TuneResult`.
      folder: the tune's folder (best.toml's), as given: paths are written relative to it, and
        the rerun's output is its `run/`; None: relative to the working directory, output
        `results/<name>`.
      imports: the files and modules of the user's the tune imported (`user.imported()`, the
        entry's own file left out).
      processes: the processes the tune ran as (`xlafuse launch --processes N`).
    """
    target, best = result.target, result.best or result.space[0]
    winner = best.options()
    if best.implementation:  # impl=NAME: an inline variant's `implementation`
        winner["implementation"] = best.implementation
    variants = ['"default"'] + ([inline_table({"name": "tuned", **winner})] if winner else [])
    name = f"tune-{_slug(target.name)}"
    output = f"{folder}/{RUN_FOLDER}" if folder is not None else f"results/{name}"
    lines = _head_lines(result, folder, processes=processes)
    if imports:
        files = [_relative(i, folder) if user.is_file_target(i) else i for i in imports]
        lines += ["", f"imports = {toml_value(files)}"]
    lines += [
        "",
        "[experiment]",
        f"name = {toml_value(name)}",
        f"output = {toml_value(output)}",
        f"variants = [{', '.join(variants)}]",
        'reference = "default"',
    ]
    programs = [{}] + ([dict(best.knobs)] if best.knobs else [])
    for label, knobs in zip(PROGRAM_LABELS, programs, strict=False):
        lines += ["", "[[workloads]]", *_workload_lines(target, label, knobs, folder)]
    return "\n".join(lines) + "\n"


def _head_lines(result: Any, folder: Path | None, *, processes: int) -> list[str]:
    """best.toml's comment lines: the tune's conclusion, the figure it tuned for, and the
    command that reruns it (`xlafuse launch --processes N -- run` when it ran as N > 1)."""
    shown = f"{folder}/best.toml" if folder is not None else "best.toml"
    lines = [f"# xlafuse tune: {_comment(result.conclusion())}"]
    if result.target.figure:
        lines.append(
            f"# tuned for {result.target.figure} time: the run's records hold both speedups"
        )
    if processes > 1:
        lines += [
            f"# tuned as {processes} processes: rerun it the same way:",
            f"#   xlafuse launch --processes {processes} -- run {_comment(shown)}",
        ]
    else:
        lines.append(f"#   xlafuse run {_comment(shown)}")
    return lines


def _workload_lines(
    target: Any, label: str, knobs: Mapping[str, Any], folder: Path | None
) -> list[str]:
    is_entry = user.is_entry(target.name)
    if is_entry:
        entry = _entry_from(target.name, folder)
        function = entry.rpartition(":")[2]
        lines = [
            f"entry = {toml_value(entry)}",
            f"name = {toml_value(label.format(function=function))}",
        ]
        keys = ("mode",)  # FUNCTION's overrides size it, on one device
    else:
        lines = [f"name = {toml_value(target.name)}"]
        keys = ("size", "mode", "dtype", "devices", "parallelism")
    for key in keys:
        if target.settings.get(key) is not None:
            lines.append(f"{key} = {toml_value(target.settings[key])}")
    overrides = {**target.overrides, **knobs}
    if overrides:
        lines.append(f"overrides = {inline_table(overrides)}")
    return lines


def _entry_from(name: str, folder: Path | None) -> str:
    """An entry as a config in `folder` names it: a file relative to that folder (a config's
    relative FILE is found from its own folder), so best.toml holds no path of this machine."""
    file, sep, function = portable_name(name).rpartition(":")
    if not sep:
        return name
    return f"{_relative(file, folder)}:{function}"


def _relative(file: str, folder: Path | None) -> str:
    if folder is None or not Path(file).is_absolute():
        return file
    return os.path.relpath(file, Path(folder).resolve())


def _comment(text: str) -> str:
    """`text` fit for a TOML comment: one line, its control characters escaped."""
    return "".join(
        _ESCAPES.get(c, f"\\u{ord(c):04X}") if c != "\t" and _is_control(c) else c for c in text
    )


def _is_control(char: str) -> bool:
    return ord(char) < 0x20 or ord(char) == 0x7F


def portable_name(name: str) -> str:
    """An entry resolved to its absolute file, so a child in any folder finds it."""
    if ":" in name and user.is_file_target(name.rpartition(":")[0]):
        return user.parse_entry(name).resolved
    return name


def _slug(name: str) -> str:
    """A target's short name for the experiment: a zoo workload's, or FUNCTION's."""
    short = name.rpartition(":")[2] if user.is_entry(name) else name
    return re.sub(r"[^A-Za-z0-9_-]+", "-", short).strip("-") or "target"


def inline_table(table: Mapping[str, Any]) -> str:
    """`{ a = 1, b = "x" }`."""
    return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in table.items()) + " }"


def toml_key(key: Any) -> str:
    """A bare key where TOML allows one, else a quoted one."""
    key = str(key)
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def toml_value(value: Any) -> str:
    """A value as TOML writes it: a bool, an integer, a float (inf and nan too), a string, an
    array or an inline table.

    Raises:
      TypeError: a value TOML has no form for (None, an object).
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return repr(value) if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, Mapping):
        return inline_table(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"{value!r} ({type(value).__name__}) has no TOML form")


def toml_string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped, any other
    character (an emoji) written as itself (the file is UTF-8)."""
    out = []
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif _is_control(char):
            out.append(f"\\u{ord(char):04X}")
        elif 0xD800 <= ord(char) <= 0xDFFF:  # a lone surrogate: no UTF-8, no TOML
            raise TypeError(f"{text!r} holds a lone surrogate, which TOML cannot hold")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'
