"""Checks of option values that argparse cannot make: one line, exit 2, before any work.

argparse's own refusals print the usage first; these raise XlafuseError, which the dispatcher
prints as the one line `xlafuse CMD: error: ...`.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from xlafuse.errors import XlafuseError

if TYPE_CHECKING:
    from xlafuse.models.names import Cell


def at_least_one(option: str, value: int | None, *, hint: str = "") -> None:
    """Refuse a count option below 1 (`--calls 0`); None (not given) passes. `hint` ends the
    message in brackets (`--all shows every kernel`)."""
    if value is not None and value < 1:
        raise XlafuseError(
            f"{option} must be 1 or more, got {value}" + (f" ({hint})" if hint else "")
        )


def comma_separated(text: str) -> list[str]:
    """The names of a NAME,NAME option: `"a, b,,c"` -> ["a", "b", "c"]."""
    return [n.strip() for n in text.split(",") if n.strip()]


def variant_names(given: str | list[str] | None) -> list[str] | None:
    """The variant names of `--variants` (comma-separated text, or the list parsed from it).

    Returns:
      The names; None when the option was not given.

    Raises:
      XlafuseError: it was given but names nothing (`--variants ""`): an empty selection would
        otherwise mean "every variant".
    """
    if given is None:
        return None
    names = [n for n in given if n] if isinstance(given, list) else comma_separated(given)
    if not names:
        raise XlafuseError(
            f"--variants {','.join(given) if isinstance(given, list) else given!r} names no "
            "variant; give comma-separated names, e.g. --variants default,no-fusion"
        )
    return names


def add_measure_arguments(parser: argparse.ArgumentParser, measures: str, calls: str) -> None:
    """--measure (with --workload: trace the program and time what the command shows) and
    --calls; `measures` and `calls` finish their help texts."""
    parser.add_argument(
        "--measure",
        action="store_true",
        help=f"with --workload: {measures} (GPU: device kernels; CPU: host thunks)",
    )
    parser.add_argument("--calls", type=int, default=10, help=f"calls traced {calls} (10)")


def check_implementations(cell: Cell, variants: list) -> None:
    """Refuse a variant's implementation (`impl=NAME`) that the cell's workload does not have
    or this device cannot run, before the workload is built (issue 46). A program of the
    user's given on the command line has only its own: its others come in a config's
    `implementations` table.

    Args:
      cell: the command's `Cell`. variants: the resolved variants.

    Raises:
      XlafuseError: the one line of the first refused, naming the variant.
    """
    from xlafuse.models import registry, user  # on use: JAX (see xlafuse.cli)

    for variant in variants:
        name = variant.implementation
        if name is None:
            continue
        if cell.entry is not None or user.is_entry(cell.name):
            raise XlafuseError(
                f"variant {variant.name!r}: a program of the user's has no implementation "
                f"{name!r} on the command line; give its implementations in a config's "
                'workload table (implementations = {NAME = "FILE.py:FUNCTION"})'
            )
        problem = registry.implementation_problem(
            cell.name, name, mode=cell.mode, dtype=cell.dtype, devices=cell.devices
        )
        if problem:
            raise XlafuseError(f"variant {variant.name!r}: {problem}")
