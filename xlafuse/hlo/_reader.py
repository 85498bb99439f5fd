"""The scanner behind `parse_hlo`: HLO text -> the dataclasses of `xlafuse.hlo.parse`.

(see `parse_hlo` for what it reads; private: call `parse_hlo`)

Three readers of one grammar (issue 30, item 7): `Reader._general` reads every form, token by
token; `scan` reads the one-line forms that XLA prints, the bulk of any text, and is the one
entry point to the fast readers: the C scanner (`_scan.c`) where it was built, else the regex
`_FAST`, chosen inside it (the reader never branches on which). `_FAST` is kept, though it
reads a subset of `_general`'s grammar: without it the pure-Python reader is several times
slower on the corpus (with C it reads only the lines that C leaves, and changes nothing).
`tests/test_hlo_scan.py` holds the readers to the same values.

No parse depends on another: shapes are kept per `Reader` (per parse), the C scanner's tables
per call (it asks `Reader._shape_of` for each shape), at some cost against shapes kept for the
process. Both figures: benchmarks/README.md ("The pure-Python fast reader").
"""

from __future__ import annotations

import re
from itertools import chain, islice

from xlafuse.errors import HloParseError
from xlafuse.hlo.ir import (
    _CLOSE,
    _LITERAL_OPCODES,
    _NO_ATTRIBUTES,
    _OPEN,
    DTYPE_BITS,
    UNKNOWN_SHAPE,
    Computation,
    HloModule,
    Instruction,
    Shape,
    _Attributes,
    _index_of,
    _make_instruction,
    _new_computation,
    _new_module,
    _new_shape,
    _operands_of,
)

try:  # the fast path in C, where it was built (`setup.py`); without it, the same in Python
    from xlafuse.hlo import _scan as scanner
except ImportError:  # pragma: no cover (a checkout run from its folder, or no C compiler)
    scanner = None

_NAME = r"[^\s=,(){}\[\]%#\"/:;<>]+"
_STR = r'"(?:[^"\\\n]++|\\.)*+"'
_BRACES = r"\{(?:[^{}\"\n]++|" + _STR + r")*+\}"
for _ in range(4):  # backend_config JSON nests: {"a":{"b":{"c":1}}}
    _BRACES = r"\{(?:[^{}\"\n]++|" + _STR + "|" + _BRACES + r")*+\}"
# Possessive (++, *+): a line that is not one whole instruction fails fast, never backtracks.
_VALUE = rf"(?:[^\s,{{}}()\[\]\"/]++|{_STR}|{_BRACES}|\[[^\[\]\n]*+\]|\([^()\n]*+\))++"
_FAST_NAME = r"[A-Za-z_][A-Za-z0-9_.\-]*+"  # ASCII, checked faster than \w; others: general
# `metadata={op_name="..." ...}` (most of the attribute text) checked by one loop over its flat
# inside rather than by the nested _BRACES: the same text is accepted, in far fewer steps. The
# inside is captured: `_body` reads the op name and source from it without another search.
_FAST_METADATA = rf'metadata=\{{([^{{}}"\n]*+(?:{_STR}[^{{}}"\n]*+)*+)\}}(?![^\s,])'
_FAST_ATTR = rf",[ \t]*+(?:{_FAST_METADATA}|[A-Za-z_][\w.\-]*+=[ \t]*+{_VALUE})"
# One whole instruction on one line as XLA prints it: ROOT, name, shape, opcode, operands (names
# only, or other), attributes; then the whitespace up to the next token, not a ',' or a comment.
_FAST = re.compile(
    rf"(ROOT[ \t]+)?%?({_FAST_NAME})[ \t]*+=[ \t]*+"
    r"([a-z][a-z0-9]*+\[[^\]\n]*+\](?:\{[^{}\n]*+\})?|\((?:[^()\n]++|\([^()\n]*+\))*+\))[ \t]++"
    rf"([a-z][a-z0-9_\-]*+)\((?:(%?{_FAST_NAME}(?:, *+%?{_FAST_NAME})*+)|([^()\"\n]*+))\)"
    rf"((?:{_FAST_ATTR})*+)[ \t\r]*+(?=\n|$)\s*+(?![,/])"
).match
# The module header on one line; as `_FAST`, not when the next token goes on with it (`,`, `/*`)
_FAST_MODULE = re.compile(
    rf"HloModule[ \t]++({_FAST_NAME})((?:{_FAST_ATTR})*+)[ \t\r]*+\n\s*+(?![,/])"
).match
_FAST_HEADER = re.compile(
    r"(ENTRY[ \t]+)?%?([A-Za-z_][\w.\-]*+)[ \t]*+(?:[(\-][^\n]*)?(?<=[ \t)\]}])\{[ \t\r]*+\n",
).match
_FAST_REF = (
    r"[ \t]*(?:[a-z][a-z0-9]*\[[^\]]*\](?:\{[^{}]*\})?[ \t]+)?%?([A-Za-z_][\w.\-]*)(?:#(\d+))?"
)
_FAST_OPERANDS = re.compile(rf"(?:{_FAST_REF}[ \t]*,)*{_FAST_REF}[ \t]*").fullmatch
_FAST_REF_ALL = re.compile(_FAST_REF).findall
_INDEX_COMMENT = re.compile(r"/\*index=\d+\*/").sub  # XLA prints one before every 5th operand
# A bracket group as `Reader._group` walks it (its depth counts brackets of any kind, strings
# skipped), without a comment: no '/' outside strings. Where it matches, the walk ends at its
# end; one regex instead of a Python step per bracket (long layouts and aliases in headers).
_GROUP_STR = r'"(?:[^"\\]++|\\.)*+"'
_GROUP_INSIDE = r'(?:[^(){}\[\]"/]++|' + _GROUP_STR + ")*+"
for _ in range(12):
    _GROUP_INSIDE = rf'(?:[^(){{}}\[\]"/]++|{_GROUP_STR}|[({{\[]{_GROUP_INSIDE}[)}}\]])*+'
