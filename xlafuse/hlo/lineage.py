"""Which kernel of an optimized module holds each instruction of a reference module.

The reference is normally the unoptimized module of the same program (`Lowered.as_text("hlo",
debug_info=True)`, or a dumped `*.before_optimizations.txt`); it may also be another optimized
module (then its fused bodies are its instructions). Every reference instruction that computes
something (not parameter, constant, tuple, get-tuple-element, call) gets one `Trace`:

* status "kernel": a copy of it runs inside a kernel of the optimized module. When XLA
  duplicated it into several kernels, `holders` lists them all and `kernel` is the one that
  writes it out (its fusion root or an output of a multi-output fusion), else the first. With
  `how` "folded" (step 7) no copy of it runs: XLA folded it into what reads it, and `kernel` is
  the one kernel holding all of that.
* status "outside": it became an instruction that launches nothing (a bitcast, a tuple, a loop),
  or nothing at all: the neutral constant of an op XLA removed (`how` "dropped", step 7).
* status "lost": no instruction of the optimized module could be identified as it, and it is not
  folded (rewritten past recognition, or folded into reads held by several kernels). Never
  guessed.

How an optimized instruction is identified with a reference one (`Trace.how`), in this order:

1. "structure": the same opcode, shape and attributes applied to the same values (value
   numbering over both graphs; an elementwise op's or a broadcast scalar's shape is its type and
   element count; fused parameters resolve to the fusion's operands; commutative operands are
   sorted; equal constants are one value). Exact: it is the same computation. XLA's simplifier
   rewrites are numbered as what they make, so both sides agree (`_Graph._number`):
   * views of their operand: reshape, bitcast, copy, identity broadcasts, a reduce over
     dimensions of size 1 only (XLA makes it a reshape), and an op that gives an operand back:
     `maximum(x, -inf)`, `minimum(x, inf)`, `add(x, 0)`, `subtract(x, 0)`, `multiply(x, 1)`,
     `divide(x, 1)`, `and(x, true)`, `or(x, false)`, `select(p, true, false)` (`jnp.tril` of a
     mask of ones) -- the constant operand of such an op is then "dropped";
   * a precision round trip, f32 -> bf16 -> f32, which XLA drops where it may keep excess
     precision: the second convert is `x`, and so is the first when nothing else reads it;
   * a broadcast of an iota is the iota of the broadcast shape along the dimension it maps to;
   * a value laid out transposed (`_Graph._transposed`): a transpose is the value under it
     with a permutation (of the dimensions not of size 1; two transposes compose, and one that
     gives the identity is the value itself), and an elementwise op whose operands are all the
     same transposition is that transposition of the op on the values under them; such an op
     is identified with the op on those values (XLA runs AdamW's update of a convolution's
     weights on a transposed copy and transposes the result back); a bitcast that moves
     dimensions by its layout (`f32[12,64,128]{2,1,0}` -> `f32[128,768]{0,1}`) is the
     transpose it makes, with the dimensions it merges merged (XLA lays a dot's result out so
     that the transpose after it is only a bitcast);
   * a broadcast is numbered without the dimensions of size 1 of its operand and result, so
     `broadcast(reshape(x))` where the reshape only adds or drops such dimensions is the one
     broadcast of `x` XLA makes of it;
   * a sum of a negation is the negation of the sum (`reduce(-x)` -> `-reduce(x)`, a layer
     norm's gradient), the form XLA's simplifier makes of it;
   * a split-K GEMM's f32 sum of the partial products of a dot of another type (a reduce
     carrying the dot's `op_name`) is the dot converted to f32, and that sum rounded to the
     dot's operand type is the dot (XLA keeps the f32 sum where the program converts the dot's
     result to f32);
   * a reduce is numbered without the dimensions of size 1 of its operand and result (a
     vmapped softmax's `reduce(f32[1,8,12,1024,1024])` over dimension 4 is the
     `reduce(f32[8,12,1024,1024])` over dimension 3 XLA makes of it);
   * a reduce of a transpose is the reduce of the value under it over the dimensions they
     were, when the dimensions kept stay in order (XLA folds the transpose in, and its CSE may
     then keep one of two such reduces: the other is identified with it, below);
   * each `call` of a computation called from several places numbers the body for its own
     operands (the value of the call; the body's instructions keep the numbers of one caller).
   Two reference instructions of one value number compute the same value: where XLA's CSE kept
   one, an identification of either is one of both (how "duplicate" when not by structure).
2. "name": XLA keeps instruction names through its GPU passes, appending `.N` to clones
   (`tanh.1` -> `tanh.1.7`). The longest dot-prefix of the optimized name that names a reference
   instruction, if opcode, element count and `op_name` agree and the operands already identified
   agree (an unidentified reference operand that only carries a value on, unchanged in size,
   agrees when the value under it does). Where fewer than half of the instructions identified by
   structure carry their reference name (the CPU with jax 0.10.2 renumbers fused clones, `tanh.1`
   -> `tanh.0`; XLA also names what it makes from the same counters, so names can coincide), a
   name counts only with the same source line and an operand identified with one of the
   reference's.
3. "metadata": the one instruction on each side with this opcode, `op_name` and source line
   (first with the shape, then the element type and count, then neither), when exactly one is
   left unidentified on each side and the operands already identified agree.
4. "neighbours": the one unidentified reference instruction of this opcode and element count
   that reads the values an optimized instruction reads (forward; an elementwise op of one
   operand also across an unidentified transpose, as XLA moves it before the transpose), or the
   operands in the same places of a pair already identified (backward; for a commutative op
   only when one operand is left on each side), when `op_name`s agree.
5. "epilogue": what a dot's kernel writes beyond the dot, once the dot is identified: the
   transpose of its result XLA folds into it (`transpose(dot(a, b))` -> `dot(b, a)`: the
   kernel's value has the transpose's dimensions, or, square, its `op_name`), the
   multiplication by a constant that a cuBLAS call does as its `alpha` (attention's scale of
   its scores, folded by XLA's GEMM rewriter), and the adds of a cuBLASLt call's epilogue
   (`BIAS`: a broadcast vector; `beta` != 0: the third operand), each the only unidentified
   reader of the value before it (`_Matcher._epilogues`; an add of a value not identified
   yet, as `beta`'s C when it is the layer before's call, is looked for again in the next
   round). The kernel is then numbered as the last of them.
6. "order", when 1 to 5 find nothing more: dots and convolutions of one signature, as many
   left on each side, the k-th in reference order with the k-th in kernel order (the first whose
   operands agree): a model's layers repeat one source line (`_by_order`).

An opcode here is the instruction's `kind`: a library call is the instruction it replaced (a
cuBLAS/cuBLASLt GEMM custom-call a `dot`, a cuDNN convolution custom-call a `convolution`), its
value its result (the first element of its (result, workspace) tuple), its data operands the
first two, each taken through the transposes XLA added to lay it out; and a division by a
constant is the multiplication by its inverse XLA makes of it (a subtraction of a constant, the
addition of its negation). So a dot that one compilation
runs in a Triton GEMM fusion and another as a cuBLAS call is identified in both (by steps 2 to
6: the call's attributes differ from the dot's, so never by structure). An identified value is
identified in every kernel that computes it again (XLA duplicates cheap ops into each consumer).
The `op_name` of an instruction in a called computation is its callers' then its own, as XLA's
inliner writes it (`jit(step)/jvp(jit(_take))` and `gather`: `jit(step)/jvp(jit(_take))/gather`).

A view in the reference computes nothing: its trace is that of the value under it (`how`
"view"), or "outside" when that is a parameter or constant.

The instructions of a computation called from several places (`call`) are numbered for one of
its callers: they are identified by structure only (its other callers' values are found in what
reads the calls). After each round of 2 to 6 the optimized graph is numbered again with each
identified instruction given its reference's number (a dot's kernel: what it writes), and step 1
runs again, so what follows a rewritten op is found by structure.

7. When nothing more is identified (`_fold`): a lost elementwise op, broadcast, transpose, pad,
   slice, iota or reverse whose every reader is held by kernels, all attributed to one kernel K,
   and that is no program output nor a `call` operand, is attributed to K (how "folded"): XLA
   removed it by folding it into what reads it -- `(a / b) / c` -> `a / (b * c)` (Adam's bias
   correction), `reduce(-x)` -> `-reduce(x)`, `x * 2` reassociated into another operand, a
   transpose into a dot's dimensions or a split-K GEMM's reduction, a pad or a broadcast into
   the fusion that reads it, a convert of a dot's result into the dot's output type. Repeated
   while a reader is folded itself. It says where its value is used, not that a copy of it runs
   there; a reduction, dot, gather or scatter is never folded (its work stays in some kernel).
   A lost op read only by ops that gave another operand back (above) is "outside", "dropped".
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from xlafuse.hlo.flops import CONV_TARGETS, GEMM_TARGETS
from xlafuse.hlo.fusion import analyze_module, executed_computations
from xlafuse.hlo.ir import Computation, HloModule, Instruction, Shape

LAYOUT_ONLY = frozenset({"reshape", "bitcast"})  # lost ones XLA may fold away as a layout
NOT_TRACED = frozenset({"parameter", "constant", "tuple", "get-tuple-element"})
_VIEWS = frozenset({"reshape", "bitcast", "copy"})
_COMMUTATIVE = frozenset({"add", "multiply", "maximum", "minimum", "and", "or", "xor"})
_KEY_ATTRS = (
    "dimensions", "direction", "slice", "index", "iota_dimension", "padding", "window",
    "lhs_contracting_dims", "rhs_contracting_dims", "lhs_batch_dims", "rhs_batch_dims",
    "dim_labels", "feature_group_count", "batch_group_count", "custom_call_target",
    "comparison_type", "exponent_bits", "mantissa_bits", "distribution", "fft_type",
    "dynamic_slice_sizes", "offset_dims", "collapsed_slice_dims", "start_index_map",
    "index_vector_dim", "slice_sizes", "is_stable", "largest", "k",
)  # fmt: skip
_ROUNDS = 40
# Ops that compute element by element: their value does not depend on how the elements are
# shaped (`f32[8,1024,768]` in the program, `f32[8192,768]` once XLA collapsed it)
_ELEMENTWISE = frozenset({
    "abs", "add", "and", "atan2", "cbrt", "ceil", "clamp", "compare", "convert", "cosine",
    "divide", "erf", "exponential", "exponential-minus-one", "floor", "imag", "is-finite", "log",
    "log-plus-one", "logistic", "maximum", "minimum", "multiply", "negate", "not", "or",
    "popcnt", "power", "real", "remainder", "round-nearest-afz", "round-nearest-even", "rsqrt",
    "select", "shift-left", "shift-right-arithmetic", "shift-right-logical", "sign", "sine",
    "sqrt", "subtract", "tan", "tanh", "xor",
})  # fmt: skip
# What XLA can remove by folding it into what reads it (`_fold`): elementwise ops (rewritten
# algebraically) and ops that only place values; never a reduction, dot or gather, whose work
# stays in some kernel
_FOLDABLE = _ELEMENTWISE | {"broadcast", "transpose", "pad", "slice", "iota", "reverse"}
# The constant that makes the op give its other operand back (`_Graph._identity`)
_NEUTRAL = {
    "maximum": "-inf", "minimum": "inf", "add": "0", "subtract": "0", "multiply": "1",
    "divide": "1", "and": "true", "or": "false",
}  # fmt: skip
# An op of a constant second operand, as XLA's simplifier rewrites it (`_Graph.kind`)
_BY_A_CONSTANT = {"divide": "multiply", "subtract": "add"}
_ORDERED = frozenset({"dot", "convolution"})  # identified by order as a last resort (`_by_order`)

Key = tuple[str, str]  # (computation, instruction)


@dataclass(frozen=True)
class Trace:
    """Where one reference instruction ended up in the optimized module.

    Attributes:
        instruction: its name in the reference module.
        computation: the reference computation holding it.
        opcode: its reference opcode.
        status: "kernel", "outside" or "lost" (see the module docstring).
        kernel: the one kernel it is attributed to (status "kernel"), else None.
        holders: every kernel holding a copy of it, in the module's kernel order.
        optimized: the optimized instruction(s) identified with it.
        how: "structure", "duplicate", "name", "metadata", "neighbours", "epilogue", "order",
            "view", "folded" or "dropped" (see the module docstring); None when lost.
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

    def lost_summary(self, limit: int = 8) -> str:
        """What was lost, per opcode with its share of all traced instructions
        (`lost_summary`)."""
        return lost_summary(self.lost_by_opcode(), len(self.traces), limit)

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


