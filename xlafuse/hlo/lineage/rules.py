"""The rewrites of XLA that value numbering follows: each a rule, `RULES` in order.

A rule takes an instruction's key and its graph (`numbering.NumberedGraph`) and returns the
instruction's `Value`, numbered as what XLA makes of it, or None where it does not apply. The
first rule that applies numbers the instruction (after the plumbing, before the plain value:
`numbering.py`), so both modules agree on what XLA rewrote: the program's form in the reference
and XLA's form in the optimized module get one number. A rule numbers the operands it reads
(`graph.value`) and may read the override of an identified instruction; it changes nothing else.

Each rule's docstring names the recorded HLO that needs it (what is lost there without it), and
tests/test_lineage_rules.py holds, for each, a pair of modules cut from that HLO.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xlafuse.hlo.ir import Instruction
from xlafuse.hlo.lineage import ops
from xlafuse.hlo.lineage.graph import Key, Value

if TYPE_CHECKING:
    from xlafuse.hlo.lineage.numbering import NumberedGraph


@dataclass(frozen=True)
class Rule:
    """One rewrite of XLA's that value numbering follows.

    Attributes:
        apply: (key, graph) -> the instruction's `Value`, or None where the rule does not apply.
        opcodes: the opcodes of the instructions it may apply to (it is tried on those only).
    """

    apply: Callable[[Key, NumberedGraph], Value | None]
    opcodes: frozenset[str]

    @property
    def name(self) -> str:
        """The rule's name: its function's."""
        return self.apply.__name__


# The constant that makes the op give its other operand back (`neutral_operand`)
NEUTRAL = {
    "maximum": "-inf", "minimum": "inf", "add": "0", "subtract": "0", "multiply": "1",
    "divide": "1", "and": "true", "or": "false",
}  # fmt: skip


def _same(graph: NumberedGraph, key: Key) -> Value:
    """The Value of the value `key` names: a rule that finds the instruction is `key`."""
    return Value(graph.value(key), graph.source(key))


def view(key: Key, graph: NumberedGraph) -> Value | None:
    """A view of its operand is its operand: a reshape, bitcast or copy of as many elements, a
    broadcast to the same dimensions, a reduce over dimensions of size 1 only (XLA makes it a
    reshape). A bitcast that moves dimensions by its layout is a transpose (`transposition`).

    Needed by: tests/data/trace-gpt2-fwd (default: 893 of its 1,728 instructions lost without
    it, 7 with it; XLA makes bitcasts of the program's reshapes).
    """
    instr, operands = graph.instr[key], graph.operands[key]
    operand = graph.shape(operands[0]) if operands else None
    if not ops.is_view(instr, operand):
        return None
    if instr.opcode == "bitcast" and ops.bitcast_perm(instr.shape, operand):
        return None
    return _same(graph, operands[0])


def rounded_split_k_sum(key: Key, graph: NumberedGraph) -> Value | None:
    """A split-K GEMM's f32 sum (`split_k_sum`) converted to the dot's operand type is the dot
    (XLA keeps the f32 sum where the program converts the dot's result to f32, and rounds it
    where the program reads the dot).

    Needed by: tests/data/trace-gpt2-small-train (default: 28 lost without it, 16 with it: the
    backward pass's GEMMs that XLA splits in K, read in bf16 and split into heads).
    """
    instr, operands = graph.instr[key], graph.operands[key]
    if instr.opcode != "convert" or len(operands) != 1:
        return None
    total = _numbered_source(graph, operands[0])
    inner = graph.instr.get(total)
    dot = _split_k_sum(graph, total) if inner is not None else None
    if dot is None or _operand_dtype(graph, dot) != instr.shape.dtype:
        return None
    return _same(graph, graph.operands[total][0])


def precision_round_trip(key: Key, graph: NumberedGraph) -> Value | None:
    """`convert(convert(x))` back to x's type (f32 -> bf16 -> f32) is `x`: XLA drops the pair
    where it may keep excess precision (the GPU's default). The first convert is `x` too when
    nothing but such second converts reads it (`drop_round_trip_openers`).

    Needed by: tests/data/trace-gpt2-small-train (default: without it, 300 of its instructions
    are attributed to kernels that compute nothing of them: the layer norms' f32 weights rounded
    to bf16 and back, and what reads them).
    """
    instr, operands = graph.instr[key], graph.operands[key]
    if instr.opcode != "convert" or len(operands) != 1:
        return None
    inner_key = _numbered_source(graph, operands[0])
    inner = graph.instr.get(inner_key)
    if inner is None or inner.opcode != "convert" or not graph.operands.get(inner_key):
        return None
    under = graph.operands[inner_key][0]
    shape = graph.shape(under)
    return _same(graph, under) if shape is not None and shape.dtype == instr.shape.dtype else None


def drop_round_trip_openers(graph: NumberedGraph) -> None:
    """After numbering: the first convert of a precision round trip whose every reader
    (through views) is a second convert back to `x`'s type is `x` too: XLA drops the pair, so
    it computes nothing of its own (`precision_round_trip`)."""
    for key in graph.traced:
        instr = graph.instr[key]
        if instr.opcode != "convert" or graph.src[key] != key or len(graph.operands[key]) != 1:
            continue
        under = graph.operands[key][0]
        x = graph.src.get(under, under)
        views = _round_trip_views(graph, key, x)
        if views is not None:
            for k in [key, *views]:
                graph.vn[k], graph.src[k] = graph.vn[under], x


def _round_trip_views(graph: NumberedGraph, key: Key, x: Key) -> list[Key] | None:
    """The views of convert `key` when every reader of it or of them is a convert whose value
    is `x` (at least one); else None."""
    views, todo, closers = [], [key], 0
    while todo:
        for k in graph.readers(todo.pop()):
            if graph.src.get(k) == key and k in graph.traced_set:
                views.append(k)
                todo.append(k)
            elif graph.instr[k].opcode == "convert" and graph.src.get(k) == x:
                closers += 1
            else:
                return None
    return views if closers > 0 else None


def select_of_true_false(key: Key, graph: NumberedGraph) -> Value | None:
    """`select(p, true, false)` of `pred`s is `p`, which XLA's simplifier keeps (`jnp.tril`
    of a mask of ones). The constants are broadcast ones or scalars.

    Needed by: tests/data/trace-gpt2-fwd (default: 203 lost without it, 7 with it: the causal
    mask, and each softmax that reads it).
    """
    instr, operands = graph.instr[key], graph.operands[key]
    if instr.opcode != "select" or len(operands) != 3 or instr.shape.dtype != "pred":
        return None
    literals = [graph.literal(k) for k in operands[1:]]
    return _same(graph, operands[0]) if literals == ["true", "false"] else None


def neutral_operand(key: Key, graph: NumberedGraph) -> Value | None:
    """An op that gives an operand back is that operand, which XLA's simplifier keeps:
    `maximum(x, -inf)`, `minimum(x, inf)`, `add(x, 0)`, `subtract(x, 0)`, `multiply(x, 1)`,
    `divide(x, 1)`, `and(x, true)`, `or(x, false)` (of the same type and element count; the
    constant broadcast or a scalar). The constant is then "dropped" (`folding.py`).

    Needed by: tests/data/trace-gpt2-fwd (default: 140 lost without it, 7 with it: each
    softmax's `maximum(reduce_max(x), -inf)`).
    """
    instr, operands = graph.instr[key], graph.operands[key]
    op = instr.opcode
    neutral = NEUTRAL.get(op)
    if neutral is None or len(operands) != 2:
        return None
    for x, c in ((0, 1), (1, 0)) if op in ops.COMMUTATIVE else ((0, 1),):
        shape = graph.shape(operands[x]) if graph.literal(operands[c]) == neutral else None
        if shape is not None and (shape.num_elements, shape.dtype) == (
            instr.shape.num_elements,
            instr.shape.dtype,
        ):
            return _same(graph, operands[x])
    return None


def broadcast_iota(key: Key, graph: NumberedGraph) -> Value | None:
    """A broadcast of an iota is the iota of the broadcast shape along the dimension the
    iota's own maps to (XLA's simplifier makes that iota).

    Needed by: tests/data/trace-gpt2-fwd (default: 207 lost without it, 7 with it: the causal
    mask's positions, and each softmax that reads the mask).
    """
    instr, operands = graph.instr[key], graph.operands[key]
    if instr.opcode != "broadcast" or len(operands) != 1:
        return None
    graph.value(operands[0])
    under = graph.instr.get(graph.source(operands[0]))
    if under is None or under.opcode != "iota" or under.shape.is_tuple:
        return None
    if under.shape.num_elements == instr.shape.num_elements and under.shape.dims != (
        instr.shape.dims
    ):
        return None  # a reshape of it: not a broadcast of its dimensions
    dims = ops.int_list(instr.attr("dimensions"))
    axis = ops.int_list(under.attr("iota_dimension"))
    if dims is None or len(dims) != len(under.shape.dims) or not axis or axis[0] >= len(dims):
        return None
    along = (("iota_dimension", str(dims[axis[0]])),)
    return Value(graph.intern(("iota", ops.shape_sig(instr.shape), along, ())), key)


def squeezed_broadcast(key: Key, graph: NumberedGraph) -> Value | None:
    """A broadcast is numbered without the dimensions of size 1 of its operand and result:
    where each of the operand's other dimensions goes among the result's other dimensions. XLA's
    simplifier merges `broadcast(reshape(x))` into one broadcast of `x` when the reshape only
    adds or drops dimensions of size 1 (a mask broadcast to every head, then reshaped for
    `jnp.where`). A scalar's broadcast is numbered by its element count (`numbering.py`).

    Needed by: tests/data/trace-gpt2-small-train (default: 32 lost without it, 16 with it: the
    causal mask broadcast to every head).
    """
    instr, operands = graph.instr[key], graph.operands[key]
    if instr.opcode != "broadcast" or len(operands) != 1 or instr.shape.is_tuple:
        return None
    operand = graph.shape(operands[0])
    dims = ops.int_list(instr.attr("dimensions"))
    if operand is None or operand.is_tuple or dims is None or len(dims) != len(operand.dims):
        return None
    result = instr.shape.dims
    if operand.num_elements == 1 or any(d >= len(result) for d in dims):
        return None
    kept = [i for i, d in enumerate(result) if d != 1]
    placed = tuple(kept.index(dims[i]) for i, d in enumerate(operand.dims) if d != 1)
    value = graph.value(operands[0])
    item = ("broadcast", instr.shape.dtype, ops.squeezed(instr.shape), placed, value)
    return Value(graph.intern(item), key)


def negated_sum(key: Key, graph: NumberedGraph) -> Value | None:
    """A sum of a negation, `reduce(-x)`, is the negation of the sum, `-reduce(x)`, which XLA's
    simplifier makes of it (a layer norm's gradient).

    Needed by: tests/data/trace-gpt2-small-train (default: 66 lost without it, 16 with it: each
    layer norm's gradient).
    """
    instr, operands = graph.instr[key], graph.operands[key]
    negate = _reduced(graph, key, "negate")
    if negate is None or not _is_sum(graph, key):
        return None
    x, init = graph.operands[negate][0], operands[1]
    shape, attrs = _squeezed_reduce(graph, instr, (x, init), ops.attrs(instr)) or (
        ops.shape_sig(instr.shape),
        ops.attrs(instr),
    )
    total = graph.intern(("reduce", shape, attrs, (graph.value(x), graph.value(init))))
    return Value(graph.intern(("negate", ops.elementwise(instr.shape), (), (total,))), key)


def split_k_sum(key: Key, graph: NumberedGraph) -> Value | None:
    """A split-K GEMM's sum of its partial products is the dot converted to the sum's type:
    XLA splits a long contraction K into a batch of partial dots (in f32) and a reduce over the
    splits that carries the dot's `op_name` (`_split_k_sum`).

    Needed by: tests/data/trace-gpt2-small-train (default: 41 lost without it, 16 with it: the
    backward pass's GEMMs that XLA splits in K, read in f32).
    """
    instr, operands = graph.instr[key], graph.operands[key]
    if _split_k_sum(graph, key) is None:
        return None
    converted = ("convert", ops.elementwise(instr.shape), (), (graph.value(operands[0]),))
    return Value(graph.intern(converted), key)


def transposition(key: Key, graph: NumberedGraph) -> Value | None:
    """A transpose, or a bitcast that moves dimensions by its layout (`ops.bitcast_perm`:
    `f32[12,64,128]{2,1,0}` -> `f32[128,768]{0,1}`), is the value under it laid out transposed:
    (the permutation of the dimensions not of size 1, the value under it), two transposes
    composed, and one that gives the identity is the value itself. XLA lays a dot's result out
    so that the transpose after it is only a bitcast, and moves transposes past elementwise ops
    (`transposed_elementwise`).

    Needed by: tests/data/trace-gpt2-small-train (default: 52 lost without it, 16 with it: each
    attention output's transpose, a bitcast).
    """
    instr, operands = graph.instr[key], graph.operands[key]
    if instr.opcode not in ("transpose", "bitcast") or len(operands) != 1:
        return None
    shape = graph.shape(operands[0])
    if instr.opcode == "bitcast":
        perm = ops.bitcast_perm(instr.shape, shape)
    else:
        perm = ops.squeezed_perm(ops.int_list(instr.attr("dimensions")), shape)
    if perm is None or instr.shape.is_tuple:
        return None
    graph.value(operands[0])
    under = _layout_of(graph, operands[0])
    if under is None:
        inner, outer = graph.value(operands[0]), tuple(range(len(perm)))
    else:
        outer, inner = under
    composed = tuple(outer[i] for i in perm)
    if composed == tuple(range(len(composed))):
        return Value(inner, graph.source(operands[0]))  # a transpose of size-1 dimensions only
    return _laid_out(graph, key, composed, inner)


def transposed_elementwise(key: Key, graph: NumberedGraph) -> Value | None:
    """An elementwise op whose every operand not of one element is the same transposition of
    a value (`transposition`) is that transposition of the op on the values under them: XLA
    runs AdamW's update of a convolution's weights on a transposed copy of them and transposes
    the result back (matching also identifies it with the op on those values).

    Needed by: tests/data/trace-resnet50-train (default: 311 lost without it, 17 with it: AdamW's
    update of each convolution's weights).
    """
    instr, operands = graph.instr[key], graph.operands[key]
    if instr.opcode not in ops.ELEMENTWISE or not operands or instr.shape.is_tuple:
        return None
    perms, values = set(), []
    for o in operands:
        value, shape, source = graph.value(o), graph.shape(o), graph.source(o)
        one = shape is not None and not shape.is_tuple and shape.num_elements == 1
        if one or graph.scalar_broadcast(source):
            values.append(value)  # one value, whatever the layout
            continue
        under = _layout_of(graph, o)
        if under is None:
            return None
        perms.add(under[0])
        values.append(under[1])
    if len(perms) != 1:
        return None
    if instr.opcode in ops.COMMUTATIVE:
        values.sort()
    item = (instr.opcode, ops.elementwise(instr.shape), ops.attrs(instr), tuple(values))
    perm, inner = perms.pop(), graph.intern(item)
    if not perm:
        return Value(inner, graph.source(operands[0]))
    return _laid_out(graph, key, perm, inner)


def _laid_out(graph: NumberedGraph, key: Key, perm: tuple[int, ...], inner: int) -> Value:
    """The Value of `key`, value `inner` laid out by `perm`: identified, what is under it is
    its reference's; its layout kept unless it also merges dimensions (a bitcast)."""
    if key in graph.override:
        known = graph.override[key]
        perm, inner = graph.untransposed.get(known, (perm, known))
    kept = len(perm) == len(ops.squeezed(graph.instr[key].shape))
    number = graph.intern(("transposed", perm, inner))
    return Value(number, key, (perm, inner) if kept else None, final=True)


def _layout_of(graph: NumberedGraph, key: Key) -> tuple[tuple[int, ...], int] | None:
    """`layout` of the value `key` names (through views that keep its dimensions not of
    size 1), else None."""
    source = graph.source(key)
    layout = graph.layout.get(source)
    if layout is None or ops.squeezed(graph.shape(key)) != ops.squeezed(graph.shape(source)):
        return None
    return layout


def reduce_of_transpose(key: Key, graph: NumberedGraph) -> Value | None:
    """A reduce of a transpose is the reduce of the value under it over the dimensions they
    were, when the dimensions kept stay in order (the result is the same array): XLA's
    simplifier folds the transpose in (and its CSE may then keep one of two such reduces).

    Needed by: no recorded HLO today: without it, no count changes in the recordings, XLA's
    test corpus or GPT-2 small train on the CPU. The form is corpus module 05767's
    (xla/service/gpu/model/gpu_performance_model_test.cc); what XLA makes of it is written by
    hand in its test.
    """
    instr, operands = graph.instr[key], graph.operands[key]
    t = _reduced(graph, key, "transpose")
    if t is None:
        return None
    perm = ops.int_list(graph.instr[t].attr("dimensions"))
    dims = ops.int_list(instr.attr("dimensions"))
    if perm is None or dims is None or sorted(perm) != list(range(len(perm))):
        return None
    kept = [perm[i] for i in range(len(perm)) if i not in dims]
    if kept != sorted(kept) or any(d >= len(perm) for d in dims):
        return None
    reduced = "{" + ",".join(str(d) for d in sorted(perm[d] for d in dims)) + "}"
    attrs = tuple((k, reduced if k == "dimensions" else v) for k, v in ops.attrs(instr))
    return _reduce_value(graph, key, (graph.operands[t][0], operands[1]), attrs)


def squeezed_reduce(key: Key, graph: NumberedGraph) -> Value | None:
    """A single-input reduce is numbered without the dimensions of size 1 of its operand and
    result, its reduced dimensions counted among the operand's others: XLA drops a vmap's
    leading dimension of size 1, so a softmax's `reduce(f32[1,8,12,1024,1024])` over dimension 4
    is its `reduce(f32[8,12,1024,1024])` over dimension 3.

    Needed by: tests/data/trace-gpt2-fwd (default: 151 lost without it, 7 with it: each layer's
    softmax, vmapped).
    """
    instr = graph.instr[key]
    if _squeezed_reduce(graph, instr, graph.operands[key], ops.attrs(instr)) is None:
        return None
    return _reduce_value(graph, key, graph.operands[key], None)


def _reduce_value(graph: NumberedGraph, key: Key, operands: tuple[Key, ...], attrs) -> Value:
    """A reduce numbered on `operands` with `attrs` (None: its own), without the dimensions
    of size 1 where `_squeezed_reduce` applies."""
    op, shape, attrs, values = graph.item(key, operands=operands, attrs=attrs)
    squeezed = _squeezed_reduce(graph, graph.instr[key], operands, attrs)
    if squeezed is not None:
        shape, attrs = squeezed
    return Value(graph.intern((op, shape, attrs, values)), key)


def _squeezed_reduce(graph: NumberedGraph, instr: Instruction, operands, attrs: tuple):
    """(shape, attributes) to number single-input reduce `instr` of `operands` with, without
    the dimensions of size 1 (`squeezed_reduce`); else None."""
    if instr.opcode != "reduce" or len(operands) != 2 or instr.shape.is_tuple:
        return None
    operand = graph.shape(operands[0])
    dims = ops.int_list(dict(attrs).get("dimensions"))
    if operand is None or operand.is_tuple or dims is None:
        return None
    if any(d >= len(operand.dims) for d in dims):
        return None
    kept = [i for i, d in enumerate(operand.dims) if d != 1]
    reduced = "{" + ",".join(str(kept.index(d)) for d in sorted(dims) if d in kept) + "}"
    attrs = tuple((k, reduced if k == "dimensions" else v) for k, v in attrs)
    return (instr.shape.dtype, ops.squeezed(instr.shape)), attrs


def _numbered_source(graph: NumberedGraph, operand: Key) -> Key:
    """`operand`'s source, the operand numbered first (its source is known only after)."""
    graph.value(operand)
    return graph.source(operand)


def _reduced(graph: NumberedGraph, key: Key, opcode: str) -> Key | None:
    """The `opcode` instruction of one operand that single-input reduce `key` reduces (looked
    through views), else None."""
    instr, operands = graph.instr[key], graph.operands[key]
    if instr.opcode != "reduce" or len(operands) != 2 or instr.shape.is_tuple:
        return None
    under_key = _numbered_source(graph, operands[0])
    under = graph.instr.get(under_key)
    if under is None or under.opcode != opcode or len(graph.operands[under_key]) != 1:
        return None
    return under_key


def _is_sum(graph: NumberedGraph, key: Key) -> bool:
    """Whether single-input reduce `key` adds from 0."""
    instr = graph.instr[key]
    if not instr.called_computations or graph.literal(graph.operands[key][1]) not in ("0", "-0"):
        return False
    reducer = graph.computation(instr.called_computations[0].lstrip("%"))
    return reducer is not None and reducer.root is not None and reducer.root.opcode == "add"


def _split_k_sum(graph: NumberedGraph, key: Key) -> Key | None:
    """The dot whose partial products reduce `key` sums, else None: a sum from 0 over one
    dimension not of size 1 of a dot's value, that dimension its only difference from the
    result, carrying the dot's `op_name`, in another type than the dot's operands (the f32 sum
    of a bf16 dot; an f32 dot's sum is numbered as any reduce and found by its readers)."""
    instr, operands = graph.instr[key], graph.operands[key]
    if instr.opcode != "reduce" or len(operands) != 2 or instr.shape.is_tuple:
        return None
    dot = _numbered_source(graph, operands[0])
    shape = graph.shape(operands[0])
    if ops.kind(graph.instr[dot]) != "dot" or shape is None or shape.is_tuple:
        return None
    if instr.op_name is None or instr.op_name != graph.instr[dot].op_name:
        return None
    dims = ops.int_list(instr.attr("dimensions"))
    if dims is None or any(d >= len(shape.dims) for d in dims):
        return None
    split = [d for d in dims if shape.dims[d] != 1]
    kept = tuple(n for d, n in enumerate(shape.dims) if n != 1 and d not in dims)
    if len(split) != 1 or kept != ops.squeezed(instr.shape):
        return None
    if _operand_dtype(graph, dot) == instr.shape.dtype or not _is_sum(graph, key):
        return None
    return dot


def _operand_dtype(graph: NumberedGraph, dot: Key) -> str | None:
    """The element type of a dot's first operand (a split-K GEMM's partial products are f32
    whatever the program's dot type; its operands keep it)."""
    operands = graph.operands.get(dot, ())
    shape = graph.shape(operands[0]) if operands else None
    return None if shape is None or shape.is_tuple else shape.dtype


# The rules, in the order they are tried: the first that applies numbers the instruction.
RULES: tuple[Rule, ...] = (
    Rule(view, frozenset({"reshape", "bitcast", "copy", "reduce", "broadcast"})),
    Rule(rounded_split_k_sum, frozenset({"convert"})),
    Rule(precision_round_trip, frozenset({"convert"})),
    Rule(select_of_true_false, frozenset({"select"})),
    Rule(neutral_operand, frozenset(NEUTRAL)),
    Rule(broadcast_iota, frozenset({"broadcast"})),
    Rule(squeezed_broadcast, frozenset({"broadcast"})),
    Rule(negated_sum, frozenset({"reduce"})),
    Rule(split_k_sum, frozenset({"reduce"})),
    Rule(transposition, frozenset({"transpose", "bitcast"})),
    Rule(transposed_elementwise, ops.ELEMENTWISE),
    Rule(reduce_of_transpose, frozenset({"reduce"})),
    Rule(squeezed_reduce, frozenset({"reduce"})),
)
