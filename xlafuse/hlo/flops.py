"""FLOPs per kernel of an optimized HLO module, counted from its shapes and attributes.

What counts (a model, as `traffic`'s bytes are: what the program text asks for, not what a
library does inside it). "Elements" are of an instruction's own shape (a tuple: its leaves summed);
"taps" is the product of a `window={size=AxB ...}` (1 without a window: no spatial dims).

    dot                   2 x (output elements) x (product of the lhs dims named in
                          `lhs_contracting_dims={..}`; 1 without them); `scaled-dot` alike
    convolution           2 x (output elements) x (taps) x (input features per group: the
                          kernel's `i` dim in `dim_labels=.._01io->..`, which is the input's
                          features / feature_group_count; batch_group_count changes no
                          per-element count). Padding and strides enter through the output
                          shape: the taps that fall on padding are counted. With `lhs_dilate`
                          (a transposed convolution, an input gradient), the (output, tap)
                          pairs that fall on the holes between dilated input elements are not:
                          nothing is there to multiply.
    elementwise           1 per output element: add, subtract, multiply, divide, remainder,
                          maximum, minimum, negate, abs, sign, compare, select, clamp, and, or,
                          xor, not, shift-left, shift-right-arithmetic, shift-right-logical,
                          popcnt, count-leading-zeros, floor, ceil, round-nearest-afz,
                          round-nearest-even, is-finite
    transcendental        1 per output element, as any elementwise op: exponential,
                          exponential-minus-one, log, log-plus-one, logistic, tanh, sqrt, rsqrt,
                          cbrt, power, sine, cosine, tan, atan2, erf
    reduce                1 per input element of each reduced operand (the outputs not taken
                          off: the reducer runs once per input element, from the init value)
    reduce-window         (output elements) x (taps)
    select-and-scatter    (source elements) x (taps)
    data movement         0: copy, transpose, broadcast, reshape, bitcast, slice, concatenate,
                          pad, gather, scatter, dynamic-slice, dynamic-update-slice, reverse,
                          convert, bitcast-convert, reduce-precision, real, imag, complex, iota,
                          constant, parameter, tuple, get-tuple-element, rng, rng-bit-generator,
                          collectives (and their -start/-done), send/recv, infeed/outfeed,
                          copy-start/-done, ... (`ZERO_FLOP_OPCODES`)
    fusion                the sum over the instructions of its fused computation(s), nested
                          fusions included; any kind (kLoop, kInput, kOutput, kCustom: Triton
                          GEMMs, XLA:CPU's `__ynn_fusion`), and `fusion-start`
    cuBLAS custom-call    `__cublas$gemm`, `__cublas$lt$matmul`, `__cublas$lt$matmul$f8`: the dot
                          count, with output = the result's first leaf, lhs = operand 0 and the
                          dims of `"lhs_contracting_dimensions"` in `backend_config`
    cuDNN convolution     `__cudnn$convForward`, `$convBiasActivationForward`,
    custom-call           `$convForwardGraph`, `$convBackwardInput`, `$convBackwardFilter`: the
                          convolution count of the forward convolution their `window` and
                          `dim_labels` describe (its output is the result's first leaf; operand 0
                          for backward input; operand 1 for backward filter, whose kernel is the
                          result)
    anything else         unknown (None), never guessed: sort, topk, fft, map, ragged-dot,
                          triangular-solve, cholesky, async `X-start` wrappers of other ops,
                          other custom-calls (cuDNN attention, ...), an opcode not named here

So: a multiply-add is 2 FLOPs whatever the dtype (a complex multiply counts 1 per element); a
transcendental is 1 FLOP; a convolution counts the taps on its padding as the usual analytic
counts do. XLA's `cost_analysis()` differs on exactly these: it counts transcendentals apart (as
"transcendentals", not in "flops"), a reduce as its inputs less its outputs, a reduce-window as
(taps - 1) per output, and a convolution's taps inside the input only (lower on padded ones); on
dots the two agree. A library call's epilogue (cuBLAS bias or activation, cuDNN's fused bias, side input and
activation) and the combiner of a scatter or an all-reduce are not counted. An instruction whose
shape has no known size, or whose operand or attribute cannot be read, is unknown too: a fusion
holding an unknown instruction is unknown as a whole.

`FlopCount.matmul_flops` is the dot and convolution part (cuBLAS and cuDNN convolution calls
included): the part that analytic counts such as `Workload.flops` cover.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import NamedTuple

from xlafuse.hlo.ir import Computation, HloModule, Instruction, Shape
from xlafuse.hlo.loops import runs_per_call

ELEMENTWISE_OPCODES = frozenset(
    {
        "add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "negate",
        "abs", "sign", "compare", "select", "clamp", "and", "or", "xor", "not", "shift-left",
        "shift-right-arithmetic", "shift-right-logical", "popcnt", "count-leading-zeros",
        "floor", "ceil", "round-nearest-afz", "round-nearest-even", "is-finite",
        "exponential", "exponential-minus-one", "log", "log-plus-one", "logistic", "tanh",
        "sqrt", "rsqrt", "cbrt", "power", "sine", "cosine", "tan", "atan2", "erf",
    }
)  # fmt: skip
_COLLECTIVES = (
    "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "ragged-all-to-all",
    "collective-permute", "collective-broadcast",
)  # fmt: skip
ZERO_FLOP_OPCODES = frozenset(
    {
        "copy", "transpose", "broadcast", "reshape", "dynamic-reshape", "bitcast", "slice",
        "concatenate", "pad", "gather", "scatter", "dynamic-slice", "dynamic-update-slice",
        "reverse", "convert", "bitcast-convert", "stochastic-convert", "reduce-precision",
        "real", "imag", "complex", "iota", "constant", "parameter", "tuple",
        "get-tuple-element", "rng", "rng-bit-generator", "rng-get-and-update-state",
        "copy-start", "copy-done", "send", "send-done", "recv", "recv-done", "infeed",
        "outfeed", "after-all", "add-dependency", "opt-barrier", "optimization-barrier",
        "domain", "partition-id", "replica-id", "get-dimension-size", "set-dimension-size",
        *_COLLECTIVES,
        *(f"{c}-start" for c in _COLLECTIVES),
        *(f"{c}-done" for c in _COLLECTIVES),
    }
)  # fmt: skip
GEMM_TARGETS = frozenset({"__cublas$gemm", "__cublas$lt$matmul", "__cublas$lt$matmul$f8"})
# cuDNN convolution target -> where its forward convolution's (input, kernel, output) are: an
# operand index, or -1 for the result's first leaf (XLA's `GetCudnnConvKind`)
CONV_TARGETS: Mapping[str, tuple[int, int, int]] = {
    "__cudnn$convForward": (0, 1, -1),
    "__cudnn$convBiasActivationForward": (0, 1, -1),
    "__cudnn$convForwardGraph": (0, 1, -1),
    "__cudnn$convBackwardInput": (-1, 1, 0),
    "__cudnn$convBackwardFilter": (0, -1, 1),
}
_FUSIONS = ("fusion", "fusion-start")
_DIMS = re.compile(r"\d+")
# Attributes read from their text as printed: splitting it (`Instruction.attributes`) costs ten
# times more. Each pattern starts with its literal, which `re` searches for fast; where it is not
# found (spaces around `=`, a mapping given to the constructor), the split is read instead.
_LHS_CONTRACTING = re.compile(r"lhs_contracting_dims=(\{[^}]*\})")
_WINDOW = re.compile(r"window=(\{[^}]*\})")
_DIM_LABELS = re.compile(r"dim_labels=(\w+->\w+)")
_WINDOW_SIZE = re.compile(r"(?<![\w-])size=(\d+(?:x\d+)*)")
_GEMM_CONTRACTING = re.compile(r'"lhs_contracting_dimensions"\s*:\s*\[([^\]]*)\]')
_NO_CALLS: tuple[str, ...] = ()
# How an op other than a free, elementwise or fusion one is counted: (instr, its computation's
# instructions by name) -> FLOPs, or None
_Rule = Callable[[Instruction, Mapping[str, Instruction]], "int | None"]


class FlopCount(NamedTuple):
    """FLOPs of one instruction or kernel: all of them, and the dot/convolution part."""

    flops: int
    matmul_flops: int


class ModuleFlops(NamedTuple):
    """FLOPs of one call summed over kernels whose count is known, how many kernels are
    unknown, and how many were counted once because their loop's trip count is unknown."""

    flops: int
    matmul_flops: int
    unknown_kernels: int
    unknown_runs: int = 0