def lost_summary(lost_by_opcode: Mapping[str, int], total: int | None, limit: int = 8) -> str:
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


def trace_module(
    reference: HloModule,
    optimized: HloModule,
    reference_text: str | None = None,
    optimized_text: str | None = None,
) -> Lineage:
    """Traces every computing instruction of `reference` to the kernels of `optimized`.

    Args:
        reference: the unoptimized module (or another compilation's optimized module).
        optimized: an optimized module of the same program.
        reference_text: the HLO text `reference` was parsed from. Without it, parameter numbers
            come from XLA's `param_N` names and constants are never equal values, so fewer
            instructions are identified by structure.
        optimized_text: the same for `optimized`.

    Returns:
        The Lineage (see the module docstring for the rules).
    """
    table: dict[tuple, int] = {}
    untransposed: dict[int, tuple] = {}
    ref = _Graph(reference, table, untransposed, literal_payloads(reference_text or ""))
    opt = _Graph(optimized, table, untransposed, literal_payloads(optimized_text or ""))
    matcher = _Matcher(ref, opt)
    matcher.run()
    order = {k: n for n, k in enumerate(opt.kernel_order)}
    traces = _fold(ref, {key: matcher.trace(key, order) for key in ref.traced}, order)
    dots = frozenset(
        kernel for key, kernel in opt.kernel.items() if kernel and kind(opt.instr[key]) in _ORDERED
    )
    copies = {
        key[1]: opt.value_name(opt.source(key), matcher.matched)
        or ("shape " + _layout_change(opt, key),)
        for key, kernel in opt.kernel.items()
        if kernel == key[1] and opt.instr[key].opcode == "copy"
    }
    return Lineage(
        reference.name,
        optimized.name,
        traces,
        opt.kernel_order,
        matcher.names_kept,
        dots,
        MappingProxyType({k: v for k, v in copies.items() if v}),
    )


