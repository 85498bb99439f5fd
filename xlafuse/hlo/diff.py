"""What two compilations of one program fused differently (A -> B), kernel by kernel, exactly.

Both optimized modules are traced (`xlafuse.hlo.lineage`) to one reference: the unoptimized
module of the program when given (both variants lower the same program), else A itself. A
kernel of A and a kernel of B are linked when they hold the same reference instruction; the
connected sets of linked kernels are the groups. So every kernel of A and every kernel of B is
in exactly one group (a kernel holding nothing traced is a group of its own), and the groups'
byte differences add up to the modeled-bytes difference of the modules exactly. A kernel left
alone that way (all its instructions lost on the way from the unoptimized module) joins the
group of the kernel on the other side that holds one of its instructions (B traced to A), or
else of the kernel on its own side that writes an instruction it holds a copy of.

A group is "same" (one kernel each side, same bytes), "changed" (one each side, bytes differ),
"split" (one kernel of A, several of B), "fused" (several of A, one of B), "regrouped" (several
each side), "only A" or "only B" (nothing traced links it: a kernel XLA added or whose
instructions were lost).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from xlafuse.hlo.collectives import CollectiveReport, analyze_collectives
from xlafuse.hlo.fusion import FusionReport, analyze_module
from xlafuse.hlo.ir import HloModule
from xlafuse.hlo.lineage import Lineage, Trace, trace_module
from xlafuse.hlo.loops import PER_CALL, PER_ITERATION


@dataclass(frozen=True)
class KernelGroup:
    """Kernels of A and of B that hold the same reference instructions.

    Attributes:
        kernels_a: the kernels of A, in A's order.
        kernels_b: the kernels of B, in B's order.
        bytes_a: modeled bytes of `kernels_a`, summed.
        bytes_b: modeled bytes of `kernels_b`, summed.
        instructions: how many reference instructions the group holds.
    """

    kernels_a: tuple[str, ...]
    kernels_b: tuple[str, ...]
    bytes_a: int
    bytes_b: int
    instructions: int

    @property
    def bytes_delta(self) -> int:
        """Modeled bytes of B minus those of A for this group."""
        return self.bytes_b - self.bytes_a

    @property
    def kind(self) -> str:
        """ "same", "changed", "split", "fused", "regrouped", "only A" or "only B"."""
        na, nb = len(self.kernels_a), len(self.kernels_b)
        if nb == 0:
            return "only A"
        if na == 0:
            return "only B"
        if na == nb == 1:
            return "same" if self.bytes_a == self.bytes_b else "changed"
        return "split" if na == 1 else "fused" if nb == 1 else "regrouped"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict of the fields plus `kind` and `bytes_delta`."""
        out = {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}
        out["kind"] = self.kind
        out["bytes_delta"] = self.bytes_delta
        return out


