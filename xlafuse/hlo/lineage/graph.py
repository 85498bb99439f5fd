"""One module as a graph of keyed instructions: operands, readers, kernels and calls.

An instruction is keyed by (computation, name). A fusion's body is read into the graph with the
kernel that runs it; the computations `call`s run are read as they are (XLA inlines them).
"""

from __future__ import annotations

from collections import defaultdict
from typing import NamedTuple

from xlafuse.hlo.fusion import analyze_module, executed_computations
from xlafuse.hlo.ir import Computation, HloModule, Instruction, Shape
from xlafuse.hlo.lineage import ops

Key = tuple[str, str]  # (computation, instruction)


class Value(NamedTuple):
    """What value numbering makes of one instruction (`numbering.py`, `rules.py`).

    Attributes:
        number: its value number: two instructions of one number compute the same value.
        source: the instruction that computes the value (itself, or what a view shows).
        layout: for a value laid out transposed, (the permutation of the dimensions not of size
            1, the number of the value under it); else None.
        final: whether `number` already puts an identified instruction in its reference's terms
            (the number given to it is then not applied again).
    """

    number: int
    source: Key
    layout: tuple[tuple[int, ...], int] | None = None
    final: bool = False


class Graph:
    """The instructions of one module that run, with their operands and kernels.

    Attributes:
        module: the module.
        payloads: instruction name -> the text inside its `parameter(...)` or `constant(...)`.
        instr: key -> instruction.
        operands: key -> its operands' keys.
        kernel: key -> the kernel that runs it, or None outside any kernel.
        output: the instructions a kernel writes out (a fusion's root, a multi-output fusion's
            outputs, an instruction that is a kernel itself).
        traced: the computing instructions (not parameter, constant, tuple, get-tuple-element,
            call), in module order; `traced_set` the same as a set.
        callers: computation -> (the fusion or call that runs it, the computation holding that).
        sites: computation -> how many `call`s run it.
        shared: the instructions of a computation that `call`s run from several places (and of
            what it calls).
        kernel_order: the kernels, in execution order.
        entry: the entry computation's name.
    """

    def __init__(self, module: HloModule, payloads: dict[str, str]):
        self.module = module
        self.payloads = payloads
        self.instr: dict[Key, Instruction] = {}
        self.operands: dict[Key, tuple[Key, ...]] = {}
        self.kernel: dict[Key, str | None] = {}
        self.output: set[Key] = set()
        self.traced: list[Key] = []
        self.traced_set: set[Key] = set()
        self.callers: dict[str, tuple[Instruction, Computation]] = {}
        self.sites: dict[str, int] = defaultdict(int)
        self.shared: set[Key] = set()
        self._call_sites: dict[str, list[Key]] = defaultdict(list)
        self._op_names: dict[Key, str | None] = {}
        self._readers: dict[Key, list[Key]] | None = None
        self.entry = module.entry.name
        self.kernel_order = tuple(k.name for k in analyze_module(module).kernel_details)
        self._collect_callers()
        self._collect_kernels()

    def _collect_callers(self) -> None:
        for comp in self.module.computations:
            for i in comp.instructions:
                if i.opcode in ("fusion", "fusion-start", "call"):
                    for name in i.called_computations:
                        self.callers[name.lstrip("%")] = (i, comp)
                        self.sites[name.lstrip("%")] += i.opcode == "call"
                        if i.opcode == "call":
                            self._call_sites[name.lstrip("%")].append((comp.name, i.name))

    def _collect_kernels(self) -> None:
        kernels = set(self.kernel_order)
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
                self.shared.update(self.body_keys(name))

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

    def body_keys(self, name: str) -> list[Key]:
        """The instructions of computation `name` and of those it calls, at any depth."""
        out: list[Key] = []
        todo, seen = [name], {name}
        while todo:
            comp = self.computation(todo.pop())
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
        if instr.opcode not in ops.NOT_TRACED and instr.opcode != "call":
            self.traced.append(key)
            self.traced_set.add(key)

    def _add_body(self, comp: Computation, fusion: Instruction, kernel: str) -> None:
        self.instr[(comp.name, fusion.name)] = fusion
        self.operands[(comp.name, fusion.name)] = tuple((comp.name, o) for o in fusion.operands)
        self.kernel[(comp.name, fusion.name)] = kernel
        for name in fusion.called_computations:
            body = self.computation(name)
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

    def computation(self, name: str) -> Computation | None:
        """The computation `name`, or None when the module has none of that name."""
        try:
            return self.module.computation(name)
        except KeyError:
            return None

    def readers(self, key: Key) -> list[Key]:
        """The instructions that name `key` as an operand."""
        if self._readers is None:
            self._readers = defaultdict(list)
            for k, operands in self.operands.items():
                for o in operands:
                    self._readers[o].append(k)
        return self._readers.get(key, [])

    def shape(self, key: Key) -> Shape | None:
        """The instruction's shape; None for a key of no instruction."""
        instr = self.instr.get(key)
        return instr.shape if instr is not None else None

    def parameter_number(self, instr: Instruction) -> int | None:
        """A parameter's number: its payload, else the N of XLA's `param_N` name; else None."""
        payload = self.payloads.get(instr.name)
        if payload is not None and payload.isdigit():
            return int(payload)
        m = ops.PARAM_NAME.match(instr.name)
        return int(m.group(1)) if m else None