_NOTHING = FlopCount(0, 0)


def instruction_flops(
    instr: Instruction, computation: Computation, *, module: HloModule | None = None
) -> FlopCount | None:
    """FLOPs of one instruction, by the table of the module docstring.

    Args:
        instr: the instruction: one op, a library custom-call, or a fusion.
        computation: the computation that holds it (its operands' shapes are looked up there).
        module: the module, to find a fusion's fused computations (a fusion is None without it).

    Returns:
        Its `FlopCount`, or None when it cannot be counted (an op the table does not count, an
        unknown custom-call target, a shape of unknown size, a fused computation not found).
    """
    return _flops(instr, computation.by_name, module, _NO_CALLS)


def kernel_flops(instr: Instruction, computation: Computation, module: HloModule) -> int | None:
    """The `flops` of `instruction_flops` alone: what `KernelInfo.flops` holds."""
    opcode = instr.opcode
    rule = _RULES.get(opcode)
    if rule is not None:  # without a FlopCount: `analyze_module` asks once per kernel
        if not instr.shape.sized:
            return None
        try:
            return rule(instr, computation.by_name)
        except (IndexError, KeyError, ValueError):
            return None
    count = _flops(instr, computation.by_name, module, _NO_CALLS)
    return None if count is None else count.flops


def elementwise_flops(instructions: Sequence[Instruction], opcodes: Sequence[str]) -> int | None:
    """FLOPs of instructions that are all free or elementwise (a fusion's ops, most often).

    Args:
        instructions: the instructions.
        opcodes: their opcodes, in the same order.

    Returns:
        The sum of their counts; None when one is of another kind (count those by
        `instruction_flops`, which looks up operands in their own computation) or an
        elementwise one has a shape of unknown size.
    """
    flops = 0
    for instr, opcode in zip(instructions, opcodes):  # noqa: B905 (one length, by contract)
        if opcode in ELEMENTWISE_OPCODES:
            shape = instr.shape
            if not shape.sized:
                return None
            flops += shape.num_elements
        elif opcode not in ZERO_FLOP_OPCODES:
            return None
    return flops


