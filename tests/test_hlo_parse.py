"""Parsing optimized HLO: shapes, instructions, tables, every sample, and malformed input."""

import gc
import re

import pytest

from xlafuse.errors import HloParseError
from xlafuse.hlo import _reader, analyze_hlo, analyze_module, find_optimized_modules, parse_hlo
from xlafuse.hlo.ir import Instruction, Shape
from xlafuse.hlo.parse import gc_paused

SMALL = """HloModule m, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

%fused (p0: f32[4]) -> f32[4] {
  %p0 = f32[4]{0} parameter(0)
  ROOT %neg = f32[4]{0} negate(%p0), metadata={op_name="jit(f)/neg" source_file="a.py" source_line=7}
}

ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  ROOT %f = f32[4]{0} fusion(%x), kind=kLoop, calls=%fused
}
"""


def _shape_of(shape_text: str) -> Shape:
    text = SMALL.replace("ROOT %f = f32[4]{0} fusion", f"ROOT %f = {shape_text} fusion")
    return parse_hlo(text).entry.root.shape


@pytest.mark.parametrize(
    ("shape_text", "byte_size"),
    [
        ("f32[]", 4),
        ("bf16[8,128]{1,0}", 2 * 8 * 128),
        ("pred[3]{0}", 3),
        ("s4[5]{0}", 3),  # packed: ceil(4 * 5 / 8)
        ("u4[8]{0}", 4),
        ("f4e2m1fn[3]{0}", 2),
        ("f8e4m3fn[16]{0}", 16),
        ("f8e5m2fnuz[2,2]{1,0}", 4),
        ("f8e8m0fnu[7]{0}", 7),
        ("c128[2]{0}", 32),
        ("f32[8,128]{1,0:T(8,128)}", 4096),
        ("f32[<=16,4]{1,0}", 256),
        ("(f32[2]{0}, (s32[], u8[3]{0}))", 8 + 4 + 3),
        ("token[]", 0),
    ],
)
def test_shape_byte_size(shape_text, byte_size):
    assert _shape_of(shape_text).byte_size == byte_size


def test_shape_details():
    tup = _shape_of("(f32[2]{0}, /*index=1*/(s32[], u8[3]{0}))")
    assert tup.is_tuple and [leaf.dtype for leaf in tup.leaves()] == ["f32", "s32", "u8"]
    assert tup.num_elements == 6
    tiled = _shape_of("f32[8,128]{1,0:T(8,128)}")
    assert (tiled.dims, tiled.layout) == ((8, 128), "{1,0:T(8,128)}")
    dyn = _shape_of("f32[<=16,4]{1,0}")
    assert dyn.dims == (16, 4) and dyn.dynamic == (True, False)
    assert str(dyn) == "f32[<=16,4]{1,0}"


def test_instruction_fields():
    module = parse_hlo(SMALL, source="small.hlo")
    assert module.name == "m" and module.source == "small.hlo"
    assert [c.name for c in module.computations] == ["fused", "main"]
    root = module.entry.root
    assert (root.name, root.opcode, root.operands, root.is_root) == ("f", "fusion", ("x",), True)
    assert root.fusion_kind == "kLoop" and root.called_computations == ("fused",)
    neg = module.computation("%fused").by_name["neg"]
    assert (neg.op_name, neg.source_file, neg.source_line) == ("jit(f)/neg", "a.py", 7)
    with pytest.raises(KeyError, match="no computation named 'nope'"):
        module.computation("nope")


def test_instructions_that_differ_in_attributes_are_not_equal():
    loop = parse_hlo(SMALL)
    other_kind = parse_hlo(SMALL.replace("kind=kLoop", "kind=kInput"))
    other_call = parse_hlo(SMALL.replace("%fused", "%fused.1").replace("kLoop", "kInput")).entry
    for other in (other_kind.entry.root, other_call.root):
        assert loop.entry.root != other and hash(loop.entry.root) != hash(other)
        assert loop.entry.root.same_value(other)  # the looser comparison: attributes left out
    assert loop != other_kind and loop.entry != other_kind.entry  # modules inherit it
    assert not loop.entry.root.same_value(loop.entry.instructions[0])


def test_the_same_instruction_read_in_another_form_or_line_is_equal():
    root = parse_hlo(SMALL).entry.root
    moved = SMALL.replace(
        "kind=kLoop, calls=%fused", "// a comment\n    calls=%fused,\n    kind=kLoop"
    ).replace("ENTRY", "// a line more\nENTRY")
    other = parse_hlo(moved).entry.root  # over lines: attributes read into a dict, keys reordered
    assert other.line == root.line + 1 and other.attributes.text != root.attributes.text
    assert other == root and hash(other) == hash(root) and len({root, other}) == 1
    built = Instruction(
        "f", "fusion", root.shape, ("x",), {"calls": "%fused", "kind": "kLoop"}, True
    )
    assert built == root and hash(built) == hash(root)


