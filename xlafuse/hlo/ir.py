"""Parsed HLO as immutable values: frozen dataclasses (module, computation, shape) and a named
tuple (instruction); what is read.

Reads what XLA reads: what `Compiled.as_text()` prints, what `--xla_dump_to` writes
(`*after_optimizations.txt`, with its `FileNames`/`FunctionNames`/`FileLocations`/`StackFrames`
tables), and HLO written by hand as in XLA's own tests. As in XLA's own lexer, line breaks are
only whitespace: an instruction, shape, attribute list or header may run over several lines, a
computation may sit on one line, and `//` and `/* */` comments may appear between any two tokens.
Also read: instructions without a shape (XLA infers it; here the shape is unknown, `Shape.sized`
is False), nested operands (`add(p, f32[] constant(1))`, named `constant.anon` as XLA names
them), buffer types `b(f32[8])`, unbounded dims `f32[?,784]`, a module without `ENTRY` (the last
computation is the entry) and `}, execution_thread="host"` after a computation.

Speed: a whole-text scanner (`_reader.py`), regexes anchored at a position. An instruction on one line in
the form XLA prints is matched by one regex (the fast path); anything else goes through the
general token-by-token path, which accepts the forms above. Attributes are split on first use.
Where `pip install` could build it, `_scan.c` reads whole computations and runs of fast-path
lines in C, into the same values (checked against the pure-Python reader over the corpus and
fuzzed text: `tests/test_hlo_scan.py`).

Malformed text raises `HloParseError` naming the line and the reason; no other exception escapes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from operator import itemgetter
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

from xlafuse.kinds import FusionKind

_FUSION_KINDS = {kind.value: kind for kind in FusionKind}  # a fusion's kind=, read once

_CHECKOUT = Path(__file__).resolve().parents[2]  # the folder that holds the xlafuse package
_INSTALLED = re.compile(r"^.*/(?:site|dist)-packages/")


def portable_source(source: str) -> str:
    """A `file:line` of HLO metadata without the machine's own folders, for records.

    `.../site-packages/flax/nnx/nn/linear.py:422` -> `flax/nnx/nn/linear.py:422`; a file in this
    xlafuse checkout -> its path from the checkout (`xlafuse/models/mlp.py:52`); anything else
    is kept as written (the user's own files: their path is the information).
    """
    path, sep, line = source.rpartition(":")
    if not sep or not line.isdigit():
        path, line = source, ""
    trimmed = _INSTALLED.sub("", path)
    if trimmed == path and Path(path).is_absolute():
        try:
            trimmed = Path(path).relative_to(_CHECKOUT).as_posix()
        except ValueError:
            trimmed = path
    return f"{trimmed}:{line}" if line else trimmed


# Bits per element. Sub-byte types are packed: bytes = ceil(bits * elements / 8).
DTYPE_BITS: Mapping[str, int] = MappingProxyType(
    {
        "pred": 8, "token": 0, "opaque": 0,
        "s1": 1, "s2": 2, "s4": 4, "s8": 8, "s16": 16, "s32": 32, "s64": 64,
        "u1": 1, "u2": 2, "u4": 4, "u8": 8, "u16": 16, "u32": 32, "u64": 64,
        "f16": 16, "bf16": 16, "f32": 32, "f64": 64, "c64": 64, "c128": 128,
        "f4e2m1fn": 4, "f8e8m0fnu": 8, "f8e3m4": 8, "f8e4m3": 8, "f8e4m3fn": 8,
        "f8e4m3fnuz": 8, "f8e4m3b11fnuz": 8, "f8e5m2": 8, "f8e5m2fnuz": 8,
    }
)  # fmt: skip
UNKNOWN_DTYPE = "?"  # the dtype of an instruction printed without a shape

_ATTR_SPLIT = re.compile(r",\s*(?=[A-Za-z_][\w.\-]*\s*=)")
_ATTR_TOK = re.compile(r'"(?:[^"\\]++|\\.)*+"|[{}()\[\],]')
_COMP_REF = re.compile(r"%?([^\s,{}%]+)")
_BACKEND_KIND = re.compile(r'"kind"\s*:\s*"([^"]+)"')
_CUSTOM_TARGET = re.compile(r'"((?:[^"\\]++|\\.)*+)"')

_new = object.__new__
_set = object.__setattr__
_OPEN = {"(": ")", "{": "}", "[": "]"}
_CLOSE = {")", "}", "]"}
_CALL_ATTRS = ("calls", "to_apply", "body", "condition", "true_computation", "false_computation")
_CALL_LIST_ATTRS = ("branch_computations", "called_computations")
_LITERAL_OPCODES = frozenset({"constant", "parameter"})


class _computed_once:
    """`functools.cached_property` without its lock: Python 3.11 takes one on each first read,
    and every shape of every module read has its size read once."""

    def __init__(self, compute):
        self.compute = compute
        self.name = compute.__name__
        self.__doc__ = compute.__doc__

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        value = instance.__dict__[self.name] = self.compute(instance)
        return value


@dataclass(frozen=True)
class Shape:
    """An HLO shape: an array (`dtype`, `dims`) or a tuple (`tuple_shapes`, dtype None).

    An unbounded dim (`f32[?,784]`) is -1 (and dynamic); an instruction printed without a shape
    has dtype "?" (`UNKNOWN_DTYPE`). Neither can be sized: `sized` is False, sizes are 0.
    A buffer type `b(f32[8])` is read as the array it holds.
    """

    dtype: str | None
    dims: tuple[int, ...] = ()
    tuple_shapes: tuple[Shape, ...] = ()
    layout: str | None = None
    dynamic: tuple[bool, ...] = ()

    @property
    def is_tuple(self) -> bool:
        return self.dtype is None

    @_computed_once
    def sized(self) -> bool:
        """Whether the byte size is known: a known dtype, no unbounded dim (all leaves)."""
        if self.is_tuple:
            return all(s.sized for s in self.tuple_shapes)
        return self.dtype in DTYPE_BITS and all(d >= 0 for d in self.dims)

    @_computed_once
    def num_elements(self) -> int:
        """Elements (dynamic dims at their bound; 0 when not `sized`); a tuple sums its leaves."""
        if self.is_tuple:
            return sum(s.num_elements for s in self.tuple_shapes)
        return math.prod(self.dims) if self.sized else 0

    @_computed_once
    def byte_size(self) -> int:
        """Bytes in memory: packed sub-byte types round up; a tuple sums its leaves; 0 if unsized."""
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
        if self.dtype == UNKNOWN_DTYPE:
            return UNKNOWN_DTYPE
        dynamic = self.dynamic or (False,) * len(self.dims)
        dims = ",".join(
            "?" if d < 0 else f"<={d}" if dyn else str(d)
            for d, dyn in zip(self.dims, dynamic, strict=True)
        )
        return f"{self.dtype}[{dims}]{self.layout or ''}"


UNKNOWN_SHAPE = Shape(UNKNOWN_DTYPE)


def _new_shape(
    dtype: str,
    dims: tuple[int, ...],
    tuple_shapes: tuple[Shape, ...] | None,
    layout: tuple[int, ...] | None,
    dynamic: tuple[bool, ...] | None,
) -> Shape:
    """Builds a Shape without the frozen dataclass's per-field __setattr__ (each shape read)."""
    shape = _new(Shape)
    _set(shape, "__dict__", {
        "dtype": dtype, "dims": dims, "tuple_shapes": tuple_shapes, "layout": layout,
        "dynamic": dynamic,
    })  # fmt: skip
    return shape


class _Attributes(Mapping):
    """Attribute name -> raw value text, split from the instruction's text on first use."""

    __slots__ = ("_hash", "_items", "_text")

    def __init__(self, text: str = "", items: dict[str, str] | None = None):
        self._text = text
        self._items = items  # `_hash` is set on the first hash only (reading makes 1e5 of these)

    def _dict(self) -> dict[str, str]:
        if self._items is None:
            self._items = _split_attributes(self._text)
        return self._items

    @property
    def text(self) -> str:
        """The attributes as printed after the operands: `, key=value, ...` (for fast scans)."""
        if self._items is not None and not self._text:
            self._text = "".join(f", {k}={v}" for k, v in self._items.items())
        return self._text

    def __getitem__(self, key: str) -> str:
        return self._dict()[key]

    def get(self, key: str, default=None):
        return self._dict().get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._dict()

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())

    def __repr__(self) -> str:
        return repr(self._dict())

    def __eq__(self, other: object) -> bool:
        """Equal to any mapping of the same keys and values (in any order), as a dict is; two
        texts that are the same string are equal without splitting them."""
        if isinstance(other, _Attributes):
            if self._text and self._text == other._text:
                return True
            return self._dict() == other._dict()
        if isinstance(other, Mapping):
            return self._dict() == dict(other.items())
        return NotImplemented

    def __hash__(self) -> int:
        """Of the items in any order (as `__eq__`); made on the first call only: hashing splits
        the text, which reading alone never does."""
        try:
            return self._hash
        except AttributeError:
            self._hash = hash(frozenset(self._dict().items()))
            return self._hash


