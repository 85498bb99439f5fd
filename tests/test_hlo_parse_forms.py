"""Every HLO form XLA reads that the reader once rejected (issue 11), one small test each; the two
inputs that once escaped as other exceptions; a form that once made a parse depend on an earlier
one, and bracket groups whose comment or string never ends, once read in quadratic time (issue
30); and a fast, deterministic fuzz of the error rule."""

import json
import random
import re
import subprocess
import sys

import pytest
from mutations import mutated

from xlafuse.errors import HloParseError
from xlafuse.hlo import _reader, analyze_hlo, analyze_module, parse_hlo

ADD = """HloModule m

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
"""


def _entry(text: str):
    return parse_hlo(text).entry


def _ops(comp) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(i.name, i.opcode, i.operands) for i in comp.instructions]


# A comment in a tuple shape that ends on the next line: the shape is read from both lines
SPLIT_SHAPE = "HloModule m\nENTRY e {\n  ROOT p = (f32[] /*, s32[]) parameter(0)\n"
# What each text reads as in a process that has read nothing else, on each path
READ_ALONE = """
import json, sys
from xlafuse.errors import HloParseError
from xlafuse.hlo import _reader, parse_hlo
if sys.argv[1] == "python":
    _reader.scanner = None
def read(text):
    try:
        return str(parse_hlo(text).entry.root.shape)
    except HloParseError as exc:
        return str(exc)
print(json.dumps([read(text) for text in json.load(sys.stdin)]))
"""
READERS = [
    "python",
    pytest.param("C", marks=pytest.mark.skipif(_reader.scanner is None, reason="not built")),
]


def _root_shape(text: str) -> str:
    try:
        return str(parse_hlo(text).entry.root.shape)
    except HloParseError as exc:
        return str(exc)


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("earlier", READERS)
def test_a_parse_does_not_depend_on_an_earlier_one(reader, earlier, monkeypatch):
    compiled = _reader.scanner
    rejected = SPLIT_SHAPE + "*/ )\n}\n"  # `(f32[] )` and no opcode
    later = [SPLIT_SHAPE + "}\n", SPLIT_SHAPE + "*/, u8[]) parameter(0)\n}\n"]
    done = subprocess.run(
        [sys.executable, "-c", READ_ALONE, reader],
        input=json.dumps(later), capture_output=True, text=True, check=True,
    )  # fmt: skip
    alone = json.loads(done.stdout)
    assert alone == ["line 3: malformed tuple shape: '/*, s32[]) parameter(0)'", "(f32[], u8[])"]
    monkeypatch.setattr(_reader, "scanner", None if earlier == "python" else compiled)
    assert _root_shape(rejected).startswith("line 3: expected an opcode")
    assert _root_shape(later[1]) == alone[1]  # the same line, read from the text after it
    monkeypatch.setattr(_reader, "scanner", None if reader == "python" else compiled)
    assert [_root_shape(text) for text in later] == alone


def test_instruction_over_several_lines():
    entry = _entry(
        "HloModule m\n"
        "ENTRY e {\n"
        "  p = f32[8]{0} parameter(0)\n"
        "  q = (f32[8]{0},\n"
        "       f32[8]{0})\n"
        "      tuple(p,\n"
        "            p)\n"
        "  ROOT r = f32[8]{0} get-tuple-element(q),\n"
        "      index=1\n"
        "}\n"
    )
    assert _ops(entry) == [
        ("p", "parameter", ()),
        ("q", "tuple", ("p", "p")),
        ("r", "get-tuple-element", ("q",)),
    ]
    assert entry.by_name["r"].attr("index") == "1" and entry.by_name["r"].line == 8
    assert str(entry.by_name["q"].shape) == "(f32[8]{0}, f32[8]{0})"


def test_attribute_list_continued_with_a_leading_comma():
    text = "HloModule m\nENTRY e {\n  p = f32[4,8] parameter(0)\n  ROOT t = f32[8,4] transpose(p)\n    , dimensions={1,0}\n}\n"
    assert _entry(text).root.attr("dimensions") == "{1,0}"