def test_a_header_that_goes_on_over_the_next_line_is_read_whole():
    header = "HloModule m, is_scheduled=true\n  , entry_computation_layout={(f32[4]{0})->f32[4]{0}}"
    module = parse_hlo(SMALL.replace(SMALL.split("\n")[0], header))
    assert module.header == (
        "HloModule m, is_scheduled=true , entry_computation_layout={(f32[4]{0})->f32[4]{0}}"
    )
    assert [c.name for c in module.computations] == ["fused", "main"]


@pytest.mark.parametrize("line_break", ["", "\n    "], ids=["one line", "over lines"])
def test_metadata_is_the_instructions_own_not_one_inside_another_attribute(line_break):
    # XLA prints a sharding's own metadata inside the sharding: it is not the instruction's
    sharded = ', sharding={devices=[2]0,1 metadata={op_name="from_sharding"}}'
    text = SMALL.replace("calls=%fused", f"calls=%fused,{line_break}{sharded[2:]}")
    assert parse_hlo(text).entry.root.op_name is None
    own = 'metadata={op_name="own/{0}" source_line=3}'  # a brace in a string: still read
    text = text.replace("}}", f"}}}},{line_break}{own}")
    root = parse_hlo(text).entry.root
    assert (root.op_name, root.source_line) == ("own/{0}", 3)


def test_operand_forms_and_attributes():
    text = SMALL.replace(
        "ROOT %f = f32[4]{0} fusion(%x), kind=kLoop, calls=%fused",
        '%t = (f32[4]{0}, s8[64]{0}) custom-call(f32[4]{0} %x, %x), custom_call_target="__cublas$lt$matmul", '
        'backend_config={"a":{"b":[1,2]},"s":"x, y={z}"}\n'
        "  %c = f32[2,2]{1,0} constant({ {1, 2},\n    {3, 4} })\n"
        '  ROOT %f = f32[4]{0} fusion(%t#0, %c), kind=kCustom, calls=%fused, backend_config={"fusion_backend_config":{"kind":"__triton_gemm"}}',
    )
    entry = parse_hlo(text).entry
    call = entry.by_name["t"]
    assert call.operands == ("x", "x") and call.custom_call_target == "__cublas$lt$matmul"
    assert call.attr("backend_config") == '{"a":{"b":[1,2]},"s":"x, y={z}"}'
    assert entry.by_name["c"].operands == ()
    root = entry.root
    assert root.operands == ("t", "c") and root.operand_indices == (0, None)
    assert root.backend_kind == "__triton_gemm"


def test_names_without_percent():
    module = parse_hlo(SMALL.replace("%", ""))
    assert module.entry.root.operands == ("x",) and module.entry.root.called_computations == (
        "fused",
    )


def test_stack_frame_tables_resolve_to_file_and_line(samples):
    module = parse_hlo((samples / "mul_add_relu.default.hlo.txt").read_text())
    lines = {(i.source_file, i.source_line) for c in module.computations for i in c.instructions}
    assert any(f and f.endswith(".py") and n for f, n in lines)


# XLA prints one instruction per line and opens each computation on a line of its own: counting
# those lines is an independent check that the parser neither drops nor invents anything.
_INSTRUCTION_LINE = re.compile(r"^\s+(?:ROOT\s+)?%?[\w.\-]+\s*=\s", re.MULTILINE)
_COMPUTATION_LINE = re.compile(r"^(?:ENTRY\s+)?%?[\w.\-]+\s.*\{\s*$", re.MULTILINE)


def test_every_sample_and_dump_module_parses_every_instruction(samples, dump_folder):
    files = sorted(samples.glob("*.hlo.txt")) + find_optimized_modules(dump_folder)
    assert len(files) == 18 + 102
    for path in files:
        text = path.read_text()
        module = parse_hlo(text, source=str(path))
        parsed = sum(len(c.instructions) for c in module.computations)
        assert parsed == len(_INSTRUCTION_LINE.findall(text)), path
        assert len(module.computations) == len(_COMPUTATION_LINE.findall(text)), path
        roots = [line for line in text.splitlines() if line.lstrip().startswith("ROOT ")]
        assert len(roots) == len(module.computations), path
        assert module.entry.root.name in text, path