@dataclass(frozen=True)
class FusionDiff:
    """Counts of A and B, and every kernel in one group (largest byte change first).

    Attributes:
        label_a: what A is (a file name or a variant).
        label_b: what B is.
        reference: "unoptimized" when traced to the unoptimized module, else "A".
        kernels_a, kernels_b, real_fusions_a, real_fusions_b, modeled_bytes_a,
        modeled_bytes_b: the modules' counts (kernels: distinct kernels; bytes as
        `bytes_basis` says, per call where both modules' trip counts are known).
        groups: every group, largest |bytes_delta| first.
        lineage_a: how the reference was traced to A.
        lineage_b: the same for B.
        collectives_a: A's collectives (`xlafuse.hlo.collectives`).
        collectives_b: B's collectives.
        bytes_basis: what the bytes count: "per call" (each kernel times its launches per
            call), or "per iteration, trip count unknown" (one run of each kernel) where either
            module has a loop of unknown trip count.
    """

    label_a: str
    label_b: str
    reference: str
    kernels_a: int
    kernels_b: int
    real_fusions_a: int
    real_fusions_b: int
    modeled_bytes_a: int
    modeled_bytes_b: int
    groups: tuple[KernelGroup, ...]
    lineage_a: Lineage
    lineage_b: Lineage
    collectives_a: CollectiveReport = field(default_factory=CollectiveReport)
    collectives_b: CollectiveReport = field(default_factory=CollectiveReport)
    bytes_basis: str = PER_CALL

    @property
    def kernels_delta(self) -> int:
        """Kernels of B minus kernels of A."""
        return self.kernels_b - self.kernels_a

    @property
    def modeled_bytes_delta(self) -> int:
        """Modeled bytes of B minus those of A (equals the sum of the groups' deltas)."""
        return self.modeled_bytes_b - self.modeled_bytes_a

    @property
    def unlinked_dots(self) -> tuple[str, ...]:
        """Kernels that run a dot or a convolution and sit in an "only A" or "only B" group
        ("A:name" / "B:name"): the lineage did not follow them across a rewrite."""
        out = []
        for g in self.groups:
            out += [
                f"A:{k}" for k in g.kernels_a if not g.kernels_b and k in self.lineage_a.dot_kernels
            ]
            out += [
                f"B:{k}" for k in g.kernels_b if not g.kernels_a and k in self.lineage_b.dot_kernels
            ]
        return tuple(out)

    @property
    def changes(self) -> tuple[KernelGroup, ...]:
        """The groups that are not "same"."""
        return tuple(g for g in self.groups if g.kind != "same")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict: labels, a/b/delta of each count, lineage counts, the groups."""
        out: dict[str, Any] = {
            "a": self.label_a,
            "b": self.label_b,
            "reference": self.reference,
            "bytes_basis": self.bytes_basis,
        }
        for key in ("kernels", "real_fusions", "modeled_bytes"):
            a, b = getattr(self, f"{key}_a"), getattr(self, f"{key}_b")
            out[key] = {"a": a, "b": b, "delta": b - a}
        out["lineage"] = {
            "a": self.lineage_a.counts(),
            "b": self.lineage_b.counts(),
            "lost_by_opcode": {
                "a": self.lineage_a.lost_by_opcode(),
                "b": self.lineage_b.lost_by_opcode(),
            },
            "unlinked_dots": list(self.unlinked_dots),
        }
        out["groups"] = [g.to_dict() for g in self.groups]
        ca, cb = self.collectives_a, self.collectives_b
        out["collectives"] = {
            key: {
                "a": getattr(ca, key),
                "b": getattr(cb, key),
                "delta": getattr(cb, key) - getattr(ca, key),
            }
            for key in ("count", "logical", "async_pairs", "operand_bytes")
        }
        out["collectives"]["by_kind"] = {"a": ca.counts(), "b": cb.counts()}
        return out


def diff_modules(
    a: HloModule,
    b: HloModule,
    *,
    labels: tuple[str, str] = ("A", "B"),
    reference: HloModule | None = None,
    texts: tuple[str | None, str | None, str | None] = (None, None, None),
) -> FusionDiff:
    """Compares two optimized compilations of one program, kernel group by kernel group.

    Args:
        a: the first optimized module.
        b: the second.
        labels: what to call A and B.
        reference: the unoptimized module of the program; None traces B to A's instructions.
        texts: the HLO texts of (reference, a, b) when known (more is identified by structure).

    Returns:
        The FusionDiff from A to B.
    """
    ref_text, a_text, b_text = texts
    if reference is None:
        reference, ref_text = a, a_text
    lineage_a = trace_module(reference, a, reference_text=ref_text, optimized_text=a_text)
    lineage_b = trace_module(reference, b, reference_text=ref_text, optimized_text=b_text)
    ra, rb = analyze_module(a), analyze_module(b)
    per_call = ra.modeled_bytes_per_call is not None and rb.modeled_bytes_per_call is not None
    bytes_a, bytes_b = _kernel_bytes(ra, per_call), _kernel_bytes(rb, per_call)
    extra = () if reference is a else _direct_links(a, b, a_text, b_text)
    groups = _groups(lineage_a, lineage_b, bytes_a, bytes_b, extra)
    return FusionDiff(
        label_a=labels[0],
        label_b=labels[1],
        reference="A" if reference is a else "unoptimized",
        kernels_a=ra.kernels,
        kernels_b=rb.kernels,
        real_fusions_a=ra.real_fusions,
        real_fusions_b=rb.real_fusions,
        modeled_bytes_a=sum(bytes_a.values()),
        modeled_bytes_b=sum(bytes_b.values()),
        groups=groups,
        lineage_a=lineage_a,
        lineage_b=lineage_b,
        collectives_a=analyze_collectives(a),
        collectives_b=analyze_collectives(b),
        bytes_basis=PER_CALL if per_call else PER_ITERATION,
    )


def _kernel_bytes(report: FusionReport, per_call: bool) -> dict[str, int]:
    """Kernel name -> its modeled bytes: per call (times its launches), or one run."""
    if not per_call:
        return {k.name: k.bytes_in + k.bytes_out for k in report.kernel_details}
    return {k.name: (k.bytes_in + k.bytes_out) * report.runs_of(k) for k in report.kernel_details}


def _direct_links(a, b, a_text, b_text) -> list[tuple[str, str]]:
    """(A kernel, B kernel) pairs holding one of A's own instructions (B traced to A)."""
    own = trace_module(a, a, reference_text=a_text, optimized_text=a_text).by_name
    links = []
    for t in trace_module(a, b, reference_text=a_text, optimized_text=b_text).traces:
        home = own.get(t.instruction)
        if t.kernel is not None and home is not None and home.kernel is not None:
            links.append((home.kernel, t.kernel))
    return links