class _Graph:
    """One module as values: value numbers, value sources and kernel membership."""

    def __init__(
        self,
        module: HloModule,
        table: dict[tuple, int],
        untransposed: dict[int, tuple],
        payloads: dict[str, str],
    ):
        self.module = module
        self.payloads = payloads
        self.table = table  # value item -> value number, shared by the two graphs
        # a transposed value's number -> (permutation, the number of the value under it), shared
        self.untransposed = untransposed
        self.instr: dict[Key, Instruction] = {}
        self.operands: dict[Key, tuple[Key, ...]] = {}
        self.src: dict[Key, Key] = {}  # a view/plumbing instruction -> the instruction computing it
        self.kernel: dict[Key, str | None] = {}  # in a kernel body -> kernel; outside -> None
        self.output: set[Key] = set()  # instructions a kernel writes out
        self.traced: list[Key] = []  # computing instructions, in order
        self.traced_set: set[Key] = set()
        self.callers: dict[str, tuple[Instruction, Computation]] = {}
        self.sites: dict[str, int] = defaultdict(int)  # computation -> how many `call` it
        self.shared: set[Key] = set()  # instructions of a computation called from several places
        self.site_elements: dict[Key, tuple[tuple[int, Key], ...]] = {}  # see `_site_value`
        self._attrs: dict[Key, tuple] = {}  # `_attrs` of each instruction, read once
        self._roots: dict[Key, Key | None] = {}  # a fusion or call -> its body's root
        self._call_sites: dict[str, list[Key]] = defaultdict(list)
        self._op_names: dict[Key, str | None] = {}
        self.vn: dict[Key, int] = {}
        self.override: dict[Key, int] = {}
        # an instruction whose value is another's laid out transposed -> (the permutation of
        # the dimensions not of size 1, that value's number); see `_transposed`
        self.layout: dict[Key, tuple[tuple[int, ...], int]] = {}
        self.entry = module.entry.name
        self._collect()

    # -- structure ------------------------------------------------------------------------
    def _collect(self) -> None:
        self.kernel_order = tuple(k.name for k in analyze_module(self.module).kernel_details)
        kernels = set(self.kernel_order)
        for comp in self.module.computations:
            for i in comp.instructions:
                if i.opcode in ("fusion", "fusion-start", "call"):
                    for name in i.called_computations:
                        self.callers[name.lstrip("%")] = (i, comp)
                        self.sites[name.lstrip("%")] += i.opcode == "call"
                        if i.opcode == "call":
                            self._call_sites[name.lstrip("%")].append((comp.name, i.name))
        for comp in executed_computations(self.module):
            for instr in comp.instructions:
                if instr.name in kernels and instr.opcode in ("fusion", "fusion-start"):
                    self._add_body(comp, instr, instr.name)
                else:
                    self._add(comp, instr, instr.name if instr.name in kernels else None)
                    if instr.name in kernels:
                        self.output.add((comp.name, instr.name))
        for name, n in self.sites.items():
            if n > 1:
                self.shared.update(self._body_keys(name))

    def op_name(self, key: Key) -> str | None:
        """The instruction's `op_name` as XLA's inliner writes it: in a computation that
        `call`s run, the callers' (all the same) then its own (`jit(step)/jvp(jit(_take))` and
        `gather`: `jit(step)/jvp(jit(_take))/gather`)."""
        if key in self._op_names:
            return self._op_names[key]
        self._op_names[key] = name = self.instr[key].op_name  # guards a malformed cycle
        sites = self._call_sites.get(key[0])
        if name is not None and sites:
            outer = {self.op_name(site) if site in self.instr else None for site in sites}
            if len(outer) == 1 and (prefix := outer.pop()):
                name = f"{prefix}/{name}"
        self._op_names[key] = name
        return name

    def _body_keys(self, name: str) -> list[Key]:
        """The instructions of computation `name` and of those it calls, at any depth."""
        out: list[Key] = []
        todo, seen = [name], {name}
        while todo:
            comp = self._computation(todo.pop())
            if comp is None:
                continue
            for i in comp.instructions:
                out.append((comp.name, i.name))
                for callee in i.called_computations if i.opcode == "call" else ():
                    if callee.lstrip("%") not in seen:
                        seen.add(callee.lstrip("%"))
                        todo.append(callee.lstrip("%"))
        return out

    def _add(self, comp: Computation, instr: Instruction, kernel: str | None) -> None:
        key = (comp.name, instr.name)
        self.instr[key] = instr
        self.operands[key] = tuple((comp.name, o) for o in instr.operands)
        self.kernel[key] = kernel
        if instr.opcode not in NOT_TRACED and instr.opcode != "call":
            self.traced.append(key)
            self.traced_set.add(key)

    def _add_body(self, comp: Computation, fusion: Instruction, kernel: str) -> None:
        self.instr[(comp.name, fusion.name)] = fusion
        self.operands[(comp.name, fusion.name)] = tuple((comp.name, o) for o in fusion.operands)
        self.kernel[(comp.name, fusion.name)] = kernel
        for name in fusion.called_computations:
            body = self._computation(name)
            if body is None:
                continue
            for inner in body.instructions:
                if inner.opcode in ("fusion", "fusion-start"):
                    self._add_body(body, inner, kernel)
                else:
                    self._add(body, inner, kernel)
            root = body.root
            if root is not None and fusion.name == kernel:
                self.output.add((body.name, root.name))
                if root.opcode == "tuple":
                    self.output.update((body.name, o) for o in root.operands)

    def _computation(self, name: str) -> Computation | None:
        try:
            return self.module.computation(name)
        except KeyError:
            return None

    # -- value numbers --------------------------------------------------------------------
    def number(self, override: dict[Key, int]) -> None:
        """(Re)computes value numbers and sources; `override` sets the numbers of identified
        instructions (to their reference's), so what reads them is numbered in reference terms."""
        self.override = override
        self.vn, self.src, self.layout = {}, {}, {}
        for key in self.instr:
            if key not in self.vn:
                self._number(key)
        self._drop_openers()

    def readers(self, key: Key) -> list[Key]:
        """The instructions that name `key` as an operand."""
        if not hasattr(self, "_readers"):
            self._readers: dict[Key, list[Key]] = defaultdict(list)
            for k, operands in self.operands.items():
                for o in operands:
                    self._readers[o].append(k)
        return self._readers.get(key, [])

    def _drop_openers(self) -> None:
        """The first convert of a precision round trip whose every reader (through views) is
        the second, which is `x` itself (`_round_trip`), is `x` too: XLA drops the pair, so it
        computes nothing of its own."""
        for key in self.traced:
            instr = self.instr[key]
            if instr.opcode != "convert" or self.src[key] != key or len(self.operands[key]) != 1:
                continue
            under = self.operands[key][0]
            x = self.src.get(under, under)
            views, todo, closers = [], [key], 0
            while todo:
                for k in self.readers(todo.pop()):
                    if self.src.get(k) == key and k in self.traced_set:
                        views.append(k)
                        todo.append(k)
                    elif self.instr[k].opcode == "convert" and self.src.get(k) == x:
                        closers += 1
                    else:
                        closers = -1
                        break
                if closers < 0:
                    break
            if closers > 0:
                for k in [key, *views]:
                    self.vn[k], self.src[k] = self.vn[under], x

    def _number(self, key: Key) -> int:
        instr = self.instr[key]
        op = instr.opcode
        operands = self.operands[key]
        if op == "parameter":
            src = key
            vn = self._parameter(key, instr)
            src = self.src.get(key, src)
        elif op == "constant":
            literal = self.payloads.get(instr.name)
            item = ("constant", _shape_sig(instr.shape), literal)
            vn = self._intern(item if literal is not None else ("opaque", self.module.name, key))
            src = key
        elif op == "call" and self._elsewhere(instr):
            vn, src = self._site_value(key, instr)
        elif (
            op in ("fusion", "fusion-start") and self.kernel.get(key) is not None
        ) or op == "call":
            vn, src = self._fusion_value(key, instr)
        elif op == "get-tuple-element" and operands:
            vn, src = self._element(key, instr)
        elif _is_view(instr, self._shape(operands[0]) if operands else None) and not (
            op == "bitcast" and _bitcast_perm(instr.shape, self._shape(operands[0]))
        ):
            vn, src = self._value(operands[0]), self.src.get(operands[0], operands[0])
        elif (
            same := self._round_trip(instr, operands) or self._identity(instr, operands)
        ) is not None:
            vn, src = self._value(same), self.src.get(same, same)
        elif (iota := self._broadcast_iota(instr, operands)) is not None:
            vn, src = self._intern(iota), key
        elif (placed := self._squeezed_broadcast(instr, operands)) is not None:
            vn, src = self._intern(placed), key
        elif (negated := self._negated_sum(instr, operands)) is not None:
            vn, src = negated, key
        elif self._split_k_sum(instr, operands) is not None:
            converted = ("convert", _elementwise(instr.shape), (), (self._value(operands[0]),))
            vn, src = self._intern(converted), key
        elif (layout := self._transposed(instr, operands)) is not None:
            perm, inner = layout
            if not perm:  # the value itself: a transpose of dimensions of size 1 only
                vn, src = inner, self.src.get(operands[0], operands[0])
            else:
                if key in self.override:  # identified: what is under it is its reference's
                    known = self.override[key]
                    perm, inner = self.untransposed.get(known, (perm, known))
                if len(perm) == len(_squeezed(instr.shape)):  # not a bitcast that merges too
                    self.layout[key] = (perm, inner)
                self.vn[key], self.src[key] = self._intern(("transposed", perm, inner)), key
                return self.vn[key]
        else:
            attrs = self._attrs.get(key)
            if attrs is None:
                attrs = self._attrs[key] = _attrs(instr)
            if (untransposed := self._reduce_transposed(instr, operands)) is not None:
                operands, attrs = untransposed
            values = [self._value(o) for o in operands]
            if op in _COMMUTATIVE:
                values.sort()
            shape = (
                _elementwise(instr.shape)
                if op in _ELEMENTWISE or self._scalar_broadcast(instr, operands)
                else _shape_sig(instr.shape)
            )
            if (squeezed := self._squeezed_reduce(instr, operands, attrs)) is not None:
                shape, attrs = squeezed
            vn = self._intern((op, shape, attrs, tuple(values)))
            src = key
        vn = self.override.get(key, vn)
        self.vn[key], self.src[key] = vn, src
        return vn

    def _round_trip(self, instr: Instruction, operands: tuple[Key, ...]) -> Key | None:
        """`x` for `convert(convert(x))` back to x's type (f32 -> bf16 -> f32): XLA drops the
        pair where it may keep excess precision (the GPU's default), so both modules count it
        as `x` itself."""
        if instr.opcode != "convert" or len(operands) != 1:
            return None
        self._value(operands[0])  # numbered first: its source is known after
        key = self.src.get(operands[0], operands[0])
        inner = self.instr.get(key)
        if inner is not None and (dot := self._split_k_sum(inner, self.operands[key])):
            # a split-K GEMM's f32 sum rounded to the dot's type: the dot
            return self.operands[key][0] if self._operand_dtype(dot) == instr.shape.dtype else None
        if inner is None or inner.opcode != "convert":
            return None
        under = self.operands[key][0] if self.operands.get(key) else None
        shape = self._shape(under) if under is not None else None
        return under if shape is not None and shape.dtype == instr.shape.dtype else None

    def _identity(self, instr: Instruction, operands: tuple[Key, ...]) -> Key | None:
        """`x` for an op that gives `x` back, which XLA's simplifier removes: `maximum(x,
        -inf)`, `minimum(x, inf)`, `add(x, 0)`, `subtract(x, 0)`, `multiply(x, 1)`, `divide(x,
        1)`, `and(x, true)`, `or(x, false)`, and `select(p, true, false)` of `pred`s (`jnp.tril`
        of a mask of ones). The constants are broadcast ones or scalars; else None."""
        op = instr.opcode
        if op == "select" and len(operands) == 3 and instr.shape.dtype == "pred":
            literals = [self.literal(k) for k in operands[1:]]
            return operands[0] if literals == ["true", "false"] else None
        neutral = _NEUTRAL.get(op)
        if neutral is None or len(operands) != 2:
            return None
        for x, c in ((0, 1), (1, 0)) if op in _COMMUTATIVE else ((0, 1),):
            if self.literal(operands[c]) == neutral and (
                self._shape(operands[x]) is not None
                and self._shape(operands[x]).num_elements == instr.shape.num_elements
                and self._shape(operands[x]).dtype == instr.shape.dtype
            ):
                return operands[x]
        return None

    def literal(self, key: Key) -> str | None:
        """The literal of a constant, or of the constant a broadcast repeats; else None."""
        self._value(key)  # numbered first: its source is known after
        key = self.src.get(key, key)
        instr = self.instr.get(key)
        if instr is not None and instr.opcode == "broadcast" and len(self.operands[key]) == 1:
            self._value(self.operands[key][0])
            key = self.src.get(self.operands[key][0], self.operands[key][0])
            instr = self.instr.get(key)
        if instr is None or instr.opcode != "constant":
            return None
        return self.payloads.get(instr.name)

    def _broadcast_iota(self, instr: Instruction, operands: tuple[Key, ...]) -> tuple | None:
        """A broadcast of an iota is the iota of the broadcast shape along the dimension the
        iota's own maps to (XLA's simplifier makes that iota): its value item, else None."""
        if instr.opcode != "broadcast" or len(operands) != 1:
            return None
        self._value(operands[0])
        under = self.instr.get(self.src.get(operands[0], operands[0]))
        if under is None or under.opcode != "iota" or under.shape.is_tuple:
            return None
        if under.shape.num_elements == instr.shape.num_elements and under.shape.dims != (
            instr.shape.dims
        ):
            return None  # a reshape of it: not a broadcast of its dimensions
        dims = _int_list(instr.attr("dimensions"))
        axis = _int_list(under.attr("iota_dimension"))
        if dims is None or len(dims) != len(under.shape.dims) or not axis or axis[0] >= len(dims):
            return None
        return ("iota", _shape_sig(instr.shape), (("iota_dimension", str(dims[axis[0]])),), ())

    def _squeezed_broadcast(self, instr: Instruction, operands: tuple[Key, ...]) -> tuple | None:
        """A broadcast numbered without the dimensions of size 1 of its operand and result:
        where each of the operand's other dimensions goes among the result's other dimensions
        (XLA's simplifier merges `broadcast(reshape(x))` into one broadcast of `x` when the
        reshape only adds or drops dimensions of size 1, as a mask broadcast to every head
        and then reshaped for `jnp.where`). Its value item, else None."""
        if instr.opcode != "broadcast" or len(operands) != 1 or instr.shape.is_tuple:
            return None
        operand = self._shape(operands[0])
        dims = _int_list(instr.attr("dimensions"))
        if operand is None or operand.is_tuple or dims is None or len(dims) != len(operand.dims):
            return None
        if operand.num_elements == 1:
            return None  # a scalar's broadcast: numbered by its element count
        result = instr.shape.dims
        if any(d >= len(result) for d in dims):
            return None
        kept = [i for i, d in enumerate(result) if d != 1]
        placed = tuple(kept.index(dims[i]) for i, d in enumerate(operand.dims) if d != 1)
        value = self._value(operands[0])
        return ("broadcast", instr.shape.dtype, _squeezed(instr.shape), placed, value)

    def _transposed(self, instr: Instruction, operands: tuple[Key, ...]):
        """A value laid out transposed, as (the permutation, the number of the value under it),
        else None. XLA's layout assignment moves transposes: it may run an elementwise chain on
        a transposed copy of its inputs and transpose the result back (AdamW's update of a
        convolution's weights), so:
        * a transpose of a transposed value is the value under both, permuted by the two
          together (`()`: the value itself);
        * an elementwise op whose every operand not of one element is the same transposition
          of a value is that transposition of the op applied to those values.
        * a bitcast that changes the layout so as to move dimensions (`_bitcast_perm`) is the
          transpose it makes: XLA lays a dot's result out so that its reader's transpose is
          only a bitcast.
        A permutation is over the dimensions not of size 1 (so moving those is no transpose)."""
        if instr.opcode in ("transpose", "bitcast") and len(operands) == 1:
            shape = self._shape(operands[0])
            if instr.opcode == "bitcast":
                perm = _bitcast_perm(instr.shape, shape)
            else:
                perm = _squeezed_perm(_int_list(instr.attr("dimensions")), shape)
            if perm is None or instr.shape.is_tuple:
                return None
            self._value(operands[0])
            under = self._layout_of(operands[0])
            if under is None:
                inner, outer = self._value(operands[0]), tuple(range(len(perm)))
            else:
                outer, inner = under
            composed = tuple(outer[i] for i in perm)
            return ((), inner) if composed == tuple(range(len(composed))) else (composed, inner)
        if instr.opcode not in _ELEMENTWISE or not operands or instr.shape.is_tuple:
            return None
        perms, values = set(), []
        for o in operands:
            value, shape, source = self._value(o), self._shape(o), self.source(o)
            one = shape is not None and not shape.is_tuple and shape.num_elements == 1
            if one or self._scalar_broadcast(self.instr[source], self.operands[source]):
                values.append(value)  # one value, whatever the layout
                continue
            under = self._layout_of(o)
            if under is None:
                return None
            perms.add(under[0])
            values.append(under[1])
        if len(perms) != 1:
            return None
        if instr.opcode in _COMMUTATIVE:
            values.sort()
        attrs = _attrs(instr)
        shape = _elementwise(instr.shape)
        return perms.pop(), self._intern((instr.opcode, shape, attrs, tuple(values)))

    def _layout_of(self, key: Key) -> tuple[tuple[int, ...], int] | None:
        """`layout` of the value `key` names (through views that keep its dimensions not of
        size 1), else None."""
        source = self.source(key)
        layout = self.layout.get(source)
        if layout is None or _squeezed(self._shape(key)) != _squeezed(self._shape(source)):
            return None
        return layout

    def _reduced(self, instr: Instruction, operands: tuple[Key, ...], opcode: str) -> Key | None:
        """The `opcode` instruction of one operand that single-input reduce `instr` reduces
        (looked through views), else None."""
        if instr.opcode != "reduce" or len(operands) != 2 or instr.shape.is_tuple:
            return None
        self._value(operands[0])  # numbered first: its source is known after
        key = self.src.get(operands[0], operands[0])
        under = self.instr.get(key)
        if under is None or under.opcode != opcode or len(self.operands[key]) != 1:
            return None
        return key

    def _is_sum(self, instr: Instruction, operands: tuple[Key, ...]) -> bool:
        """Whether single-input reduce `instr` adds from 0."""
        if not instr.called_computations or self.literal(operands[1]) not in ("0", "-0"):
            return False
        reducer = self._computation(instr.called_computations[0].lstrip("%"))
        return reducer is not None and reducer.root is not None and reducer.root.opcode == "add"

    def _split_k_sum(self, instr: Instruction, operands: tuple[Key, ...]) -> Key | None:
        """The dot whose partial products reduce `instr` sums, else None. XLA splits a long
        contraction K into a batch of partial dots (in f32) and a reduce over the splits, which
        carries the dot's `op_name`: a sum from 0 over one dimension not of size 1 of a dot's
        value, that dimension its only difference from the result, in another type than the
        dot's operands (the f32 sum of a bf16 dot)."""
        if instr.opcode != "reduce" or len(operands) != 2 or instr.shape.is_tuple:
            return None
        self._value(operands[0])  # numbered first: its source is known after
        dot = self.source(operands[0])
        shape = self._shape(operands[0])
        if kind(self.instr[dot]) != "dot" or shape is None or shape.is_tuple:
            return None
        if instr.op_name is None or instr.op_name != self.instr[dot].op_name:
            return None
        dims = _int_list(instr.attr("dimensions"))
        if dims is None or any(d >= len(shape.dims) for d in dims):
            return None
        split = [d for d in dims if shape.dims[d] != 1]
        kept = tuple(n for d, n in enumerate(shape.dims) if n != 1 and d not in dims)
        if len(split) != 1 or kept != _squeezed(instr.shape):
            return None
        if self._operand_dtype(dot) == instr.shape.dtype or not self._is_sum(instr, operands):
            return None  # an f32 dot's sum is numbered as any reduce (found by its readers)
        return dot

    def _operand_dtype(self, dot: Key) -> str | None:
        """The element type of a dot's first operand (a split-K GEMM's partial products are
        f32 whatever the program's dot type; its operands keep it)."""
        operands = self.operands.get(dot, ())
        shape = self._shape(operands[0]) if operands else None
        return None if shape is None or shape.is_tuple else shape.dtype

    def _negated_sum(self, instr: Instruction, operands: tuple[Key, ...]) -> int | None:
        """A sum of a negation, `reduce(-x)`, is numbered as the negation of the sum,
        `-reduce(x)`, which XLA's simplifier makes of it (a layer norm's gradient); else None."""
        negate = self._reduced(instr, operands, "negate")
        if negate is None or not self._is_sum(instr, operands):
            return None
        x, init = self.operands[negate][0], operands[1]
        shape, attrs = self._squeezed_reduce(instr, (x, init), _attrs(instr)) or (
            _shape_sig(instr.shape),
            _attrs(instr),
        )
        total = ("reduce", shape, attrs, (self._value(x), self._value(init)))
        elementwise = _elementwise(instr.shape)
        return self._intern(("negate", elementwise, (), (self._intern(total),)))

    def _squeezed_reduce(self, instr: Instruction, operands: tuple[Key, ...], attrs: tuple):
        """A single-input reduce numbered without the dimensions of size 1 of its operand and
        result: its reduced dimensions counted among the operand's others (XLA drops a vmap's
        leading dimension of size 1, so the softmax's `reduce(f32[1,8,12,1024,1024])` over
        dimension 4 is its `reduce(f32[8,12,1024,1024])` over dimension 3). (shape, attributes)
        to number it with, else None."""
        if instr.opcode != "reduce" or len(operands) != 2 or instr.shape.is_tuple:
            return None
        operand = self._shape(operands[0])
        dims = _int_list(dict(attrs).get("dimensions"))
        if operand is None or operand.is_tuple or dims is None:
            return None
        if any(d >= len(operand.dims) for d in dims):
            return None
        kept = [i for i, d in enumerate(operand.dims) if d != 1]
        reduced = "{" + ",".join(str(kept.index(d)) for d in sorted(dims) if d in kept) + "}"
        attrs = tuple((k, reduced if k == "dimensions" else v) for k, v in attrs)
        return (instr.shape.dtype, _squeezed(instr.shape)), attrs

    def _reduce_transposed(self, instr: Instruction, operands: tuple[Key, ...]):
        """A reduce of a transpose is the reduce of the value under it over the dimensions
        they were (XLA's simplifier folds the transpose in), when the dimensions kept stay in
        order (the result is the same array): (operands, attributes) to number it with, else
        None."""
        t = self._reduced(instr, operands, "transpose")
        if t is None:
            return None
        perm = _int_list(self.instr[t].attr("dimensions"))
        dims = _int_list(instr.attr("dimensions"))
        if perm is None or dims is None or sorted(perm) != list(range(len(perm))):
            return None
        kept = [perm[i] for i in range(len(perm)) if i not in dims]
        if kept != sorted(kept) or any(d >= len(perm) for d in dims):
            return None
        reduced = "{" + ",".join(str(d) for d in sorted(perm[d] for d in dims)) + "}"
        attrs = tuple((k, reduced if k == "dimensions" else v) for k, v in _attrs(instr))
        return (self.operands[t][0], operands[1]), attrs

    def _site_value(self, key: Key, instr: Instruction) -> tuple[int, Key]:
        """The value of a `call` of a computation that is numbered for another of its callers:
        its body numbered again for this caller's operands, then restored (its instructions
        keep the numbers of the caller they are numbered for). The elements of a tuple result
        are kept for the `get-tuple-element`s that read them (`site_elements`)."""
        name = instr.called_computations[0].lstrip("%")
        keys = self._body_keys(name)
        saved = {k: (self.vn.pop(k, None), self.src.pop(k, None)) for k in keys}
        caller = self.callers[name]
        self.callers[name] = (instr, self._computation(key[0]))
        try:
            vn, src = self._fusion_value(key, instr)
            root = self.instr.get(src)
            if root is not None and root.opcode == "tuple":
                self.site_elements[key] = tuple(
                    (self._value(e), self.src.get(e, e)) for e in self.operands[src]
                )
        finally:
            self.callers[name] = caller
            for k, (v, s) in saved.items():
                for table, old in ((self.vn, v), (self.src, s)):
                    if old is None:
                        table.pop(k, None)
                    else:
                        table[k] = old
        return vn, src

    def _elsewhere(self, instr: Instruction) -> bool:
        """Whether `instr` calls a computation that is numbered for another of its callers."""
        if not self.shared:
            return False
        names = instr.called_computations
        if len(names) != 1 or self.sites.get(names[0].lstrip("%"), 0) < 2:
            return False
        return self.callers[names[0].lstrip("%")][0] is not instr

    def _scalar_broadcast(self, instr: Instruction, operands: tuple[Key, ...]) -> bool:
        """A broadcast of one value: its shape does not matter either."""
        if instr.opcode != "broadcast" or len(operands) != 1:
            return False
        shape = self._shape(operands[0])
        return shape is not None and not shape.is_tuple and shape.num_elements == 1

    def _parameter(self, key: Key, instr: Instruction) -> int:
        caller = self.callers.get(key[0])
        number = self._parameter_number(instr)
        if caller is not None and number is not None:
            fusion, comp = caller
            if number < len(fusion.operands):
                outer = (comp.name, fusion.operands[number])
                if outer in self.instr:
                    value = self._value(outer)
                    self.src[key] = self.src.get(outer, outer)
                    return value
        if key[0] == self.entry:
            return self._intern(("entry-parameter", number))
        return self._intern(("parameter", self.module.name, key))

    def _parameter_number(self, instr: Instruction) -> int | None:
        payload = self.payloads.get(instr.name)
        if payload is not None and payload.isdigit():
            return int(payload)
        m = _PARAM_NAME.match(instr.name)
        return int(m.group(1)) if m else None

    def _fusion_value(self, key: Key, instr: Instruction) -> tuple[int, Key]:
        if key not in self._roots:
            self._roots[key] = None
            for name in instr.called_computations:
                body = self._computation(name)
                if body is not None and body.root is not None:
                    root = (body.name, body.root.name)
                    if root in self.instr:
                        self._roots[key] = root
                        break
        root = self._roots[key]
        if root is not None:
            return self._value(root), self.src.get(root, root)
        return self._intern(("opaque", self.module.name, key)), key

    def _element(self, key: Key, instr: Instruction) -> tuple[int, Key]:
        operand = self.operands[key][0]
        value = self._value(operand)
        tup = self.src.get(operand, operand)
        tinstr = self.instr.get(tup)
        index = int(instr.attr("index") or -1)
        if tinstr is not None and index == 0 and _is_library(tinstr):
            return value, tup  # a library call's result
        elements = self.site_elements.get(operand)
        if elements is not None and 0 <= index < len(elements):
            return elements[index]
        if tinstr is not None and tinstr.opcode == "tuple" and 0 <= index < len(tinstr.operands):
            element = (tup[0], tinstr.operands[index])
            if element in self.instr:
                return self._value(element), self.src.get(element, element)
        return self._intern(("get-tuple-element", value, index)), key

    def _value(self, key: Key) -> int:
        if key in self.vn:
            return self.vn[key]
        if key not in self.instr:
            return self._intern(("missing", self.module.name, key))
        self.vn[key] = self._intern(("cycle", self.module.name, key))  # guards malformed loops
        return self._number(key)

    def _shape(self, key: Key) -> Shape | None:
        instr = self.instr.get(key)
        return instr.shape if instr is not None else None

    def _intern(self, item: tuple) -> int:
        number = self.table.setdefault(item, len(self.table))
        if item[0] == "transposed":
            self.untransposed[number] = item[1:]
        return number

    def kind(self, key: Key) -> str:
        """`kind` of the instruction, with a division by a constant counted as the
        multiplication XLA rewrites it into (`x / broadcast(c)` -> `x * broadcast(1 / c)`), and a
        subtraction of a constant as the addition (`x - c` -> `x + (-c)`)."""
        instr = self.instr[key]
        rewritten = _BY_A_CONSTANT.get(instr.opcode)
        if rewritten is not None and len(self.operands[key]) == 2:
            other = self.source(self.operands[key][1])
            if self.instr[other].opcode == "constant" or _constant_broadcast(self, other):
                return rewritten
        return kind(instr)

    def value_name(self, key: Key, matched: Mapping[Key, set[Key]]) -> tuple[str, ...]:
        """What the value `key` computes is, in the reference's terms: the reference
        instructions identified with it, or `parameter N` of the entry; () if unknown."""
        if key[0] == self.entry and self.instr[key].opcode == "parameter":
            number = self._parameter_number(self.instr[key])
            return (f"parameter {number}",) if number is not None else ()
        return tuple(sorted(r[1] for r in matched.get(key, ())))

    def source(self, key: Key) -> Key:
        """The instruction that computes the value `key` names (through views and plumbing)."""
        return self.src.get(key, key)


