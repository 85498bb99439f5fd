"""Collectives in optimized HLO: what a sharded program communicates, counted from the text.

What counts:
- A collective is an executed instruction of one of `KINDS`: synchronous (`all-reduce(...)`), or
  asynchronous, counted once at its start (`all-reduce-start`, `all-gather-start`,
  `collective-permute-start`, or an `async-start` whose wrapped computation is a collective, as
  XLA:GPU writes reduce-scatter and all-to-all); the matching `-done` is not counted again.
  A start whose backend_config says `"is_sync":true` (XLA:GPU's
  `gpu-convert-async-collectives-to-sync` marks pairs that nothing could overlap that way) runs
  synchronously: it is counted as synchronous.
- `operand_bytes`: the bytes of its operands on one device (what the issue calls the bytes it
  moves). A combined collective has one operand per logical collective it carries: XLA's
  combiner passes merge N all-reduces into one all-reduce of N operands, so `logical` = operands.
- `ring_bytes`: the bytes one device sends in the textbook ring algorithm for a group of n
  devices: all-reduce 2(n-1)/n x operand bytes, all-gather (n-1) x operand bytes (each device's
  shard goes to n-1 others), reduce-scatter and all-to-all (n-1)/n x operand bytes,
  collective-permute the operand bytes. None when the group size cannot be read. NCCL may pick
  a tree or NVLS algorithm: this is a model, for comparing variants, not a measurement.
- Counts are static: a collective in a while-loop body is counted once, not once per iteration.

The parser's public objects give opcode, operands, shapes and raw attribute text; the group size
is read from the raw `replica_groups` text (`{{0,1},{2,3}}`, the iota form `[2,2]<=[4]`, or the
mesh form `mesh['x'=2,'y'=4] {'y'}`), which the parser does not interpret.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

from xlafuse.hlo.fusion import executed_computations
from xlafuse.hlo.ir import Computation, HloModule, Instruction, Shape
from xlafuse.hlo.parse import parse_hlo

KINDS = (
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "ragged-all-to-all",
    "collective-permute",
    "collective-broadcast",
)
_ASYNC_STARTS = {f"{k}-start": k for k in ("all-reduce", "all-gather", "collective-permute")}
_EXPLICIT_GROUPS = re.compile(r"\{([\d,\s]*)\}")
_IOTA_GROUPS = re.compile(r"\[([\d,\s]+)\]\s*<=")
_MESH_AXES = re.compile(r"'([^']+)'\s*=\s*(\d+)")
_MESH_USED = re.compile(r"\]\s*\{([^}]*)\}")
_IS_SYNC = re.compile(r'"is_sync"\s*:\s*true')


@dataclasses.dataclass(frozen=True)
class Collective:
    """One collective instruction of the executed program.

    Attributes:
      name: the instruction name (the `-start` one for an async collective).
      kind: one of `KINDS`.
      is_async: True for a start/done pair, False for a synchronous instruction.
      operand_bytes: bytes of its operands on one device.
      logical: logical collectives it carries (its operand count; > 1 once combined).
      group_size: devices per replica group, or None when the text does not say.
      ring_bytes: bytes one device sends under the ring model (see the module docstring).
      operand_shapes: its operands' shapes, as HLO text.
      computation: the computation it is in.
      op_name: the JAX op it came from (metadata), when known.
    """

    name: str
    kind: str
    is_async: bool
    operand_bytes: int
    logical: int
    group_size: int | None
    ring_bytes: int | None
    operand_shapes: tuple[str, ...]
    computation: str
    op_name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        data = dataclasses.asdict(self)
        data["operand_shapes"] = list(self.operand_shapes)
        return data


@dataclasses.dataclass(frozen=True)
class KindTotals:
    """The collectives of one kind in a program.

    Attributes:
      count: collective instructions (a combined one counts once).
      sync: of them, synchronous.
      async_pairs: of them, async start/done pairs.
      logical: logical collectives carried (sum of operand counts).
      operand_bytes: sum of their operand bytes on one device.
      ring_bytes: sum of their ring-model bytes (None if any group size is unknown).
    """

    count: int
    sync: int
    async_pairs: int
    logical: int
    operand_bytes: int
    ring_bytes: int | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class CollectiveReport:
    """Every collective of one optimized program, in program order (one step, per device)."""

    collectives: tuple[Collective, ...] = ()

    @property
    def count(self) -> int:
        """Collective instructions (a combined one counts once)."""
        return len(self.collectives)

    @property
    def logical(self) -> int:
        """Logical collectives carried: what the count would be without combining."""
        return sum(c.logical for c in self.collectives)

    @property
    def operand_bytes(self) -> int:
        """Bytes of all collectives' operands on one device, per step."""
        return sum(c.operand_bytes for c in self.collectives)

    @property
    def ring_bytes(self) -> int | None:
        """Ring-model bytes one device sends per step; None if a group size is unknown."""
        values = [c.ring_bytes for c in self.collectives]
        return None if any(v is None for v in values) else sum(values)  # type: ignore[misc]

    @property
    def async_pairs(self) -> int:
        """Collectives issued as async start/done pairs."""
        return sum(c.is_async for c in self.collectives)

    def by_kind(self) -> dict[str, KindTotals]:
        """Totals per kind, in `KINDS` order; kinds absent from the program are left out."""
        out: dict[str, KindTotals] = {}
        for kind in KINDS:
            items = [c for c in self.collectives if c.kind == kind]
            if not items:
                continue
            rings = [c.ring_bytes for c in items]
            out[kind] = KindTotals(
                count=len(items),
                sync=sum(not c.is_async for c in items),
                async_pairs=sum(c.is_async for c in items),
                logical=sum(c.logical for c in items),
                operand_bytes=sum(c.operand_bytes for c in items),
                ring_bytes=None if None in rings else sum(rings),  # type: ignore[arg-type]
            )
        return out

    def counts(self) -> dict[str, int]:
        """Instructions per kind (the flat form results records keep)."""
        return {kind: totals.count for kind, totals in self.by_kind().items()}

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form: totals, per kind, and every collective."""
        return {
            "count": self.count,
            "logical": self.logical,
            "async_pairs": self.async_pairs,
            "operand_bytes": self.operand_bytes,
            "ring_bytes": self.ring_bytes,
            "by_kind": {k: t.to_dict() for k, t in self.by_kind().items()},
            "collectives": [c.to_dict() for c in self.collectives],
        }


def analyze_collectives(module: HloModule) -> CollectiveReport:
    """The collectives of a parsed optimized module's executed computations."""
    computations = executed_computations(module)
    wrapped = {
        name
        for comp in computations
        for instr in comp.instructions
        if instr.opcode == "async-start"
        for name in instr.called_computations
    }
    found: list[Collective] = []
    for comp in computations:
        if comp.name in wrapped:
            continue
        for instr in comp.instructions:
            collective = _collective(module, comp, instr)
            if collective is not None:
                found.append(collective)
    return CollectiveReport(tuple(found))


