"""Run a command as N local processes of one jax.distributed run, on a free localhost port:
`xlafuse launch --processes 2 --devices-per-process 2 -- run CONFIG`. Each process is
`xlafuse COMMAND ... --distributed --coordinator localhost:PORT --num-processes N --process-id
I`, the same path a cluster takes (docs/distributed.md); process 0 writes the results. When a
process is killed, one line names it and what it was doing, and the others are stopped."""

from __future__ import annotations

import argparse
import sys

from xlafuse.errors import XlafuseError

HELP = "run a command as N local processes of one jax.distributed run"
COMMANDS = ("run", "compare", "inspect", "diff", "tune")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `xlafuse launch`."""
    parser.add_argument("--processes", type=int, required=True, metavar="N", help="processes")
    parser.add_argument(
        "--devices-per-process",
        type=int,
        default=1,
        metavar="M",
        help="host devices of each process on a CPU (default: 1)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="each process stops when another is silent this long (default: 300)",
    )
    parser.add_argument(
        "rest",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND ...",
        help=f"the command every process runs: {', '.join(COMMANDS)} and its arguments",
    )


def run(args: argparse.Namespace) -> int:
    """Start the processes and wait for them; their exit status (1 when one was killed)."""
    # on use, not at the top: `xlafuse --help` imports no JAX (see xlafuse.cli)
    from xlafuse.compiler.devices import host_devices_env
    from xlafuse.distributed.launch import launch

    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    if not rest or rest[0] not in COMMANDS:
        given = f"{rest[0]!r}" if rest else "nothing"
        raise XlafuseError(
            f"launch runs one of {', '.join(COMMANDS)} after `--` (e.g. `xlafuse launch "
            f"--processes 2 -- run CONFIG`), not {given}"
        )
    _check_counts(args.processes, args.devices_per_process)
    if not args.timeout > 0:
        raise XlafuseError(f"--timeout {args.timeout:g}: need a number of seconds above 0")
    argv = [sys.executable, "-m", "xlafuse", *(["--debug"] if args.debug else []), *rest]
    env = host_devices_env(args.devices_per_process)
    outcome = launch(argv, args.processes, args.timeout, env)
    if outcome.line:
        print(f"xlafuse launch: {outcome.line}", file=sys.stderr)
    return outcome.returncode


def _check_counts(processes: int, devices_per_process: int) -> None:
    """Refuse, before anything starts, more processes or host devices than this machine takes:
    each count in its range, and their product within the host devices one process may have.

    Raises:
      XlafuseError: one line naming the option, its range on this machine and the value.
    """
    from xlafuse.compiler.devices import device_count_problem, max_host_devices  # JAX, as `run`
    from xlafuse.distributed.launch import process_count_problem

    problem = process_count_problem(processes)
    if problem:
        raise XlafuseError(f"--processes {problem}")
    problem = device_count_problem(devices_per_process, backend="cpu")
    if problem:
        raise XlafuseError(f"--devices-per-process {problem}")
    total, limit = processes * devices_per_process, max_host_devices()
    if total > limit:
        raise XlafuseError(
            f"--processes {processes} x --devices-per-process {devices_per_process} is {total} "
            f"host devices; at most {limit} in all (host devices: 4 per core of this machine, "
            "at least 8)"
        )