_NESTED_GROUP = re.compile(rf"[({{\[]{_GROUP_INSIDE}[)}}\]]", re.S).match
_WS = re.compile(r"(?:\s+|//[^\n]*|/\*.*?\*/)*", re.S)
_ws = _WS.match
# What `Reader._group` walks over: a string's and a block comment's openings (each read on from
# there by `_string_end`, `_comment_end`), a line comment, a bracket.
_GROUP_TOK = re.compile(r'"|//[^\n]*|/\*|[(){}\[\]]').search
_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"', re.S).match
_VALUE_GOES_ON = re.compile(r"[{(\[0-9'\-]").match  # a value's next part, after a space
_BARE = re.compile(r"[^\s,{}()\[\]\"]+")
_WORD = re.compile(rf"%?({_NAME})")
_KEY = re.compile(r"([A-Za-z_][\w.\-]*)\s*=")
_INSTR_HEAD = re.compile(rf"(ROOT\b\s*)?%?({_NAME})\s*=")
_NESTED_HEAD = re.compile(  # an instruction (not `key=value`) opening an inline computation
    rf"(?:ROOT\s+)?%?{_NAME}\s*=\s*(?:[a-z][a-z0-9]*\[|\(|[a-z][a-z0-9_\-]*\s*\()"
)
_OPCODE = re.compile(r"([a-z][a-z0-9_\-]*)\s*\(")
_OPERAND_REF = re.compile(rf"%?({_NAME})(?:#(\d+))?")
_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\](?:(\{[^{}]*\})|[ \t]+(\{[^{}=%\n]*\}))?")
_STATIC_DIMS = re.compile(r"(?:\d+(?:,\d+)*)?")
_ZERO_SUFFIX = re.compile(r"\.(0\d*)$", re.M)  # `x.0`, `x.01`: numbered as `x`, `x.1` by XLA
_TABLE = re.compile(r"(FileNames|FunctionNames|FileLocations|StackFrames)[ \t\r]*(?:\n|$)")
_TABLE_ROW = r"[ \t]*+(\d+)[ \t]++([^\n]*+)(?:\n|$)"  # the value's trailing blanks: rstrip
_TABLE_END = re.compile(rf"(?:{_TABLE_ROW})*+").match
_TABLE_ROWS = re.compile(_TABLE_ROW).findall
_TABLE_ROW_AT = re.compile(_TABLE_ROW).finditer
_KV_INT = re.compile(r"(\w+)=(-?\d+)")
_QUOTED = re.compile(r'"((?:[^"\\]++|\\.)*+)"')
_META_STR = re.compile(r'(op_name|source_file)="((?:[^"\\]++|\\.)*+)"')
_META_INT = re.compile(r"(source_line|stack_frame_id)=(\d+)")
_NO_METADATA = (None, None, None)
_INT64_MAX = (1 << 63) - 1
_INT64_DIGITS = 18  # a number of at most this many digits fits in int64


def scan(reader: Reader, pos: int, *, body: list[Instruction] | None = None) -> int:
    """Reads from pos what is in the one-line forms XLA prints, as far as they go.

    Args:
        reader: the reader of the text; its `line_pos`, `line_no` are left where this stopped.
        pos: the first token to read.
        body: in a computation's body, its instructions (each read is appended); None at the
            top level, where whole computations are read into `reader.computations` (by the C
            scanner only: in Python `Reader._computation` reads the header, and its lines here).

    Returns:
        Where it stopped: at a form for `Reader._general`, a `}`, a table or the end.
    """
    if body is None:
        return pos if scanner is None else _scan_computations(reader, pos)
    return _scan_lines(reader, pos, body)


def _scan_computations(reader: Reader, pos: int) -> int:
    """Whole computations from pos, read in C (see `scan`)."""
    read: list[tuple] = []
    pos, reader.line_pos, reader.line_no = scanner.scan_computations(
        reader.s, pos, reader.line_pos, reader.line_no, read, reader._shape_of, reader._metadata,
        Instruction, _Attributes, _NO_ATTRIBUTES, _LITERAL_OPCODES,
    )  # fmt: skip
    for name, is_entry, instructions, index, checked in read:
        if not checked:
            reader._check_operands(name, instructions, index)
        reader.computations.append(
            _new_computation(
                name, instructions, is_entry=is_entry, execution_thread=None, index=index
            )
        )
    return pos


