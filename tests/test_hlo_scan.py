"""The reader's fast path in C (`xlafuse/hlo/_scan.c`) against the same reader without it.

The C scanner takes a computation or a line only where the Python reader's fast paths
(`_reader._FAST_HEADER`, `_reader._FAST`) would take it, and must read it into the same values.
So for any text both readers give the same module (every field of every instruction, its line
and its attribute text included) or the same error. Checked over XLA's own test corpus (every
text, accepted or not) and over fuzzed texts. Skipped where the extension was not built (a
checkout run from its folder, or no C compiler at install).
"""

import gzip
import json
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
from mutations import mutated

from xlafuse.errors import HloParseError
from xlafuse.hlo import _reader, parse_hlo

pytestmark = pytest.mark.skipif(
    _reader.scanner is None, reason="the C fast path was not built (pip install -e .)"
)
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "hlo-corpus" / "xla-tests.jsonl.gz"


def _outcome(text: str, monkeypatch, compiled: bool):
    """Everything the reader gives for `text`: each instruction's fields in full, or the error."""
    monkeypatch.setattr(_reader, "scanner", SCANNER if compiled else None)
    try:
        module = parse_hlo(text)
    except HloParseError as exc:
        return ("error", str(exc))
    return (
        module.name,
        module.header,
        [
            (c.name, c.is_entry, c.execution_thread, [_fields(i) for i in c.instructions])
            for c in module.computations
        ],
    )


def _fields(instr) -> tuple:
    return (*instr[:4], instr.attributes.text, dict(instr.attributes), *instr[5:])


SCANNER = _reader.scanner


def _same_both_ways(texts: list[str], monkeypatch) -> int:
    """Asserts both readers agree on each text; returns how many were read without an error."""
    taken = 0
    for text in texts:
        python = _outcome(text, monkeypatch, compiled=False)
        compiled = _outcome(text, monkeypatch, compiled=True)
        assert compiled == python, text[:2000]
        taken += python[0] != "error"
    return taken


