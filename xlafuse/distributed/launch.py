"""N local processes of one command, joined on a free localhost port, watched to the end.

`xlafuse launch` is a convenience over the same path a cluster takes: each process is the
command given, with `--distributed --coordinator localhost:PORT --num-processes N
--process-id I --timeout S` added, so it joins `jax.distributed` exactly as under Slurm or
mpirun. What the launcher adds is supervision: each process writes what it is doing to a
status file (`watch.STATUS_ENV`); when one is killed by a signal, the launcher names it and
what it was doing in one line and stops the others at once; when one ends with an error of
its own (its line already printed), the others are given a moment, then stopped.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from xlafuse.distributed import watch
from xlafuse.errors import XlafuseError

GRACE_S = 2.0  # how long the others may take to end on their own once one has failed
_POLL_S = 0.1
ABORT_WAIT_S = 0.5  # JAX aborts the survivors of a lost coordinator within this


def max_processes() -> int:
    """The most processes `launch` starts on this machine: 2 per core, or 4 on a smaller one.

    Each is a whole Python process with JAX and XLA's thread pools; past a couple per core they
    only wait on each other, and 100000 of them fork until the machine stops.
    """
    return max(4, 2 * (os.cpu_count() or 1))


def process_count_problem(processes: object) -> str | None:
    """What is wrong with launching `processes` processes here; None when nothing is.

    Returns:
      e.g. "must be at least 1 and at most 4 (2 per core of this machine, or 4), not 100000",
      for the caller to prefix with the option it came from.
    """
    limit = max_processes()
    is_int = isinstance(processes, int) and not isinstance(processes, bool)
    if is_int and 1 <= processes <= limit:
        return None
    return (
        f"must be at least 1 and at most {limit} (2 per core of this machine, or 4), "
        f"not {processes!r}"
    )


def free_port(*, host: str = "localhost") -> int:
    """A TCP port nobody listens on now (the kernel's pick; free until someone binds it)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def process_argv(
    argv: Sequence[str], port: int, processes: int, index: int, timeout_s: float
) -> list[str]:
    """The command line of process `index`: `argv` with the distributed options added."""
    return [
        *argv,
        "--distributed",
        "--coordinator",
        f"localhost:{port}",
        "--num-processes",
        str(processes),
        "--process-id",
        str(index),
        "--timeout",
        f"{timeout_s:g}",
    ]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How a launch ended: its exit status and, when one process was killed, the line saying
    so (None when every process ended by itself)."""

    returncode: int
    line: str | None = None


def launch(
    argv: Sequence[str],
    processes: int,
    timeout_s: float,
    env: Mapping[str, str],
) -> Outcome:
    """Run `argv` as `processes` processes of one `jax.distributed` run; wait for them.

    Args:
      argv: the command of every process (e.g. `python -m xlafuse run CONFIG`).
      processes: how many.
      timeout_s: each process's watchdog timeout (`--timeout`).
      env: their environment (host devices set by the caller).

    Returns:
      The Outcome: 0 when all ended with 0; else the first failure's status (1 for a kill).

    Raises:
      XlafuseError: `processes` out of range (`process_count_problem`); nothing started.
    """
    problem = process_count_problem(processes)
    if problem:
        raise XlafuseError(f"processes {problem}")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="xlafuse-launch-") as status:
        children = [
            subprocess.Popen(
                process_argv(argv, port, processes, i, timeout_s),
                env={**env, watch.STATUS_ENV: status},
            )
            for i in range(processes)
        ]
        try:
            return _supervise(children, Path(status))
        finally:
            _stop(children)


def _supervise(children: list[subprocess.Popen], status: Path) -> Outcome:
    """Wait until all end, or until one fails: then name a killed one and stop the rest."""
    while True:
        codes = [child.poll() for child in children]
        if all(code == 0 for code in codes):
            return Outcome(0)
        if all(code in (None, 0) for code in codes):
            time.sleep(_POLL_S)
            continue
        failed, code = _first_failure(children)
        if code < 0:
            return Outcome(watch.EXIT_PEER_LOST, _killed_line(failed, -code, status))
        _wait(children, GRACE_S)
        return Outcome(code)


def _first_failure(children: list[subprocess.Popen]) -> tuple[int, int]:
    """(index, status) of the process that failed first, after a moment for the others to be
    seen: a kill by a signal before JAX's own abort of the survivors (SIGABRT, when process 0,
    its coordinator, is gone), before an exit status of its own."""
    time.sleep(ABORT_WAIT_S)
    codes = [(i, child.poll()) for i, child in enumerate(children)]
    failed = [(i, code) for i, code in codes if code not in (None, 0)]

    def rank(item: tuple[int, int]) -> tuple[int, int]:
        code = item[1]
        return (0 if code < 0 and code != -signal.SIGABRT else 1 if code < 0 else 2, item[0])

    return min(failed, key=rank)


def _killed_line(index: int, signum: int, status: Path) -> str:
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = "unknown"
    doing = watch.read_status(status, index)
    where = f" while {doing}" if doing else ""
    return f"process {index} was killed by signal {signum} ({name}){where}; stopped the others"


def _wait(children: list[subprocess.Popen], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(c.poll() is None for c in children):
        time.sleep(_POLL_S)


def _stop(children: list[subprocess.Popen]) -> None:
    """Kill every child still running (a stopped one included), and reap it."""
    for child in children:
        if child.poll() is None:
            child.kill()
    for child in children:
        child.wait()