def _scan_lines(reader: Reader, pos: int, body: list[Instruction]) -> int:
    """Instruction lines from pos into body (see `scan`): runs of them in C where it was built,
    then the line that C leaves by `_FAST`, and so on; else all by `_FAST`."""
    s, fast, shapes, shape_of = reader.s, _FAST, reader.shapes, reader._shape_of
    compiled = scanner.scan_lines if scanner is not None else None
    append = body.append
    line_pos, line_no = reader.line_pos, reader.line_no
    if pos < line_pos:  # an inline computation: its instructions come after line_pos
        line_pos, line_no = 0, 1
    while True:
        if compiled is not None:
            pos, line_pos, line_no = compiled(
                s, pos, line_pos, line_no, body, shape_of, reader._metadata, Instruction,
                _Attributes, _NO_ATTRIBUTES, _LITERAL_OPCODES,
            )  # fmt: skip
        m = None if s.startswith("}", pos) else fast(s, pos)  # `}`: most bodies end so
        if m is None:
            break
        root, iname, shape_text, opcode, names, inner, rest, meta = m.groups()
        if opcode in _LITERAL_OPCODES:
            operands = indices = ()
        elif names is not None:
            operands = tuple(names.replace("%", "").replace(" ", "").split(","))
            indices = ()
        else:  # operands None: a form for the general path (then shape is False)
            operands, indices = _fast_operands(inner)
        shape = operands is not None and (shapes.get(shape_text) or reader._fast_shape(m))
        if not shape:
            break
        line_no += s.count("\n", line_pos, pos)
        line_pos = pos
        attrs = _Attributes(rest) if rest else _NO_ATTRIBUTES
        # meta: the inside of `metadata={...}`, captured by `_FAST`
        op_name, source_file, source_line = (
            reader._metadata(meta, line_no) if meta else _NO_METADATA
        )
        append(_make_instruction((
            iname, opcode, shape, operands, attrs, root is not None, op_name,
            source_file, source_line, indices, line_no,
        )))  # fmt: skip
        pos = m.end()
    reader.line_pos, reader.line_no = line_pos, line_no
    return pos