_NO_ATTRIBUTES = _Attributes("", {})


class Instruction(NamedTuple):
    """One HLO instruction. `operands` are instruction names (no `%`, no `#N` tuple index).

    A named tuple: the reader makes one per instruction (1e5 and more in a large module), and a
    tuple is made and freed in a third of the time of an object with a `__dict__`.

    Two instructions are equal (and hash alike) when every field but `line` is: `attributes`
    compare as mappings (the same keys and values in any order), so a kLoop fusion calling `f1`
    is not a kInput fusion calling `f2`. `line` is where the text was read, not part of the
    value: the same instruction read one line lower (a comment added above it) is equal.
    `same_value` is the looser comparison, without `attributes`.
    """

    name: str
    opcode: str
    shape: Shape
    operands: tuple[str, ...] = ()
    attributes: Mapping[str, str] = _NO_ATTRIBUTES
    is_root: bool = False
    op_name: str | None = None
    source_file: str | None = None
    source_line: int | None = None
    # `%x#1` -> 1: reads tuple element 1 of x; None for a whole operand; () when no operand has #
    operand_indices: tuple[int | None, ...] = ()
    line: int | None = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Instruction):
            return NotImplemented
        # the other fields first: attribute texts are split only where they are all equal
        return _valued(self) == _valued(other) and self.attributes == other.attributes

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        attributes = self.attributes
        if not isinstance(attributes, _Attributes):  # a dict, given to the constructor
            attributes = frozenset(attributes.items())
        return hash((_valued(self), attributes))

    def same_value(self, other: Instruction) -> bool:
        """Whether `other` has the same fields but `attributes` and `line`: the same name,
        opcode, shape, operands, root flag and metadata, whatever the attributes say (the kind
        of a fusion, the computations it calls, its layouts and configs)."""
        return _valued(self) == _valued(other)

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
    def fusion_kind(self) -> FusionKind | str | None:
        """A fusion's `kind=` as a `FusionKind` (kLoop, kInput, kOutput, kCustom; a kind XLA
        adds later stays its string), else None."""
        kind = self.attributes.get("kind")
        return _FUSION_KINDS.get(kind, kind)

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