def module_flops(module: HloModule, kernels: Iterable) -> ModuleFlops:
    """FLOPs of one call of a module: each kernel's count times the runs of its computation
    (`loops.runs_per_call`: a loop body's trip count; unknown: once, counted in
    `unknown_runs`).

    Args:
        module: the parsed module.
        kernels: its kernels, each with a `name` and a `computation` (e.g. the `kernel_details`
            of `analyze_module(module)`).

    Returns:
        The sums over the kernels whose count is known, and how many kernels are unknown.
    """
    runs = runs_per_call(module)
    flops = matmul = unknown = unknown_runs = 0
    for kernel in kernels:
        comp = module.computation(kernel.computation)
        count = instruction_flops(comp.by_name[kernel.name], comp, module=module)
        times = runs.get(comp.name)
        if times is None:
            unknown_runs += 1
            times = 1
        if count is None:
            unknown += 1
        else:
            flops += count.flops * times
            matmul += count.matmul_flops * times
    return ModuleFlops(flops, matmul, unknown, unknown_runs)


def _flops(
    instr: Instruction,
    by_name: Mapping[str, Instruction],
    module: HloModule | None,
    calling: tuple[str, ...],
) -> FlopCount | None:
    """One instruction's count; `calling`: the fused computations it sits in (a cycle stops)."""
    opcode = instr.opcode
    if opcode in ZERO_FLOP_OPCODES:
        return _NOTHING
    if opcode in ELEMENTWISE_OPCODES:
        shape = instr.shape
        return FlopCount(shape.num_elements, 0) if shape.sized else None
    if opcode in _FUSIONS:
        return _fusion_flops(instr, module, calling)
    rule = _RULES.get(opcode)
    count = None if rule is None else _by_rule(rule, instr, by_name)
    if count is None:
        return None
    return FlopCount(count, count if opcode in _MATMUL_OPCODES else 0)