class _Joined:
    """Kernels of A and B, `("a", name)` and `("b", name)`, joined into groups (union-find)."""

    def __init__(self, nodes: list[tuple[str, str]]):
        self.parent = {n: n for n in nodes}

    def find(self, x: tuple[str, str]) -> tuple[str, str]:
        while self.parent.setdefault(x, x) != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def join(self, keep: tuple[str, str], other: tuple[str, str]) -> None:
        root, other_root = self.find(keep), self.find(other)
        if other_root != root:
            self.parent[other_root] = root


def _join_copies(joined: _Joined, alone: set, side: str, lineage: Lineage) -> None:
    """A kernel still alone that holds a copy of an instruction another kernel of its side
    writes (XLA duplicated it, or split a reduction in two kernels) joins that kernel's group:
    the one whose instruction has the fewest copies."""
    best: dict[str, Trace] = {}
    for t in lineage.traces:
        if t.kernel is None or len(t.holders) < 2:
            continue
        for k in t.holders:
            closer = k not in best or len(t.holders) < len(best[k].holders)
            if k != t.kernel and (side, k) in alone and closer:
                best[k] = t
    for k, t in best.items():
        joined.join((side, t.kernel), (side, k))


def _join_layout_copies(joined: _Joined, alone: set, lineage_a, lineage_b, bytes_a, bytes_b):
    """A `copy` kernel of A and one of B, both alone, that copy the same value (or, the value
    unknown, make the same layout change) with the same bytes are one layout change made in
    both: one group (paired in order)."""
    waiting: dict[tuple, list[str]] = defaultdict(list)
    for k, value in lineage_b.copy_of.items():
        if ("b", k) in alone:
            waiting[(value, bytes_b.get(k))].append(k)
    for k, value in lineage_a.copy_of.items():
        match = waiting.get((value, bytes_a.get(k)))
        if ("a", k) in alone and match:
            joined.join(("a", k), ("b", match.pop(0)))


def _groups(lineage_a, lineage_b, bytes_a, bytes_b, extra=()) -> tuple[KernelGroup, ...]:
    nodes = [("a", k) for k in lineage_a.kernels] + [("b", k) for k in lineage_b.kernels]
    joined = _Joined(nodes)
    find = joined.find
    for ta in lineage_a.traces:
        tb = lineage_b.by_name.get(ta.instruction)
        if ta.kernel is not None and tb is not None and tb.kernel is not None:
            joined.join(("a", ta.kernel), ("b", tb.kernel))
    # A kernel whose instructions were all lost on the way from the unoptimized module may still
    # hold the same instructions as a kernel on the other side: link it, and only it, directly.
    sizes: dict[tuple[str, str], int] = {}
    for n in nodes:
        sizes[find(n)] = sizes.get(find(n), 0) + 1
    alone = {n for n in nodes if sizes[find(n)] == 1}
    for ka, kb in extra:
        if ("a", ka) in alone or ("b", kb) in alone:
            joined.join(("a", ka), ("b", kb))
    _join_copies(joined, alone, "a", lineage_a)
    _join_copies(joined, alone, "b", lineage_b)
    _join_layout_copies(joined, alone, lineage_a, lineage_b, bytes_a, bytes_b)
    members: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for n in nodes:
        members.setdefault(find(n), []).append(n)
    instructions: dict[tuple[str, str], int] = {}
    for ta in lineage_a.traces:
        if ta.kernel is not None:
            r = find(("a", ta.kernel))
            instructions[r] = instructions.get(r, 0) + 1
    out = []
    for root, group in members.items():
        ka = tuple(k for side, k in group if side == "a")
        kb = tuple(k for side, k in group if side == "b")
        out.append(
            KernelGroup(
                ka,
                kb,
                sum(bytes_a.get(k, 0) for k in ka),
                sum(bytes_b.get(k, 0) for k in kb),
                instructions.get(root, 0),
            )
        )
    out.sort(key=lambda g: (-abs(g.bytes_delta), (g.kernels_a or g.kernels_b)[0]))
    return tuple(out)
