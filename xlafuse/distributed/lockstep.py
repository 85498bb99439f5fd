"""Rounds in step across processes: what `xlafuse.measurement.timing` asks of the other processes.

Every process runs the same SPMD program, so each call of it is collective: if one process
stopped timing after 40 rounds and another after 41, the other would wait forever. So the
timing loop asks a `Lockstep`:

- `barrier()` before each timed round (`multihost_utils.sync_global_devices`): no process's
  round starts while another is still in the previous one;
- `first(value)`: process 0's value, for every decision that reads a clock (when to stop, how
  many calls per round): the processes' clocks differ, their decisions must not;
- `slowest(samples)`: the samples of the same rounds, the slowest process's in each (a round
  ends for the program when its last process ends it);
- `gather(values)`: each process's values, by process (its own figures for the record).

`SOLO` answers for one process without communicating: a program of one process times as it
always did.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class Lockstep:
    """One process: every answer is its own (see the module doc for what each means)."""

    processes = 1

    def barrier(self) -> None:
        """Wait for every process (nothing to wait for here)."""

    def first(self, value: float) -> float:
        """Process 0's `value`."""
        return value

    def slowest(self, samples: Sequence[float]) -> list[float]:
        """Per position, the largest of the processes' samples."""
        return list(samples)

    def gather(self, values: Sequence[float]) -> np.ndarray:
        """Every process's `values`, one row per process."""
        return np.asarray([list(values)], dtype=np.float64)


SOLO = Lockstep()


class Processes(Lockstep):
    """Several processes of `jax.distributed`: answers agreed through its collectives."""

    def __init__(self, processes: int):
        self.processes = processes
        self._rounds = 0

    def barrier(self) -> None:
        from jax.experimental import multihost_utils  # JAX only where processes are many

        self._rounds += 1
        multihost_utils.sync_global_devices(f"xlafuse round {self._rounds}")

    def first(self, value: float) -> float:
        from jax.experimental import multihost_utils

        words = np.asarray([value], dtype=np.float64).view(np.uint32)
        return float(np.asarray(multihost_utils.broadcast_one_to_all(words)).view(np.float64)[0])

    def slowest(self, samples: Sequence[float]) -> list[float]:
        if not len(samples):
            return []
        return [float(v) for v in self.gather(samples).max(axis=0)]

    def gather(self, values: Sequence[float]) -> np.ndarray:
        from jax.experimental import multihost_utils

        # As 32-bit words: JAX without x64 would round float64 seconds to float32.
        own = np.asarray(list(values), dtype=np.float64).view(np.uint32)
        rows = np.asarray(multihost_utils.process_allgather(own), dtype=np.uint32)
        return rows.reshape(self.processes, -1).view(np.float64)


_CURRENT: list[Lockstep] = [SOLO]


def current() -> Lockstep:
    """This process's Lockstep: `SOLO` unless `use` installed another (`--distributed`)."""
    return _CURRENT[0]


def use(lockstep: Lockstep) -> None:
    """Install the Lockstep every timing loop of this process uses (the runtime is
    process-wide, as `jax.distributed` is)."""
    _CURRENT[0] = lockstep