def test_line_comments_and_comment_after_a_closing_brace():
    text = ADD.replace("ROOT %s", "// the sum\n  ROOT %s") + (
        "ENTRY %e (x: f32[]) -> f32[] {  // entry\n"
        "  %x = f32[] parameter(0)  // x\n"
        '  ROOT %r = f32[] add(%x, %x), metadata={op_name="a//b"}\n'
        "} // region_0.20\n"
    )
    module = parse_hlo(text)
    assert [c.name for c in module.computations] == ["add", "e"]
    assert module.entry.root.op_name == "a//b"


def test_block_comments_on_their_own_line_and_in_the_header():
    text = (
        "HloModule m, /* a note */ is_scheduled=true\n"
        "/* a comment\n   over two lines */\n"
        "ENTRY e {\n  /* before */ p = f32[2] parameter(0)\n  ROOT n = f32[2] negate(/*a*/p)\n}\n"
    )
    module = parse_hlo(text)
    assert module.header == "HloModule m, /* a note */ is_scheduled=true"
    assert module.entry.root.operands == ("p",) and module.entry.root.line == 6


def test_instruction_without_a_shape_is_unknown_not_guessed():
    report = analyze_hlo(
        "HloModule m\nENTRY e {\n  p = f32[1024] parameter(0)\n  n = negate(p)\n"
        "  ROOT r = f32[1024] add(p, p)\n}\n"
    )
    n = report.kernel_details[0]
    assert (n.name, n.sized, n.bytes_in, n.bytes_out) == ("n", False, 0, 0)
    assert (report.kernels, report.unsized_kernels, report.modeled_bytes) == (2, 1, 8192)
    shape = parse_hlo(
        "HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT n = negate(p)\n}\n"
    )
    assert not shape.entry.root.shape.sized and str(shape.entry.root.shape) == "?"


def test_no_entry_keyword_means_the_last_computation():
    module = parse_hlo(ADD + "main {\n  x = f32[] parameter(0)\n  ROOT y = f32[] add(x, x)\n}\n")
    assert module.entry.name == "main" and not module.computation("add").is_entry


def test_header_over_several_lines():
    module = parse_hlo(
        "HloModule m,\n  is_scheduled=true,\n  entry_computation_layout={(\n    f32[2]{0}\n"
        "  )->f32[2]{0}}\n\nENTRY e {\n  ROOT p = f32[2]{0} parameter(0)\n}\n"
    )
    assert module.name == "m" and module.entry.root.line == 8
    assert module.header.startswith("HloModule m, is_scheduled=true, entry_computation_layout={(")


def test_execution_thread_after_a_computation():
    text = ADD.replace(
        "ROOT %s = f32[] add(%a, %b)\n}\n",
        'ROOT %s = f32[] add(%a, %b)\n}, execution_thread="host"\n',
    )
    module = parse_hlo(text + "ENTRY e {\n  ROOT c = f32[] constant(1)\n}\n")
    assert module.computation("add").execution_thread == "host"
    assert module.entry.execution_thread is None


def test_nested_operands_are_named_as_xla_names_them():
    entry = _entry(
        "HloModule m\nENTRY e {\n  p = f32[] parameter(0)\n"
        "  r = f32[] add(p, f32[] negate(f32[] constant(1)))\n"
        "  ROOT x = f32[] add(r, f32[] constant(2))\n}\n"
    )
    assert _ops(entry) == [
        ("p", "parameter", ()),
        ("constant.anon", "constant", ()),
        ("negate.anon", "negate", ("constant.anon",)),
        ("r", "add", ("p", "negate.anon")),
        ("constant.anon.1", "constant", ()),
        ("x", "add", ("r", "constant.anon.1")),
    ]
    assert entry.by_name["negate.anon"].shape.byte_size == 4


