"""The workload options of the commands that compile one: `--workload` (a zoo name or a program
of the user's, `FILE.py:FUNCTION`), `--import`, `--size`/`--mode` and `--devices N --parallelism
P --overrides K=V`, checked before any work."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from xlafuse.cli import _distributed
from xlafuse.cli._checks import comma_separated
from xlafuse.errors import XlafuseError
from xlafuse.models.names import PARALLELISMS, Cell, is_entry

if TYPE_CHECKING:
    from xlafuse.models.workload import Items

WORKLOAD_HELP = (
    "a zoo workload (`xlafuse workloads`) or a program of yours, FILE.py:FUNCTION or "
    "MODULE:FUNCTION (docs/your-model.md)"
)


def add_workload_arguments(
    parser: argparse.ArgumentParser,
    *,
    positional: bool = False,
    required: bool = False,
    dtype: bool = False,
    mesh: bool = False,
    what: str = "",
) -> None:
    """Adds the workload (`--workload W`, or a positional WORKLOAD), --size, --mode,
    --overrides, --import, and when asked --dtype and the mesh (`add_mesh_arguments`); `what`
    starts the workload's help text ("compile this instead of reading a TARGET: ")."""
    if positional:
        parser.add_argument("workload", help=WORKLOAD_HELP)
    else:
        parser.add_argument("--workload", required=required, help=f"{what}{WORKLOAD_HELP}")
    parser.add_argument("--size", help="tiny, small or full (default: tiny)")
    parser.add_argument("--mode", help="forward or train (default: forward)")
    if dtype:
        parser.add_argument("--dtype", help="float32, bfloat16 or float16 (default: per backend)")
    parser.add_argument(
        "--overrides",
        action="append",
        metavar="K=V[,K=V]",
        help="size-table or option overrides (a program of yours: its keyword arguments), "
        "e.g. batch=8",
    )
    add_import_argument(parser)
    add_items_arguments(parser)
    if mesh:
        add_mesh_arguments(parser)


def add_items_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds --items N and --items-unit UNIT: the work one call does, for throughput."""
    parser.add_argument(
        "--items",
        type=int,
        metavar="N",
        help="items one call processes, for throughput in items/s (default: the workload's "
        "own; a program of yours: 1 call)",
    )
    parser.add_argument(
        "--items-unit", metavar="UNIT", help="what an item is, e.g. env-steps (default: items)"
    )


def items_of(args: argparse.Namespace) -> Items | None:
    """The `xlafuse.models.Items` that --items and --items-unit name (None without --items).

    Raises:
      XlafuseError: --items-unit without --items, a count below 1 or a unit that is no word.
    """
    count, unit = getattr(args, "items", None), getattr(args, "items_unit", None)
    if count is None:
        if unit is not None:
            raise XlafuseError(
                f"--items-unit {unit} goes with --items N (items one call processes)"
            )
        return None
    from xlafuse.models.workload import ITEMS_UNIT, Items, items_problem  # JAX: builds next

    unit = ITEMS_UNIT if unit is None else unit
    problem = items_problem(count, unit)
    if problem:
        raise XlafuseError(f"--items {count} --items-unit {unit}: {problem}")
    return Items(count, unit)


def add_mesh_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds --devices and --parallelism (a sharded batch must divide evenly), and the options
    of a run of several processes (`xlafuse.cli._distributed`)."""
    _distributed.add_distributed_arguments(parser)
    parser.add_argument(
        "--devices",
        type=int,
        default=1,
        help="shard the workload over N devices (on a CPU: N host devices; default: 1)",
    )
    parser.add_argument(
        "--parallelism",
        default="data",
        choices=PARALLELISMS,
        help="data: batch split, parameters replicated; model: Megatron column/row sharding",
    )


def add_import_argument(parser: argparse.ArgumentParser) -> None:
    """Adds --import FILE_OR_MODULE (repeatable)."""
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        metavar="FILE_OR_MODULE",
        help="import a file or module of yours first, so that the workloads it registers "
        "(@xlafuse.models.register) are names here; repeatable",
    )


def import_user_code(args: argparse.Namespace) -> None:
    """Imports every --import, in order (one line naming what failed, before any work)."""
    if not getattr(args, "imports", None):
        return
    from xlafuse.models import user  # JAX, as in check_workload

    for target in args.imports:
        try:
            user.import_target(target)
        except user.EntryError as err:
            raise user.EntryError(f"--import: {err}") from err.__cause__