def _error(text: str) -> str:
    with pytest.raises(HloParseError) as info:
        parse_hlo(text)
    return str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "line 1: empty text"),
        ("The quick brown fox\njumps.", "line 1: not HLO"),
        ("HloModule m\n\x00\x01\x02garbage", "line 2: binary data"),
        (
            SMALL[: SMALL.index("ROOT %f")],
            "line 10: truncated: computation 'main' (opened at line 8",
        ),
        (
            SMALL.replace("kind=kLoop,", "kind={kLoop,"),
            "line 12: truncated: computation 'main' (opened at line 8, last instruction at line 10)",
        ),
        (
            SMALL[: SMALL.rindex("}")],
            "line 11: truncated: computation 'main' (opened at line 8, last instruction at line 10)",
        ),
        (SMALL.replace("kind=kLoop,", "kind=kLoop),"), "line 10: expected an instruction"),
        (SMALL + "}\n", "line 12: unbalanced braces: '}' outside a computation"),
        (SMALL.replace("fusion(%x)", "fusion(%y)"), "line 10: unknown operand %y of %f"),
        (SMALL.replace("%x = f32[4]{0}", "%x = f99[4]{0}"), "line 9: unknown element type"),
        ("HloModule m\n%a = f32[] constant(1)\n", "line 2: instruction outside a computation"),
        ("HloModule m\n// nothing else\n", "line 3: no computation"),
        (SMALL.replace("(%x)", "(%x, %x"), "line 10: expected ',' or ')' in the operands of 'f'"),
    ],
)
def test_malformed_input_names_line_and_reason(text, message):
    assert message in _error(text)


LONG = "9" * 5000  # past int()'s 4,300 digits: once a ValueError, its line where it was raised
SHOWN = "99999999999999999999... (5000 digits)"
BIG_DIMS = ",".join(["100000000000000000000"] * 16)
MANY_DIMS = ",".join(["1000000000"] * 16)
TABLES = '\nFileNames\n1 "a.py"\n\nFileLocations\n1 file_name_id=1 line=3\n\nStackFrames\n'
PATHS = ["C", "python"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            SMALL.replace("source_line=7", f"source_line={LONG}"),
            f"line 5: source_line={SHOWN} in metadata does not fit in int64",
        ),
        (
            SMALL.replace("source_line=7", "source_line=9223372036854775808"),
            "line 5: source_line=9223372036854775808 in metadata does not fit in int64",
        ),
        (
            SMALL.replace("source_line=7", f"stack_frame_id={LONG}"),
            f"line 5: stack_frame_id={SHOWN} in metadata does not fit in int64",
        ),
        (
            SMALL.replace("fusion(%x)", f"fusion(%x#{LONG})"),
            f"line 10: tuple index #{SHOWN} in the operands of 'f' does not fit in int64",
        ),
        (
            SMALL + f"{TABLES}1 file_location_id={LONG}\n",
            f"line 20: {SHOWN} in the StackFrames table does not fit in int64",
        ),
        (
            SMALL + f"{TABLES}{LONG} file_location_id=1\n",
            f"line 20: {SHOWN} in the StackFrames table does not fit in int64",
        ),
    ],
    ids=["source line", "source line past int64", "stack frame", "tuple index", "table", "key"],
)
def test_a_number_past_int64_is_one_error_at_its_line(text, message, path, monkeypatch):
    if path == "python":
        monkeypatch.setattr(_reader, "scanner", None)
    assert _error(text) == message


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    ("shape", "message"),
    [
        (
            "f32[99999999999999999999]{0}",
            "dimension 99999999999999999999 in shape 'f32[99999999999999999999]{0}' does not "
            "fit in int64",
        ),
        (f"f32[{LONG}]{{0}}", f"dimension {SHOWN} in shape 'f32[{LONG[:76]}...' does not"),
        (f"f32[<=4,{LONG}]{{0}}", f"dimension {SHOWN} in shape 'f32[<=4,{LONG[:72]}...' does"),
        (f"f32[{BIG_DIMS}]", "dimension 100000000000000000000 in shape 'f32[10000000000000"),
        (f"f32[{MANY_DIMS}]", "shape 'f32[1000000000,1000000000,"),
        ("f32[3037000500,3037000500]", "shape 'f32[3037000500,3037000500]' has more elements"),
        # as XLA multiplies them, in order: past int64 before the 0
        ("f32[4294967296,4294967296,0]", "shape 'f32[4294967296,4294967296,0]' has more elements"),
    ],
    ids=["20 digits", "5000 digits", "dynamic", "16 of 1e20", "16 of 1e9", "product", "then 0"],
)
def test_a_shape_past_int64_is_one_error_at_its_line(shape, message, path, monkeypatch):
    if path == "python":
        monkeypatch.setattr(_reader, "scanner", None)
    text = SMALL.replace("ROOT %f = f32[4]{0} fusion", f"ROOT %f = {shape} fusion")
    error = _error(text)
    assert error.startswith(f"line 10: {message}") and "\n" not in error


