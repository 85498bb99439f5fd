"""Which kernels read which kernels' outputs: the kernel-level dataflow of an optimized module.

A kernel's producers are the kernels that wrote a buffer it reads. From each of its operands the
buffer is followed back to the kernel that wrote it:

- free instructions (bitcast, get-tuple-element, tuple, `*-done`) are looked through, with the
  tuple element they select (`buffer_producers`, which `xlafuse.report.graph` draws as edges);
- a loop's, call's or conditional's result leads to its body's (callee's, each branch's) root;
- a parameter of a loop's body or condition leads to the loop's initial value and to the body's
  root (the previous iteration's), one of a branch, callee or async computation to the caller's
  operand;
- any other instruction that is no kernel (an annotation, a barrier, a dependency) leads to its
  operands.

A parameter of the entry computation and a constant are no kernel's. A kernel that reads its own
output (a loop-carried value) is not its own producer.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from xlafuse.hlo.fusion import KernelInfo, executed_computations
from xlafuse.hlo.ir import Computation, HloModule, Instruction
from xlafuse.hlo.lineage import literal_payloads
from xlafuse.hlo.parse import parse_hlo

_LOOK_THROUGH = frozenset({"bitcast", "get-tuple-element", "copy-done"})
_CALLERS = frozenset({"while", "conditional", "async-start", "call"})
_Step = tuple[Computation, str, tuple[int, ...]]  # an instruction, and the tuple element read


def buffer_producers(
    comp: Computation, instr: Instruction, index: int | None
) -> list[tuple[Instruction, int | None]]:
    """What wrote the buffer `instr` names in `comp`, with the tuple element read (None: all).

    Free ops are looked through, tuples expanded and constants dropped; the instruction found
    may be a kernel, a parameter or a control instruction (a loop, a call).
    """
    while instr.opcode in _LOOK_THROUGH or instr.opcode.endswith("-done"):
        if instr.opcode == "get-tuple-element" and index is None:
            index = _int(instr.attr("index"))
        elif instr.opcode != "get-tuple-element":
            index = None
        if not instr.operands:
            break
        instr = comp.by_name[instr.operands[0]]
    if instr.opcode == "tuple":
        picked = instr.operands if index is None else instr.operands[index : index + 1]
        return [p for name in picked for p in buffer_producers(comp, comp.by_name[name], None)]
    return [] if instr.opcode == "constant" else [(instr, index)]


def kernel_producers(
    module: HloModule, kernels: Sequence[KernelInfo]
) -> tuple[tuple[int, ...], ...]:
    """Each kernel's producer kernels (see the module docstring), as indices into `kernels`.

    Args:
      module: the parsed module.
      kernels: its kernels (`FusionReport.kernel_details`).

    Returns:
      One sorted tuple of indices per kernel, in `kernels`' order.
    """
    flow = _Flow(module, kernels)
    return tuple(flow.producers(i, k) for i, k in enumerate(kernels))


def producer_names(hlo_text: str, kernels: Sequence[KernelInfo]) -> dict[str, tuple[str, ...]]:
    """Kernel name -> the names of its producer kernels (`kernel_producers` of the text)."""
    found = kernel_producers(parse_hlo(hlo_text), kernels)
    return {k.name: tuple(kernels[j].name for j in p) for k, p in zip(kernels, found, strict=True)}


class _Flow:
    """The walk from a kernel's operands back to the kernels that wrote them."""

    def __init__(self, module: HloModule, kernels: Sequence[KernelInfo]) -> None:
        self.module = module
        self.index = {(k.computation, k.name): i for i, k in enumerate(kernels)}
        self.callers: dict[str, list[tuple[Computation, Instruction, int]]] = {}
        for comp in executed_computations(module):
            for instr in comp.instructions:
                if instr.opcode in _CALLERS:
                    for position, name in enumerate(instr.called_computations):
                        self.callers.setdefault(name, []).append((comp, instr, position))
        self._numbers: dict[str, str] | None = None

    def producers(self, me: int, kernel: KernelInfo) -> tuple[int, ...]:
        comp = self._computation(kernel.computation)
        instr = comp.by_name.get(kernel.name) if comp is not None else None
        if instr is None:
            return ()
        indices = instr.operand_indices or (None,) * len(instr.operands)
        operands = zip(instr.operands, indices, strict=True)
        stack = [(comp, name, () if i is None else (i,)) for name, i in operands]
        found, seen = set(), set()
        while stack:
            step = stack.pop()
            comp, name, path = step
            if (comp.name, name, path) in seen or name not in comp.by_name:
                continue
            seen.add((comp.name, name, path))
            kernel_index = self.index.get((comp.name, name))
            if kernel_index is not None:
                found.add(kernel_index)
            else:
                stack.extend(self._back(comp, comp.by_name[name], path))
        found.discard(me)
        return tuple(sorted(found))

    def _back(self, comp: Computation, instr: Instruction, path: tuple[int, ...]) -> list[_Step]:
        """The instructions whose outputs `instr` (no kernel) passes on as element `path`."""
        op, operands = instr.opcode, instr.operands
        if op == "get-tuple-element":
            return [(comp, operands[0], (_int(instr.attr("index")) or 0, *path))]
        if op == "tuple":
            if path:
                picked = operands[path[0] : path[0] + 1]
                return [(comp, name, path[1:]) for name in picked]
            return [(comp, name, ()) for name in operands]
        if op in _LOOK_THROUGH or op.endswith("-done") or op.endswith("-update"):
            return [(comp, operands[0], () if op.endswith(("-done", "-update")) else path)]
        if op == "parameter":
            return list(self._into(comp, instr, path))
        if op == "constant":
            return []
        if op in _CALLERS:
            keep = path if op != "async-start" else ()
            return [(c, c.root.name, keep) for c in self._results(instr) if c.root is not None]
        if len(operands) == 1:
            return [(comp, operands[0], path)]
        return [(comp, name, ()) for name in operands]

    def _into(self, comp: Computation, param: Instruction, path) -> Iterator[_Step]:
        """Where a parameter of a called computation gets its value: the caller's operand (a
        loop's also its body's root, the value of the previous iteration)."""
        for caller_comp, caller, position in self.callers.get(comp.name, ()):
            if caller.opcode == "while":
                yield caller_comp, caller.operands[0], path
                body = self._computation(caller.attr("body") or "")
                if body is not None and body.root is not None:
                    yield body, body.root.name, path
            elif caller.opcode == "conditional":
                if position + 1 < len(caller.operands):
                    yield caller_comp, caller.operands[position + 1], path
            else:
                number = self._number(comp, param)
                if number is not None and number < len(caller.operands):
                    yield caller_comp, caller.operands[number], path

    def _number(self, comp: Computation, param: Instruction) -> int | None:
        """A parameter's number: 0 where it is its computation's only one, else its text's."""
        if sum(1 for i in comp.instructions if i.opcode == "parameter") == 1:
            return 0
        if self._numbers is None:
            self._numbers = literal_payloads(self.module.text or "")
        return _int(self._numbers.get(param.name))

    def _results(self, instr: Instruction) -> list[Computation]:
        """The computations whose root is `instr`'s result: a loop's body (not its condition),
        each branch of a conditional, a call's or async-start's callee."""
        names = [instr.attr("body") or ""] if instr.opcode == "while" else instr.called_computations
        found = (self._computation(name) for name in names)
        return [c for c in found if c is not None]

    def _computation(self, name: str) -> Computation | None:
        try:
            return self.module.computation(name)
        except KeyError:
            return None


def _int(text: str | None) -> int | None:
    return int(text) if text and text.strip().isdigit() else None