def _by_rule(rule: _Rule, instr: Instruction, by_name: Mapping[str, Instruction]) -> int | None:
    if not instr.shape.sized:
        return None
    try:
        return rule(instr, by_name)
    except (IndexError, KeyError, ValueError):
        return None  # an operand, dim or attribute that is not there: not countable


def _fusion_flops(
    instr: Instruction, module: HloModule | None, calling: tuple[str, ...]
) -> FlopCount | None:
    """The sum over a fusion's fused computation(s); None if one is missing or uncountable."""
    names = instr.attributes.get("calls")
    if module is None or not names:
        return None
    flops = matmul = 0
    for name in names.strip("{}").replace("%", "").split(","):
        try:
            comp = module.computation(name.strip())
        except KeyError:
            return None
        if comp.name in calling:
            return None  # a cycle, which XLA rejects (`analyze_module` raises on it)
        count = _computation_flops(comp, module, (*calling, comp.name))
        if count is None:
            return None
        flops += count[0]
        matmul += count[1]
    return FlopCount(flops, matmul)


def _computation_flops(
    comp: Computation, module: HloModule, calling: tuple[str, ...]
) -> tuple[int, int] | None:
    """(flops, matmul flops) over a fused computation's instructions, or None."""
    flops = matmul = 0
    by_name = comp.by_name
    for instr in comp.instructions:
        opcode = instr.opcode
        if opcode in ZERO_FLOP_OPCODES:  # then elementwise: most fused instructions are these
            continue
        if opcode in ELEMENTWISE_OPCODES:
            shape = instr.shape
            if not shape.sized:
                return None
            flops += shape.num_elements
            continue
        count = _flops(instr, by_name, module, calling)
        if count is None:
            return None
        flops += count[0]
        matmul += count[1]
    return flops, matmul


def _dot(instr: Instruction, by_name: Mapping[str, Instruction]) -> int | None:
    contracting = _attribute(instr, "lhs_contracting_dims", _LHS_CONTRACTING)
    lhs = _operand_shape(instr, 0, by_name)
    return _dot_count(instr.shape, lhs, _dims(contracting or ""))


def _convolution(instr: Instruction, by_name: Mapping[str, Instruction]) -> int | None:
    lhs, kernel = _operand_shape(instr, 0, by_name), _operand_shape(instr, 1, by_name)
    return _convolution_count(instr, lhs, kernel, instr.shape)


def _reduce(instr: Instruction, by_name: Mapping[str, Instruction]) -> int | None:
    inputs = len(instr.operands) // 2  # the inputs, then as many init values
    if inputs == 1 and not instr.operand_indices:  # most reduces: one input, no `%x#i`
        shape = by_name[instr.operands[0]].shape
        return shape.num_elements if shape.sized else None
    if not inputs:
        return None
    total = 0
    for k in range(inputs):
        shape = _operand_shape(instr, k, by_name)
        if not shape.sized:
            return None
        total += shape.num_elements
    return total


def _reduce_window(instr: Instruction, by_name: Mapping[str, Instruction]) -> int:
    return instr.shape.num_elements * _window_taps(instr)