def test_buffer_types_read_as_the_array_they_hold():
    entry = _entry(
        "HloModule m\nENTRY e {\n  p = b(f32[8]{0}) parameter(0)\n"
        '  ROOT c = (s32[], b(f32[8])) custom-call(p), custom_call_target="Pin"\n}\n'
    )
    assert entry.by_name["p"].shape.byte_size == 32 and entry.root.shape.byte_size == 36


def test_computation_on_one_line_and_brace_on_the_last_line():
    module = parse_hlo(
        "HloModule m\nadd { a = f32[] parameter(0) b = f32[] parameter(1) ROOT s = f32[] add(a, b) }\n"
        "ENTRY e {\n  p = f32[] parameter(0)\n  ROOT r = f32[] add(p, p) }\n"
    )
    assert _ops(module.computation("add")) == [
        ("a", "parameter", ()),
        ("b", "parameter", ()),
        ("s", "add", ("a", "b")),
    ]
    assert module.entry.root.operands == ("p", "p")


def test_operands_without_percent_beside_index_comments():
    params = "\n".join(f"  p{i} = f32[] parameter({i})" for i in range(6))
    entry = _entry(
        f"HloModule m\nENTRY e {{\n{params}\n"
        "  ROOT t = (f32[], f32[], f32[], f32[], f32[], /*index=5*/f32[]) tuple(p0, p1, p2, p3, p4, /*index=5*/p5)\n}\n"
    )
    assert entry.root.operands == ("p0", "p1", "p2", "p3", "p4", "p5")
    assert len(entry.root.shape.tuple_shapes) == 6


def test_unbounded_dims_cannot_be_sized():
    report = analyze_hlo(
        "HloModule m\nENTRY e {\n  p = f32[?,784]{1,0} parameter(0)\n  ROOT n = f32[?,784]{1,0} negate(p)\n}\n"
    )
    shape = report.kernel_details[0]
    assert shape.sized is False and (report.unsized_kernels, report.modeled_bytes) == (1, 0)
    dims = parse_hlo(
        "HloModule m\nENTRY e {\n  ROOT p = f32[?,<=8,3] parameter(0)\n}\n"
    ).entry.root.shape
    assert dims.dims == (-1, 8, 3) and dims.dynamic == (True, True, False)
    assert str(dims) == "f32[?,<=8,3]"


def test_multi_line_backend_config_and_strings_over_lines():
    entry = _entry(
        'HloModule m, origin_recovery_table={\n  {"c"} : {"c2"},\n  "\n  HloModule r\n  "\n}\n'
        "ENTRY e {\n  p = f32[4] parameter(0)\n"
        '  ROOT f = f32[4] custom-call(p), custom_call_target="x", backend_config={"a":\n'
        '      {"b":0,\n       "c":1}}\n}\n'
    )
    assert entry.root.attr("backend_config") == '{"a":\n      {"b":0,\n       "c":1}}'


def test_inline_computation_attribute_and_names_made_unique_as_xla():
    module = parse_hlo(
        "HloModule m\nENTRY e {\n  p0 = f32[8] parameter(0)\n  z = f32[] constant(0)\n"
        "  ROOT r = f32[] reduce(p0, z), dimensions={0}, to_apply={\n"
        "    p0 = f32[] parameter(0)\n    p1 = f32[] parameter(1)\n    ROOT s = f32[] add(p0, p1)\n  }\n}\n"
    )
    assert [c.name for c in module.computations] == ["_", "e"]
    # The inline computation is finished first, so it keeps `p0`; the entry's becomes `p0.1`.
    assert _ops(module.computation("_"))[0] == ("p0", "parameter", ())
    assert _ops(module.entry) == [
        ("p0.1", "parameter", ()),
        ("z", "constant", ()),
        ("r", "reduce", ("p0.1", "z")),
    ]
    assert module.entry.root.called_computations == ("_",)


