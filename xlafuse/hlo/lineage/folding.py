"""Step 7 of the lineage (`fold`): what XLA removed by folding it into what reads it.

When matching identifies nothing more, a lost elementwise op, broadcast, transpose, pad, slice,
iota or reverse whose every reader is held by kernels, all attributed to one kernel K, and that
is no program output nor a `call` operand, is attributed to K (how "folded"): XLA removed it by
folding it into what reads it -- `(a / b) / c` -> `a / (b * c)` (Adam's bias correction),
`x * 2` reassociated into another operand, a transpose into a dot's dimensions or a split-K
GEMM's reduction, a pad or a broadcast into the fusion that reads it, a convert of a dot's result
into the dot's output type. Repeated while a reader is folded itself. It says where its value is
used, not that a copy of it runs there; a reduction, dot, gather or scatter is never folded (its
work stays in some kernel). A lost constant read only by ops that gave another operand back
(`rules.neutral_operand`) is "outside", "dropped".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace

from xlafuse.hlo.lineage import ops
from xlafuse.hlo.lineage.graph import Key
from xlafuse.hlo.lineage.numbering import NumberedGraph
from xlafuse.hlo.lineage.result import Trace

# What XLA can remove by folding it into what reads it: elementwise ops (rewritten
# algebraically) and ops that only place values; never a reduction, dot or gather, whose work
# stays in some kernel
FOLDABLE = ops.ELEMENTWISE | {"broadcast", "transpose", "pad", "slice", "iota", "reverse"}


def fold(
    ref: NumberedGraph, traces: dict[Key, Trace], order: Mapping[str, int]
) -> tuple[Trace, ...]:
    """Each lost instruction whose every reader is held by kernels and attributed to one
    kernel K (the readers' `kernel`), where nothing else reads it (no program output, no
    `call` operand), is attributed to K with `how` "folded": XLA removed it by folding it into
    what reads it (a transpose into a dot's dimensions, a broadcast or a convert into the
    fusion that reads it, `(a / b) / c` into `a / (b * c)`). Repeated until nothing changes
    (a reader may be folded itself); the views of a folded instruction follow it."""
    readers, blocked, dropped = _fold_graph(ref)
    lost = [k for k in ref.traced if ref.source(k) == k and traces[k].status == "lost"]
    folded: set[Key] = set()
    for key in lost:
        if key in dropped and not readers.get(key) and key not in blocked:
            traces[key] = replace(traces[key], status="outside", how="dropped")
            folded.add(key)
    changed = True
    while changed:
        changed = False
        for key in lost:
            if key in folded or key in blocked or not readers.get(key):
                continue
            if ref.instr[key].opcode in FOLDABLE and _fold_into_readers(
                ref, traces, order, key, readers[key]
            ):
                folded.add(key)
                changed = True
    for key in ref.traced:
        under = ref.source(key)
        if under != key and under in folded:
            traces[key] = replace(
                traces[under], instruction=key[1], computation=key[0],
                opcode=ref.instr[key].opcode, how="view",
            )  # fmt: skip
    return tuple(traces.values())


def _fold_graph(ref: NumberedGraph) -> tuple[dict[Key, set[Key]], set[Key], set[Key]]:
    """(value -> the computing instructions that read it, the values read by a `call`, an
    ENTRY tuple or the program's root, the constants an op that gives its other operand back
    reads: XLA dropped them)."""
    readers: dict[Key, set[Key]] = defaultdict(set)
    blocked: set[Key] = set()
    dropped: set[Key] = set()
    for key, instr in ref.instr.items():
        sources = {ref.source(o) for o in ref.operands[key]}
        if key in ref.traced_set:
            for o in sources - {ref.source(key)}:
                if ref.source(key) == key:
                    readers[o].add(key)
                else:  # `key` is a view of another operand: XLA dropped this one
                    dropped.add(o)
        elif instr.opcode == "call" or (instr.opcode == "tuple" and key[0] == ref.entry):
            blocked |= sources
    root = ref.module.entry.root
    if root is not None:
        blocked.add(ref.source((ref.entry, root.name)))
    return readers, blocked, dropped


def _fold_into_readers(
    ref: NumberedGraph,
    traces: dict[Key, Trace],
    order: Mapping[str, int],
    key: Key,
    readers: set[Key],
) -> bool:
    """Attributes `key` to the one kernel all its readers are attributed to ("folded"); False
    (nothing changed) when a reader is not in a kernel or they are in several."""
    kernels, holders = set(), set()
    for u in readers:
        t = traces.get(ref.source(u))
        if t is None or t.status != "kernel":
            return False
        kernels.add(t.kernel)
        holders.update(t.holders)
    if len(kernels) != 1:
        return False
    ordered = tuple(sorted(holders, key=lambda k: order.get(k, len(order))))
    traces[key] = replace(
        traces[key], status="kernel", kernel=kernels.pop(), holders=ordered, how="folded"
    )
    return True
