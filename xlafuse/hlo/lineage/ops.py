"""Facts about one instruction, read from it alone: what it computes (`kind`), its shape
as value numbering sees it, its attributes, and what a library call's configuration adds."""

from __future__ import annotations

import re

from xlafuse.hlo.flops import CONV_TARGETS, GEMM_TARGETS
from xlafuse.hlo.ir import Instruction, Shape

NOT_TRACED = frozenset({"parameter", "constant", "tuple", "get-tuple-element"})
VIEWS = frozenset({"reshape", "bitcast", "copy"})
COMMUTATIVE = frozenset({"add", "multiply", "maximum", "minimum", "and", "or", "xor"})
KEY_ATTRS = (
    "dimensions", "direction", "slice", "index", "iota_dimension", "padding", "window",
    "lhs_contracting_dims", "rhs_contracting_dims", "lhs_batch_dims", "rhs_batch_dims",
    "dim_labels", "feature_group_count", "batch_group_count", "custom_call_target",
    "comparison_type", "exponent_bits", "mantissa_bits", "distribution", "fft_type",
    "dynamic_slice_sizes", "offset_dims", "collapsed_slice_dims", "start_index_map",
    "index_vector_dim", "slice_sizes", "is_stable", "largest", "k",
)  # fmt: skip
# Ops that compute element by element: their value does not depend on how the elements are
# shaped (`f32[8,1024,768]` in the program, `f32[8192,768]` once XLA collapsed it)
ELEMENTWISE = frozenset({
    "abs", "add", "and", "atan2", "cbrt", "ceil", "clamp", "compare", "convert", "cosine",
    "divide", "erf", "exponential", "exponential-minus-one", "floor", "imag", "is-finite", "log",
    "log-plus-one", "logistic", "maximum", "minimum", "multiply", "negate", "not", "or",
    "popcnt", "power", "real", "remainder", "round-nearest-afz", "round-nearest-even", "rsqrt",
    "select", "shift-left", "shift-right-arithmetic", "shift-right-logical", "sign", "sine",
    "sqrt", "subtract", "tan", "tanh", "xor",
})  # fmt: skip
ORDERED = frozenset(
    {"dot", "convolution"}
)  # identified by order as a last resort (`Matcher._by_order`)


def int_list(text: str | None) -> list[int] | None:
    """`{0,2}` or `1` -> [0, 2] or [1]; None if not a list of integers."""
    if text is None:
        return None
    parts = [p.strip() for p in text.strip().strip("{}").split(",") if p.strip()]
    return [int(p) for p in parts] if all(p.isdigit() for p in parts) else None


def is_view(instr: Instruction, operand: Shape | None) -> bool:
    """Whether `instr` only shows its operand of shape `operand` (`rules.view`)."""
    if operand is None or instr.shape.is_tuple or operand.is_tuple:
        return False
    if instr.opcode in VIEWS:
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


def is_library(instr: Instruction) -> bool:
    """Whether `instr` is a library call that replaced a dot or a convolution."""
    return instr.opcode == "custom-call" and kind(instr) != "custom-call"


_EPILOGUE = re.compile(r'"epilogue"\s*:\s*"([A-Z_]+)"')
_BETA = re.compile(r'"beta"\s*:\s*(-?[0-9.eE+-]+)')


_ALPHA_REAL = re.compile(r'"alpha_real"\s*:\s*(-?[0-9.eE+-]+)')
_ALPHA_IMAG = re.compile(r'"alpha_imag"\s*:\s*(-?[0-9.eE+-]+)')


def alpha(instr: Instruction) -> float | None:
    """The real `alpha` a cuBLAS GEMM call scales its product by, where it is not 1 (and its
    imaginary part 0); else None."""
    if not is_library(instr) or kind(instr) != "dot":
        return None
    config = instr.attributes.get("backend_config") or ""
    real, imag = _ALPHA_REAL.search(config), _ALPHA_IMAG.search(config)
    try:
        alpha = float(real.group(1)) if real else 1.0
        imaginary = float(imag.group(1)) if imag else 0.0
    except ValueError:
        return None
    return alpha if imaginary == 0 and alpha != 1 else None