def _int_list(text: str | None) -> list[int] | None:
    """`{0,2}` or `1` -> [0, 2] or [1]; None if not a list of integers."""
    if text is None:
        return None
    parts = [p.strip() for p in text.strip().strip("{}").split(",") if p.strip()]
    return [int(p) for p in parts] if all(p.isdigit() for p in parts) else None


def _is_view(instr: Instruction, operand: Shape | None) -> bool:
    if operand is None or instr.shape.is_tuple or operand.is_tuple:
        return False
    if instr.opcode in _VIEWS:
        return instr.shape.num_elements == operand.num_elements
    if instr.opcode == "reduce":  # over dimensions of size 1 only: XLA makes it a reshape
        return instr.shape.num_elements == operand.num_elements
    if instr.opcode == "broadcast":
        return instr.shape.dims == operand.dims
    return False


def kind(instr: Instruction) -> str:
    """The opcode, or for a library call the opcode of what it replaced ("dot" for a cuBLAS
    GEMM, "convolution" for a cuDNN convolution)."""
    if instr.opcode == "custom-call":
        target = instr.custom_call_target
        if target in GEMM_TARGETS:
            return "dot"
        if target in CONV_TARGETS:
            return "convolution"
    return instr.opcode


def _is_library(instr: Instruction) -> bool:
    return instr.opcode == "custom-call" and kind(instr) != "custom-call"


