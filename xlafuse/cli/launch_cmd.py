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


def add_arguments(parser) -> None:
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


def run(args) -> int:
    """Start the processes and wait for them; their exit status (1 when one was killed)."""
    # on use, not at the top: `xlafuse --help` imports no JAX (see xlafuse.cli)
    from xlafuse.compile.devices import device_count_problem, host_devices_env
    from xlafuse.distributed.launch import launch

    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    if not rest or rest[0] not in COMMANDS:
        given = f"{rest[0]!r}" if rest else "nothing"
        raise XlafuseError(
            f"launch runs one of {', '.join(COMMANDS)} after `--` (e.g. `xlafuse launch "
            f"--processes 2 -- run CONFIG`), not {given}"
        )
    if args.processes < 1:
        raise XlafuseError(f"--processes must be at least 1, not {args.processes}")
    problem = device_count_problem(args.devices_per_process, "cpu")
    if problem:
        raise XlafuseError(f"--devices-per-process {problem}")
    if not args.timeout > 0:
        raise XlafuseError(f"--timeout {args.timeout:g}: need a number of seconds above 0")
    argv = [sys.executable, "-m", "xlafuse", *(["--debug"] if args.debug else []), *rest]
    env = host_devices_env(args.devices_per_process)
    outcome = launch(argv, args.processes, args.timeout, env)
    if outcome.line:
        print(f"xlafuse launch: {outcome.line}", file=sys.stderr)
    return outcome.returncode