class Reader:
    """A scanner over the whole text: header, tables, computations, instructions."""

    def __init__(self, text: str, source: str | None):
        self.s = text
        self.n = len(text)
        self.source = source
        self.pos = 0  # start of what is being parsed, for errors from unexpected exceptions
        # A quote at or after unclosed_quote opens no string (`_string_end`); the last `*/`,
        # once looked for (`_comment_end`)
        self.unclosed_quote = self.n
        self.last_comment_end: int | None = None
        self.line_pos = 0  # self.line_no is the line of text[line_pos]
        self.line_no = 1
        self.files: dict[int, str] = {}
        self.locations: dict[int, tuple[int, int]] = {}  # id -> (file_name_id, line)
        self.frames: dict[int, int] = {}  # id -> file_location_id
        self.frame_cache: dict[int, tuple[str | None, int | None]] = {}
        # Shapes by their text, for this parse only (an earlier one's could differ: see
        # `_fast_shape`)
        self.shapes: dict[str, Shape] = {}
        self.metadata_cache: dict[str, tuple[str | None, str | None, int | None]] = {}
        self.anon: dict[str, int] = {}
        self.instrs: list[Instruction] = []
        self.computations: list[Computation] = []  # in the order completed (a nested one first)

    def line_of(self, pos: int) -> int:
        if pos >= self.line_pos:
            self.line_no += self.s.count("\n", self.line_pos, pos)
            self.line_pos = pos
            return self.line_no
        return self.s.count("\n", 0, pos) + 1

    def error(self, reason: str, *, pos: int | None = None) -> HloParseError:
        return HloParseError(
            reason, line=self.line_of(self.pos if pos is None else pos), source=self.source
        )

    def run(self) -> HloModule:
        try:
            return self._run()
        except HloParseError:
            raise
        except RecursionError:
            raise self.error(
                "nested too deeply to read (tuple shapes, nested operands or inline "
                "computations inside one another past Python's recursion limit)"
            ) from None
        except (IndexError, KeyError, ValueError, UnicodeError) as exc:
            raise self.error(f"malformed HLO ({type(exc).__name__}: {exc})") from exc

    def ws(self, pos: int) -> int:
        return _WS.match(self.s, pos).end()

    def _run(self) -> HloModule:
        name, header, pos = self._header()
        computations = self.computations
        s, n = self.s, self.n
        while True:
            pos = _ws(s, pos).end()
            if pos >= n:
                break
            self.pos = pos
            end = scan(self, pos)  # whole computations in the forms XLA prints
            if end != pos:
                pos = end
                continue
            m = _TABLE.match(s, pos) if s[pos] in "FS" else None  # FileNames, ..., StackFrames
            if m:
                pos = self._table(m.group(1), m.end())
            elif s[pos] == "}":
                raise self.error("unbalanced braces: '}' outside a computation")
            else:
                comp, pos = self._computation(pos)
                computations.append(comp)
        if not computations:
            raise self.error("no computation (truncated or not a whole module?)", pos=n)
        if not any(c.is_entry for c in computations):  # as XLA: the last one is the entry
            last = computations[-1]
            computations[-1] = _new_computation(
                last.name, last.instructions, is_entry=True, execution_thread=last.execution_thread
            )
        return _new_module(name, _unique_names(computations), self.source, header, self.s)

    def _header(self) -> tuple[str, str, int]:
        s = self.s
        pos = self.ws(0)
        if pos >= self.n:
            raise self.error("empty text: expected an 'HloModule name, ...' header", pos=0)
        self.pos = pos
        fast = _FAST_MODULE(s, pos)
        if fast:  # `HloModule name, key=value, ...` on one line, as XLA prints it
            return fast.group(1), " ".join(s[pos : fast.end()].split()), fast.end()
        if not s.startswith("HloModule", pos) or not s[pos + 9 : pos + 10].isspace():
            first = s[pos : s.find("\n", pos) if "\n" in s[pos:] else self.n].strip()
            raise self.error(f"not HLO: expected 'HloModule name, ...', got {_clip(first)}")
        end = self.ws(pos + 9)
        m = _WORD.match(s, end)
        if not m:
            raise self.error("HloModule header without a module name")
        end = m.end() + 1 if s.startswith(":", m.end()) else m.end()  # `HloModule name:`
        _, after = self._attributes(end, keep=False)
        return m.group(1), " ".join(s[pos:after].split()), after

    def _table(self, table: str, pos: int) -> int:
        """The rows `id value` of a stack-frame table (one regex call finds them all)."""
        s = self.s
        end = _TABLE_END(s, pos).end()
        for row, (key_text, value) in enumerate(_TABLE_ROWS(s, pos, end)):
            key, value = _int64(key_text), value.rstrip(" \t\r")
            if key is None:
                raise self._table_error(table, key_text, pos, row)
            if table == "FunctionNames":
                continue
            if table == "FileNames":
                q = _QUOTED.search(value)
                self.files[key] = q.group(1) if q else value
                continue
            pairs = _KV_INT.findall(value)
            numbers = [_int64(v) for _, v in pairs]
            if None in numbers:
                raise self._table_error(table, pairs[numbers.index(None)][1], pos, row)
            fields = {k: number for (k, _), number in zip(pairs, numbers, strict=True)}
            if table == "FileLocations":
                self.locations[key] = (fields.get("file_name_id", 0), fields.get("line", 0))
            else:
                self.frames[key] = fields.get("file_location_id", 0)
        return end

    def _table_error(self, table: str, number: str, pos: int, row: int) -> HloParseError:
        """The error for a number out of int64's range in row `row` of the table at pos."""
        at = next(islice(_TABLE_ROW_AT(self.s, pos), row, None)).start()
        return self.error(f"{_digits(number)} in the {table} table does not fit in int64", pos=at)

    def _frame_source(self, frame: int) -> tuple[str | None, int | None]:
        cached = self.frame_cache.get(frame)
        if cached is None:
            loc = self.locations.get(self.frames.get(frame, -1))
            cached = (self.files.get(loc[0]), loc[1]) if loc else (None, None)
            self.frame_cache[frame] = cached
        return cached

    def _computation(self, pos: int) -> tuple[Computation, int]:
        s = self.s
        start = pos
        fast = _FAST_HEADER(s, pos)
        if fast:  # `[ENTRY] %name (params) -> shape {` on one line, as XLA prints it
            comp, pos = self._body(fast.end(), fast.group(2), bool(fast.group(1)), start)
            return self._thread(comp, pos)
        is_entry = s.startswith("ENTRY", pos) and not _WORD.match(s, pos + 5)
        if is_entry:
            pos = self.ws(pos + 5)
        m = _WORD.match(s, pos)
        if not m:
            raise self.error(
                f"expected a computation header 'name (...) -> shape {{': {self._clip(pos)}"
            )
        name = m.group(1)
        pos = self.ws(m.end())
        if s.startswith("(", pos):  # the parameter list: not needed, parameters are instructions
            pos = self.ws(self._group(pos))
        if s.startswith("->", pos):
            _, pos = self._shape(self.ws(pos + 2))
            pos = self.ws(pos)
        if not s.startswith("{", pos):
            if s.startswith("=", pos) or s.startswith("=", self.ws(pos)):
                raise self.error(
                    f"instruction outside a computation: {self._clip(start)}", pos=start
                )
            raise self.error(
                f"expected a computation header 'name (...) -> shape {{': {self._clip(start)}",
                pos=start,
            )
        comp, pos = self._body(pos + 1, name, is_entry, start)
        return self._thread(comp, pos)

    def _thread(self, comp: Computation, pos: int) -> tuple[Computation, int]:
        """`}, execution_thread="host"` after a computation."""
        if not self.s.startswith(",", _ws(self.s, pos).end()):
            return comp, pos  # as `_attributes` finds: no attribute (most computations)
        attrs, pos = self._attributes(pos, keep=True)
        if attrs:
            thread = attrs.get("execution_thread", "").strip('"') or None
            comp = _new_computation(
                comp.name, comp.instructions, is_entry=comp.is_entry, execution_thread=thread
            )
        return comp, pos

    def _body(self, pos: int, name: str, is_entry: bool, start: int) -> tuple[Computation, int]:
        """The instructions after a computation's `{`, up to its `}`; returns the position after."""
        s = self.s
        outer, self.instrs = self.instrs, []
        instrs = self.instrs
        pos = _ws(s, pos).end()
        while True:
            pos = self._general_line(scan(self, pos, body=instrs), name, start)
            if s.startswith("}", pos):
                break
        self.instrs = outer
        return self._checked(name, instrs, is_entry), pos + 1

    def _checked(self, name: str, instrs: list[Instruction], is_entry: bool) -> Computation:
        """The computation of a body's instructions, its names and operands checked."""
        instructions = tuple(instrs)
        index = _index_of(instructions)
        self._check_operands(name, instructions, index)
        return _new_computation(
            name, instructions, is_entry=is_entry, execution_thread=None, index=index
        )

    def _fast_shape(self, m: re.Match) -> Shape | None:
        """The shape of a `_FAST` line not yet in the cache, then kept under its text; None where
        reading it runs past that text (the general path then reads the line).

        A comment inside a tuple shape may end on a later line: `(f32[] /*, s32[]) parameter(0)`
        then `*/ )`. Such a shape depends on the text after its line, so it is not kept: a later
        line of the same text would read as this one, and so would the C scanner (`_scan.c`),
        which takes its shapes from this cache (`_shape_of`).
        """
        shape, end = self._shape(m.start(3))
        if end != m.end(3):
            return None
        self.shapes[m.group(3)] = shape
        return shape

    def _shape_of(self, start: int, end: int) -> Shape | None:
        """For the C scanner: the shape of the text from start to end, as `_fast_shape` reads
        and keeps it; None where it is not read from that text alone, or not read at all (the
        Python reader then reads the line, and says what is wrong)."""
        text = self.s[start:end]
        shape = self.shapes.get(text)
        if shape is not None:
            return shape
        try:
            shape, stop = self._shape(start)
        except HloParseError:
            return None
        if stop != end:
            return None
        self.shapes[text] = shape
        return shape

    def _general_line(self, pos: int, name: str, start: int) -> int:
        """Past the instruction at pos that the fast paths did not take, read by `_general`; at
        the body's `}`, that position (`start`: where the computation `name` opened)."""
        s = self.s
        if not s.startswith("}", pos):  # `_FAST` ends at the next token: most often this `}`
            pos = _ws(s, pos).end()
        if pos >= self.n:
            opened = self.line_of(start)
            last = f", last instruction at line {self.instrs[-1].line}" if self.instrs else ""
            raise self.error(
                f"truncated: computation {name!r} (opened at line {opened}{last}) is not closed",
                pos=pos,
            )
        if s[pos] == "}":
            return pos
        self.pos = pos
        return _ws(s, self._general(pos)).end()

    def _nested_computation(self, pos: int) -> tuple[str, int]:
        """An attribute's inline computation `to_apply={ ... }`: parsed, and named when done as
        XLA names it (`_`, `_.1`, ...: an inner one is done, so named, before its outer one)."""
        comp, end = self._body(pos + 1, "_", False, pos)
        count = self.anon.get("", 0)
        self.anon[""] = count + 1
        name = "_" + (f".{count}" if count else "")
        self.computations.append(_new_computation(name, comp.instructions))
        return "%" + name, end

    def _add(self, name, opcode, shape, operands, indices, attrs, root, meta, line) -> None:
        """Appends an instruction of the general path; `meta`: the inside of its `metadata={}`."""
        op_name, source_file, source_line = self._metadata(meta, line) if meta else _NO_METADATA
        self.instrs.append(_make_instruction((
            name, opcode, shape, operands, attrs, bool(root), op_name, source_file,
            source_line, indices, line,
        )))  # fmt: skip

    def _metadata(
        self, meta: str, line: int | None = None
    ) -> tuple[str | None, str | None, int | None]:
        """(op_name, source_file, source_line) of a `metadata={...}` text, read once per module:
        instructions from one source line (a fused computation's) repeat the same text. `line`:
        the instruction's, for an error (the C scanner leaves a text that may have one to the
        Python reader, so it calls this without)."""
        known = self.metadata_cache.get(meta)
        if known is None:
            known = self.metadata_cache[meta] = self._read_metadata(meta, line)
        return known

    def _read_metadata(
        self, meta: str, line: int | None = None
    ) -> tuple[str | None, str | None, int | None]:
        op_name = source_file = source_line = None
        for key, value in _META_STR.findall(meta):
            if key == "op_name":
                op_name = value
            else:
                source_file = value
        for key, value in _META_INT.findall(meta):
            number = _int64(value)
            if number is None:
                reason = f"{key}={_digits(value)} in metadata does not fit in int64"
                if line is None:
                    raise self.error(reason)
                raise HloParseError(reason, line=line, source=self.source)
            if key == "source_line":
                source_line = number
            elif source_file is None:
                source_file, source_line = self._frame_source(number)
        return op_name, source_file, source_line

    def _general(self, pos: int) -> int:
        """Any instruction form XLA reads: over lines, with comments, without a shape, nested."""
        s = self.s
        m = _INSTR_HEAD.match(s, pos)
        if not m:
            if s.startswith(",", pos):
                raise self.error(f"expected an instruction, got an attribute: {self._clip(pos)}")
            raise self.error(
                f"expected an instruction 'name = shape opcode(...)': {self._clip(pos)}"
            )
        line = self.line_of(pos)
        start = self.ws(m.end())
        shape, opcode, operands, indices, p = self._shaped_op(start, m.group(2))
        attrs, end = self._attributes(p, keep=True)
        meta = attrs.get("metadata", "")
        inside = meta[1:-1] if meta.startswith("{") and meta.endswith("}") else None
        attributes = _Attributes("", attrs) if attrs else _NO_ATTRIBUTES
        self._add(m.group(2), opcode, shape, operands, indices, attributes, m.group(1),
                  inside, line)  # fmt: skip
        return end

    def _shaped_op(self, pos: int, owner: str):
        """`[shape] opcode(operands)` at pos -> (shape, opcode, operands, indices, end)."""
        s = self.s
        shape = UNKNOWN_SHAPE
        if not _OPCODE.match(s, pos) or s.startswith("b(", pos):
            shape, pos = self._shape(pos)
            pos = self.ws(pos)
        op = _OPCODE.match(s, pos)
        if not op:
            raise self.error(
                f"expected an opcode followed by '(' after the shape of {owner!r}: {self._clip(pos)}"
            )
        opcode = op.group(1)
        if opcode in _LITERAL_OPCODES:
            return shape, opcode, (), (), self._group(op.end() - 1)
        operands: list[str] = []
        indices: list[int | None] = []
        pos = self.ws(op.end())
        while not s.startswith(")", pos):
            if pos >= self.n:
                raise self.error(f"unbalanced parentheses in operands of {owner!r}", pos=pos)
            name, index, pos = self._operand(pos, owner)
            operands.append(name)
            indices.append(index)
            pos = self.ws(pos)
            if s.startswith(",", pos):
                pos = self.ws(pos + 1)
            elif not s.startswith(")", pos):
                raise self.error(
                    f"expected ',' or ')' in the operands of {owner!r}: {self._clip(pos)}"
                )
        if indices.count(None) == len(indices):
            indices = []
        return shape, opcode, tuple(operands), tuple(indices), pos + 1

    def _operand(self, pos: int, owner: str) -> tuple[str, int | None, int]:
        """One operand: `[shape] %name[#i]`, or a nested `[shape] opcode(...)` (XLA: `opcode.anon`)."""
        s = self.s
        start = pos
        shape = UNKNOWN_SHAPE
        if s.startswith(("(", "b("), pos) or _ARRAY.match(s, pos):
            shape, pos = self._shape(pos)
            pos = self.ws(pos)
        if _OPCODE.match(s, pos):  # a nested instruction
            _, opcode, operands, indices, end = self._shaped_op(pos, owner)
            name = self._anon_name(opcode)
            line = self.line_of(start)
            self._add(name, opcode, shape, operands, indices, _NO_ATTRIBUTES, None, None, line)
            return name, None, end
        m = _OPERAND_REF.match(s, pos)
        if not m:
            raise self.error(
                f"expected an operand name in the operands of {owner!r}: {self._clip(pos)}"
            )
        if not m.group(2):
            return m.group(1), None, m.end()
        index = _int64(m.group(2))
        if index is None:
            raise self.error(
                f"tuple index #{_digits(m.group(2))} in the operands of {owner!r} does not fit in "
                "int64",
                pos=m.start(2),
            )
        return m.group(1), index, m.end()

    def _anon_name(self, opcode: str) -> str:
        count = self.anon.get(opcode, 0)
        self.anon[opcode] = count + 1
        return f"{opcode}.anon" + (f".{count}" if count else "")

    def _attributes(self, pos: int, keep: bool) -> tuple[dict[str, str], int]:
        """`, key=value` pairs from pos (values raw; any bracket group, string or word)."""
        s = self.s
        attrs: dict[str, str] = {}
        while True:
            p = self.ws(pos)
            if not s.startswith(",", p):
                return attrs, pos
            p = self.ws(p + 1)
            m = _KEY.match(s, p)
            if not m:
                raise self.error(f"expected attribute=value, got {self._clip(p)}", pos=p)
            start = self.ws(m.end())
            if s.startswith("{", start) and _NESTED_HEAD.match(s, self.ws(start + 1)):
                attrs[m.group(1)], pos = self._nested_computation(start)
                continue
            pos = self._value(start)
            if pos == start:
                raise self.error(f"attribute {m.group(1)!r} without a value", pos=p)
            if keep:
                attrs[m.group(1)] = s[start:pos]

    def _value(self, pos: int) -> int:
        """Position after an attribute value: groups, strings and words, in a row or spaced
        where XLA's typed values are (`literal=s32[2]{0} {1, 2}`, `mesh[...] {'axis_1'}`)."""
        s, n = self.s, self.n
        start = pos
        while pos < n:
            c = s[pos]
            if c in "({[":
                pos = self._group(pos)
            elif c == '"':
                m = _STRING(s, pos)
                if not m:
                    raise self.error("unterminated string", pos=pos)
                pos = m.end()
            else:
                m = _BARE.match(s, pos)
                if not m:
                    after = _ws(s, pos).end()
                    if after == pos or pos == start or not _VALUE_GOES_ON(s, after):
                        break
                    pos = after
                    continue
                pos = m.end()
        return pos

    def _group(self, pos: int) -> int:
        """Position after the bracket group opened at pos (strings and comments skipped).

        A quote whose string never ends, or a `/*` that no `*/` follows, is read as any other
        character. Which are so is learned once per text (`_string_end`, `_comment_end`): a
        search to the end of the text from each of them made a read quadratic in its size
        (issue 30).
        """
        s = self.s
        # Past an unclosed quote, the regex could only fail at a quote, after the same search
        if pos < self.unclosed_quote:
            nested = _NESTED_GROUP(s, pos)
            if nested:  # no comment: one regex instead of a step per bracket
                return nested.end()
        depth = 0
        tok = _GROUP_TOK(s, pos)
        while tok is not None:
            c = tok.group()
            end = tok.end()
            if c in _OPEN:
                depth += 1
            elif c in _CLOSE:
                depth -= 1
                if depth == 0:
                    return end
                if depth < 0:
                    break
            elif c == '"':
                end = self._string_end(tok.start())
            elif c == "/*":
                end = self._comment_end(end)
            tok = _GROUP_TOK(s, end)
        raise self.error(
            f"unbalanced brackets (an unclosed {s[pos]!r}): {self._clip(pos)}", pos=pos
        )

    def _string_end(self, start: int) -> int:
        """Position after the string opened at start; start + 1 where it never ends."""
        if start < self.unclosed_quote:
            m = _STRING(self.s, start)
            if m:
                return m.end()
            # The search ran to the end: any later quote was inside it, so opens none either
            self.unclosed_quote = start
        return start + 1

    def _comment_end(self, pos: int) -> int:
        """Position after the `*/` that ends a block comment whose text starts at pos; pos where
        none does (the text's last `*/` is before it)."""
        if self.last_comment_end is None:
            self.last_comment_end = self.s.rfind("*/")
        if self.last_comment_end < pos:
            return pos
        return self.s.find("*/", pos) + 2

    def _shape(self, pos: int) -> tuple[Shape, int]:
        """An array, (nested) tuple or buffer shape at pos; returns it and the position after."""
        s = self.s
        m = _ARRAY.match(s, pos)
        if m:
            key = m.group(0)
            shape = self.shapes.get(key)
            if shape is None:
                shape = self.shapes[key] = self._array(m, pos)
            return shape, m.end()
        if s.startswith("b(", pos):
            shape, pos = self._shape(self.ws(pos + 2))
            pos = self.ws(pos)
            if not s.startswith(")", pos):
                raise self.error(f"malformed buffer type b(...): {self._clip(pos)}", pos=pos)
            return shape, pos + 1
        if not s.startswith("(", pos):
            raise self.error(f"expected a shape like f32[8,128]: {self._clip(pos)}", pos=pos)
        elements: list[Shape] = []
        pos = self.ws(pos + 1)
        while not s.startswith(")", pos):
            element, pos = self._shape(pos)
            elements.append(element)
            pos = self.ws(pos)
            if s.startswith(",", pos):
                pos = self.ws(pos + 1)
            elif not s.startswith(")", pos):
                raise self.error(f"malformed tuple shape: {self._clip(pos)}", pos=pos)
        return _new_shape(None, (), tuple(elements), None, ()), pos + 1

    def _array(self, m: re.Match, pos: int) -> Shape:
        dtype, dims_text, layout, spaced_layout = m.groups()
        layout = layout or spaced_layout
        if dtype not in DTYPE_BITS:
            raise self.error(f"unknown element type {dtype!r} in shape {m.group(0)!r}", pos=pos)
        if _STATIC_DIMS.fullmatch(dims_text):
            sizes = dims_text.split(",") if dims_text else []
            dynamic = (False,) * len(sizes)
            if len(dims_text) <= _INT64_DIGITS:  # so few digits: each dim, and their product, fit
                return _new_shape(dtype, tuple(map(int, sizes)), (), layout, dynamic)
        else:
            sizes, dynamic = [], []
            for dim in dims_text.split(","):
                dim = dim.strip()
                digits = dim[2:].strip() if dim.startswith("<=") else dim
                if dim == "?":
                    digits = "-1"
                elif not digits.isdecimal():
                    raise self.error(f"bad dimension {dim!r} in shape {_clip(m.group(0))}", pos=pos)
                sizes.append(digits)
                dynamic.append(dim != digits)
        return _new_shape(dtype, self._dims(sizes, m.group(0), pos), (), layout, tuple(dynamic))

    def _dims(self, sizes: list[str], shape: str, pos: int) -> tuple[int, ...]:
        """The dims of the shape at pos, each and their product in int64's range as XLA checks
        them (a running product: an unbounded dim, -1, left out)."""
        dims = []
        product = 1
        for size in sizes:
            dim = -1 if size == "-1" else _int64(size)
            if dim is None:
                raise self.error(
                    f"dimension {_digits(size)} in shape {_clip(shape)} does not fit in int64",
                    pos=pos,
                )
            if dim >= 0:
                product *= dim
                if product > _INT64_MAX:
                    raise self.error(
                        f"shape {_clip(shape)} has more elements than int64 holds", pos=pos
                    )
            dims.append(dim)
        return tuple(dims)

    def _check_operands(
        self, name: str, instrs: tuple[Instruction, ...], index: dict[str, Instruction]
    ) -> None:
        """Each name once in a computation, each operand one of its names."""
        if len(index) != len(instrs):
            seen: set[str] = set()
            for instr in instrs:
                if instr.name in seen:
                    raise HloParseError(
                        f"instruction %{instr.name} defined twice in computation {name!r}",
                        line=instr.line,
                        source=self.source,
                    )
                seen.add(instr.name)
        # each operand looked up in C, in the dict itself (a mappingproxy costs 1.7x more; a set
        # of the operands first, `keys() >= set(...)`, 3x more)
        if all(map(index.__contains__, chain.from_iterable(map(_operands_of, instrs)))):
            return
        for instr in instrs:
            for operand in instr.operands:
                if operand not in index:
                    raise HloParseError(
                        f"unknown operand %{operand} of %{instr.name} in computation {name!r}",
                        line=instr.line,
                        source=self.source,
                    )

    def _clip(self, pos: int, width: int = 80) -> str:
        end = self.s.find("\n", pos)
        return _clip(self.s[pos : end if end >= 0 else self.n].strip(), width)


