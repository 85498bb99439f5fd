"""Modeled HBM bytes per kernel: what a launch must read and write at least once.

The model: a kernel reads each DISTINCT operand buffer once (an operand named twice counts once)
and writes its whole output once (a tuple output is the sum of its leaves). An operand is counted
at its own shape: a bitcast or get-tuple-element operand counts as the (sub)buffer it names, and
`%x#1` counts tuple element 1 of x only. Bitcast, tuple, get-tuple-element, parameter and constant
instructions are free: they launch nothing.

It is a model, not a measurement: it ignores caches (L2 can hold small arrays between kernels),
outputs aliased in place onto an input (dynamic-update-slice, scatter: the model charges the whole
output), and reads that a kernel skips (a slice or gather reads less than its operand). Library
calls' scratch workspaces (the `s8[...]`/`u8[...]` leaf of a cuBLAS/cuDNN tuple) are not counted.
"""

from __future__ import annotations

from xlafuse.hlo.ir import Computation, Instruction, Shape

FREE_OPCODES = frozenset({"bitcast", "tuple", "get-tuple-element", "parameter", "constant"})
_EMPTY = Shape(None)  # an operand not in the computation (the parser rules it out): no bytes


def instruction_bytes(instr: Instruction, computation: Computation) -> tuple[int, int]:
    """Modeled bytes a launch reads and writes.

    Args:
        instr: the instruction (a fusion, custom-call or other launch).
        computation: the computation that holds it (to look up its operands' shapes).

    Returns:
        (bytes_in, bytes_out); (0, 0) for free instructions (bitcast, tuple, parameter, ...).
        A shape of unknown size counts 0 here; `kernel_bytes` tells such a kernel apart.
    """
    sized = kernel_bytes(instr, computation)
    if sized is not None:
        return sized
    operands = _distinct_operands(instr, computation)
    return sum(_operand_shape(o, i).byte_size for o, i in operands), _output_bytes(instr)


def kernel_bytes(instr: Instruction, computation: Computation) -> tuple[int, int] | None:
    """Like `instruction_bytes`, but None when a shape it needs has no known size.

    Args:
        instr: the instruction (a fusion, custom-call or other launch).
        computation: the computation that holds it (to look up its operands' shapes).

    Returns:
        (bytes_in, bytes_out), or None when the output or an operand cannot be sized.
    """
    opcode = instr.opcode
    if opcode in FREE_OPCODES:
        return 0, 0
    shape = instr.shape
    if not shape.sized:
        return None
    indices = instr.operand_indices
    if not indices or indices.count(None) == len(indices):  # the common case: no `%x#i`
        operands = instr.operands
        if len(operands) > 1:
            operands = dict.fromkeys(operands)  # distinct, in order
        by_name = computation.by_name
        bytes_in = 0
        for name in operands:
            operand = by_name.get(name)
            if operand is not None:
                operand_shape = operand.shape
                if not operand_shape.sized:
                    return None
                bytes_in += operand_shape.byte_size
        if opcode == "custom-call":
            return bytes_in, _output_bytes(instr)
        return bytes_in, shape.byte_size  # as _output_bytes: a launch's whole output
    bytes_in = 0
    for operand, index in _distinct_operands(instr, computation):
        operand_shape = _operand_shape(operand, index)
        if not operand_shape.sized:
            return None
        bytes_in += operand_shape.byte_size
    return bytes_in, _output_bytes(instr)


def _distinct_operands(
    instr: Instruction, computation: Computation
) -> list[tuple[Instruction | None, int | None]]:
    """Each distinct (operand, tuple index) once: an operand named twice is read once."""
    by_name = computation.by_name
    indices = instr.operand_indices
    if not indices or indices.count(None) == len(indices):
        return [(by_name.get(name), None) for name in dict.fromkeys(instr.operands)]
    pairs = dict.fromkeys(zip(instr.operands, indices, strict=True))
    return [(by_name.get(name), index) for name, index in pairs]


def _operand_shape(operand: Instruction | None, index: int | None) -> Shape:
    if operand is None:
        return _EMPTY
    shape = operand.shape
    if index is not None and shape.is_tuple and index < len(shape.tuple_shapes):
        shape = shape.tuple_shapes[index]
    return shape


def _output_bytes(instr: Instruction) -> int:
    shape = instr.shape
    if instr.opcode == "custom-call" and shape.is_tuple and len(shape.tuple_shapes) > 1:
        return _without_workspace(shape).byte_size
    return shape.byte_size


def _without_workspace(shape: Shape) -> Shape:
    """A library call's tuple output without its trailing s8/u8 scratch workspace leaf."""
    last = shape.tuple_shapes[-1]
    if not last.is_tuple and last.dtype in ("s8", "u8") and len(last.dims) == 1:
        return Shape(None, tuple_shapes=shape.tuple_shapes[:-1])
    return shape