def collectives_of_text(text: str) -> CollectiveReport:
    """`analyze_collectives` of optimized HLO text."""
    return analyze_collectives(parse_hlo(text))


def _collective(module: HloModule, comp: Computation, instr: Instruction) -> Collective | None:
    op = instr.opcode
    if op in KINDS:
        kind, is_async, carrier = op, False, instr
    elif op in _ASYNC_STARTS:
        kind, is_async, carrier = _ASYNC_STARTS[op], True, instr
    elif op == "async-start":
        carrier = _wrapped_collective(module, instr)
        if carrier is None:
            return None
        kind, is_async = carrier.opcode, True
    else:
        return None
    if is_async and _IS_SYNC.search(instr.attributes.get("backend_config") or ""):
        is_async = False
    shapes = _operand_shapes(comp, instr)
    operand_bytes = sum(s.byte_size for s in shapes)
    group = group_size(carrier.attributes)
    return Collective(
        name=instr.name,
        kind=kind,
        is_async=is_async,
        operand_bytes=operand_bytes,
        logical=max(1, len(instr.operands)),
        group_size=group,
        ring_bytes=ring_bytes(kind, operand_bytes, group),
        operand_shapes=tuple(str(s) for s in shapes),
        computation=comp.name,
        op_name=instr.op_name or carrier.op_name,
    )


def _wrapped_collective(module: HloModule, instr: Instruction) -> Instruction | None:
    """The collective an `async-start` wraps (the root of its computation), else None."""
    for name in instr.called_computations:
        try:
            root = module.computation(name).root
        except KeyError:
            continue
        if root is not None and root.opcode in KINDS:
            return root
    return None


def _operand_shapes(comp: Computation, instr: Instruction) -> tuple[Shape, ...]:
    shapes = []
    indices = instr.operand_indices or (None,) * len(instr.operands)
    for name, index in zip(instr.operands, indices, strict=False):
        operand = comp.by_name.get(name)
        if operand is None:
            continue
        shape = operand.shape
        if index is not None and shape.is_tuple and index < len(shape.tuple_shapes):
            shape = shape.tuple_shapes[index]
        shapes.append(shape)
    return tuple(shapes)


def group_size(attributes: Mapping[str, str]) -> int | None:
    """Devices per replica group from an instruction's raw attributes; None when unknown.

    Reads `replica_groups` in its three printed forms; a collective-permute has no groups and
    returns None (its bytes do not depend on one).
    """
    text = attributes.get("replica_groups")
    if not text:
        return None
    text = text.strip()
    if text.startswith("mesh"):
        sizes = dict((name, int(size)) for name, size in _MESH_AXES.findall(text))
        used = _MESH_USED.search(text)
        if not used or not sizes:
            return None
        names = [n.strip().strip("'") for n in used.group(1).split(",") if n.strip()]
        if not names or any(n not in sizes for n in names):
            return None
        return math.prod(sizes[n] for n in names)
    iota = _IOTA_GROUPS.match(text)
    if iota:
        dims = [int(d) for d in iota.group(1).split(",") if d.strip()]
        return dims[-1] if dims else None
    groups = _EXPLICIT_GROUPS.findall(text.strip()[1:-1] if text.startswith("{{") else "")
    if groups:
        first = [g for g in groups[0].split(",") if g.strip()]
        return len(first) or None
    return None


def ring_bytes(kind: str, operand_bytes: int, group: int | None) -> int | None:
    """Bytes one device sends for one collective under the ring model (module docstring)."""
    if kind == "collective-permute":
        return operand_bytes
    if group is None:
        return None
    if group <= 1:
        return 0
    if kind == "all-reduce":
        return 2 * (group - 1) * operand_bytes // group
    if kind == "all-gather":
        return (group - 1) * operand_bytes
    if kind == "collective-broadcast":
        return operand_bytes
    return (group - 1) * operand_bytes // group