_NOT_FAST = (None, None)


def _fast_operands(inner: str) -> tuple[tuple[str, ...] | None, tuple[int | None, ...] | None]:
    """(operands, indices) of the fast path in other forms than bare names: none, typed
    (`f32[] %x`), tuple elements (`%x#1`), and XLA's `/*index=5*/` every fifth operand;
    (None, None): a form for the general path."""
    if not inner:
        return (), ()
    if "/*" in inner:
        if "[" in inner:  # a comment in a typed operand may sit inside its shape: not here
            return _NOT_FAST
        inner = _INDEX_COMMENT(" ", inner)  # a space: `%a/*index=1*/b` stays two names, an error
        if "/*" in inner:
            return _NOT_FAST
    if not _FAST_OPERANDS(inner):
        return _NOT_FAST
    found = _FAST_REF_ALL(inner)
    operands = tuple(f[0] for f in found)
    if "#" not in inner:
        return operands, ()
    if any(len(i) > _INT64_DIGITS for _, i in found):
        return _NOT_FAST  # one that may not fit in int64: the general path reports where it is
    return operands, tuple(int(i) if i else None for _, i in found)


def _clip(text: str, width: int = 80) -> str:
    return repr(text if len(text) <= width else text[:width] + "...")


def _int64(digits: str) -> int | None:
    """The value of decimal digits (a `-` before them allowed), or None where it is out of
    int64's range: XLA's lexer reads integers into 64 bits and rejects the text where one does
    not fit (and int() of more than 4,300 digits raises)."""
    if len(digits) <= _INT64_DIGITS:
        return int(digits)
    sign = "-" if digits.startswith("-") else ""
    significant = digits.lstrip("-").lstrip("0") or "0"
    if len(significant) > _INT64_DIGITS + 1:
        return None
    value = int(sign + significant)
    return value if -_INT64_MAX - 1 <= value <= _INT64_MAX else None


