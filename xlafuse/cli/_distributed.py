"""The options that run a command as one process of a `jax.distributed` run (issue 31):
`--distributed`, with `--coordinator HOST:PORT --num-processes N --process-id I` or what Slurm
or Open MPI provide, and `--timeout` for the watchdog. `start` joins the runtime before JAX
starts its backend; a process other than 0 then prints nothing on stdout (process 0 speaks for
the run)."""

from __future__ import annotations

import argparse
import os
import sys

from xlafuse.cli import _progress
from xlafuse.errors import XlafuseError

DISTRIBUTED_HELP = (
    "run as one process of a jax.distributed run (docs/distributed.md): Slurm and Open MPI "
    "provide the values, else give --coordinator, --num-processes and --process-id"
)


def add_distributed_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds --distributed, --coordinator, --num-processes, --process-id and --timeout."""
    group = parser.add_argument_group("several processes (jax.distributed)")
    group.add_argument("--distributed", action="store_true", help=DISTRIBUTED_HELP)
    group.add_argument("--coordinator", metavar="HOST:PORT", help="process 0's address")
    group.add_argument("--num-processes", type=int, metavar="N", help="how many processes")
    group.add_argument("--process-id", type=int, metavar="I", help="this process's index")
    group.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="S",
        help="stop when another process is silent this long, or the coordinator does not "
        "answer (default: 300)",
    )


def start(args: argparse.Namespace) -> bool:
    """Join `jax.distributed` when --distributed was given; whether it was.

    Sets `args.layout`. Selects gloo collectives on a CPU, keeps timing in step
    (`xlafuse.distributed.lockstep`), starts the watchdog and, on a process other than 0,
    sends stdout to /dev/null (the file descriptor: gloo prints there too).

    Raises:
      XlafuseError: a value given without --distributed, or bad values; CoordinatorError:
        the coordinator's port is in use or it is unreachable.
    """
    given = [
        f"--{name.replace('_', '-')}"
        for name in ("coordinator", "num_processes", "process_id", "timeout")
        if getattr(args, name, None) is not None
    ]
    if not getattr(args, "distributed", False):
        if given:
            verb = "goes" if len(given) == 1 else "go"
            raise XlafuseError(f"{', '.join(given)} {verb} with --distributed")
        return False
    if getattr(args, "layout", None) is not None:
        return True  # already joined (a command that checks its workload twice)
    from xlafuse.distributed import lockstep, runtime, watch  # JAX: not for `--help`

    timeout_s = runtime.DEFAULT_TIMEOUT_S if args.timeout is None else args.timeout
    if not timeout_s > 0:
        raise XlafuseError(f"--timeout {timeout_s:g}: need a number of seconds above 0")
    layout = runtime.initialize(
        coordinator=args.coordinator,
        num_processes=args.num_processes,
        process_id=args.process_id,
        timeout_s=timeout_s,
    )
    args.layout = layout
    if layout.distributed:
        import jax  # joined: its backend may start now

        lockstep.use(lockstep.Processes(layout.processes))
        client = jax._src.distributed.global_state.client  # its key-value store (watch's doc)
        watch.start(layout.index, layout.processes, timeout_s, client)
    if not layout.writer:
        _progress.silence()
        sys.stdout.flush()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    return True


def quiet(args: argparse.Namespace) -> bool:
    """Whether this process leaves a usage error's line to process 0 (which has the same)."""
    layout = getattr(args, "layout", None)
    return layout is not None and not layout.writer