def _select_and_scatter(instr: Instruction, by_name: Mapping[str, Instruction]) -> int | None:
    source = _operand_shape(instr, 1, by_name)
    return source.num_elements * _window_taps(instr) if source.sized else None


def _custom_call(instr: Instruction, by_name: Mapping[str, Instruction]) -> int | None:
    """A cuBLAS gemm or a cuDNN convolution, from its shapes and attributes; else None."""
    target = instr.custom_call_target
    if target in GEMM_TARGETS:
        found = _GEMM_CONTRACTING.search(instr.attributes.get("backend_config") or "")
        if found is None:
            return None
        lhs = _operand_shape(instr, 0, by_name)
        return _dot_count(_first_leaf(instr.shape), lhs, _dims(found[1]))
    roles = CONV_TARGETS.get(target or "")
    if roles is None:
        return None
    lhs, kernel, output = (
        _first_leaf(instr.shape) if role < 0 else _operand_shape(instr, role, by_name)
        for role in roles
    )
    return _convolution_count(instr, lhs, kernel, output)


_RULES: Mapping[str, _Rule] = {
    "dot": _dot,
    "scaled-dot": _dot,
    "convolution": _convolution,
    "custom-call": _custom_call,
    "reduce": _reduce,
    "reduce-window": _reduce_window,
    "select-and-scatter": _select_and_scatter,
}
_MATMUL_OPCODES = frozenset({"dot", "scaled-dot", "convolution", "custom-call"})


def _dot_count(output: Shape, lhs: Shape, contracting: tuple[int, ...]) -> int | None:
    if not (output.sized and lhs.sized):
        return None
    count = 2 * output.num_elements
    dims = lhs.dims
    for d in contracting:
        count *= dims[d]
    return count


@lru_cache(maxsize=256)  # a module spells a few dim lists, once per dot
def _dims(text: str) -> tuple[int, ...]:
    """`{1,2}` (or `"1","2"`) -> (1, 2); `{}` or "" -> ()."""
    return tuple(map(int, _DIMS.findall(text)))


def _convolution_count(instr: Instruction, lhs: Shape, kernel: Shape, output: Shape) -> int | None:
    """2 x output elements x taps x the kernel's input features (`i` of its dim labels); with
    `lhs_dilate`, the (output position, tap) pairs that fall between dilated input elements
    left out.

    Raises:
        ValueError: a window or dim labels that cannot be read.
    """
    labels = _attribute(instr, "dim_labels", _DIM_LABELS)
    if not labels or not (lhs.sized and output.sized and kernel.sized):
        return None
    operands, _, out_labels = labels.partition("->")
    lhs_labels, kernel_labels = operands.split("_")
    if len(kernel_labels) != len(kernel.dims) or len(out_labels) != len(output.dims):
        return None  # e.g. cuDNN's int8x4 layouts, one dim more than the labels
    features = kernel.dims[kernel_labels.index("i")]
    text = _attribute(instr, "window", _WINDOW) or ""
    if "lhs_dilate" not in text:
        return 2 * output.num_elements * _taps(text) * features
    window = _window(text)
    pairs = output.num_elements
    for dim, (size, stride, (low, _), dilate, rhs_dilate) in enumerate(
        zip(*(window[k] for k in _WINDOW_FIELDS), strict=True)
    ):
        out = output.dims[out_labels.index(str(dim))]
        span = (lhs.dims[lhs_labels.index(str(dim))] - 1) * dilate
        pairs = (
            pairs
            // out
            * (
                out * size
                if dilate == 1
                else _undilated_pairs(out, size, stride, low, dilate, rhs_dilate, span)
            )
        )
    return 2 * pairs * features


