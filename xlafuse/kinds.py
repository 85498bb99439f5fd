"""The closed sets of values xlafuse branches on, each defined once (issue 30).

A string read at a boundary (a config, a record line, a variant's definition, an HLO attribute)
becomes one of these members there; the code past it compares members, not spelled strings. Each
is a `StrEnum`: a member equals its string and is written as it (`json.dumps`, f-strings), so
records keep the strings published since schema 1.
"""

from __future__ import annotations

import enum
from typing import TypeVar


class Mode(enum.StrEnum):
    """What a workload's program does per call: a forward pass, or a training step (its state
    donated and threaded from one call to the next)."""

    FORWARD = "forward"
    TRAIN = "train"


class Backend(enum.StrEnum):
    """The JAX backend a cell is compiled and measured on (`jax.default_backend()`, a device's
    `platform`); xlafuse's variants and measurements know these two."""

    CPU = "cpu"
    GPU = "gpu"


class Figure(enum.StrEnum):
    """The time a speedup divides (`xlafuse.measurement.timing`): the median of synchronized calls,
    or the time per call of a pipelined burst (what a train step and a CPU cell lead with)."""

    LATENCY = "latency"
    PIPELINED = "pipelined"


class Framework(enum.StrEnum):
    """What compiles and runs a cell: XLA through JAX, or the workload's PyTorch twin."""

    JAX = "jax"
    TORCH = "torch"


class Status(enum.StrEnum):
    """How a cell ended: measured to the end, or failed (its record holds the error)."""

    OK = "ok"
    ERROR = "error"


class Verdict(enum.StrEnum):
    """What an interval says of a speedup or a time difference (`xlafuse.measurement.stats`)."""

    FASTER = "faster"
    SLOWER = "slower"
    SAME = "same"


class FusionKind(enum.StrEnum):
    """The `kind=` of an XLA fusion, the kind of a fused kernel; a kernel that is one
    instruction has its opcode as its kind (`xlafuse.hlo.fusion.KernelInfo.kind`)."""

    LOOP = "kLoop"
    INPUT = "kInput"
    OUTPUT = "kOutput"
    CUSTOM = "kCustom"


E = TypeVar("E", bound=enum.StrEnum)


def member(kind: type[E], value: object, what: str) -> E | None:
    """`value` as a member of `kind` (None stays None).

    Raises:
      TypeError: a value that is not one of `kind`'s; the message names `what` and lists them.
    """
    if value is None or isinstance(value, kind):
        return value
    try:
        return kind(value)
    except ValueError:
        accepted = ", ".join(m.value for m in kind)
        raise TypeError(f"{what} {value!r} is not one of {accepted}") from None
