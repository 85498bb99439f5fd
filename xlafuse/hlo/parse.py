"""Optimized HLO text -> frozen dataclasses (module, computation, instruction, shape).

Reads what `Compiled.as_text()` prints and what `--xla_dump_to` writes (`*after_optimizations.txt`):
the `HloModule` header, the `FileNames`/`FunctionNames`/`FileLocations`/`StackFrames` tables, and the
computations with one instruction per line. The parser is line-oriented with precompiled regexes,
so it is linear in the size of the text; brackets are only scanned token by token (quoted strings
skipped whole) inside one instruction. A constant whose literal spans several lines is joined.

Malformed text raises `HloParseError` naming the line and the reason; no other exception escapes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from xlafuse.errors import HloParseError

# Bits per element. Sub-byte types are packed: bytes = ceil(bits * elements / 8).
DTYPE_BITS: Mapping[str, int] = MappingProxyType(
    {
        "pred": 8, "token": 0,
        "s1": 1, "s2": 2, "s4": 4, "s8": 8, "s16": 16, "s32": 32, "s64": 64,
        "u1": 1, "u2": 2, "u4": 4, "u8": 8, "u16": 16, "u32": 32, "u64": 64,
        "f16": 16, "bf16": 16, "f32": 32, "f64": 64, "c64": 64, "c128": 128,
        "f4e2m1fn": 4, "f8e8m0fnu": 8, "f8e3m4": 8, "f8e4m3": 8, "f8e4m3fn": 8,
        "f8e4m3fnuz": 8, "f8e4m3b11fnuz": 8, "f8e5m2": 8, "f8e5m2fnuz": 8,
    }
)  # fmt: skip

_ARRAY = re.compile(r"\s*([a-z][a-z0-9]*)\[([^\]]*)\](\{[^{}]*\})?")
_STATIC_DIMS = re.compile(r"(?:\d+(?:,\d+)*)?")
_ATTR_SPLIT = re.compile(r",\s*(?=[A-Za-z_][\w.\-]*=)")
_COMMENT = re.compile(r"\s*(?:/\*.*?\*/\s*)*")
_INSTR = re.compile(r"\s*(ROOT\s+)?%?([^\s=,(){}]+)\s*=\s*")
_OPCODE = re.compile(r"\s*([a-z][a-z0-9_\-]*)\(")
_PAREN_TOK = re.compile(r'"(?:[^"\\]|\\.)*"|[()]')
_ATTR_TOK = re.compile(r'"(?:[^"\\]|\\.)*"|[{}()\[\],]')
_OPERAND = re.compile(r"%([^\s,(){}\[\]#]+)(?:#(\d+))?")
_COMP_HEADER = re.compile(r"(ENTRY\s+)?%?([^\s(]+)\s*(?:\(|\{)")
_TABLE_NAME = re.compile(r"(FileNames|FunctionNames|FileLocations|StackFrames)\s*$")
_TABLE_ROW = re.compile(r"\s*(\d+)\s+(.*?)\s*$")
_KV_INT = re.compile(r"(\w+)=(-?\d+)")
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
_META_STR = re.compile(r'(op_name|source_file)="((?:[^"\\]|\\.)*)"')
_META_INT = re.compile(r"(source_line|stack_frame_id)=(\d+)")
_COMP_REF = re.compile(r"%?([^\s,{}%]+)")
_BACKEND_KIND = re.compile(r'"kind"\s*:\s*"([^"]+)"')
_CUSTOM_TARGET = re.compile(r'"((?:[^"\\]|\\.)*)"')

_OPEN = {"(": ")", "{": "}", "[": "]"}
_CLOSE = {")", "}", "]"}
_CALL_ATTRS = ("calls", "to_apply", "body", "condition", "true_computation", "false_computation")
_CALL_LIST_ATTRS = ("branch_computations", "called_computations")
_LITERAL_OPCODES = frozenset({"constant", "parameter"})


@dataclass(frozen=True)
class Shape:
    """An HLO shape: an array (`dtype`, `dims`) or a tuple (`tuple_shapes`, dtype None)."""

    dtype: str | None
    dims: tuple[int, ...] = ()
    tuple_shapes: tuple[Shape, ...] = ()
    layout: str | None = None
    dynamic: tuple[bool, ...] = ()

    @property
    def is_tuple(self) -> bool:
        return self.dtype is None

    @property
    def num_elements(self) -> int:
        """Elements of an array (dynamic dims at their bound); sum over leaves for a tuple."""
        if self.is_tuple:
            return sum(s.num_elements for s in self.tuple_shapes)
        return math.prod(self.dims)

    @property
    def byte_size(self) -> int:
        """Bytes in memory: packed sub-byte types round up; a tuple is the sum of its leaves."""
        if self.is_tuple:
            return sum(s.byte_size for s in self.tuple_shapes)
        return (DTYPE_BITS.get(self.dtype, 0) * self.num_elements + 7) // 8

    def leaves(self) -> tuple[Shape, ...]:
        """The array shapes of a (nested) tuple, in order; an array is its own only leaf."""
        if not self.is_tuple:
            return (self,)
        return tuple(leaf for s in self.tuple_shapes for leaf in s.leaves())

    def __str__(self) -> str:
        if self.is_tuple:
            return "(" + ", ".join(str(s) for s in self.tuple_shapes) + ")"
        dynamic = self.dynamic or (False,) * len(self.dims)
        dims = ",".join(
            f"<={d}" if dyn else str(d) for d, dyn in zip(self.dims, dynamic, strict=True)
        )
        return f"{self.dtype}[{dims}]{self.layout or ''}"


@dataclass(frozen=True)
class Instruction:
    """One HLO instruction. `operands` are instruction names (no `%`, no `#N` tuple index)."""

    name: str
    opcode: str
    shape: Shape
    operands: tuple[str, ...] = ()
    attributes: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)
    is_root: bool = False
    op_name: str | None = None
    source_file: str | None = None
    source_line: int | None = None
    operand_indices: tuple[int | None, ...] = ()  # `%x#1` -> 1: reads tuple element 1 of x
    line: int | None = field(default=None, compare=False)

    def attr(self, key: str) -> str | None:
        """The raw text of attribute `key`, or None when absent."""
        return self.attributes.get(key)

    @property
    def called_computations(self) -> tuple[str, ...]:
        """Names of computations this instruction calls (fused, reducer, loop, branch, ...)."""
        names: list[str] = []
        for key in _CALL_ATTRS + _CALL_LIST_ATTRS:
            value = self.attributes.get(key)
            if value:
                names.extend(_COMP_REF.findall(value.strip("{}")))
        return tuple(names)

    @property
    def fusion_kind(self) -> str | None:
        """ "kLoop", "kInput", "kOutput" or "kCustom" for a fusion, else None."""
        return self.attributes.get("kind")

    @property
    def custom_call_target(self) -> str | None:
        """The custom_call_target of a custom-call (e.g. "__cublas$lt$matmul"), else None."""
        value = self.attributes.get("custom_call_target")
        if value is None:
            return None
        m = _CUSTOM_TARGET.fullmatch(value)
        return m.group(1) if m else value

    @property
    def backend_kind(self) -> str | None:
        """The `"kind"` in backend_config (e.g. "__triton_gemm", "__ynn_fusion"), else None."""
        config = self.attributes.get("backend_config")
        if not config:
            return None
        m = _BACKEND_KIND.search(config)
        return m.group(1) if m else None


@dataclass(frozen=True)
class Computation:
    """A named list of instructions in printed order; the entry computation has is_entry."""

    name: str
    instructions: tuple[Instruction, ...]
    is_entry: bool = False
    _index: Mapping[str, Instruction] = field(
        init=False, repr=False, compare=False, hash=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        index = MappingProxyType({i.name: i for i in self.instructions})
        object.__setattr__(self, "_index", index)

    @property
    def by_name(self) -> Mapping[str, Instruction]:
        """Instruction name -> instruction."""
        return self._index

    @property
    def root(self) -> Instruction | None:
        """The ROOT instruction (the last one when none is marked), or None when empty."""
        for instr in self.instructions:
            if instr.is_root:
                return instr
        return self.instructions[-1] if self.instructions else None


@dataclass(frozen=True)
class HloModule:
    """A parsed HLO module. `source` is the file it came from, when known."""

    name: str
    computations: tuple[Computation, ...]
    source: str | None = None
    header: str = field(default="", compare=False)
    _index: Mapping[str, Computation] = field(
        init=False, repr=False, compare=False, hash=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", MappingProxyType({c.name: c for c in self.computations}))

    @property
    def entry(self) -> Computation:
        """The ENTRY computation (the parser guarantees there is one)."""
        return next(c for c in self.computations if c.is_entry)

    def computation(self, name: str) -> Computation:
        """The computation called `name` (with or without `%`).

        Raises:
            KeyError: when the module has no computation of that name.
        """
        try:
            return self._index[name.lstrip("%")]
        except KeyError:
            raise KeyError(f"module {self.name!r} has no computation named {name!r}") from None


def parse_hlo(text: str, source: str | None = None) -> HloModule:
    """Parses optimized HLO text into an `HloModule`.

    Args:
        text: HLO as printed by `Compiled.as_text()` or written by `--xla_dump_to`.
        source: where the text came from (a path), used in error messages and kept on the module.

    Returns:
        The parsed module.

    Raises:
        HloParseError: the text is empty, binary, truncated or not well-formed HLO; the message
            names the line and the reason.
    """
    if not isinstance(text, str):
        raise HloParseError(f"expected HLO text (str), got {type(text).__name__}", 1, source)
    nul = text.find("\x00")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        raise HloParseError("binary data (NUL byte), not HLO text", line, source)
    return _Parser(text.split("\n"), source).run()


class _Parser:
    """Line-by-line state machine: header, tables, computations."""

    def __init__(self, lines: list[str], source: str | None):
        self.lines = lines
        self.source = source
        self.pos = 0
        self.files: dict[int, str] = {}
        self.locations: dict[int, tuple[int, int]] = {}  # id -> (file_name_id, line)
        self.frames: dict[int, int] = {}  # id -> file_location_id
        self.frame_cache: dict[int, tuple[str | None, int | None]] = {}
        self.shapes: dict[str, Shape] = {}

    def error(self, reason: str, line: int | None = None) -> HloParseError:
        return HloParseError(reason, line if line is not None else self.pos, self.source)

    def run(self) -> HloModule:
        try:
            return self._run()
        except HloParseError:
            raise
        except (IndexError, KeyError, ValueError, UnicodeError, RecursionError) as exc:
            raise self.error(f"malformed HLO ({type(exc).__name__}: {exc})") from exc

    def _run(self) -> HloModule:
        name, header = self._header()
        computations: list[Computation] = []
        table: str | None = None
        n = len(self.lines)
        while self.pos < n:
            raw = self.lines[self.pos]
            self.pos += 1
            text = raw.strip()
            if not text:
                table = None
                continue
            m = _TABLE_NAME.match(text)
            if m:
                table = m.group(1)
            elif table is not None and _TABLE_ROW.match(text):
                self._table_row(table, text)
            elif text.endswith("{") and not _INSTR.match(text):
                table = None
                computations.append(self._computation(text))
            elif text == "}":
                raise self.error("unbalanced braces: '}' outside a computation")
            elif _INSTR.match(text):
                raise self.error(f"instruction outside a computation: {_clip(text)}")
            else:
                raise self.error(
                    f"expected a computation header 'name (...) -> shape {{': {_clip(text)}"
                )
        if not any(c.is_entry for c in computations):
            raise self.error("no ENTRY computation (truncated or not a whole module?)", n)
        return HloModule(name, tuple(computations), self.source, header)

    def _header(self) -> tuple[str, str]:
        n = len(self.lines)
        while self.pos < n and not self.lines[self.pos].strip():
            self.pos += 1
        if self.pos >= n:
            raise self.error("empty text: expected an 'HloModule name, ...' header", 1)
        first = self.lines[self.pos].strip()
        self.pos += 1
        if not first.startswith("HloModule "):
            raise self.error(f"not HLO: expected 'HloModule name, ...', got {_clip(first)}")
        name = first[len("HloModule ") :].split(",", 1)[0].strip()
        if not name:
            raise self.error("HloModule header without a module name")
        return name, first

    def _table_row(self, table: str, text: str) -> None:
        key_text, value = _TABLE_ROW.match(text).groups()
        key = int(key_text)
        if table in ("FileNames", "FunctionNames"):
            m = _QUOTED.search(value)
            if table == "FileNames":
                self.files[key] = m.group(1) if m else value
            return
        fields = dict((k, int(v)) for k, v in _KV_INT.findall(value))
        if table == "FileLocations":
            self.locations[key] = (fields.get("file_name_id", 0), fields.get("line", 0))
        else:
            self.frames[key] = fields.get("file_location_id", 0)

    def _frame_source(self, frame: int) -> tuple[str | None, int | None]:
        cached = self.frame_cache.get(frame)
        if cached is None:
            loc = self.locations.get(self.frames.get(frame, -1))
            cached = (self.files.get(loc[0]), loc[1]) if loc else (None, None)
            self.frame_cache[frame] = cached
        return cached

    def _computation(self, text: str) -> Computation:
        start = self.pos
        m = _COMP_HEADER.match(text)
        if not m:
            raise self.error(f"malformed computation header: {_clip(text)}")
        is_entry, name = bool(m.group(1)), m.group(2)
        instrs: list[Instruction] = []
        n = len(self.lines)
        while self.pos < n:
            raw = self.lines[self.pos]
            self.pos += 1
            body = raw.strip()
            if body == "}":
                comp = Computation(name, tuple(instrs), is_entry)
                _check_operands(comp, self.source)
                return comp
            if not body:
                continue
            instrs.append(self._instruction(body))
        raise self.error(f"truncated: computation {name!r} opened at line {start} is not closed", n)

    def _instruction(self, text: str) -> Instruction:
        line = self.pos
        m = _INSTR.match(text)
        if not m:
            raise self.error(f"expected an instruction 'name = shape opcode(...)': {_clip(text)}")
        shape, pos = _parse_shape(text, m.end(), self)
        op = _OPCODE.match(text, pos)
        if not op:
            raise self.error(f"expected an opcode followed by '(' after the shape: {_clip(text)}")
        opcode = op.group(1)
        close = _match_paren(text, op.end())
        if close < 0 and opcode == "constant":
            text, close = self._join_literal(text, op.end())
        if close < 0:
            raise self.error(f"unbalanced parentheses in operands of {m.group(2)!r}", line)
        operands, indices = _operands(text[op.end() : close], opcode)
        attrs = _attributes(text, close + 1, self, line)
        return self._build(m, opcode, shape, operands, indices, attrs, line)

    def _join_literal(self, text: str, start: int) -> tuple[str, int]:
        """Joins the lines of a constant literal printed over several lines (linear time)."""
        parts = [text]
        depth = _paren_depth(text[start:]) + 1
        while depth > 0 and self.pos < len(self.lines):
            parts.append(self.lines[self.pos].strip())
            self.pos += 1
            depth += _paren_depth(parts[-1])
        text = " ".join(parts)
        return text, _match_paren(text, start)

    def _build(self, m, opcode, shape, operands, indices, attrs, line) -> Instruction:
        op_name = source_file = source_line = None
        meta = attrs.get("metadata")
        if meta:
            for key, value in _META_STR.findall(meta):
                if key == "op_name":
                    op_name = value
                else:
                    source_file = value
            for key, value in _META_INT.findall(meta):
                if key == "source_line":
                    source_line = int(value)
                elif source_file is None:
                    source_file, source_line = self._frame_source(int(value))
        return Instruction(
            m.group(2), opcode, shape, operands, MappingProxyType(attrs), bool(m.group(1)),
            op_name, source_file, source_line, indices, line,
        )  # fmt: skip


def _clip(text: str, width: int = 80) -> str:
    return repr(text if len(text) <= width else text[:width] + "...")


def _parse_shape(text: str, pos: int, parser: _Parser) -> tuple[Shape, int]:
    """Parses an array or (nested) tuple shape at `pos`; returns it and the position after it."""
    m = _ARRAY.match(text, pos)
    if m:
        key = m.group(0)
        shape = parser.shapes.get(key)
        if shape is None:
            shape = parser.shapes[key] = _array_shape(m, parser)
        return shape, m.end()
    pos = _COMMENT.match(text, pos).end()
    if not text.startswith("(", pos):
        if _ARRAY.match(text, pos):
            return _parse_shape(text, pos, parser)
        raise parser.error(f"expected a shape like f32[8,128] at column {pos + 1}: {_clip(text)}")
    elements: list[Shape] = []
    pos = _COMMENT.match(text, pos + 1).end()
    while not text.startswith(")", pos):
        element, pos = _parse_shape(text, pos, parser)
        elements.append(element)
        pos = _COMMENT.match(text, pos).end()
        if text.startswith(",", pos):
            pos = _COMMENT.match(text, pos + 1).end()
        elif not text.startswith(")", pos):
            raise parser.error(f"malformed tuple shape at column {pos + 1}: {_clip(text)}")
    return Shape(None, tuple_shapes=tuple(elements)), pos + 1


def _array_shape(m: re.Match, parser: _Parser) -> Shape:
    dtype, dims_text, layout = m.groups()
    if dtype not in DTYPE_BITS:
        raise parser.error(f"unknown element type {dtype!r} in shape {m.group(0).strip()!r}")
    if _STATIC_DIMS.fullmatch(dims_text):
        dims = tuple(map(int, dims_text.split(","))) if dims_text else ()
        return Shape(dtype, dims, (), layout, (False,) * len(dims))
    dims_list: list[int] = []
    dynamic: list[bool] = []
    for dim in dims_text.split(","):
        dim = dim.strip()
        digits = dim[2:] if dim.startswith("<=") else dim
        if not digits.isdigit():
            raise parser.error(f"bad dimension {dim!r} in shape {m.group(0).strip()!r}")
        dims_list.append(int(digits))
        dynamic.append(dim.startswith("<="))
    return Shape(dtype, tuple(dims_list), (), layout, tuple(dynamic))


def _paren_depth(text: str) -> int:
    opened = 0
    for tok in _PAREN_TOK.finditer(text):
        c = tok.group()
        opened += 1 if c == "(" else -1 if c == ")" else 0
    return opened


def _match_paren(text: str, pos: int) -> int:
    """Index of the ')' closing an already-open '(' before `pos`, or -1 when it is not closed."""
    depth = 1
    for tok in _PAREN_TOK.finditer(text, pos):
        c = tok.group()
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return tok.start()
    return -1


def _operands(inner: str, opcode: str) -> tuple[tuple[str, ...], tuple[int | None, ...]]:
    if opcode in _LITERAL_OPCODES or not inner.strip():
        return (), ()
    if "%" in inner:
        found = _OPERAND.findall(inner)
    else:  # printed without '%': the name is the last word of each top-level piece
        found = [(piece.split()[-1], "") for piece in _split_top(inner) if piece.strip()]
    names = tuple(name for name, _ in found)
    return names, tuple(int(i) if i else None for _, i in found)


def _split_top(text: str, start: int = 0) -> list[str]:
    """Splits `text[start:]` at commas outside brackets and quotes (None-free; may raise)."""
    pieces: list[str] = []
    depth = 0
    last = start
    for tok in _ATTR_TOK.finditer(text, start):
        c = tok.group()
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced {c!r} at column {tok.start() + 1}")
        elif c == "," and depth == 0:
            pieces.append(text[last : tok.start()])
            last = tok.end()
    if depth != 0:
        raise ValueError("unbalanced brackets (an unclosed '{', '(' or '[')")
    pieces.append(text[last:])
    return pieces


def _attributes(text: str, pos: int, parser: _Parser, line: int) -> dict[str, str]:
    rest = text[pos:].strip()
    if not rest:
        return {}
    if not rest.startswith(","):
        raise parser.error(f"expected ', attribute=value' after the operands: {_clip(rest)}", line)
    try:
        pieces = _ATTR_SPLIT.split(rest[1:])
        if not all(map(_balanced, pieces)):  # a candidate ', key=' sat inside brackets/quotes
            pieces = _split_top(rest, 1)
    except ValueError as exc:
        raise parser.error(f"{exc} in the attributes: {_clip(rest)}", line) from None
    attrs: dict[str, str] = {}
    for piece in pieces:
        key, eq, value = piece.partition("=")
        if not eq:
            raise parser.error(f"expected attribute=value, got {_clip(piece.strip())}", line)
        attrs[key.strip()] = value.strip()
    return attrs


def _balanced(piece: str) -> bool:
    """Whether brackets balance by count and quotes pair up (the fast attribute-split check)."""
    return (
        piece.count("{") == piece.count("}")
        and piece.count("(") == piece.count(")")
        and piece.count("[") == piece.count("]")
        and (piece.count('"') - piece.count('\\"')) % 2 == 0
    )


def _check_operands(comp: Computation, source: str | None) -> None:
    index = comp.by_name
    for instr in comp.instructions:
        for operand in instr.operands:
            if operand not in index:
                raise HloParseError(
                    f"unknown operand %{operand} of %{instr.name} in computation {comp.name!r}",
                    instr.line,
                    source,
                )
