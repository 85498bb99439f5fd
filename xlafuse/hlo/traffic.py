"""Modeled HBM bytes per kernel: what a launch must read and write at least once.

The model: a kernel reads each DISTINCT operand buffer once (an operand named twice counts once)
and writes its whole output once (a tuple output is the sum of its leaves). An operand is counted
at its own shape: a bitcast or get-tuple-element operand counts as the (sub)buffer it names, and
`%x#1` counts tuple element 1 of x only. Bitcast, tuple, get-tuple-element, parameter and constant
instructions are free: they launch nothing.

Two patterns of every loop are counted as they run (`in_place_savings`): a fused parameter read
only by (dynamic-)slices counts as the slices it reads (a scan reading step i of its inputs), and
a fusion whose root updates a parameter with a dynamic-update-slice, in place, writes the update
only and reads nothing of that buffer (a scan writing step i of its outputs) or the one window it
updates (an accumulation, `acc[i] += x`: a chunked loss's weight gradient). Otherwise it is a
model, not a measurement: it ignores caches (L2 can hold small arrays between kernels), other
outputs aliased in place (scatter: the model charges the whole output), and other reads that a
kernel skips (a gather reads less than its operand). Library calls' scratch workspaces (the
`s8[...]`/`u8[...]` leaf of a cuBLAS/cuDNN tuple) are not counted, nor the operands an async
`fusion-start` carries in its output tuple (`((operands...), result, context)`: aliases of its
inputs, not writes).
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
        if opcode in _OWN_OUTPUT_RULES:
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


_OWN_OUTPUT_RULES = frozenset({"custom-call", "fusion-start"})


def _output_bytes(instr: Instruction) -> int:
    shape = instr.shape
    if instr.opcode == "custom-call" and shape.is_tuple and len(shape.tuple_shapes) > 1:
        return _without_workspace(shape).byte_size
    if instr.opcode == "fusion-start" and _is_async_tuple(shape):
        # ((operands...), result, context): the operands are its inputs' buffers, not written
        return shape.tuple_shapes[1].byte_size
    return shape.byte_size


def _is_async_tuple(shape: Shape) -> bool:
    """An async start's shape, ((operands...), result, ...)."""
    return shape.is_tuple and len(shape.tuple_shapes) >= 2 and shape.tuple_shapes[0].is_tuple


def _without_workspace(shape: Shape) -> Shape:
    """A library call's tuple output without its trailing s8/u8 scratch workspace leaf."""
    last = shape.tuple_shapes[-1]
    if not last.is_tuple and last.dtype in ("s8", "u8") and len(last.dims) == 1:
        return Shape(None, tuple_shapes=shape.tuple_shapes[:-1])
    return shape


_SLICES = frozenset({"slice", "dynamic-slice"})


def in_place_savings(fused: Computation) -> tuple[int, int]:
    """(read, written) bytes a fusion's whole-operand count overstates, from its fused
    computation: each parameter read only as operand 0 of (dynamic-)slices is read as those
    slices; a parameter that a root dynamic-update-slice updates in place (`_in_place_update`)
    is read only where a dynamic-slice reads the updated window, and the update is all that is
    written of it. The caller subtracts them from `kernel_bytes` where the fusion's operands are
    distinct (one parameter per operand).

    Args:
        fused: the fusion's fused computation.
    """
    users: dict[str, list[Instruction]] = {}
    for instr in fused.instructions:
        for operand in instr.operands:
            users.setdefault(operand, []).append(instr)
    root = fused.root
    if root is None:
        return 0, 0
    roots = [fused.by_name.get(n) for n in root.operands] if root.opcode == "tuple" else [root]
    roots = {_unbitcast(r, fused).name for r in roots if r is not None}
    read = written = 0
    for param in (i for i in fused.instructions if i.opcode == "parameter"):
        uses = users.get(param.name, [])
        if not uses or not param.shape.sized:
            continue
        if all(u.opcode in _SLICES and u.operands[0] == param.name for u in uses):
            sliced = sum(u.shape.byte_size for u in uses)
            read += max(param.shape.byte_size - sliced, 0)
        elif (moved := _in_place_update(param, users, roots, fused)) is not None:
            window_read, update_written = moved
            read += param.shape.byte_size - window_read
            written += param.shape.byte_size - update_written
    return read, written


def _in_place_update(
    param: Instruction, users: dict[str, list[Instruction]], roots: set[str], fused: Computation
) -> tuple[int, int] | None:
    """(bytes read, bytes written) of `param` when XLA updates it in place, else None.

    XLA's rule (`CanEmitFusedDynamicUpdateSliceInPlaceForGpu`): a dynamic-update-slice whose
    operand 0 is the parameter (or a bitcast of it) is a root (or a root's bitcast, or a root
    tuple's element) of the parameter's size, and its other readers are dynamic-slices of the
    update's shape at the same start indices (an accumulation, `acc[i] += x`): those read the
    window once, the update writes it.
    """
    target, uses = param, users.get(param.name, [])
    if len(uses) == 1 and uses[0].opcode == "bitcast":
        target, uses = uses[0], users.get(uses[0].name, [])
    updates = [u for u in uses if u.opcode == "dynamic-update-slice"]
    if len(updates) != 1:
        return None
    (dus,) = updates
    update = fused.by_name.get(dus.operands[1]) if len(dus.operands) > 1 else None
    if (
        update is None
        or dus.operands[0] != target.name
        or dus.name not in roots
        or dus.shape.byte_size != param.shape.byte_size
    ):
        return None
    windows = [u for u in uses if u is not dus]
    if not all(
        w.opcode == "dynamic-slice"
        and w.operands[0] == target.name
        and w.shape.dims == update.shape.dims
        and w.operands[1:] == dus.operands[2:]
        for w in windows
    ):
        return None
    return (windows[0].shape.byte_size if windows else 0), update.shape.byte_size


def _unbitcast(instr: Instruction, fused: Computation) -> Instruction:
    """The instruction a bitcast stands for (itself if not a bitcast)."""
    if instr.opcode == "bitcast" and instr.operands and instr.operands[0] in fused.by_name:
        return fused.by_name[instr.operands[0]]
    return instr
