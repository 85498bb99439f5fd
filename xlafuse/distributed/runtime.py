"""Joining `jax.distributed`, and the layout of the processes that joined.

`initialize` is what `--distributed` calls, before JAX starts its backend: with the three
values given (`--coordinator HOST:PORT --num-processes N --process-id I`) or with what a
launcher provides (JAX's own detection: Slurm, Open MPI). On a CPU the collectives between
processes go through gloo (`jax_cpu_collectives_implementation`; without it a CPU program
whose mesh spans processes does not run).

The coordinator is checked before JAX is given it, because JAX ends the process (a fatal log
and a stack trace, no Python exception) when it cannot reach one: process 0 checks that the
port is free, the others wait for it to answer, and either failure is one line.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from typing import Any

from xlafuse.errors import XlafuseError

CPU_COLLECTIVES = "gloo"
DEFAULT_TIMEOUT_S = 300.0
# JAX's own heartbeat ends a process (fatally) when a peer stops answering; it is given this
# much longer than the watchdog's timeout, so that the watchdog's one line comes first.
HEARTBEAT_MARGIN_S = 60
_POLL_S = 0.2


class CoordinatorError(XlafuseError):
    """The coordinator's port is in use, or no coordinator answers there."""


@dataclasses.dataclass(frozen=True)
class Layout:
    """The processes of a run.

    Attributes:
      processes: how many processes run the program (1: no `jax.distributed`).
      process_devices: devices of each process (its local devices).
      index: this process's index (0 writes the results).
    """

    processes: int = 1
    process_devices: int = 1
    index: int = 0

    @property
    def writer(self) -> bool:
        """Whether this process writes results, reports and the lines a user reads."""
        return self.index == 0

    @property
    def distributed(self) -> bool:
        return self.processes > 1

    @property
    def label(self) -> str:
        """`2x2`: processes x devices per process."""
        return f"{self.processes}x{self.process_devices}"

    def settings(self) -> dict[str, Any]:
        """What a run's settings add for this layout (nothing on one process: older files)."""
        if not self.distributed:
            return {}
        return {"processes": self.processes, "process_devices": self.process_devices}


SINGLE = Layout()


def layout() -> Layout:
    """The running layout, as JAX sees it (one process unless `initialize` ran)."""
    import jax  # here: the launcher and the argument checks import this package without JAX

    return Layout(jax.process_count(), jax.local_device_count(), jax.process_index())


def check_spans_processes(devices: int, what: str) -> None:
    """Refuse a mesh that leaves out some process's devices, under several processes.

    Every process makes every call of a program whose devices span processes; a mesh of the
    first N devices would leave the others' processes with no part in it.

    Args:
      devices: the mesh size asked for. what: who asks (for the message).

    Raises:
      XlafuseError: several processes, and `devices` is not all of their devices.
    """
    running = layout()
    total = running.processes * running.process_devices
    if running.distributed and devices != total:
        raise XlafuseError(
            f"{what} asks for {devices} device{'s' if devices != 1 else ''}, but the "
            f"{running.processes} processes have {total} together: under --distributed a "
            f"mesh spans every process's devices; ask for {total}"
        )


def parse_address(address: str) -> tuple[str, int]:
    """`HOST:PORT` -> (host, port).

    Raises:
      XlafuseError: not HOST:PORT with a port from 1 to 65535.
    """
    host, sep, port = str(address).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise XlafuseError(
            f"--coordinator {address!r} is not HOST:PORT (e.g. localhost:12355, a port from 1 "
            "to 65535)"
        )
    return host.strip("[]"), int(port)


def check_explicit(
    coordinator: str | None, num_processes: int | None, process_id: int | None
) -> bool:
    """Whether the three values are given (all) or left to the launcher (none).

    Raises:
      XlafuseError: some given and not the others, or values out of range.
    """
    given = [v is not None for v in (coordinator, num_processes, process_id)]
    if not any(given):
        return False
    if not all(given):
        raise XlafuseError(
            "--coordinator, --num-processes and --process-id go together: give all three, or "
            "none where Slurm or Open MPI provides them"
        )
    parse_address(coordinator)
    if num_processes < 1:
        raise XlafuseError(f"--num-processes must be at least 1, not {num_processes}")
    if not 0 <= process_id < num_processes:
        raise XlafuseError(
            f"--process-id must be from 0 to {num_processes - 1} (--num-processes "
            f"{num_processes}), not {process_id}"
        )
    return True


def check_coordinator(address: str, process_id: int, timeout_s: float) -> None:
    """Process 0: the port is free to listen on; another: something answers there in time.

    Raises:
      CoordinatorError: one line naming the address and what was wrong.
    """
    host, port = parse_address(address)
    if process_id == 0:
        try:
            with socket.create_server(("", port)):
                return
        except OSError as err:
            reason = os.strerror(err.errno) if err.errno else str(err)
            raise CoordinatorError(
                f"coordinator port {port} is in use ({reason}): pick another "
                "--coordinator port, or let `xlafuse launch` pick a free one"
            ) from None
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError as err:
            if time.monotonic() >= deadline:
                raise CoordinatorError(
                    f"coordinator {address} is unreachable ({err.strerror or err}) after "
                    f"{timeout_s:g} s: start process 0 with the same --coordinator, or check "
                    "the host and port"
                ) from None
        time.sleep(_POLL_S)


def initialize(
    *,
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Layout:
    """Join `jax.distributed` (before JAX starts its backend) and return the layout.

    Args:
      coordinator: `HOST:PORT` of process 0's coordination service; None: the launcher's.
      num_processes: how many processes; None: the launcher's.
      process_id: this process's index; None: the launcher's.
      timeout_s: how long to wait for the coordinator (and for the other processes to join).

    Raises:
      CoordinatorError: the port is in use, or the coordinator is unreachable.
      XlafuseError: the values are incomplete or out of range, or no launcher provides them.
    """
    import jax  # here: see `layout`

    if check_explicit(coordinator, num_processes, process_id):
        check_coordinator(coordinator, process_id, timeout_s)
    jax.config.update("jax_cpu_collectives_implementation", CPU_COLLECTIVES)
    try:
        jax.distributed.initialize(
            coordinator,
            num_processes,
            process_id,
            initialization_timeout=max(1, int(timeout_s)),
            heartbeat_timeout_seconds=int(timeout_s) + HEARTBEAT_MARGIN_S,
        )
    except ValueError as err:
        raise XlafuseError(
            f"--distributed: no launcher's values found ({_first_line(err)}); under Slurm or "
            "mpirun they are read from the job, else give --coordinator HOST:PORT "
            "--num-processes N --process-id I (or run `xlafuse launch`)"
        ) from None
    except RuntimeError as err:  # JaxRuntimeError: e.g. the RPC server could not start
        raise CoordinatorError(f"joining jax.distributed failed: {_first_line(err)}") from None
    return layout()


def _first_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0]