LONG = "9" * 5000
LINES = {
    "plain": "  ROOT %r = f32[8]{0} add(%p, %q)",
    "bare names": "  ROOT r = f32[8] add(p, q)",
    "tuple indices": "  ROOT r = f32[8] add(p#0, %q#12)",
    "index comment": "  ROOT r = f32[8] add(p, /*index=1*/q)",
    "blanks in operands": "  ROOT r = f32[8] add( p ,q )",
    "tuple shape": "  ROOT r = (f32[8]{0}, (s32[], f32[8])) tuple(p, q)",
    "attributes": '  ROOT r = f32[8] add(p, q), sharding={devices=[2]<=[2]}, frontend_attributes={a="{"}',
    "metadata": '  ROOT r = f32[8] add(p, q), metadata={op_name="jit(f)/add" source_file="a.py" source_line=3}',
    "metadata then more": '  ROOT r = f32[8] add(p, q), metadata={op_name="x"}, backend_config={"k":{"a":[1]}}',
    "two metadata": '  ROOT r = f32[8] add(p, q), metadata={op_name="x"}, metadata={op_name="y"}',
    "nested metadata": '  ROOT r = f32[8] add(p, q), metadata={op_name="x" a={b}}',
    "spaced metadata": '  ROOT r = f32[8] add(p, q), metadata = {op_name="x"}',
    "deep braces": "  ROOT r = f32[8] add(p, q), x={{{{{{1}}}}}}",
    "five deep": "  ROOT r = f32[8] add(p, q), x={{{{{1}}}}}",
    "typed operands": "  ROOT r = f32[8] add(f32[8] p, f32[8]{0} q)",
    "a name ROOT": "  ROOT = f32[8] add(p, q)",
    "no space before opcode": "  ROOT r = f32[8]add(p, q)",
    "trailing blanks": "  ROOT r = f32[8] add(p, q), x=1 \t\r",
    "value with slash": "  ROOT r = f32[8] add(p, q), x=a/b",
    "unknown operand": "  ROOT r = f32[8] add(p, z)",
    "unknown dtype": "  ROOT r = f33[8] add(p, q)",
    "unterminated string": '  ROOT r = f32[8] add(p, q), x="abc',
    "escaped quote": '  ROOT r = f32[8] add(p, q), x="a\\"b", y=2',
    "non-ASCII name": "  ROOT rä = f32[8] add(p, q)",
    "non-ASCII value": '  ROOT r = f32[8] add(p, q), metadata={op_name="jit(ä)"}',
    "metadata in any order": '  ROOT r = f32[8] add(p, q), metadata={source_line=4 op_type="x" op_name="y"}',
    "metadata twice over": '  ROOT r = f32[8] add(p, q), metadata={op_name="a" op_name="b" source_line=1 source_line=2}',
    "escapes in metadata": '  ROOT r = f32[8] add(p, q), metadata={op_name="a\\"op_name=\\"b" source_file="c\\\\"}',
    "a name inside a value": '  ROOT r = f32[8] add(p, q), metadata={op_type="op_name=" source_file="f"}',
    "no digits": "  ROOT r = f32[8] add(p, q), metadata={source_line=x source_line=}",
    "a long line number": "  ROOT r = f32[8] add(p, q), metadata={source_line=123456789012345678901}",
    "a stack frame": '  ROOT r = f32[8] add(p, q), metadata={op_name="x" stack_frame_id=1}',
    "comment after": "  ROOT r = f32[8] add(p, q) // done",
    "attribute on the next line": "  ROOT r = f32[8] add(p, q)\n    , x=1",
    # Numbers past int64 (5,000 digits: past int()'s 4,300 too), and the longest that fit
    "a long tuple index": f"  ROOT r = f32[8] add(p#{LONG}, q)",
    "a tuple index past int64": "  ROOT r = f32[8] add(p#9223372036854775808, q)",
    "the last tuple index in int64": "  ROOT r = f32[8] add(p#9223372036854775807, q)",
    "a tuple index of many zeros": f"  ROOT r = f32[8] add(p#{'0' * 5000}1, q)",
    "a long source line": f"  ROOT r = f32[8] add(p, q), metadata={{source_line={LONG}}}",
    "a source line past int64": "  ROOT r = f32[8] add(p, q), metadata={source_line=9223372036854775808}",
    "the last source line in int64": "  ROOT r = f32[8] add(p, q), metadata={source_line=9223372036854775807}",
    "a long stack frame": f'  ROOT r = f32[8] add(p, q), metadata={{op_name="x" stack_frame_id={LONG}}}',
    "a long number in a string": f'  ROOT r = f32[8] add(p, q), metadata={{op_name="source_line={LONG}"}}',
    "a long number beside non-ASCII": f'  ROOT r = f32[8] add(p, q), metadata={{op_name="é" source_line={LONG}}}',
    "a long dimension": f"  ROOT r = f32[{LONG}] add(p, q)",
    "a dimension past int64": "  ROOT r = f32[9223372036854775808] add(p, q)",
    "too many elements": f"  ROOT r = f32[{','.join(['1000000000'] * 16)}] add(p, q)",
    "an unclosed comment in groups": "  ROOT r = f32[8] add(p, q), x={/*}, y={/*}",
    "unclosed comments in groups, on the next line": "  ROOT r = f32[8] add(p, q)\n    , x={/*}, y=[/* /*]",
    "a comment over two groups": "  ROOT r = f32[8] add(p, q)\n    , x={/*}, y={*/}",
    "unclosed strings in groups": '  ROOT r = f32[8] add(p, q)\n    , x={"\\}, y={\\"\\}',
}


@pytest.mark.parametrize("root", LINES.values(), ids=LINES.keys())
def test_each_line_form_reads_the_same_with_and_without_the_scanner(root, monkeypatch):
    text = (
        "HloModule m, entry_computation_layout={(f32[8]{0})->f32[8]{0}}\n\n"
        "ENTRY %e (p: f32[8], q: f32[8]) -> f32[8] {\n"
        "  %p = f32[8]{0} parameter(0)\n  q = f32[8] parameter(1), sharding={replicated}\n"
        f"  c = s32[] constant(3)\n{root}\n}}\n"
    )
    _same_both_ways([text], monkeypatch)