_EPILOGUE = re.compile(r'"epilogue"\s*:\s*"([A-Z_]+)"')
_BETA = re.compile(r'"beta"\s*:\s*(-?[0-9.eE+-]+)')


_ALPHA_REAL = re.compile(r'"alpha_real"\s*:\s*(-?[0-9.eE+-]+)')
_ALPHA_IMAG = re.compile(r'"alpha_imag"\s*:\s*(-?[0-9.eE+-]+)')


def _alpha(instr: Instruction) -> float | None:
    """The real `alpha` a cuBLAS GEMM call scales its product by, where it is not 1 (and its
    imaginary part 0); else None."""
    if not _is_library(instr) or kind(instr) != "dot":
        return None
    config = instr.attributes.get("backend_config") or ""
    real, imag = _ALPHA_REAL.search(config), _ALPHA_IMAG.search(config)
    try:
        alpha = float(real.group(1)) if real else 1.0
        imaginary = float(imag.group(1)) if imag else 0.0
    except ValueError:
        return None
    return alpha if imaginary == 0 and alpha != 1 else None


def _epilogue_operands(instr: Instruction) -> int:
    """How many operands a cuBLAS GEMM adds to its product: beta's C and the `BIAS` epilogue's
    vector; -1 for an epilogue that does more than add (GELU, RELU) or an unreadable one."""
    config = instr.attributes.get("backend_config") or ""
    epilogue = _EPILOGUE.search(config)
    beta = _BETA.search(config)
    name = epilogue.group(1) if epilogue else "DEFAULT"
    if name not in ("DEFAULT", "BIAS"):
        return -1
    try:
        adds_c = beta is not None and float(beta.group(1)) != 0
    except ValueError:
        return -1
    return int(adds_c) + (name == "BIAS")


def _squeezed(shape: Shape) -> tuple[int, ...]:
    return tuple(d for d in shape.dims if d != 1)


def _squeezed_perm(perm: list[int] | None, operand: Shape | None) -> tuple[int, ...] | None:
    """A transpose's permutation over its operand's dimensions not of size 1: result dimension
    i (of those) is operand dimension perm[i] (of those); None if malformed."""
    if perm is None or operand is None or operand.is_tuple or len(perm) != len(operand.dims):
        return None
    if sorted(perm) != list(range(len(perm))):
        return None
    kept = [i for i, d in enumerate(operand.dims) if d != 1]
    rank = {i: n for n, i in enumerate(kept)}
    return tuple(rank[p] for p in perm if p in rank)


