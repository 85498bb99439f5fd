"""Which kernel of an optimized module holds each instruction of a reference module.

The reference is normally the unoptimized module of the same program (`Lowered.as_text("hlo",
debug_info=True)`, or a dumped `*.before_optimizations.txt`); it may also be another optimized
module (then its fused bodies are its instructions). Every reference instruction that computes
something (not parameter, constant, tuple, get-tuple-element, call) gets one `Trace`:

* status "kernel": a copy of it runs inside a kernel of the optimized module. When XLA
  duplicated it into several kernels, `holders` lists them all and `kernel` is the one that
  writes it out (its fusion root or an output of a multi-output fusion), else the first.
* status "outside": it became an instruction that launches nothing (a bitcast, a tuple, a loop).
* status "lost": no instruction of the optimized module could be identified as it (rewritten,
  merged by CSE into another, removed, or renamed past recognition). Never guessed.

How an optimized instruction is identified with a reference one (`Trace.how`), in this order:

1. "structure": the same opcode, shape and attributes applied to the same values (value
   numbering over both graphs; an elementwise op's or a broadcast scalar's shape is its type and
   element count; fused parameters resolve to the fusion's operands; reshape, bitcast, copy and
   identity broadcasts are views of their operand, and so is a precision round trip, f32 -> bf16
   -> f32, which XLA drops where it may keep excess precision; commutative operands are sorted;
   equal constants are one value). Exact: it is the same computation.
2. "name": XLA keeps instruction names through its GPU passes, appending `.N` to clones
   (`tanh.1` -> `tanh.1.7`). The longest dot-prefix of the optimized name that names a reference
   instruction, if opcode, element count and `op_name` agree and the operands already identified
   agree (an unidentified reference operand that only carries a value on, unchanged in size, such
   as `maximum(x, -inf)` that XLA drops, agrees when the value under it does). Where fewer than
   half of the instructions identified by structure carry their reference name (the CPU with jax
   0.10.2 renumbers fused clones, `tanh.1` -> `tanh.0`; XLA also names what it makes from the
   same counters, so names can coincide), a name counts only with the same source line and an
   operand identified with one of the reference's.
3. "metadata": the one instruction on each side with this opcode, `op_name` and source line
   (first with the shape, then the element type and count, then neither), when exactly one is
   left unidentified on each side and the operands already identified agree.
4. "neighbours": the one unidentified reference instruction of this opcode and element count
   that reads the values an optimized instruction reads (forward), or the operands in the same
   places of a pair already identified (backward; for a commutative op only when one operand is
   left on each side), when `op_name`s agree.
5. "order", when 1 to 4 find nothing more: dots and convolutions of one signature, as many
   left on each side, the k-th in reference order with the k-th in kernel order (the first whose
   operands agree): a model's layers repeat one source line (`_by_order`).

An opcode here is the instruction's `kind`: a library call is the instruction it replaced (a
cuBLAS/cuBLASLt GEMM custom-call a `dot`, a cuDNN convolution custom-call a `convolution`), its
value its result (the first element of its (result, workspace) tuple), its data operands the
first two, each taken through the transposes XLA added to lay it out; and a division by a
constant is the multiplication by its inverse XLA makes of it. So a dot that one compilation
runs in a Triton GEMM fusion and another as a cuBLAS call is identified in both (by steps 2 to
5: the call's attributes differ from the dot's, so never by structure). An identified value is
identified in every kernel that computes it again (XLA duplicates cheap ops into each consumer).

A view in the reference (a reshape, bitcast or copy of the same elements, an identity broadcast)
computes nothing: its trace is that of the value under it (`how` "view"), or "outside" when that is
a parameter or constant.

A computation called from several places (`call`) is numbered for one of them, so its
instructions are found mostly by steps 2 to 4 there. After each round of 2 to 5 the optimized
graph is numbered again with each identified instruction given its reference's number, and step
1 runs again, so what follows a rewritten op is found by structure.
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
        how: "structure", "name", "metadata", "neighbours", "order" or "view"; None when lost.
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
    ref = _Graph(reference, table, literal_payloads(reference_text or ""))
    opt = _Graph(optimized, table, literal_payloads(optimized_text or ""))
    matcher = _Matcher(ref, opt)
    matcher.run()
    order = {k: n for n, k in enumerate(opt.kernel_order)}
    traces = tuple(matcher.trace(key, order) for key in ref.traced)
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

    def __init__(self, module: HloModule, table: dict[tuple, int], payloads: dict[str, str]):
        self.module = module
        self.payloads = payloads
        self.table = table
        self.instr: dict[Key, Instruction] = {}
        self.operands: dict[Key, tuple[Key, ...]] = {}
        self.src: dict[Key, Key] = {}  # a view/plumbing instruction -> the instruction computing it
        self.kernel: dict[Key, str | None] = {}  # in a kernel body -> kernel; outside -> None
        self.output: set[Key] = set()  # instructions a kernel writes out
        self.traced: list[Key] = []  # computing instructions, in order
        self.traced_set: set[Key] = set()
        self.callers: dict[str, tuple[Instruction, Computation]] = {}
        self.vn: dict[Key, int] = {}
        self.override: dict[Key, int] = {}
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
        for comp in executed_computations(self.module):
            for instr in comp.instructions:
                if instr.name in kernels and instr.opcode in ("fusion", "fusion-start"):
                    self._add_body(comp, instr, instr.name)
                else:
                    self._add(comp, instr, instr.name if instr.name in kernels else None)
                    if instr.name in kernels:
                        self.output.add((comp.name, instr.name))

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
        self.vn, self.src = {}, {}
        for key in self.instr:
            if key not in self.vn:
                self._number(key)

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
        elif (
            op in ("fusion", "fusion-start") and self.kernel.get(key) is not None
        ) or op == "call":
            vn, src = self._fusion_value(key, instr)
        elif op == "get-tuple-element" and operands:
            vn, src = self._element(key, instr)
        elif _is_view(instr, self._shape(operands[0]) if operands else None):
            vn, src = self._value(operands[0]), self.src.get(operands[0], operands[0])
        elif (round_trip := self._round_trip(instr, operands)) is not None:
            vn, src = self._value(round_trip), self.src.get(round_trip, round_trip)
        else:
            values = [self._value(o) for o in operands]
            if op in _COMMUTATIVE:
                values.sort()
            shape = (
                (instr.shape.dtype, instr.shape.num_elements)
                if op in _ELEMENTWISE or self._scalar_broadcast(instr, operands)
                else _shape_sig(instr.shape)
            )
            vn = self._intern((op, shape, _attrs(instr), tuple(values)))
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
        inner = self.instr.get(self.src.get(operands[0], operands[0]))
        if inner is None or inner.opcode != "convert":
            return None
        key = self.src.get(operands[0], operands[0])
        under = self.operands[key][0] if self.operands.get(key) else None
        shape = self._shape(under) if under is not None else None
        return under if shape is not None and shape.dtype == instr.shape.dtype else None

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
        for name in instr.called_computations:
            body = self._computation(name)
            if body is not None and body.root is not None:
                root = (body.name, body.root.name)
                if root in self.instr:
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
        return self.table.setdefault(item, len(self.table))

    def kind(self, key: Key) -> str:
        """`kind` of the instruction, with a division by a constant counted as the
        multiplication XLA rewrites it into (`x / broadcast(c)` -> `x * broadcast(1 / c)`)."""
        instr = self.instr[key]
        if instr.opcode == "divide" and len(self.operands[key]) == 2:
            divisor = self.source(self.operands[key][1])
            if self.instr[divisor].opcode == "constant" or _constant_broadcast(self, divisor):
                return "multiply"
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


def _is_view(instr: Instruction, operand: Shape | None) -> bool:
    if operand is None or instr.shape.is_tuple or operand.is_tuple:
        return False
    if instr.opcode in _VIEWS:
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


def _value_shape(instr: Instruction) -> Shape:
    """The shape of the value: a library call's is its result's, the first of its tuple."""
    shape = instr.shape
    if _is_library(instr) and shape.is_tuple and shape.tuple_shapes:
        return shape.tuple_shapes[0]
    return shape


def _elements(instr: Instruction) -> int:
    return _value_shape(instr).num_elements


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
            if not new:
                new = self._by_order()
            if not new:
                break

    def _renumber(self) -> None:
        """Numbers the optimized graph, each identified instruction as its reference."""
        self.opt.number({o: self.ref.vn[min(rs)] for o, rs in self.matched.items() if rs})

    def _pair(self, o: Key, r: Key, how: str) -> bool:
        """Identifies `o` with `r`, and so every copy of `o`: the same value computed again in
        another kernel (XLA duplicates cheap ops into each consumer's fusion)."""
        if r in self.matched[o]:
            return False
        for copy in self._copies.get(self._plain.get(o), [o]):
            self.matched[copy].add(r)
            self.back[r].add(copy)
        self.how.setdefault(r, how)
        return True

    def _by_structure(self) -> int:
        index: dict[int, list[Key]] = defaultdict(list)
        for r in self.ref.traced:
            if self.ref.source(r) == r:
                index[self.ref.vn[r]].append(r)
        new = 0
        for o in self.opt.traced:
            if self.opt.source(o) != o:
                continue
            for r in index.get(self.opt.vn[o], ()):
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
                if i.op_name and i.source_file:
                    value = _value_shape(i)
                    shape = (
                        _shape_sig(value)
                        if shape_key == "dims"
                        else (value.dtype, value.num_elements)
                        if shape_key == "elements"
                        else None
                    )
                    out[(graph.kind(k), i.op_name, i.source_file, i.source_line, shape)].append(k)
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
            if kind(i) not in _ORDERED or (by in ("all", "metadata") and not i.op_name):
                continue
            value = _value_shape(i)
            key = [kind(i)]
            if by != "metadata":
                operands = graph.operands[k][:2]
                key += sorted(graph.instr[graph.source(o)].shape.num_elements for o in operands)
            if by in ("all", "shapes"):
                key.append(value.num_elements)
            if by in ("all", "metadata"):
                key += [i.op_name, i.source_file, i.source_line]
            if by == "all":
                key.append(value.dtype)
            out[tuple(key)].append(k)
        return out

    def _by_neighbours(self) -> int:
        """Forward: the one unidentified reference user, of this opcode, of the values an
        instruction reads. Backward: the operands, in the same places, of an identified pair."""
        if not hasattr(self, "_users"):
            self._users: dict[Key, list[Key]] = defaultdict(list)
            for r in self.ref.traced:
                for k in self.ref.operands[r]:
                    self._users[self.ref.source(k)].append(r)
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
                }
                found = users if found is None else found & users
            if found and len(found) == 1:
                (u,) = found
                if self._agree(o, u):
                    new += self._pair(o, u, "neighbours")
        for o, rs in list(self.matched.items()):
            if len(rs) == 1:
                new += self._operands_of(o, next(iter(rs)))
        return new

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

    def _data_operands(self, o: Key) -> list[Key]:
        """What `o` computes from: a library call's first two operands (a GEMM's bias or a
        fused convolution's side input stands for an instruction of its own), each taken
        through the transposes XLA added to lay it out (`_laid_out`)."""
        ops = [self._laid_out(self.opt.source(k)) for k in self.opt.operands[o]]
        return ops[:2] if _is_library(self.opt.instr[o]) else ops

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
            and not (oi.op_name and ri.op_name and oi.op_name != ri.op_name)
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
        if oi.op_name and ri.op_name and oi.op_name != ri.op_name:
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