def _digits(number: str) -> str:
    """A number as shown in an error: its first digits only, where it has many."""
    return number if len(number) <= 24 else f"{number[:20]}... ({len(number)} digits)"


def _unique_names(computations: list[Computation]) -> tuple[Computation, ...]:
    """Renames repeated instruction names as XLA's parser does (`x`, `x` -> `x`, `x.1`).

    XLA keeps one name space per module: its NameUniquifier strips a numeric `.N` suffix, and
    gives a name whose number is taken the next free number of that prefix.
    """
    # Names are unique within each computation (`_check_operands`): those of the module are
    # unique when the computations' indexes together hold one name per instruction.
    unique = set().union(*(c.by_name for c in computations))
    if len(unique) == sum(len(c.instructions) for c in computations) and not (
        _zero_suffix_renamed(unique)
    ):
        return tuple(computations)  # no two names share a (prefix, number): nothing to rename
    used: dict[str, tuple[set[int], list[int]]] = {}
    out: list[Computation] = []
    for comp in computations:
        renamed = {i.name: _uniquify(i.name, used) for i in comp.instructions}
        instrs = tuple(
            _renamed(i, renamed) if renamed[i.name] != i.name or _any_renamed(i, renamed) else i
            for i in comp.instructions
        )
        out.append(
            _new_computation(
                comp.name, instrs, is_entry=comp.is_entry, execution_thread=comp.execution_thread
            )
        )
    return tuple(out)