def _major_to_minor(shape: Shape) -> list[int] | None:
    """The dimensions of an array in the order they are laid out, the slowest first (its
    layout's minor-to-major list reversed; without a layout, row-major); None if unreadable."""
    if shape.layout is None:
        return list(range(len(shape.dims)))
    order = _int_list(shape.layout.split(":")[0])
    if order is None or sorted(order) != list(range(len(shape.dims))):
        return None
    return order[::-1]


def _bitcast_perm(result: Shape, operand: Shape | None) -> tuple[int, ...] | None:
    """The transpose a bitcast makes of a row-major operand by laying its result out in
    another order (`bf16[12,64,128]{2,1,0}` -> `bf16[128,768]{0,1}` is the operand's
    dimension 2 then dimensions 0 and 1 merged): the permutation of the dimensions of the two
    shapes' common refinement (not of size 1) whose merge gives the result, in the form of
    `_squeezed_perm`. None when the bitcast moves no dimension or is no such transpose."""
    if operand is None or operand.is_tuple or result.is_tuple:
        return None
    source, placed = _major_to_minor(operand), _major_to_minor(result)
    if source is None or placed is None:
        return None
    if [d for d in source if operand.dims[d] != 1] != [
        d for d, n in enumerate(operand.dims) if n != 1
    ]:
        return None  # the operand is laid out in another order itself
    sizes = [operand.dims[d] for d in source if operand.dims[d] != 1]
    laid = [d for d in placed if result.dims[d] != 1]  # result dims, in memory order
    pieces: dict[int, list[int]] = {d: [] for d in laid}  # result dim -> its refined dims
    i = j = n = 0
    left_a, left_b = (sizes[0] if sizes else 1), (result.dims[laid[0]] if laid else 1)
    while i < len(sizes) and j < len(laid):
        if left_a % left_b and left_b % left_a:
            return None  # a reshape that does not split or merge whole dimensions
        piece = min(left_a, left_b)
        pieces[laid[j]].append(n)
        n += 1
        left_a, left_b = left_a // piece, left_b // piece
        if left_a == 1:
            i += 1
            left_a = sizes[i] if i < len(sizes) else 1
        if left_b == 1:
            j += 1
            left_b = result.dims[laid[j]] if j < len(laid) else 1
    if i < len(sizes) or j < len(laid):
        return None
    perm = tuple(p for d, size in enumerate(result.dims) if size != 1 for p in pieces[d])
    return perm if perm != tuple(range(n)) else None


def _value_shape(instr: Instruction) -> Shape:
    """The shape of the value: a library call's is its result's, the first of its tuple."""
    shape = instr.shape
    if _is_library(instr) and shape.is_tuple and shape.tuple_shapes:
        return shape.tuple_shapes[0]
    return shape


def _elements(instr: Instruction) -> int:
    return _value_shape(instr).num_elements


def _elementwise(shape: Shape) -> tuple:
    """How an elementwise op's value is numbered: its type and element count."""
    return (shape.dtype, shape.num_elements)


def _shape_sig(shape: Shape) -> tuple:
    if shape.is_tuple:
        return tuple(_shape_sig(s) for s in shape.tuple_shapes)
    return (shape.dtype, shape.dims)


def _attrs(instr: Instruction) -> tuple:
    return tuple((k, instr.attributes[k]) for k in _KEY_ATTRS if k in instr.attributes)


_PAYLOAD = re.compile(r"^\s*(?:ROOT\s+)?%?([^\s=,(){}]+)\s*=.*?\b(?:parameter|constant)\(", re.M)
_PARAM_NAME = re.compile(r"^param(?:eter)?_(\d+)(?:\.\d+)?$")


def literal_payloads(text: str) -> dict[str, str]:
    """Instruction name -> the text inside `parameter(...)` / `constant(...)` of an HLO text.

    The parsed module does not keep parameter numbers or constant literals; value numbering
    needs both (a fused parameter N is the fusion's operand N; equal constants are one value).
    """
    out = {}
    for m in _PAYLOAD.finditer(text):
        depth, end = 1, m.end()
        while end < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            end += 1
        out[m.group(1)] = text[m.end() : end - 1].strip()
    return out