# Fields by position: itemgetter reads a tuple's item in half the time attrgetter takes
_name_of = itemgetter(Instruction._fields.index("name"))
_operands_of = itemgetter(Instruction._fields.index("operands"))
_valued = itemgetter(0, 1, 2, 3, 5, 6, 7, 8, 9)  # every field but attributes (4) and line (10)
# (name, opcode, shape, ...: every field in order) -> Instruction, without a Python call
_make_instruction = partial(tuple.__new__, Instruction)


@dataclass(frozen=True)
class Computation:
    """A named list of instructions in printed order; the entry computation has is_entry.

    `by_name` (instruction name -> instruction) is a plain attribute, not a property: the
    analysis reads it once per kernel.
    """

    name: str
    instructions: tuple[Instruction, ...]
    is_entry: bool = False
    execution_thread: str | None = None
    by_name: Mapping[str, Instruction] = field(
        init=False, repr=False, compare=False, hash=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", MappingProxyType(_index_of(self.instructions)))

    @property
    def root(self) -> Instruction | None:
        """The ROOT instruction (the last one when none is marked), or None when empty."""
        for instr in self.instructions:
            if instr.is_root:
                return instr
        return self.instructions[-1] if self.instructions else None


def _new_computation(
    name: str,
    instructions: tuple[Instruction, ...],
    *,
    is_entry: bool = False,
    execution_thread: str | None = None,
    index: dict[str, Instruction] | None = None,
) -> Computation:
    """Builds a Computation without the frozen dataclass's per-field __setattr__ (the reader
    makes one per computation, and again when a thread or a renaming changes it); `index`:
    its `by_name` dict, when the caller has made it already."""
    comp = _new(Computation)
    if index is None:
        index = _index_of(instructions)
    _set(comp, "__dict__", {
        "name": name, "instructions": instructions, "is_entry": is_entry,
        "execution_thread": execution_thread, "by_name": MappingProxyType(index),
    })  # fmt: skip
    return comp


def _index_of(instructions: tuple[Instruction, ...]) -> dict[str, Instruction]:
    """Name -> instruction (the last of a repeated name; the reader rejects repeats)."""
    return dict(zip(map(_name_of, instructions), instructions))  # noqa: B905 (one list, twice)


@dataclass(frozen=True)
class HloModule:
    """A parsed HLO module. `source` is the file it came from, when known."""

    name: str
    computations: tuple[Computation, ...]
    source: str | None = None
    header: str = field(default="", compare=False)
    text: str = field(default="", repr=False, compare=False)  # the HLO text it was parsed from
    _index: Mapping[str, Computation] = field(
        init=False, repr=False, compare=False, hash=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", _computations_by_name(self.computations))

    @_computed_once
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


def _new_module(
    name: str, computations: tuple[Computation, ...], source: str | None, header: str, text: str
) -> HloModule:
    """Builds an HloModule as `_new_computation` builds a Computation, without the frozen
    dataclass's per-field `__setattr__` (once per module read, and most modules are small)."""
    module = _new(HloModule)
    _set(module, "__dict__", {
        "name": name, "computations": computations, "source": source, "header": header,
        "text": text, "_index": _computations_by_name(computations),
    })  # fmt: skip
    return module


def _computations_by_name(computations: tuple[Computation, ...]) -> Mapping[str, Computation]:
    return MappingProxyType({c.name: c for c in computations})


def _split_attributes(text: str) -> dict[str, str]:
    """`, k=v, k2={...}` -> {k: v, k2: {...}}: split at commas outside brackets and quotes."""
    pieces = _ATTR_SPLIT.split(text[1:])
    if not all(map(_balanced, pieces)):  # a candidate ', key=' sat inside brackets/quotes
        pieces = _split_top(text, 1)
    attrs: dict[str, str] = {}
    for piece in pieces:
        key, _, value = piece.partition("=")
        attrs[key.strip()] = value.strip()
    return attrs


def _balanced(piece: str) -> bool:
    return (
        piece.count("{") == piece.count("}")
        and piece.count("(") == piece.count(")")
        and piece.count("[") == piece.count("]")
        and (piece.count('"') - piece.count('\\"')) % 2 == 0
    )


def _split_top(text: str, start: int = 0) -> list[str]:
    """Splits `text[start:]` at commas outside brackets and quotes."""
    pieces: list[str] = []
    depth = 0
    last = start
    for tok in _ATTR_TOK.finditer(text, start):
        c = tok.group()
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif c == "," and depth == 0:
            pieces.append(text[last : tok.start()])
            last = tok.end()
    pieces.append(text[last:])
    return pieces