BODY = "  p = f32[8] parameter(0)\n  ROOT n = f32[8] negate(p)\n"
MODULES = {
    "header as XLA prints it": f"HloModule m\n\nENTRY %e (p: f32[8]) -> f32[8] {{\n{BODY}}}\n",
    "no parameters": f"HloModule m\nENTRY e {{\n{BODY}}}\n",
    "no blank before the brace": f"HloModule m\nENTRY e{{\n{BODY}}}\n",
    "a computation called ENTRY": f"HloModule m\nENTRY (p: f32[8]) -> f32[8] {{\n{BODY}}}\n",
    "ENTRY alone": f"HloModule m\nENTRY {{\n{BODY}}}\n",
    "brace then text": f"HloModule m\nENTRY e {{ x\n{BODY}}}\n",
    "brace then comment": f"HloModule m\nENTRY e {{ // c\n{BODY}}}\n",
    "CRLF": f"HloModule m\r\nENTRY e {{\r\n{BODY}}}\r\n".replace("\n  ", "\r\n  "),
    "header ends the text": "HloModule m\nENTRY e {",
    "no closing brace": f"HloModule m\nENTRY e {{\n{BODY}",
    "empty body": "HloModule m\n%c {\n}\nENTRY e {\n" + BODY + "}\n",
    "thread after": f'HloModule m\n%c {{\n{BODY}}}, execution_thread="host"\nENTRY e {{\n{BODY}}}\n',
    "comment between": f"HloModule m\n%c {{\n{BODY}}}\n// x\nENTRY e {{\n{BODY}}}\n",
    "comment in a body": f"HloModule m\nENTRY e {{\n  // x\n{BODY}}}\n",
    "a repeated name": f"HloModule m\nENTRY e {{\n{BODY}  n = f32[8] negate(p)\n}}\n",
    "an unknown operand": "HloModule m\nENTRY e {\n  ROOT n = f32[8] negate(q)\n}\n",
    "an operand named after": "HloModule m\nENTRY e {\n  n = f32[8] negate(p)\n"
    "  ROOT p = f32[8] parameter(0)\n}\n",
    "names shared by computations": f"HloModule m\n%c {{\n{BODY}}}\nENTRY e {{\n{BODY}}}\n",
    "an operand of another computation": f"HloModule m\n%c {{\n{BODY}}}\n"
    "ENTRY e {\n  ROOT x = f32[8] negate(n)\n}\n",
    "a table after": f'HloModule m\nENTRY e {{\n{BODY}}}\n\nFileNames\n1 "a.py"\n',
    "a brace outside": f"HloModule m\nENTRY e {{\n{BODY}}}\n}}\n",
    "no entry": f"HloModule m\n%a {{\n{BODY}}}\n%b {{\n{BODY}}}\n",
    "non-ASCII space after": f"HloModule m\nENTRY e {{\n{BODY}}}\u0085\n",
    "a character beyond Latin-1": f"HloModule m\nENTRY e {{\n{BODY}}}\n// λ\n",
    # Once located at the first computation of C's run, the Python reader at the last (issue 30)
    "a long source line in a later computation": f"HloModule m\n%c {{\n{BODY}}}\nENTRY e {{\n"
    f"  p = f32[8] parameter(0)\n  ROOT n = f32[8] negate(p), metadata={{source_line={LONG}}}\n}}\n",
    "a long tuple index in a later computation": f"HloModule m\n%c {{\n{BODY}}}\nENTRY e {{\n"
    f"  p = (f32[8]) parameter(0)\n  ROOT n = f32[8] negate(p#{LONG})\n}}\n",
    "a long number in a name": f"HloModule m\n%c {{\n  ROOT p.{LONG} = f32[8] parameter(0)\n}}\n"
    f"ENTRY e {{\n  ROOT p.{LONG} = f32[8] parameter(0)\n}}\n",
    "a long number in a table": f'HloModule m\nENTRY e {{\n{BODY}}}\n\nFileNames\n1 "a.py"\n{LONG} "b.py"\n',
}


@pytest.mark.parametrize("text", MODULES.values(), ids=MODULES.keys())
def test_each_module_form_reads_the_same_with_and_without_the_scanner(text, monkeypatch):
    _same_both_ways([text], monkeypatch)


def test_the_scanner_reads_a_module_as_xla_prints_it_whole(monkeypatch):
    text = (
        "HloModule m\n\nENTRY %e (p: f32[8]) -> f32[8] {\n  %p = f32[8]{0} parameter(0)\n"
        '  ROOT %r = f32[8]{0} negate(%p), metadata={op_name="n" source_file="a.py" source_line=2}\n}\n'
    )
    read = []  # on a first read: the scanner asks the reader for each shape, once

    def computations(*args):
        out = args[4]
        result = SCANNER.scan_computations(*args)
        read.extend((name, [i.name for i in instrs]) for name, _, instrs, _, _ in out)
        return result

    def lines(*args):
        read.append("lines")
        return SCANNER.scan_lines(*args)

    wrapped = SimpleNamespace(scan_computations=computations, scan_lines=lines)
    monkeypatch.setattr(_reader, "scanner", wrapped)
    metadata_read_in_python = []
    read_metadata = _reader.Reader._read_metadata
    monkeypatch.setattr(
        _reader.Reader,
        "_read_metadata",
        lambda reader, meta, line=None: (
            metadata_read_in_python.append(meta) or read_metadata(reader, meta, line)
        ),
    )
    module = parse_hlo(text)
    assert read == [("e", ["p", "r"])]
    root = module.entry.root
    assert (root.op_name, root.source_file, root.source_line, root.line) == ("n", "a.py", 2, 5)
    assert metadata_read_in_python == []  # read in C; a stack frame's source is read in Python
    parse_hlo(text.replace("source_line=2", "stack_frame_id=1"))
    assert metadata_read_in_python == ['op_name="n" source_file="a.py" stack_frame_id=1']