class _Matcher:
    """Identifies optimized instructions with reference ones (see the module docstring)."""

    def __init__(self, ref: _Graph, opt: _Graph):
        self.ref, self.opt = ref, opt
        self.matched: dict[Key, set[Key]] = defaultdict(set)  # optimized -> reference
        self.back: dict[Key, set[Key]] = defaultdict(set)  # reference -> optimized
        self.how: dict[Key, str] = {}  # reference -> how first identified
        self.names_kept = False
        self.value_of: dict[Key, Key] = {}  # a dot's kernel -> what it writes (`_epilogues`)
        self._written: set[Key] = set()  # dots whose epilogues were looked for

    def run(self) -> None:
        self.ref.number({})
        self.opt.number({})
        self._copies: dict[int, list[Key]] = defaultdict(list)  # one value computed again
        self._plain = dict(self.opt.vn)
        for o in self.opt.traced:
            if self.opt.source(o) == o:
                self._copies[self._plain[o]].append(o)
        for round_ in range(_ROUNDS):
            if round_:  # round 0: numbered just above, nothing identified yet
                self._renumber()
            new = self._by_structure()
            if round_ == 0:
                self.names_kept = self._names_kept()
            new += self._by_name(same_line=not self.names_kept)
            for shape in ("dims", "elements", None):
                new += self._by_metadata(shape)
            new += self._by_neighbours()
            new += self._epilogues()
            if not new:
                new = self._by_order()
            if not new:
                break

    def _renumber(self) -> None:
        """Numbers the optimized graph, each identified instruction as its reference."""
        self.opt.number(
            {
                o: self.ref.vn[self.value_of.get(o) or min(rs)]
                for o, rs in self.matched.items()
                if rs
            }
        )

    def _pair(self, o: Key, r: Key, how: str) -> bool:
        """Identifies `o` with `r`, and so every copy of `o`: the same value computed again in
        another kernel (XLA duplicates cheap ops into each consumer's fusion); and with `r`,
        every reference instruction of `r`'s value number left unidentified: the same value
        computed twice in the program, which XLA's CSE keeps once (how "duplicate")."""
        if r in self.matched[o] or (r in self.ref.shared and how not in ("structure", "duplicate")):
            return False  # a computation called from several places: numbered for one only
        for copy in self._copies.get(self._plain.get(o), [o]):
            self.matched[copy].add(r)
            self.back[r].add(copy)
        self.how.setdefault(r, how)
        for twin in self._same_value().get(self.ref.vn[r], ()):
            if twin != r and not self.back.get(twin):
                self._pair(o, twin, how if how == "structure" else "duplicate")
        return True

    def _same_value(self) -> dict[int, list[Key]]:
        """Reference value number -> the computing instructions that have it."""
        if not hasattr(self, "_by_value"):
            self._by_value: dict[int, list[Key]] = defaultdict(list)
            for r in self.ref.traced:
                if self.ref.source(r) == r:
                    self._by_value[self.ref.vn[r]].append(r)
        return self._by_value

    def _by_structure(self) -> int:
        """Step 1: the same value number; an elementwise op run on a transposed layout is also
        the op on the values under it (`_Graph._transposed`), a transpose never."""
        index: dict[int, list[Key]] = defaultdict(list)
        for r in self.ref.traced:
            if self.ref.source(r) == r:
                index[self.ref.vn[r]].append(r)
                if r in self.ref.layout and self.ref.instr[r].opcode != "transpose":
                    index[self.ref.layout[r][1]].append(r)
        new = 0
        for o in self.opt.traced:
            if self.opt.source(o) != o:
                continue
            values = [self.opt.vn[o]]
            if o in self.opt.layout and self.opt.instr[o].opcode != "transpose":
                values.append(self.opt.layout[o][1])
            for value in values:
                for r in index.get(value, ()):
                    new += self._pair(o, r, "structure")
        return new

    def _names_kept(self) -> bool:
        """Whether at least half of the instructions identified by structure with exactly one
        reference instruction carry its name as a prefix (one equal to several, a broadcast
        constant, says nothing about names)."""
        pairs = [(o, next(iter(rs))) for o, rs in self.matched.items() if len(rs) == 1]
        if not pairs:
            return False
        kept = sum(_is_prefix(r[1], o[1]) for o, r in pairs)
        return 2 * kept >= len(pairs)

    def _by_name(self, same_line: bool) -> int:
        """Step 2; with `same_line` (a module that does not keep most names) only where more
        than the name agrees (`_supported`)."""
        names: dict[str, list[Key]] = defaultdict(list)
        for r in self.ref.traced:
            names[r[1]].append(r)
        new = 0
        for o in self._unmatched_opt():
            parts = o[1].split(".")
            for n in range(len(parts), 0, -1):
                found = names.get(".".join(parts[:n]))
                if found and len(found) == 1 and self._agree(o, found[0]):
                    if not same_line or self._supported(o, found[0]):
                        new += self._pair(o, found[0], "name")
                    break
        return new

    def _by_metadata(self, shape_key: str | None) -> int:
        def group(graph: _Graph, keys) -> dict[tuple, list[Key]]:
            out: dict[tuple, list[Key]] = defaultdict(list)
            for k in keys:
                i = graph.instr[k]
                if graph.op_name(k) and i.source_file:
                    value = _value_shape(i)
                    shape = (
                        _shape_sig(value)
                        if shape_key == "dims"
                        else (value.dtype, value.num_elements)
                        if shape_key == "elements"
                        else None
                    )
                    key = (graph.kind(k), graph.op_name(k), i.source_file, i.source_line, shape)
                    out[key].append(k)
            return out

        opt = group(self.opt, self._unmatched_opt())
        ref = group(self.ref, [r for r in self.ref.traced if not self.back.get(r)])
        new = 0
        for key, os_ in opt.items():
            rs = ref.get(key, ())
            if len(os_) == 1 and len(rs) == 1 and self._agree(os_[0], rs[0]):
                new += self._pair(os_[0], rs[0], "metadata")
        return new

    def _by_order(self) -> int:
        """Dots and convolutions of one signature (kind, `op_name` and source line, the value's
        type and elements, the operands' elements), when as many are left unidentified on each
        side: the k-th in reference order is the k-th in kernel order. A model's layers repeat
        one line and the copies do the same work, so only which layer's copy is which is taken
        from the order. Then the same without `op_name` and line (XLA drops the metadata of
        some GEMMs it rewrites into cuBLAS calls)."""
        kernels = {k: n for n, k in enumerate(self.opt.kernel_order)}
        position = {k: n for n, k in enumerate(self.ref.traced)}
        new = 0
        for metadata in ("all", "shapes", "operands", "metadata"):
            opt = self._signatures(self.opt, self._unmatched_opt(), metadata)
            ref = self._signatures(
                self.ref, [r for r in self.ref.traced if not self.back.get(r)], metadata
            )
            for key, os_ in opt.items():
                rs = ref.get(key, [])
                if len(os_) != len(rs):
                    continue
                os_.sort(key=lambda k: kernels.get(self.opt.kernel[k], -1))
                rs.sort(key=position.get)
                new += sum(self._pair(o, r, "order") for o, r in self._in_order(os_, rs))
            if new:
                break
        return new

    def _in_order(self, os_: list[Key], rs: list[Key]) -> list[tuple[Key, Key]]:
        """Each optimized instruction, in order, with the first reference one left whose
        identified operands agree (`_agree`), else with the first one left."""
        left = list(rs)
        pairs = []
        for o in os_:
            r = next((r for r in left if self._agree(o, r)), left[0])
            left.remove(r)
            pairs.append((o, r))
        return pairs

    @staticmethod
    def _signatures(graph: _Graph, keys, by: str) -> dict[tuple, list[Key]]:
        """Signature -> instructions: `by` "all" (metadata, the value's type and elements, the
        operands' elements), "shapes" (the value and the operands), "operands" (a split-K
        GEMM's value has K's splits as a dimension of its own) or "metadata" (cuBLAS pads a
        GEMM's odd dimensions, GPT-2's 50,257-word vocabulary to 50,264, and the GEMM may write
        the f32 its consumer converts to)."""
        out: dict[tuple, list[Key]] = defaultdict(list)
        for k in keys:
            i = graph.instr[k]
            if kind(i) not in _ORDERED or (by in ("all", "metadata") and not graph.op_name(k)):
                continue
            value = _value_shape(i)
            key = [kind(i)]
            if by != "metadata":
                operands = graph.operands[k][:2]
                key += sorted(graph.instr[graph.source(o)].shape.num_elements for o in operands)
            if by in ("all", "shapes"):
                key.append(value.num_elements)
            if by in ("all", "metadata"):
                key += [graph.op_name(k), i.source_file, i.source_line]
            if by == "all":
                key.append(value.dtype)
            out[tuple(key)].append(k)
        return out

    def _epilogues(self) -> int:
        """What a dot's kernel writes beyond the dot, once the dot is identified: XLA folds
        `transpose(dot(a, b))` into the dot (its value then has the transpose's dimensions, or,
        square, its `op_name`) and `dot * c` into a cuBLAS call's alpha, and a cuBLASLt call
        adds its epilogue's operands (`BIAS`: a broadcast vector, last operand; `beta` != 0:
        the third operand) to the product. Each such reference op, the only unidentified reader
        of the value before it, is identified with the kernel (how "epilogue"), which is then
        numbered as the last of them. An add of a value not identified yet (`beta`'s C, the
        residual of the layer before) is looked for again in the next round."""
        users = self._ref_users()
        new = 0
        for o in self.opt.traced:
            if o in self._written or self.opt.kind(o) not in _ORDERED:
                continue
            if o not in self.value_of:  # the dot alone is identified: its transpose and alpha
                rs = self.matched.get(o)
                if not rs or len(rs) != 1:
                    continue
                (r,) = rs
                transpose = self._folded_transpose(o, r, users)
                if transpose is not None:
                    new += self._pair(o, transpose, "epilogue")
                    r = transpose
                scaled = self._scaled_by_alpha(o, r, users)
                if scaled is not None:
                    new += self._pair(o, scaled, "epilogue")
                    r = scaled
                self.value_of[o] = r
            added, finished = self._epilogue_adds(o, self.value_of[o], users)
            new += added
            if finished:
                self._written.add(o)
        return new

    def _unidentified_readers(self, r: Key, users) -> list[Key]:
        """The computing reference instructions that read `r` and are not identified yet."""
        return [u for u in users.get(r, ()) if not self.back.get(u) and self.ref.source(u) == u]

    def _scaled_by_alpha(self, o: Key, r: Key, users) -> Key | None:
        """The multiplication of dot `r`'s value by a constant (or its division by one) that
        cuBLAS call `o` does as its `alpha` (XLA's GEMM rewriter folds `dot * c` into the
        call): its only unidentified reader, by a constant equal to alpha; else None."""
        alpha = _alpha(self.opt.instr[o])
        if alpha is None:
            return None
        readers = self._unidentified_readers(r, users)
        if len(readers) != 1:
            return None
        (u,) = readers
        instr, operands = self.ref.instr[u], [self.ref.source(k) for k in self.ref.operands[u]]
        if instr.opcode not in ("multiply", "divide") or len(operands) != 2:
            return None
        if instr.opcode == "divide" and operands[0] != r:
            return None  # c / dot is no scale of the dot
        others = [k for k in operands if k != r]
        if len(others) != 1 or instr.shape.num_elements != _elements(self.ref.instr[r]):
            return None
        try:
            factor = float(self.ref.literal(others[0]) or "nan")
        except ValueError:
            return None
        if instr.opcode == "divide":
            factor = 1 / factor if factor else float("nan")
        return u if abs(factor - alpha) <= 1e-6 * abs(alpha) else None

    def _folded_transpose(self, o: Key, r: Key, users) -> Key | None:
        """The transpose of dot `r`'s value that kernel `o` writes instead (its only
        unidentified reader, of the kernel's dimensions or, square, its `op_name`), else None."""
        readers = self._unidentified_readers(r, users)
        if len(readers) != 1:
            return None
        t, oi = self.ref.instr[readers[0]], self.opt.instr[o]
        value = _value_shape(oi)
        if t.opcode != "transpose" or t.shape.num_elements != value.num_elements:
            return None
        if _squeezed(value) != _squeezed(t.shape):
            return None
        if _squeezed(t.shape) != _squeezed(self.ref.instr[r].shape):
            return readers[0]
        same_name = oi.op_name is not None and oi.op_name == self.ref.op_name(readers[0])
        return readers[0] if same_name and oi.op_name != self.ref.op_name(r) else None

    def _epilogue_adds(self, o: Key, r: Key, users) -> tuple[int, bool]:
        """Pairs library call `o` with the adds of its epilogue's operands onto `r` (each the
        one unidentified add of the value before it and of an extra operand): (how many,
        whether `o` is done: every add found, none to find, or an epilogue this cannot read)."""
        oi = self.opt.instr[o]
        extra = list(self._data_operands(o, every=True)[2:]) if _is_library(oi) else []
        if not extra or len(extra) != _epilogue_operands(oi):
            return 0, True
        chain = []
        while extra:
            step = [
                (u, e)
                for u in users.get(r, ())
                if not self.back.get(u) and self.ref.instr[u].opcode == "add"
                for e in extra
                if self._adds(u, r, e)
            ]
            if len(step) != 1:
                break
            ((u, e),) = step
            chain.append(u)
            extra.remove(e)
            r = u
        if not chain or extra:
            return 0, False
        new = sum(self._pair(o, u, "epilogue") for u in chain)
        self.value_of[o] = chain[-1]
        return new, True

    def _adds(self, u: Key, r: Key, e: Key) -> bool:
        """Whether reference `u` adds to `r` the value of optimized operand `e` (or its
        broadcast)."""
        others = [self.ref.source(k) for k in self.ref.operands[u] if self.ref.source(k) != r]
        if len(others) != 1:
            return False
        x = others[0]
        values = {x}
        if self.ref.instr[x].opcode == "broadcast" and len(self.ref.operands[x]) == 1:
            values.add(self.ref.source(self.ref.operands[x][0]))
        known = self.matched.get(e, set())
        return bool(values & known) or self.opt.vn.get(e) in {self.ref.vn.get(v) for v in values}

    def _ref_users(self) -> dict[Key, list[Key]]:
        """Reference value -> the traced instructions that read it."""
        if not hasattr(self, "_users"):
            self._users: dict[Key, list[Key]] = defaultdict(list)
            for r in self.ref.traced:
                for k in self.ref.operands[r]:
                    self._users[self.ref.source(k)].append(r)
        return self._users

    def _by_neighbours(self) -> int:
        """Forward: the one unidentified reference user, of this opcode, of the values an
        instruction reads (an elementwise op of one operand also across an unidentified
        transpose: XLA moves such ops before a transpose, `convert(transpose(x))` ->
        `transpose(convert(x))`). Backward: the operands, in the same places, of an identified
        pair."""
        self._ref_users()
        if not hasattr(self, "_across"):
            self._across: dict[Key, list[tuple[Key, Key]]] = defaultdict(list)
            for r in self.ref.traced:
                if self.ref.instr[r].opcode in _ELEMENTWISE and len(self.ref.operands[r]) == 1:
                    t = self.ref.source(self.ref.operands[r][0])
                    if self.ref.instr[t].opcode == "transpose" and len(self.ref.operands[t]) == 1:
                        self._across[self.ref.source(self.ref.operands[t][0])].append((r, t))
        new = 0
        for o in self._unmatched_opt():
            found: set[Key] | None = None
            for k in self._data_operands(o):
                rs = self.matched.get(k)
                if not rs:
                    continue
                users = {
                    u
                    for r in rs
                    for u in self._users.get(r, ())
                    if not self.back.get(u) and self._alike(o, u)
                } | {
                    u
                    for r in rs
                    for u, t in self._across.get(r, ())
                    if not self.back.get(t) and not self.back.get(u) and self._alike(o, u)
                }
                found = users if found is None else found & users
            if found and len(found) == 1:
                (u,) = found
                if self._agree(o, u) and not self._elsewhere_operand(o, u):
                    new += self._pair(o, u, "neighbours")
        for o, rs in list(self.matched.items()):
            if len(rs) == 1:
                new += self._operands_of(o, next(iter(rs)))
        return new

    def _elsewhere_operand(self, o: Key, r: Key) -> bool:
        """Whether, in place, an operand of `o` is unidentified where `r`'s is identified (with
        another instruction): `o` then reads something else than `r` does (`(a / b) / c` made
        `a / (b * c)`: the new division reads `a` as `a / b` did)."""
        if self.opt.instr[o].opcode in _COMMUTATIVE or _is_library(self.opt.instr[o]):
            return False
        ops = self._data_operands(o)
        refs = [self.ref.source(k) for k in self.ref.operands[r]]
        return len(ops) == len(refs) and any(
            not self.matched.get(k) and k in self.opt.traced_set and self.back.get(x)
            for k, x in zip(ops, refs, strict=True)
        )

    def _operands_of(self, o: Key, r: Key) -> int:
        if _is_library(self.opt.instr[o]):
            return 0  # its operands may be swapped: not identified by place
        ops = self._data_operands(o)
        refs = [self.ref.source(k) for k in self.ref.operands[r]]
        if len(ops) != len(refs):
            return 0
        if self.opt.instr[o].opcode in _COMMUTATIVE:
            ops = [k for k in ops if not self.matched.get(k)]
            refs = [k for k in refs if not self.back.get(k)]
            if len(ops) != 1 or len(refs) != 1:
                return 0
        new = 0
        for a, b in zip(ops, refs, strict=True):
            if (
                a in self.opt.traced_set
                and b in self.ref.traced_set
                and not self.matched.get(a)
                and not self.back.get(b)
                and self._alike(a, b)
            ):
                new += self._pair(a, b, "neighbours")
        return new

    def _data_operands(self, o: Key, every: bool = False) -> list[Key]:
        """What `o` computes from: a library call's first two operands (a GEMM's bias or a
        fused convolution's side input stands for an instruction of its own; `every`: all),
        each taken through the transposes XLA added to lay it out (`_laid_out`)."""
        ops = [self._laid_out(self.opt.source(k)) for k in self.opt.operands[o]]
        return ops[:2] if _is_library(self.opt.instr[o]) and not every else ops

    def _laid_out(self, o: Key) -> Key:
        """The value under a chain of unidentified transposes of the optimized module: XLA adds
        them to give a dot or a library call the layout it wants (the reference has none)."""
        while not self.matched.get(o) and self.opt.instr[o].opcode == "transpose":
            operands = self.opt.operands[o]
            if len(operands) != 1:
                break
            o = self.opt.source(operands[0])
        return o

    def _alike(self, o: Key, r: Key) -> bool:
        oi, ri = self.opt.instr[o], self.ref.instr[r]
        return (
            self.opt.kind(o) == self.ref.kind(r)
            and _elements(oi) == ri.shape.num_elements
            and not (oi.op_name and (name := self.ref.op_name(r)) and oi.op_name != name)
        )

    def _unmatched_opt(self) -> list[Key]:
        return [o for o in self.opt.traced if not self.matched.get(o) and self.opt.source(o) == o]

    def _agree(self, o: Key, r: Key) -> bool:
        """Opcode, element count and op_name agree, and so do operands identified already."""
        oi, ri = self.opt.instr[o], self.ref.instr[r]
        if self.opt.kind(o) != self.ref.kind(r) and not (
            oi.opcode in _VIEWS and ri.opcode in _VIEWS
        ):
            return False
        if _elements(oi) != ri.shape.num_elements:
            return False
        if oi.op_name and (name := self.ref.op_name(r)) and oi.op_name != name:
            return False
        ops = self._data_operands(o)
        refs = [self._carriers(self.ref.source(k)) for k in self.ref.operands[r]]
        if len(ops) != len(refs):
            return False
        if oi.opcode in _COMMUTATIVE or _is_library(oi):  # a library call may swap operands
            known = [self.matched.get(k) for k in ops]
            return all(not s or any(s & x for x in refs) for s in known)
        for k, xs in zip(ops, refs, strict=True):
            s = self.matched.get(k)
            if s and not s & xs and self.opt.vn.get(k) not in {self.ref.vn.get(x) for x in xs}:
                return False
        return True

    def _supported(self, o: Key, r: Key) -> bool:
        """Evidence beyond a name (names can coincide: XLA numbers the instructions it makes
        from the same counters): the same source line, and an operand identified with one of
        the reference's."""
        if not _same_line(self.opt.instr[o], self.ref.instr[r]):
            return False
        refs = set().union(*(self._carriers(self.ref.source(k)) for k in self.ref.operands[r]))
        return any(self.matched.get(k, set()) & refs for k in self._data_operands(o))

    def _carriers(self, r: Key) -> set[Key]:
        """`r` and, while unidentified, what it carries on unchanged in size: XLA drops such ops
        (`maximum(x, -inf)`), so the optimized operand is then the value under them."""
        out = {r}
        while not self.back.get(r):
            instr = self.ref.instr.get(r)
            if instr is None:
                break
            data = [
                self.ref.source(k)
                for k in self.ref.operands[r]
                if self.ref.instr[self.ref.source(k)].opcode != "constant"
                and not _constant_broadcast(self.ref, self.ref.source(k))
            ]
            if len(data) != 1 or self.ref.instr[data[0]].shape.num_elements != (
                instr.shape.num_elements
            ):
                break
            r = data[0]
            if r in out:  # a computation called from two places, one call reading the other
                break
            out.add(r)
        return out

    def trace(self, r: Key, order: Mapping[str, int]) -> Trace:
        """Where reference instruction `r` ended up; `order`: kernel -> its place."""
        instr = self.ref.instr[r]
        source = self.ref.source(r)
        if source != r:  # a view: where the value under it is
            if source not in self.ref.traced_set:
                return Trace(instr.name, r[0], instr.opcode, "outside", how="view")
            under = self.trace(source, order)
            how = "view" if under.status != "lost" else None
            return replace(
                under, instruction=instr.name, computation=r[0], opcode=instr.opcode, how=how
            )
        copies = sorted(self.back.get(r, ()), key=lambda k: k[1])
        if not copies:
            return Trace(instr.name, r[0], instr.opcode, "lost")
        kernels = {self.opt.kernel.get(o) for o in copies} - {None}
        holders = tuple(sorted(kernels, key=lambda k: order.get(k, len(order))))
        names = tuple(o[1] for o in copies)
        how = self.how.get(r)
        if not holders:
            return Trace(instr.name, r[0], instr.opcode, "outside", None, (), names, how)
        writers = [self.opt.kernel[o] for o in copies if o in self.opt.output]
        kernel = min(writers, key=lambda k: order.get(k, len(order))) if writers else holders[0]
        return Trace(instr.name, r[0], instr.opcode, "kernel", kernel, holders, names, how)