def _undilated_pairs(
    out: int, size: int, stride: int, low: int, dilate: int, rhs_dilate: int, span: int
) -> int:
    """Along one spatial dim: the (output position, tap) pairs whose input position is not a
    hole of the lhs dilation (a position in the padding counts, as it does without dilation).

    Tap t of output o reads position p = o * stride + t * rhs_dilate - low of the dilated input,
    whose elements sit at 0, dilate, ..., span: p in [0, span] that is not a multiple of dilate
    is a hole. Counted along the shorter of the two, in O(dilate) steps each.
    """
    if out <= size:  # for each output position, its taps t
        lines = ((o * stride - low, rhs_dilate, size) for o in range(out))
    else:  # for each tap, the output positions o
        lines = ((t * rhs_dilate - low, stride, out) for t in range(size))
    holes = 0
    for start, step, count in lines:
        first = max(0, -(start // step))  # the steps that land in [0, span]
        last = min(count - 1, (span - start) // step)
        if last >= first:
            holes += last - first + 1 - _on_elements(first, last, start, step, dilate)
    return out * size - holes


def _on_elements(first: int, last: int, start: int, step: int, dilate: int) -> int:
    """How many x in [first, last] put start + x * step on a multiple of dilate: those of one
    residue modulo dilate / gcd(step, dilate), or none."""
    common = math.gcd(step, dilate)
    if start % common:
        return 0
    period = dilate // common
    x0 = -start // common * pow(step // common, -1, period) % period
    return (last - x0) // period - (first - 1 - x0) // period


def _window(text: str) -> dict[str, tuple]:
    """A window's fields (`size`, `stride`, `pad`, `lhs_dilate`, `rhs_dilate`), each a tuple
    over the spatial dims, the defaults filled in.

    Raises:
        ValueError: a field that cannot be read, or fields of different lengths.
    """
    fields = dict(f.split("=", 1) for f in text.strip("{} ").split())
    window: dict[str, tuple] = {
        key: tuple(int(v) for v in fields[key].split("x"))
        for key in ("size", "stride", "lhs_dilate", "rhs_dilate")
        if key in fields
    }
    dims = len(window["size"])
    for key in ("stride", "lhs_dilate", "rhs_dilate"):
        window.setdefault(key, (1,) * dims)
    pads = fields.get("pad")
    window["pad"] = (
        tuple(tuple(int(p) for p in pad.split("_")) for pad in pads.split("x"))
        if pads
        else ((0, 0),) * dims
    )
    if any(len(v) != dims for v in window.values()):
        raise ValueError(f"window fields of different lengths: {text!r}")
    return window


_WINDOW_FIELDS = ("size", "stride", "pad", "lhs_dilate", "rhs_dilate")


def _window_taps(instr: Instruction) -> int:
    """Product of the window's sizes; 1 without a window or with `window={}`."""
    return _taps(_attribute(instr, "window", _WINDOW) or "")


def _taps(window: str) -> int:
    """Product of the sizes of a window's text (`{size=3x3 ...}`); 1 for "" or `{}`.

    Raises:
        ValueError: a window with fields but no `size=`.
    """
    found = _WINDOW_SIZE.search(window)
    if found is None:
        if window.strip("{} "):
            raise ValueError(f"no size in window {window!r}")
        return 1
    return math.prod(map(int, found[1].split("x")))


def _attribute(instr: Instruction, key: str, pattern: re.Pattern) -> str | None:
    """Attribute `key`'s value: read from the printed text, else from the split attributes."""
    attributes = instr.attributes
    found = pattern.search(getattr(attributes, "text", ""))
    return found[1] if found else attributes.get(key)


def _operand_shape(instr: Instruction, k: int, by_name: Mapping[str, Instruction]) -> Shape:
    """The shape of operand k (its tuple element where it is written `%x#i`).

    Raises:
        IndexError: no operand k. KeyError: an operand not in the computation.
    """
    shape = by_name[instr.operands[k]].shape
    indices = instr.operand_indices
    if indices and indices[k] is not None and shape.is_tuple:
        shape = shape.tuple_shapes[indices[k]]
    return shape


def _first_leaf(shape: Shape) -> Shape:
    """A library call's output: the first leaf of its (output, ..., workspace) tuple."""
    while shape.is_tuple and shape.tuple_shapes:
        shape = shape.tuple_shapes[0]
    return shape
