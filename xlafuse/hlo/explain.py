"""Why was it not fused: the kernel boundaries of a program, with XLA's reasons and their bytes.

A boundary is a value of the unoptimized program computed in one kernel and read in another:
its producer instruction `p` is traced (`xlafuse.hlo.lineage`) to kernel P, a consumer `c` of
it to kernel C, and C holds no copy of `p`. Operands that were lost or became views (reshape,
bitcast) are looked through to the instruction that computes the value (`via` lists them);
program inputs and constants are not intermediates, so they make no boundary. A path through a
lost instruction that changes the value's size (a reduce XLA rewrote) is not judged: the bytes
crossing would be a guess (`Explanation.unjudged_edges` counts them).

What a boundary costs (modeled bytes, see `xlafuse.hlo.traffic`): the intermediate is written
by P and read back by C, `boundary_bytes = 2 * intermediate_bytes`, at the unoptimized shape
of `p`. Fusing C with P saves the read; the write too unless other kernels also read it
(`readers` counts the kernels reading it, C included) or it is a program output.

XLA's reasons come from a GPU priority-fusion dump (`xlafuse.hlo.priority_dump`): the last
`producer_ineligible` step whose producer holds `p` gives `reason`; the last `update_priority`
whose producer holds `p` and whose consumers hold one of the consumers gives `us_fused` and
`us_unfused`. Dump names are resolved through the module the dump carries (the HLO as
priority-fusion saw it), traced to the unoptimized module like any optimized module, and through
the fusions that earlier steps made.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from xlafuse.hlo.ir import HloModule
from xlafuse.hlo.lineage import NOT_TRACED, Lineage, trace_module
from xlafuse.hlo.loops import runs_per_call
from xlafuse.hlo.parse import parse_hlo
from xlafuse.hlo.priority_dump import FusionStep, PriorityDump


@dataclass(frozen=True)
class Boundary:
    """One intermediate that crosses from one kernel to another.

    Attributes:
        producer: the unoptimized instruction computing it.
        producer_kernel: the kernel computing it.
        consumer_kernel: the kernel reading it back.
        consumers: the unoptimized instructions of `consumer_kernel` reading it.
        intermediate_bytes: its size (unoptimized shape).
        readers: kernels reading it (this one included).
        producer_source: "file:line" of the producer, if known.
        consumer_source: "file:line" of the first consumer, if known.
        via: lost or view instructions between producer and consumers.
        reason: XLA's reason the producer was not fused, if it gave one.
        us_fused: XLA's cost model, fused (microseconds), if it was asked.
        us_unfused: the same, unfused.
        runs_per_call: times the consumer kernel runs in one call (a loop body's trip count);
            None where the trip count is unknown (the boundary is then counted once).
    """

    producer: str
    producer_kernel: str
    consumer_kernel: str
    consumers: tuple[str, ...]
    intermediate_bytes: int
    readers: int = 1
    producer_source: str | None = None
    consumer_source: str | None = None
    via: tuple[str, ...] = ()
    reason: str | None = None
    us_fused: float | None = None
    us_unfused: float | None = None
    runs_per_call: int | None = 1

    @property
    def boundary_bytes(self) -> int:
        """Modeled bytes the boundary costs per call: the intermediate written once and read
        back once each time the consumer kernel runs (once where that is unknown)."""
        return 2 * self.intermediate_bytes * (self.runs_per_call or 1)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict of the fields plus `boundary_bytes`."""
        out = {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}
        out["boundary_bytes"] = self.boundary_bytes
        return out


@dataclass(frozen=True)
class ResolvedStep:
    """A fusion step with its names resolved to unoptimized instructions.

    Attributes:
        step: the step as dumped.
        producer_holds: unoptimized instructions the producer held at that point.
        consumer_holds: the same for each consumer.
        missing: dump names found neither in the dumped module nor among earlier fusions.
    """

    step: FusionStep
    producer_holds: frozenset[str]
    consumer_holds: tuple[frozenset[str], ...]
    missing: tuple[str, ...] = ()


@dataclass(frozen=True)
class Explanation:
    """The boundaries of one optimized module, largest first, and XLA's steps if dumped.

    Attributes:
        module: the optimized module's name.
        lineage: how the unoptimized instructions were traced to its kernels.
        boundaries: every boundary, largest `boundary_bytes` first.
        steps: the resolved priority-fusion steps, in order (empty without a dump).
        has_dump: whether a priority-fusion dump was read.
        unjudged_edges: reads whose path to a kernel meets a lost instruction that changes the
            value's size (a rewritten reduce, ...): not judged, not listed.
    """

    module: str
    lineage: Lineage
    boundaries: tuple[Boundary, ...]
    steps: tuple[ResolvedStep, ...] = ()
    has_dump: bool = False
    unjudged_edges: int = 0

    @property
    def ineligible(self) -> tuple[FusionStep, ...]:
        """XLA's `producer_ineligible` steps, in order."""
        return tuple(s.step for s in self.steps if s.step.kind == "producer_ineligible")

    @property
    def missing_names(self) -> tuple[str, ...]:
        """Dump names of fusion steps not found in the HLO (distinct, in order)."""
        return tuple(dict.fromkeys(n for s in self.steps for n in s.missing))

    def history(self, kernel: str) -> tuple[ResolvedStep, ...]:
        """The fusion steps that built `kernel` of the optimized module, in XLA's order.

        A "fusion" step belongs to the kernel when the producer or consumer it fused holds an
        unoptimized instruction the kernel holds.

        Raises:
            ValueError: the module has no kernel of that name (the message lists some).
        """
        if kernel not in self.lineage.kernels:
            names = ", ".join(self.lineage.kernels[:8])
            raise ValueError(f"no kernel {kernel!r} in module {self.module!r}; kernels: {names}")
        held = {t.instruction for t in self.lineage.traces if kernel in t.holders}
        return tuple(
            s
            for s in self.steps
            if s.step.kind == "fusion"
            and held & (s.producer_holds | frozenset().union(*s.consumer_holds))
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict: module, lineage counts, boundaries, steps and what was not found."""
        return {
            "module": self.module,
            "has_dump": self.has_dump,
            "unjudged_edges": self.unjudged_edges,
            "lineage": {k: v for k, v in self.lineage.to_dict().items() if k != "traces"},
            "lost": [t.instruction for t in self.lineage.traces if t.status == "lost"],
            "boundaries": [b.to_dict() for b in self.boundaries],
            "ineligible": [s.to_dict() for s in self.ineligible],
            "fusion_steps": [s.step.to_dict() for s in self.steps if s.step.kind == "fusion"],
            "missing_names": list(self.missing_names),
        }


def explain_module(
    unoptimized: HloModule,
    optimized: HloModule,
    *,
    dump: PriorityDump | None = None,
    unoptimized_text: str | None = None,
    optimized_text: str | None = None,
) -> Explanation:
    """The boundaries of `optimized`, with XLA's reasons when `dump` is given.

    Args:
        unoptimized: the program before optimization (`*.before_optimizations.txt`).
        optimized: one optimized compilation of it.
        dump: the priority-fusion dump of that same compilation (GPU only).
        unoptimized_text: the text `unoptimized` came from (better tracing; see lineage).
        optimized_text: the text `optimized` came from.

    Returns:
        The Explanation.
    """
    lineage = trace_module(
        unoptimized, optimized, reference_text=unoptimized_text, optimized_text=optimized_text
    )
    steps = resolve_steps(unoptimized, unoptimized_text, dump) if dump else ()
    boundaries, unjudged = _boundaries(unoptimized, lineage)
    boundaries = _per_call(boundaries, optimized)
    if steps:
        by_producer = _steps_by_producer(steps)
        boundaries = [_with_reasons(b, by_producer.get(b.producer, ())) for b in boundaries]
    boundaries.sort(key=lambda b: (-b.boundary_bytes, b.producer, b.consumer_kernel))
    return Explanation(
        optimized.name, lineage, tuple(boundaries), steps, dump is not None, unjudged
    )


def _per_call(boundaries: list[Boundary], optimized: HloModule) -> list[Boundary]:
    """The boundaries with the runs per call of their consumer kernel's computation."""
    runs = runs_per_call(optimized, branches_taken=True)
    where = {
        i.name: c.name for c in optimized.computations if c.name in runs for i in c.instructions
    }
    return [
        replace(b, runs_per_call=runs.get(where.get(b.consumer_kernel, ""), 1)) for b in boundaries
    ]


def removed_boundaries(fused: Explanation, unfused: Explanation) -> tuple[Boundary, ...]:
    """Boundaries of `unfused` whose every producer-consumer edge is inside a kernel in `fused`.

    Both must trace the same unoptimized module. Largest first.
    """
    kept = {(b.producer, c) for b in fused.boundaries for c in b.consumers}
    return tuple(
        b for b in unfused.boundaries if not any((b.producer, c) in kept for c in b.consumers)
    )


def _boundaries(module: HloModule, lineage: Lineage) -> tuple[list[Boundary], int]:
    by_name = lineage.by_name
    instrs = {i.name: i for c in module.computations for i in c.instructions}
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    via: dict[tuple[str, str], list[str]] = defaultdict(list)
    unjudged = 0
    for trace in lineage.traces:
        if trace.status != "kernel":
            continue
        for producer, path in _producers(instrs[trace.instruction], instrs, by_name):
            if producer is None:
                unjudged += 1
                continue
            holders = by_name[producer].holders
            for kernel in trace.holders:
                if kernel not in holders:
                    found[(producer, kernel)].append(trace.instruction)
                    via[(producer, kernel)].extend(path)
    readers: dict[str, int] = defaultdict(int)
    for producer, _ in found:
        readers[producer] += 1
    out = []
    for (producer, kernel), consumers in found.items():
        p = instrs[producer]
        out.append(
            Boundary(
                producer=producer,
                producer_kernel=by_name[producer].kernel,
                consumer_kernel=kernel,
                consumers=tuple(dict.fromkeys(consumers)),
                intermediate_bytes=p.shape.byte_size,
                readers=readers[producer],
                producer_source=_source(p),
                consumer_source=_source(instrs[consumers[0]]),
                via=tuple(dict.fromkeys(via[(producer, kernel)])),
            )
        )
    return out, unjudged


def _producers(instr, instrs, by_name):
    """(producer, via) for each value `instr` reads that some kernel computes; (None, via) where
    the path meets a lost instruction that changes the value's size (not judged)."""
    out, seen = [], set()
    stack = [(o, ()) for o in instr.operands]
    while stack:
        name, path = stack.pop()
        if name in seen or name not in instrs:
            continue
        seen.add(name)
        operand = instrs[name]
        if operand.opcode in NOT_TRACED:
            continue
        trace = by_name.get(name)
        if trace is not None and trace.status == "kernel" and trace.how != "view":
            out.append((name, path))
        elif _passable(operand, instrs):
            stack.extend((o, (*path, name)) for o in operand.operands)
        else:
            out.append((None, (*path, name)))
    return out


def _passable(instr, instrs) -> bool:
    """Whether a lost or outside instruction carries its operand's value on unchanged in size:
    a view, a broadcast, or an op whose only non-constant operand has its element count."""
    if instr.opcode in ("reshape", "bitcast", "copy", "broadcast"):
        return True
    data = [
        instrs[o]
        for o in instr.operands
        if o in instrs and instrs[o].opcode != "constant" and not _is_constant_broadcast(o, instrs)
    ]
    return len(data) == 1 and data[0].shape.num_elements == instr.shape.num_elements


def _is_constant_broadcast(name, instrs) -> bool:
    instr = instrs[name]
    return instr.opcode == "broadcast" and all(
        o in instrs and instrs[o].opcode == "constant" for o in instr.operands
    )


def _source(instr) -> str | None:
    if not instr.source_file:
        return None
    return f"{Path(instr.source_file).name}:{instr.source_line}"


def resolve_steps(
    unoptimized: HloModule, unoptimized_text: str | None, dump: PriorityDump
) -> tuple[ResolvedStep, ...]:
    """The dump's steps, each name resolved to the unoptimized instructions it held then."""
    holds: dict[str, frozenset[str]] = {}
    known: set[str] = set()
    if dump.hlo_before_fusion:
        before = parse_hlo(
            dump.hlo_before_fusion, source=f"{dump.source} (hlo_module_before_fusion)"
        )
        known = {i.name for c in before.computations for i in c.instructions}
        lineage = trace_module(
            unoptimized,
            before,
            reference_text=unoptimized_text,
            optimized_text=dump.hlo_before_fusion,
        )
        groups: dict[str, set[str]] = defaultdict(set)
        for t in lineage.traces:
            for holder in t.holders:
                groups[holder].add(t.instruction)
            for name in t.optimized:
                groups[name].add(t.instruction)
        holds = {k: frozenset(v) for k, v in groups.items()}
    out = []
    for step in dump.steps:
        names = (step.producer, *step.consumers)
        missing = tuple(n for n in names if n not in known and n not in holds)
        consumer_holds = tuple(holds.get(c, frozenset()) for c in step.consumers)
        producer_holds = holds.get(step.producer, frozenset())
        out.append(ResolvedStep(step, producer_holds, consumer_holds, missing))
        if step.kind == "fusion" and step.fusion_name:
            holds[step.fusion_name] = producer_holds.union(*consumer_holds)
    return tuple(out)


def _steps_by_producer(steps: tuple[ResolvedStep, ...]) -> dict[str, list[ResolvedStep]]:
    """Unoptimized instruction -> the steps whose producer held it, in the dump's order (one
    pass over the steps; each boundary then reads only its own, not every step)."""
    out: dict[str, list[ResolvedStep]] = defaultdict(list)
    for s in steps:
        for name in s.producer_holds:
            out[name].append(s)
    return out


def _with_reasons(boundary: Boundary, steps: Sequence[ResolvedStep]) -> Boundary:
    """The boundary with the last reason and estimate XLA gave for its producer (`steps`: those
    whose producer held it, in order)."""
    reason = us_fused = us_unfused = None
    consumers = set(boundary.consumers)
    for s in steps:
        if s.step.kind == "producer_ineligible":
            reason = s.step.reason
        elif s.step.kind == "update_priority" and any(consumers & c for c in s.consumer_holds):
            us_fused, us_unfused = s.step.us_fused, s.step.us_unfused
    return replace(boundary, reason=reason, us_fused=us_fused, us_unfused=us_unfused)