def test_the_scanner_keeps_no_shape_from_one_call_to_the_next():
    # Each call asks its caller for a shape's reading, once per text (issue 30: a table kept
    # across calls made a parse depend on an earlier one)
    text = "p = f32[8]{0} parameter(0)\nROOT n = f32[8]{0} negate(p)\n}\n"
    types = (_reader.Instruction, _reader._Attributes, _reader._NO_ATTRIBUTES)
    for shape in ("first", "second"):
        asked, out = [], []

        def shape_of(start, end, asked=asked, shape=shape):
            asked.append(text[start:end])
            return shape

        end = SCANNER.scan_lines(
            text, 0, 0, 1, out, shape_of, lambda meta: (None,) * 3, *types,
            _reader._LITERAL_OPCODES,
        )  # fmt: skip
        assert end == (text.rindex("}"), text.rindex("}"), 3)
        assert ([i.name for i in out], [i.shape for i in out]) == (["p", "n"], [shape, shape])
        assert asked == ["f32[8]{0}"]


@pytest.mark.slow  # the whole corpus, read twice: .ci/run's second command
def test_both_readers_agree_over_the_corpus(monkeypatch):
    if not CORPUS.is_file():
        pytest.skip(f"no HLO corpus at {CORPUS} (the shared/ folder beside the clone)")
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    texts = [r["text"] for r in records] + [r["canonical"] for r in records if r["canonical"]]
    assert len(texts) == 6393 + 5872
    # read: all that XLA prints, all but 2 of what it reads, and some that its verifier rejects
    assert _same_both_ways(texts, monkeypatch) >= 5872 + 5870


def test_both_readers_agree_on_fuzzed_text(monkeypatch):
    seed = (
        "HloModule m, entry_computation_layout={(f32[8]{0}, (s32[], f32[8]{0}))->f32[8]{0}}\n\n"
        "%fused (a: f32[8]) -> f32[8] {\n  %a = f32[8]{0} parameter(0)\n"
        "  ROOT %n = f32[8]{0} negate(%a)\n}\n\n"
        "ENTRY %e (p: f32[8], t: (s32[], f32[8])) -> f32[8] {\n  %p = f32[8]{0} parameter(0)\n"
        "  %t = (s32[], f32[8]{0}) parameter(1)\n  %g = f32[8]{0} get-tuple-element(%t), index=1\n"
        '  %f = f32[8]{0} fusion(%p), kind=kLoop, calls=%fused, metadata={op_name="jit(f)/neg" '
        'source_file="a.py" source_line=7}\n'
        '  ROOT %r = f32[8]{0} add(%f, /*index=1*/%g), backend_config={"k":{"v":[1,"}"]}}\n}\n'
    )
    rng = random.Random(11)
    alphabet = [*"{}()[],=%#\"'/*\n \t\\.0", "ROOT", "f32[8]", "metadata={", "/*index=5*/", "ä"]
    alphabet += ['op_name="', 'source_file="', "source_line=", "stack_frame_id=", '\\"']
    alphabet += ["ENTRY ", "ENTRY %e {\n", "}\n", " -> ", "\r\n", "FileNames\n", "\u0085"]
    cases = [mutated(seed, rng, alphabet, max_edits=3, substitute=0.6) for _ in range(1500)]
    read = _same_both_ways(cases, monkeypatch)
    assert 100 < read < len(cases)  # both kinds of outcome are exercised


def test_no_text_reads_differently_after_others(monkeypatch):
    # Comments in tuple shapes, some ending on a later line: a shape read from more than its
    # line's text, once kept under that text, would be a later text's reading of it (issue 30)
    shapes = ["(f32[] /*, s32[])", "(f32[], s32[] /*)", "(f32[] /* a */, s32[])"]
    shapes += ["(f32[] //, s32[])", "(/*f32[],*/ s32[])", "(f32[], s32[])"]
    after = ["", "*/ )", "*/, u8[]) parameter(0)", " */ ) parameter(1)", "*/ , s8[] )"]
    texts = [
        f"HloModule m\nENTRY e {{\n  ROOT p = {shape} parameter(0)\n{rest}\n}}\n"
        for shape in shapes
        for rest in after
    ]
    alone = {text: _outcome(text, monkeypatch, compiled=False) for text in texts}
    assert 5 < sum(o[0] != "error" for o in alone.values()) < len(texts)
    for text in texts + texts[::-1]:  # each after all the others, on both paths
        for compiled in (True, False):
            assert _outcome(text, monkeypatch, compiled) == alone[text], (compiled, text)