@pytest.mark.parametrize(
    ("names", "renamed"),
    [  # as jaxlib's own parser renames them (checked with hlo_module_from_text)
        (["x", "x.0"], ["x", "x.1"]),
        (["x.0", "x"], ["x.0", "x.1"]),
        (["x.01"], ["x.1"]),
        (["a.00"], ["a.0"]),
        (["a.0x", "a.0x.0"], ["a.0x", "a.0x.1"]),
        (["a.0x.01"], ["a.0x.1"]),
        (["y", "x.0"], ["y", "x.0"]),
        (["b.0.0", "b.0"], ["b.0.0", "b.0"]),
    ],
)
def test_names_numbered_zero_renamed_as_xla(names, renamed):
    params = "".join(f"  {n} = f32[] parameter({i})\n" for i, n in enumerate(names))
    module = parse_hlo(f"HloModule m\nENTRY e {{\n{params}  ROOT t = f32[] constant(0)\n}}\n")
    assert [i.name for i in module.entry.instructions] == [*renamed, "t"]


def test_mixed_percent_operands_keep_every_name_and_bytes():
    report = analyze_hlo(
        "HloModule m\nENTRY e {\n  p = f32[1024] parameter(0)\n  q = f32[1024] parameter(1)\n"
        "  ROOT r = f32[1024] add(%p, q)\n}\n"
    )
    assert report.kernel_details[0].name == "r"
    assert parse_hlo(
        "HloModule m\nENTRY e {\n  p = f32[1024] parameter(0)\n  q = f32[1024] parameter(1)\n"
        "  ROOT r = f32[1024] add(%p, q)\n}\n"
    ).entry.root.operands == ("p", "q")
    assert report.modeled_bytes == 12288


def test_fusion_calling_its_own_computation_is_a_parse_error():
    text = (
        "HloModule m\nf {\n  p = f32[8] parameter(0)\n  ROOT r = f32[8] fusion(p), kind=kLoop, calls=f\n}\n"
        "ENTRY e {\n  p = f32[8] parameter(0)\n  ROOT r = f32[8] fusion(p), kind=kLoop, calls=f\n}\n"
    )
    with pytest.raises(
        HloParseError,
        match=r"line 4: fusion %r calls computation 'f' inside itself \(e -> f -> f\)",
    ):
        analyze_hlo(text)


def test_long_text_is_not_taken_for_a_path():
    with pytest.raises(HloParseError, match=r"line 1: not HLO: expected 'HloModule name, \.\.\.'"):
        analyze_hlo("x" * 5000)
    with pytest.raises(HloParseError, match=r"no such file: 'missing\.hlo'"):
        analyze_hlo("missing.hlo")


@pytest.mark.parametrize(
    "root",
    [
        "ROOT r = " + "(" * 5000 + "f32[8]" + ")" * 5000 + " tuple(p)",
        "ROOT r = f32[] " + "add(p, " * 5000 + "p" + ")" * 5000,
    ],
    ids=["tuple shape", "nested operands"],
)
def test_nesting_past_the_recursion_limit_is_one_clear_error(root):
    text = f"HloModule m\nENTRY e {{\n  p = f32[8] parameter(0)\n  {root}\n}}\n"
    with pytest.raises(HloParseError, match=r"line 4: nested too deeply to read \(tuple"):
        parse_hlo(text)


# Bracket groups holding a `/*` that no `*/` ends, or quotes that no string ends, on the line after
# their instruction's (so that the general path reads them): about 500 KB each. Each group's
# search for the end of its comment or string once ran to the end of the text (issue 30): 96 KB
# took 8-25 s, these would take 3-12 minutes each.
UNCLOSED_HEAD = "HloModule m\nENTRY e {\n  ROOT p = f32[8] parameter(0)\n    , x="
UNCLOSED = {
    "a /* in each group": "{/*}" * 125_000,
    "/* over and over in one group": "{" + "/* " * 166_000 + "}",
    "quotes that no string ends": "{" + '"\\' * 250_000 + "}",
    "and no group ends": "{{/*" + "{/*}" * 125_000,
}
READ_UNCLOSED = """
import json, sys
from xlafuse.errors import HloParseError
from xlafuse.hlo import _reader, parse_hlo
compiled = _reader.scanner
out = {}
for label, text in json.load(sys.stdin).items():
    for path, scanner in (("C", compiled), ("python", None)):
        _reader.scanner = scanner
        try:
            out[f"{label}, {path}"] = parse_hlo(text).entry.root.attr("x")[:9]
        except HloParseError as exc:
            out[f"{label}, {path}"] = str(exc)[:60]
print(json.dumps(out))
"""