def epilogue_operands(instr: Instruction) -> int:
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


def squeezed(shape: Shape) -> tuple[int, ...]:
    """The shape's dimensions not of size 1."""
    return tuple(d for d in shape.dims if d != 1)


def squeezed_perm(perm: list[int] | None, operand: Shape | None) -> tuple[int, ...] | None:
    """A transpose's permutation over its operand's dimensions not of size 1: result dimension
    i (of those) is operand dimension perm[i] (of those); None if malformed."""
    if perm is None or operand is None or operand.is_tuple or len(perm) != len(operand.dims):
        return None
    if sorted(perm) != list(range(len(perm))):
        return None
    kept = [i for i, d in enumerate(operand.dims) if d != 1]
    rank = {i: n for n, i in enumerate(kept)}
    return tuple(rank[p] for p in perm if p in rank)


def major_to_minor(shape: Shape) -> list[int] | None:
    """The dimensions of an array in the order they are laid out, the slowest first (its
    layout's minor-to-major list reversed; without a layout, row-major); None if unreadable."""
    if shape.layout is None:
        return list(range(len(shape.dims)))
    order = int_list(shape.layout.split(":")[0])
    if order is None or sorted(order) != list(range(len(shape.dims))):
        return None
    return order[::-1]


def bitcast_perm(result: Shape, operand: Shape | None) -> tuple[int, ...] | None:
    """The transpose a bitcast makes of a row-major operand by laying its result out in
    another order (`bf16[12,64,128]{2,1,0}` -> `bf16[128,768]{0,1}` is the operand's
    dimension 2 then dimensions 0 and 1 merged): the permutation of the dimensions of the two
    shapes' common refinement (not of size 1) whose merge gives the result, in the form of
    `squeezed_perm`. None when the bitcast moves no dimension or is no such transpose."""
    if operand is None or operand.is_tuple or result.is_tuple:
        return None
    source, placed = major_to_minor(operand), major_to_minor(result)
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


def value_shape(instr: Instruction) -> Shape:
    """The shape of the value: a library call's is its result's, the first of its tuple."""
    shape = instr.shape
    if is_library(instr) and shape.is_tuple and shape.tuple_shapes:
        return shape.tuple_shapes[0]
    return shape


def elements(instr: Instruction) -> int:
    """How many elements the instruction's value has (`value_shape`)."""
    return value_shape(instr).num_elements


def elementwise(shape: Shape) -> tuple:
    """How an elementwise op's value is numbered: its type and element count."""
    return (shape.dtype, shape.num_elements)


def shape_sig(shape: Shape) -> tuple:
    """How a shape is numbered: its type and dimensions (a tuple's, each element's)."""
    if shape.is_tuple:
        return tuple(shape_sig(s) for s in shape.tuple_shapes)
    return (shape.dtype, shape.dims)


def attrs(instr: Instruction) -> tuple:
    """The attributes that make its value, (name, text) in `KEY_ATTRS` order."""
    return tuple((k, instr.attributes[k]) for k in KEY_ATTRS if k in instr.attributes)


_PAYLOAD = re.compile(r"^\s*(?:ROOT\s+)?%?([^\s=,(){}]+)\s*=.*?\b(?:parameter|constant)\(", re.M)
PARAM_NAME = re.compile(r"^param(?:eter)?_(\d+)(?:\.\d+)?$")


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


def same_line(a: Instruction, b: Instruction) -> bool:
    """Whether both come from one known source line."""
    return a.source_file is not None and (a.source_file, a.source_line) == (
        b.source_file,
        b.source_line,
    )


def is_prefix(reference: str, optimized: str) -> bool:
    """Whether `optimized` is `reference` or a clone's name of it (`tanh.1` -> `tanh.1.7`)."""
    return optimized == reference or optimized.startswith(reference + ".")
