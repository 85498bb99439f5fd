"""The one-pass problem collector of a config's checks (`Problems`: every problem located,
raised together) and the helpers that read a TOML value of a given type or table into it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from xlafuse.errors import XlafuseError, did_you_mean

T = TypeVar("T")


class Problems:
    """Collects located problems; raises them together."""

    def __init__(self):
        self.items: list[str] = []

    def add(self, where: str, message: str) -> None:
        self.items.append(f"{where}: {message}" if where else message)

    def raise_if_any(self, source: Path | None) -> None:
        if not self.items:
            return
        head = f"{source}: " if source else ""
        count = len(self.items)
        lines = "\n".join(f"  {p}" for p in self.items)
        raise XlafuseError(
            f"{head}{count} problem{'s' if count > 1 else ''} in the config:\n{lines}"
        )


def check_keys(problems: Problems, prefix: str, table: Any, accepted: Iterable[str]) -> None:
    if not isinstance(table, Mapping):
        return
    for key in table:
        if key not in accepted:
            problems.add(
                f"{prefix}{key}",
                f"unknown key{did_you_mean(key, accepted)}; accepted: {', '.join(accepted)}",
            )


def as_table(problems: Problems, where: str, value: Any) -> Mapping[str, Any]:
    if isinstance(value, Mapping):
        return value
    problems.add(where, f"must be a table, not {type_name(value)}")
    return {}


def type_name(value: Any) -> str:
    names = {str: "a string", bool: "a boolean", int: "an integer", float: "a number"}
    names.update({list: "an array", dict: "a table"})
    return names.get(type(value), type(value).__name__)


def typed_field(
    problems: Problems,
    where: str,
    value: Any,
    kind: type | tuple[type, ...],
    *,
    optional: bool = False,
    default: Any = None,
) -> Any:
    """`value` if it has type `kind` (ints accepted as floats, bools never as numbers)."""
    if value is None:
        if not optional:
            problems.add(where, "missing (required)")
        return default
    ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if ok:
        return value
    want = {str: "a string", int: "an integer", float: "a number", bool: "a boolean"}[kind]
    problems.add(where, f"must be {want}, not {type_name(value)} {value!r}")
    return default


def check_choice(
    problems: Problems, where: str, value: Any, accepted: Iterable[str], kind: str
) -> None:
    if value is not None and value not in accepted:
        problems.add(
            where,
            f"{value!r} is not a {kind}{did_you_mean(value, accepted)} "
            f"(accepted: {', '.join(accepted)})",
        )


def flat_table(
    problems: Problems,
    section: str,
    value: Any,
    cls: type[T],
    kind_of: Callable[[str], type | tuple[type, ...]],
) -> T:
    """A `cls` from a TOML table of its fields, each checked to be of type `kind_of(name)`."""
    table = as_table(problems, section, value)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    check_keys(problems, f"{section}.", table, tuple(fields))
    kwargs = {}
    for key, field in fields.items():
        got = typed_field(problems, f"{section}.{key}", table.get(key, field.default), kind_of(key))
        if got is not None:
            kwargs[key] = got
    return cls(**kwargs)