def test_shapes_at_int64s_end_are_read():
    assert _shape_of("s8[9223372036854775807]").num_elements == 2**63 - 1
    assert _shape_of("f32[3,3074457345618258602]").num_elements == 2**63 - 2
    assert _shape_of(f"f32[0,{MANY_DIMS}]").num_elements == 0  # 0 first: no product overflows
    unbounded = _shape_of("f32[?,9223372036854775807]")
    assert unbounded.dims == (-1, 2**63 - 1) and not unbounded.sized
    assert _shape_of(f"f32[{'0' * 30}7]").dims == (7,)


@pytest.mark.parametrize("path", PATHS)
def test_a_name_numbered_past_int64_is_not_numbered_as_xla(path, monkeypatch):
    # XLA's NameUniquer: a suffix that absl::SimpleAtoi cannot read into an int64 is no number
    if path == "python":
        monkeypatch.setattr(_reader, "scanner", None)
    names = [f"p.{LONG}", "q.9223372036854775808", "r.9223372036854775807"]
    bodies = "".join(f"  {n} = f32[] parameter({i})\n" for i, n in enumerate(names))
    text = f"HloModule m\nc {{\n{bodies}  ROOT t = f32[] constant(0)\n}}\n"
    text += f"ENTRY e {{\n{bodies}  ROOT t = f32[] constant(0)\n}}\n"
    renamed = [i.name for i in parse_hlo(text).entry.instructions]
    assert renamed == [f"p.{LONG}.1", "q.9223372036854775808.1", "r.0", "t.1"]


def test_binary_and_missing_files(tmp_path):
    binary = tmp_path / "x.bin"
    binary.write_bytes(b"HloModule m\n\xff\xfe\x00\x10")
    with pytest.raises(HloParseError, match="line 2: binary file"):
        analyze_hlo(binary)
    with pytest.raises(HloParseError, match="no such file"):
        analyze_hlo(tmp_path / "missing.txt")
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"HloModule m\n\n\xe9t\xe9")
    with pytest.raises(HloParseError, match="line 3: not UTF-8"):
        analyze_hlo(latin)


def test_a_file_saved_with_a_byte_order_mark_is_read(tmp_path):
    marked = tmp_path / "marked.txt"
    marked.write_bytes(
        b"\xef\xbb\xbfHloModule m\nENTRY e {\n  p = f32[8] parameter(0)\n"
        b"  ROOT n = f32[8] negate(p)\n}\n"
    )
    report = analyze_hlo(marked)
    assert (report.module, report.kernels, report.modeled_bytes) == ("m", 1, 64)


@pytest.mark.parametrize("enabled", [True, False], ids=["gc enabled", "gc disabled"])
@pytest.mark.parametrize("frozen", [False, True], ids=["none frozen", "some frozen"])
def test_reading_and_analyzing_leave_the_gc_as_found(enabled, frozen):
    # A library call does not switch the process's GC (issue 30): only an application opts in
    was_enabled = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    if frozen:
        gc.freeze()
    try:
        count = gc.get_freeze_count()
        module = parse_hlo(SMALL)
        assert (gc.isenabled(), gc.get_freeze_count()) == (enabled, count)
        analyze_module(module)
        assert (gc.isenabled(), gc.get_freeze_count()) == (enabled, count)
    finally:
        if frozen:
            gc.unfreeze()
        (gc.enable if was_enabled else gc.disable)()


def test_reading_and_analyzing_call_no_gc_switch(monkeypatch):
    switched = []
    for name in ("disable", "enable", "freeze", "unfreeze", "collect"):
        monkeypatch.setattr(gc, name, lambda *_, name=name: switched.append(name))
    analyze_module(parse_hlo(SMALL))
    analyze_hlo(SMALL)
    assert switched == []


@pytest.mark.parametrize("enabled", [True, False], ids=["gc enabled", "gc disabled"])
def test_gc_paused_pauses_and_restores_the_gc(enabled):
    was_enabled = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        count = gc.get_freeze_count()
        with gc_paused():
            assert not gc.isenabled()
            parse_hlo(SMALL)
        assert (gc.isenabled(), gc.get_freeze_count()) == (enabled, count)
    finally:
        (gc.enable if was_enabled else gc.disable)()
