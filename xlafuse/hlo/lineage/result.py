"""What the lineage says of each reference instruction: `Trace`, and of a module: `Lineage`."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

LAYOUT_ONLY = frozenset({"reshape", "bitcast"})  # lost ones XLA may fold away as a layout


@dataclass(frozen=True)
class Trace:
    """Where one reference instruction ended up in the optimized module.

    Attributes:
        instruction: its name in the reference module.
        computation: the reference computation holding it.
        opcode: its reference opcode.
        status: "kernel": a copy of it runs in a kernel of the optimized module, or it was folded
            into what reads it, all in one kernel; "outside": it became an instruction that
            launches nothing (a bitcast, a tuple, a loop), or nothing at all (the neutral
            constant of an op XLA removed); "lost": nothing of the optimized module could be
            identified as it. Never guessed.
        kernel: the one kernel it is attributed to (status "kernel"): of the kernels holding a
            copy, the one that writes it out, else the first; else None.
        holders: every kernel holding a copy of it, in the module's kernel order.
        optimized: the optimized instruction(s) identified with it.
        how: the step that identified it: "structure", "duplicate", "name", "metadata",
            "neighbours", "epilogue", "order" (`matching.py`), "view" (the value under it),
            "folded" or "dropped" (`folding.py`); None when lost. docs/lineage.md says each.
    """

    instruction: str
    computation: str
    opcode: str
    status: str
    kernel: str | None = None
    holders: tuple[str, ...] = ()
    optimized: tuple[str, ...] = ()
    how: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict of the fields."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Lineage:
    """Every traced reference instruction and the kernels of the optimized module.

    Attributes:
        reference: the reference module's name.
        optimized: the optimized module's name.
        traces: one per traced reference instruction, in reference order.
        kernels: the optimized module's kernel names, in execution order.
        names_kept: whether the optimized module keeps reference names (step 2 was used).
        dot_kernels: the kernels that run a dot or a convolution (library calls included).
        copy_of: a `copy` kernel (a layout change XLA added) -> the reference instructions
            whose value it copies, or `parameter N`, or when neither is known the layout change
            (`shape f32[..]{0,1} -> f32[..]{1,0}`); it computes nothing, so holds no trace.
    """

    reference: str
    optimized: str
    traces: tuple[Trace, ...]
    kernels: tuple[str, ...]
    names_kept: bool
    dot_kernels: frozenset[str] = frozenset()
    copy_of: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    _by_name: Mapping[str, Trace] = field(
        init=False, repr=False, compare=False, hash=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "_by_name", MappingProxyType({t.instruction: t for t in self.traces})
        )

    @property
    def by_name(self) -> Mapping[str, Trace]:
        """Reference instruction name -> its trace."""
        return self._by_name

    def kernel_instructions(self) -> dict[str, tuple[str, ...]]:
        """Kernel -> the reference instructions attributed to it (every kernel present)."""
        out: dict[str, list[str]] = {k: [] for k in self.kernels}
        for t in self.traces:
            if t.kernel is not None:
                out[t.kernel].append(t.instruction)
        return {k: tuple(v) for k, v in out.items()}

    def counts(self) -> dict[str, int]:
        """How many traces have each status ("kernel", "outside", "lost")."""
        out = {"kernel": 0, "outside": 0, "lost": 0}
        for t in self.traces:
            out[t.status] += 1
        return out

    def lost_by_opcode(self) -> dict[str, int]:
        """Opcode -> how many lost traces have it, most first."""
        counts: dict[str, int] = defaultdict(int)
        for t in self.traces:
            if t.status == "lost":
                counts[t.opcode] += 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def lost_summary(self, *, limit: int = 8) -> str:
        """What was lost, per opcode with its share of all traced instructions
        (`lost_summary`)."""
        return lost_summary(self.lost_by_opcode(), len(self.traces), limit=limit)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict: module names, counts, names_kept, dot kernels and the traces."""
        return {
            "reference": self.reference,
            "optimized": self.optimized,
            "names_kept": self.names_kept,
            "dot_kernels": sorted(self.dot_kernels),
            "counts": self.counts(),
            "lost_by_opcode": self.lost_by_opcode(),
            "traces": [t.to_dict() for t in self.traces],
        }


def lost_summary(lost_by_opcode: Mapping[str, int], total: int | None, *, limit: int = 8) -> str:
    """`23 of 6,883 (0.33%; 21 besides reshapes and bitcasts, 0.31%): 5 broadcast 0.07%, 4
    gather 0.06%, ...`: the lost instructions, those XLA may fold away as a layout (reshapes,
    bitcasts) set apart, and per opcode (most first, `limit` shown) the count and its share of
    the `total` traced instructions. Without a total (an older record): `23 (5 broadcast, ...)`.
    """
    items = list(lost_by_opcode.items())
    n = sum(lost_by_opcode.values())
    more = ", ..." if len(items) > limit else ""
    if not total:
        return f"{n} ({', '.join(f'{c} {op}' for op, c in items[:limit])}{more})"

    def share(count: int) -> str:
        return f"{100 * count / total:.2f}%"

    shaped = n - sum(c for op, c in items if op in LAYOUT_ONLY)
    head = f"{n:,} of {total:,} ({share(n)}; {shaped:,} besides reshapes and bitcasts, {share(shaped)})"
    if not items:
        return head
    return f"{head}: {', '.join(f'{c} {op} {share(c)}' for op, c in items[:limit])}{more}"