def settle_workload_args(args: argparse.Namespace) -> None:
    """--size and --mode of a zoo workload take their defaults (tiny, forward); a program of
    the user's (`FILE.py:FUNCTION`) takes neither, nor --dtype: FUNCTION's overrides size it
    and what it returns is its mode. Its size is then "custom", its mode None (not yet known).

    Raises:
      XlafuseError: --size, --mode or --dtype given with a program of the user's.
    """
    if not is_entry(args.workload):
        args.size = args.size or "tiny"
        args.mode = args.mode or "forward"
        return
    given = [f"--{k}" for k in ("size", "mode", "dtype") if getattr(args, k, None) is not None]
    if given:
        raise XlafuseError(
            f"{' and '.join(given)} {'go' if len(given) > 1 else 'goes'} with a zoo workload; {args.workload!r} is a program of "
            "yours: give it keyword arguments with --overrides (its mode is what it returns)"
        )
    args.size, args.mode = "custom", None


def overrides(args: argparse.Namespace) -> dict:
    """The parsed --overrides (`{"batch": 8}`); {} for a command without them."""
    return parse_overrides(getattr(args, "overrides", None))


def cell_of(args: argparse.Namespace) -> Cell | None:
    """The cell the options of `add_workload_arguments` name (None without a workload): the
    workload, size, mode, dtype and overrides, and with the mesh its devices and parallelism."""
    if not getattr(args, "workload", None):
        return None
    return Cell(
        args.workload,
        args.size,
        args.mode,
        getattr(args, "dtype", None),
        overrides(args),
        getattr(args, "devices", 1),
        getattr(args, "parallelism", "data"),
        items=items_of(args),
    )


def check_workload(args: argparse.Namespace) -> None:
    """Refuse a bad --workload, --size, --mode, --overrides or --devices before any work.

    Every check `xlafuse.models.build` makes without an array (override values, and whether
    the arrays fit in the devices' memory), and the --devices range: one line, before a child
    process or a progress line starts.
    """
    # JAX, imported here: a command that reads HLO or results never calls this (it starts faster)
    from xlafuse.models.registry import check_build

    settle_workload_args(args)
    import_user_code(args)
    devices = getattr(args, "devices", 1)
    _check_devices(devices)
    parallelism = getattr(args, "parallelism", "data")
    dtype = getattr(args, "dtype", None)
    check_build(
        args.workload,
        size=args.size,
        mode=args.mode,
        dtype=dtype,
        devices=devices,
        parallelism=parallelism,
        **overrides(args),
    )


def rerun_if_needed(args: argparse.Namespace) -> int | None:
    """Checks the workload's arguments (`check_workload`), then runs the command again with N
    host devices when the CPU backend has fewer.

    With --distributed, this process first joins `jax.distributed` and is never run again:
    its devices are the ones the launcher gave it, and the mesh spans every process's.

    Returns:
      The child's exit status, or None when this process has the devices (or is a GPU one:
      building the workload then reports a missing device as a one-line error).

    Raises:
      XlafuseError, ValueError: as for `check_workload` and `_distributed.start`.
    """
    if _distributed.start(args):
        from xlafuse.distributed.runtime import check_spans_processes  # JAX, as below

        check_workload(args)
        devices = getattr(args, "devices", 1)
        check_spans_processes(devices, f"--devices {devices}")
        return None
    # JAX, imported here: a command that reads HLO or results never calls this (it starts faster)
    from xlafuse.compiler.devices import needs_host_devices

    check_workload(args)
    if not needs_host_devices(args.devices):
        return None
    return rerun_with_host_devices(args.argv, args.devices)


def rerun_with_host_devices(argv: Sequence[str], devices: int) -> int:
    """Runs `python -m xlafuse ARGV` with `devices` host devices; returns its exit status.

    Its output goes straight to this process's stdout and stderr. Here, not in
    `xlafuse.compiler.devices`: the command line is what runs itself again.
    """
    from xlafuse.compiler.devices import host_devices_env  # JAX, as in rerun_if_needed

    command = [sys.executable, "-m", "xlafuse", *argv]
    return subprocess.run(command, env=host_devices_env(devices), check=False).returncode


def _check_devices(devices: int) -> None:
    from xlafuse.compiler.devices import device_count_problem  # JAX, as in check_workload

    problem = device_count_problem(devices)
    if problem:
        raise XlafuseError(f"--devices {problem}")


def parse_overrides(texts: list[str] | None) -> dict:
    """`--overrides a=1,b=2 --overrides c=x` -> {"a": 1, "b": 2, "c": "x"}."""
    out = {}
    for item in comma_separated(",".join(texts or ())):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise XlafuseError(f"override {item!r} is not KEY=VALUE (e.g. ops=8)")
        out[key.strip()] = _value(value.strip())
    return out


def _value(text: str):
    """An override value: an int, a float, true/false, or else the string."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)