def _fold(ref: _Graph, traces: dict[Key, Trace], order: Mapping[str, int]) -> tuple[Trace, ...]:
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
            if ref.instr[key].opcode in _FOLDABLE and _fold_into_readers(
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


def _fold_graph(ref: _Graph) -> tuple[dict[Key, set[Key]], set[Key], set[Key]]:
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
    ref: _Graph, traces: dict[Key, Trace], order: Mapping[str, int], key: Key, readers: set[Key]
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


def _constant_broadcast(graph: _Graph, key: Key) -> bool:
    instr = graph.instr[key]
    return instr.opcode == "broadcast" and all(
        graph.instr[graph.source(k)].opcode == "constant" for k in graph.operands[key]
    )


def _layout_change(graph: _Graph, key: Key) -> str:
    """`f32[64,256]{0,1} -> f32[64,256]{1,0}`: what a copy does, from its operand's shape and
    its own."""
    operands = graph.operands[key]
    before = graph.instr[operands[0]].shape if operands and operands[0] in graph.instr else None
    return f"{before} -> {graph.instr[key].shape}"


def _same_line(a: Instruction, b: Instruction) -> bool:
    return a.source_file is not None and (a.source_file, a.source_line) == (
        b.source_file,
        b.source_line,
    )


def _is_prefix(reference: str, optimized: str) -> bool:
    return optimized == reference or optimized.startswith(reference + ".")