def _zero_suffix_renamed(names: set[str]) -> bool:
    """Whether XLA renames a name numbered `.0...`: `x.01` always, `x.0` beside an `x`."""
    joined = "\n".join(names)
    if ".0" not in joined:  # most modules: one search in C
        return False
    for m in _ZERO_SUFFIX.finditer(joined):  # a search for '.': no regex step per character
        start = joined.rfind("\n", 0, m.start()) + 1
        if m.start() > start and (m.group(1) != "0" or joined[start : m.start()] in names):
            return True
    return False


def _uniquify(name: str, used: dict[str, tuple[set[int], list[int]]]) -> str:
    root, sep, suffix = name.rpartition(".")
    # As XLA's absl::SimpleAtoi into an int64: ASCII digits, in range; else no numeric suffix
    number = _int64(suffix) if sep and root and suffix.isascii() and suffix.isdigit() else None
    if number is not None:
        has_suffix = True
    else:
        root, number, has_suffix = name, 0, False
    ids, next_free = used.setdefault(root, (set(), [0]))
    if number in ids:
        while next_free[0] in ids:
            next_free[0] += 1
        number = next_free[0]
    ids.add(number)
    if number == 0:
        return f"{root}.0" if has_suffix else root
    return f"{root}.{number}"


def _any_renamed(instr: Instruction, renamed: dict[str, str]) -> bool:
    return any(renamed.get(o, o) != o for o in instr.operands)


def _renamed(instr: Instruction, renamed: dict[str, str]) -> Instruction:
    operands = tuple(renamed.get(o, o) for o in instr.operands)
    return instr._replace(name=renamed[instr.name], operands=operands)