def test_groups_with_unclosed_comments_and_strings_are_read_in_linear_time():
    texts = {label: f"{UNCLOSED_HEAD}{value}\n}}\n" for label, value in UNCLOSED.items()}
    done = subprocess.run(
        [sys.executable, "-c", READ_UNCLOSED],
        input=json.dumps(texts), capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    unbalanced = "line 4: unbalanced brackets (an unclosed '{'): '{{/*{/*}{/*}"
    expected = ["{/*}{/*}{", "{/* /* /*", '{"\\"\\"\\"\\', unbalanced]
    assert json.loads(done.stdout) == {
        f"{label}, {path}": outcome
        for label, outcome in zip(UNCLOSED, expected, strict=True)
        for path in ("C", "python")
    }


# The end of a bracket group as the reader found it before issue 30: a walk over the tokens, each
# comment and string matched whole or else passed over as one character
GROUP_WALK = re.compile(r'"(?:[^"\\]++|\\.)*+"|//[^\n]*|/\*.*?\*/|[(){}\[\]]', re.S)


def _walked_group_end(text: str, pos: int) -> int | None:
    depth = 0
    for tok in GROUP_WALK.finditer(text, pos):
        c = tok.group()
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
            if depth <= 0:
                return tok.end() if depth == 0 else None
    return None


def test_groups_end_where_a_walk_over_whole_comments_and_strings_ends():
    rng = random.Random(30)
    alphabet = [*'{}()[]"\\/*a \n', "/*", "*/", "//", '\\"']
    checked = 0
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))
        reader = _reader.Reader(text, None)  # one reader: what it learns of a text, kept
        for pos in (i for i, c in enumerate(text) if c in "({["):
            try:
                end = reader._group(pos)
            except HloParseError:
                end = None
            assert end == _walked_group_end(text, pos), (text, pos)
            checked += end is not None
    assert checked > 1000


SEEDS = [
    ADD
    + "ENTRY e {\n  x = f32[] parameter(0)\n  ROOT r = f32[] fusion(x, f32[] constant(1)), kind=kLoop, calls=%add\n}\n",
    "HloModule m\nENTRY e {\n  p = (f32[2], s32[]) parameter(0)\n  g = f32[2] get-tuple-element(p), index=0\n"
    '  ROOT c = f32[2] custom-call(g), custom_call_target="x", backend_config={"a":[1,{"b":"}"}]}\n}\n',
]


@pytest.mark.parametrize("seed", range(len(SEEDS)))
def test_fuzzed_text_raises_only_hlo_parse_error_with_a_line(seed):
    text = SEEDS[seed]
    rng = random.Random(seed)
    cases = [text[:cut] for cut in range(0, len(text), 3)]
    alphabet = [*"{}()[],=%#\"'/*\n ", "ROOT", "fusion", "f32[]", "ENTRY", "calls="]
    cases += [mutated(text, rng, alphabet, max_edits=4, substitute=0.5) for _ in range(300)]
    outcomes = {"parsed": 0, "error": 0}
    for case in cases:
        try:
            analyze_module(parse_hlo(case))
            outcomes["parsed"] += 1
        except HloParseError as exc:
            assert exc.line is not None and exc.line >= 1, (case, exc)
            outcomes["error"] += 1
    assert outcomes["error"] > len(cases) // 2  # most mutations break the text; none escapes
