"""`trace_module`: the two graphs numbered, matched and folded into a `Lineage`."""

from __future__ import annotations

from types import MappingProxyType

from xlafuse.hlo.ir import HloModule
from xlafuse.hlo.lineage import ops
from xlafuse.hlo.lineage.folding import fold
from xlafuse.hlo.lineage.graph import Key
from xlafuse.hlo.lineage.matching import Matcher
from xlafuse.hlo.lineage.numbering import NumberedGraph
from xlafuse.hlo.lineage.result import Lineage
from xlafuse.hlo.lineage.rules import RULES, Rule


def trace_module(
    reference: HloModule,
    optimized: HloModule,
    *,
    reference_text: str | None = None,
    optimized_text: str | None = None,
    rules: tuple[Rule, ...] = RULES,
) -> Lineage:
    """Traces every computing instruction of `reference` to the kernels of `optimized`.

    Args:
        reference: the unoptimized module (or another compilation's optimized module).
        optimized: an optimized module of the same program.
        reference_text: the HLO text `reference` was parsed from. Without it, parameter numbers
            come from XLA's `param_N` names and constants are never equal values, so fewer
            instructions are identified by structure.
        optimized_text: the same for `optimized`.
        rules: the rewrites of XLA that value numbering follows, in order (`rules.RULES`).

    Returns:
        The Lineage: one `Trace` per computing instruction of `reference` (docs/lineage.md).
    """
    table: dict[tuple, int] = {}
    untransposed: dict[int, tuple] = {}
    payloads = ops.literal_payloads
    ref_payloads, opt_payloads = payloads(reference_text or ""), payloads(optimized_text or "")
    ref = NumberedGraph(reference, table, untransposed, ref_payloads, rules=rules)
    opt = NumberedGraph(optimized, table, untransposed, opt_payloads, rules=rules)
    matcher = Matcher(ref, opt)
    matcher.run()
    order = {k: n for n, k in enumerate(opt.kernel_order)}
    traces = fold(ref, {key: matcher.trace(key, order) for key in ref.traced}, order)
    return Lineage(
        reference.name,
        optimized.name,
        traces,
        opt.kernel_order,
        matcher.names_kept,
        _dots(opt),
        _copies(opt, matcher),
    )


def _dots(opt: NumberedGraph) -> frozenset:
    """The kernels of `opt` that hold an ordered op (`ops.ORDERED`: a dot, a convolution)."""
    return frozenset(
        kernel
        for key, kernel in opt.kernel.items()
        if kernel and ops.kind(opt.instr[key]) in ops.ORDERED
    )


def _copies(opt: NumberedGraph, matcher: Matcher) -> MappingProxyType:
    """Each copy kernel of `opt` -> the value it copies (its matched name, else the layout
    change it makes); copies with neither are left out."""
    copies = {
        key[1]: opt.value_name(opt.source(key), matcher.matched)
        or ("shape " + _layout_change(opt, key),)
        for key, kernel in opt.kernel.items()
        if kernel == key[1] and opt.instr[key].opcode == "copy"
    }
    return MappingProxyType({k: v for k, v in copies.items() if v})


def _layout_change(graph: NumberedGraph, key: Key) -> str:
    """`f32[64,256]{0,1} -> f32[64,256]{1,0}`: what a copy does, from its operand's shape and
    its own."""
    operands = graph.operands[key]
    before = graph.instr[operands[0]].shape if operands and operands[0] in graph.instr else None
    return f"{before} -> {graph.instr[key].shape}"
