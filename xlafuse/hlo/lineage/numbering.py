"""Value numbering of a module's graph: two instructions of one number compute the same value.

The reference and the optimized graph share one table of numbers, so an instruction of either
is identified by structure when its number is one of the other's (`matching.py`, step 1).

Each instruction is numbered by the first that applies of:

1. the plumbing: a parameter is its caller's operand (a fusion's or a `call`'s: a fused
   parameter N is the fusion's operand N; an entry parameter is its number), a fusion or a
   `call` is its body's root, a `get-tuple-element` is the element; equal constants are one
   value (their literal), each `call` of a computation called from several places numbers the
   body again for its own operands (the body's instructions keep the numbers of one caller);
2. `rules.RULES`, in order: the rewrites XLA makes, each numbered as what it makes;
3. the plain value: the opcode, the shape (an elementwise op's or a broadcast scalar's is its
   type and element count), the attributes that matter (`ops.KEY_ATTRS`) and the operands'
   numbers (sorted for a commutative op).

An identified instruction of the optimized graph is then given its reference's number (the
`override` of `NumberedGraph.number`), so what reads it is numbered in reference terms.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xlafuse.hlo.ir import HloModule, Instruction
from xlafuse.hlo.lineage import ops
from xlafuse.hlo.lineage.graph import Graph, Key, Value
from xlafuse.hlo.lineage.rules import RULES, Rule, drop_round_trip_openers

# An op of a constant second operand, as XLA's simplifier rewrites it (`NumberedGraph.kind`)
_BY_A_CONSTANT = {"divide": "multiply", "subtract": "add"}


class NumberedGraph(Graph):
    """A module's graph with its value numbers.

    Attributes:
        table: value item -> value number, shared by the two graphs traced.
        untransposed: a transposed value's number -> (the permutation, the number of the value
            under it), shared by the two graphs.
        vn: key -> its value number.
        src: key -> the instruction that computes its value (through views and plumbing).
        layout: an instruction whose value is another's laid out transposed -> (the permutation
            of the dimensions not of size 1, that value's number); see `rules.transposition`.
        override: an identified instruction -> its reference's number (`number`).
        site_elements: a `call` numbered for its own operands, of a tuple result -> each
            element's (number, source).
        rules: the rewrites followed, in order (`rules.RULES`).
    """

    def __init__(
        self,
        module: HloModule,
        table: dict[tuple, int],
        untransposed: dict[int, tuple],
        payloads: dict[str, str],
        *,
        rules: tuple[Rule, ...] = RULES,
    ):
        super().__init__(module, payloads)
        self.rules = rules
        self._rules_for: dict[str, tuple[Rule, ...]] = {}  # opcode -> the rules tried on it
        self.table = table
        self.untransposed = untransposed
        self.vn: dict[Key, int] = {}
        self.src: dict[Key, Key] = {}
        self.layout: dict[Key, tuple[tuple[int, ...], int]] = {}
        self.override: dict[Key, int] = {}
        self.site_elements: dict[Key, tuple[tuple[int, Key], ...]] = {}
        self._attrs: dict[Key, tuple] = {}  # `ops.attrs` of each instruction, read once
        self._roots: dict[Key, Key | None] = {}  # a fusion or call -> its body's root

    # -- the walk -------------------------------------------------------------------------
    def number(self, override: Mapping[Key, int]) -> None:
        """(Re)computes value numbers and sources; `override` sets the numbers of identified
        instructions (to their reference's), so what reads them is numbered in reference terms."""
        self.override = dict(override)
        self.vn, self.src, self.layout = {}, {}, {}
        for key in self.instr:
            if key not in self.vn:
                self._number(key)
        drop_round_trip_openers(self)

    def value(self, key: Key) -> int:
        """The value number of `key`, numbered now if it is not yet."""
        if key in self.vn:
            return self.vn[key]
        if key not in self.instr:
            return self.intern(("missing", self.module.name, key))
        self.vn[key] = self.intern(("cycle", self.module.name, key))  # guards malformed loops
        return self._number(key)

    def _number(self, key: Key) -> int:
        found = self._plumbing(key)
        for rule in self._rules(self.instr[key].opcode) if found is None else ():
            found = rule.apply(key, self)
            if found is not None:
                break
        if found is None:
            found = Value(self.intern(self.item(key)), key)
        number = found.number if found.final else self.override.get(key, found.number)
        if found.layout is not None:
            self.layout[key] = found.layout
        self.vn[key], self.src[key] = number, found.source
        return number

    def _rules(self, opcode: str) -> tuple[Rule, ...]:
        """The rules that may apply to an instruction of `opcode`, in order."""
        found = self._rules_for.get(opcode)
        if found is None:
            found = self._rules_for[opcode] = tuple(r for r in self.rules if opcode in r.opcodes)
        return found

    def item(
        self, key: Key, *, operands: tuple[Key, ...] | None = None, attrs: Any = None
    ) -> tuple:
        """The plain value item of `key`: (opcode, shape, attributes, the operands' numbers);
        `operands` and `attrs` replace the instruction's own (a rule that reads it otherwise)."""
        instr = self.instr[key]
        if operands is None:
            operands = self.operands[key]
        if attrs is None:
            attrs = self._attrs.get(key)
            if attrs is None:
                attrs = self._attrs[key] = ops.attrs(instr)
        values = [self.value(o) for o in operands]
        if instr.opcode in ops.COMMUTATIVE:
            values.sort()
        shape = (
            ops.elementwise(instr.shape)
            if instr.opcode in ops.ELEMENTWISE or self.scalar_broadcast(key)
            else ops.shape_sig(instr.shape)
        )
        return (instr.opcode, shape, attrs, tuple(values))

    def intern(self, item: tuple) -> int:
        """The number of value `item` (a new one for an item not seen before)."""
        number = self.table.setdefault(item, len(self.table))
        if item[0] == "transposed":
            self.untransposed[number] = item[1:]
        return number

    # -- the plumbing ---------------------------------------------------------------------
    def _plumbing(self, key: Key) -> Value | None:
        """The value of a parameter, constant, fusion, call or tuple element; else None."""
        instr = self.instr[key]
        op = instr.opcode
        if op == "parameter":
            return self._parameter(key, instr)
        if op == "constant":
            literal = self.payloads.get(instr.name)
            item = ("constant", ops.shape_sig(instr.shape), literal)
            if literal is None:  # not read from text: never equal to another
                item = ("opaque", self.module.name, key)
            return Value(self.intern(item), key)
        if op == "call" and self._elsewhere(instr):
            return self._site_value(key, instr)
        if (op in ("fusion", "fusion-start") and self.kernel.get(key) is not None) or op == "call":
            return self._fusion_value(key, instr)
        if op == "get-tuple-element" and self.operands[key]:
            return self._element(key, instr)
        return None

    def _parameter(self, key: Key, instr: Instruction) -> Value:
        caller = self.callers.get(key[0])
        number = self.parameter_number(instr)
        if caller is not None and number is not None:
            fusion, comp = caller
            if number < len(fusion.operands):
                outer = (comp.name, fusion.operands[number])
                if outer in self.instr:
                    return Value(self.value(outer), self.src.get(outer, outer))
        if key[0] == self.entry:
            return Value(self.intern(("entry-parameter", number)), self.src.get(key, key))
        return Value(self.intern(("parameter", self.module.name, key)), self.src.get(key, key))

    def _fusion_value(self, key: Key, instr: Instruction) -> Value:
        if key not in self._roots:
            self._roots[key] = None
            for name in instr.called_computations:
                body = self.computation(name)
                if body is not None and body.root is not None:
                    root = (body.name, body.root.name)
                    if root in self.instr:
                        self._roots[key] = root
                        break
        root = self._roots[key]
        if root is not None:
            return Value(self.value(root), self.src.get(root, root))
        return Value(self.intern(("opaque", self.module.name, key)), key)

    def _element(self, key: Key, instr: Instruction) -> Value:
        operand = self.operands[key][0]
        value = self.value(operand)
        tup = self.src.get(operand, operand)
        tinstr = self.instr.get(tup)
        index = int(instr.attr("index") or -1)
        if tinstr is not None and index == 0 and ops.is_library(tinstr):
            return Value(value, tup)  # a library call's result
        elements = self.site_elements.get(operand)
        if elements is not None and 0 <= index < len(elements):
            return Value(*elements[index])
        if tinstr is not None and tinstr.opcode == "tuple" and 0 <= index < len(tinstr.operands):
            element = (tup[0], tinstr.operands[index])
            if element in self.instr:
                return Value(self.value(element), self.src.get(element, element))
        return Value(self.intern(("get-tuple-element", value, index)), key)

    def _site_value(self, key: Key, instr: Instruction) -> Value:
        """The value of a `call` of a computation that is numbered for another of its callers:
        its body numbered again for this caller's operands, then restored (its instructions
        keep the numbers of the caller they are numbered for). The elements of a tuple result
        are kept for the `get-tuple-element`s that read them (`site_elements`)."""
        name = instr.called_computations[0].lstrip("%")
        keys = self.body_keys(name)
        saved = {k: (self.vn.pop(k, None), self.src.pop(k, None)) for k in keys}
        caller = self.callers[name]
        self.callers[name] = (instr, self.computation(key[0]))
        try:
            found = self._fusion_value(key, instr)
            root = self.instr.get(found.source)
            if root is not None and root.opcode == "tuple":
                self.site_elements[key] = tuple(
                    (self.value(e), self.src.get(e, e)) for e in self.operands[found.source]
                )
        finally:
            self.callers[name] = caller
            for k, (v, s) in saved.items():
                for table, old in ((self.vn, v), (self.src, s)):
                    if old is None:
                        table.pop(k, None)
                    else:
                        table[k] = old
        return found

    def _elsewhere(self, instr: Instruction) -> bool:
        """Whether `instr` calls a computation that is numbered for another of its callers."""
        if not self.shared:
            return False
        names = instr.called_computations
        if len(names) != 1 or self.sites.get(names[0].lstrip("%"), 0) < 2:
            return False
        return self.callers[names[0].lstrip("%")][0] is not instr

    # -- what the numbers say -------------------------------------------------------------
    def source(self, key: Key) -> Key:
        """The instruction that computes the value `key` names (through views and plumbing)."""
        return self.src.get(key, key)

    def literal(self, key: Key) -> str | None:
        """The literal of a constant, or of the constant a broadcast repeats; else None."""
        self.value(key)  # numbered first: its source is known after
        key = self.src.get(key, key)
        instr = self.instr.get(key)
        if instr is not None and instr.opcode == "broadcast" and len(self.operands[key]) == 1:
            self.value(self.operands[key][0])
            key = self.src.get(self.operands[key][0], self.operands[key][0])
            instr = self.instr.get(key)
        if instr is None or instr.opcode != "constant":
            return None
        return self.payloads.get(instr.name)

    def scalar_broadcast(self, key: Key) -> bool:
        """Whether `key` is a broadcast of one value: its shape does not matter either."""
        operands = self.operands[key]
        if self.instr[key].opcode != "broadcast" or len(operands) != 1:
            return False
        shape = self.shape(operands[0])
        return shape is not None and not shape.is_tuple and shape.num_elements == 1

    def constant_broadcast(self, key: Key) -> bool:
        """Whether `key` is a broadcast of constants."""
        return self.instr[key].opcode == "broadcast" and all(
            self.instr[self.source(k)].opcode == "constant" for k in self.operands[key]
        )

    def kind(self, key: Key) -> str:
        """`ops.kind` of the instruction, with a division by a constant counted as the
        multiplication XLA rewrites it into (`x / broadcast(c)` -> `x * broadcast(1 / c)`), and a
        subtraction of a constant as the addition (`x - c` -> `x + (-c)`)."""
        instr = self.instr[key]
        rewritten = _BY_A_CONSTANT.get(instr.opcode)
        if rewritten is not None and len(self.operands[key]) == 2:
            other = self.source(self.operands[key][1])
            if self.instr[other].opcode == "constant" or self.constant_broadcast(other):
                return rewritten
        return ops.kind(instr)

    def value_name(self, key: Key, matched: Mapping[Key, set[Key]]) -> tuple[str, ...]:
        """What the value `key` computes is, in the reference's terms: the reference
        instructions identified with it, or `parameter N` of the entry; () if unknown."""
        if key[0] == self.entry and self.instr[key].opcode == "parameter":
            number = self.parameter_number(self.instr[key])
            return (f"parameter {number}",) if number is not None else ()
        return tuple(sorted(r[1] for r in matched.get(key, ())))
