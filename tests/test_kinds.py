"""The closed sets of values (`xlafuse.kinds`) are members past the boundary that reads them, and
are written as the strings records have always held (issue 30)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import xlafuse
from xlafuse.compiler.variants import Variant, get
from xlafuse.hlo import analyze_hlo
from xlafuse.kinds import Backend, Figure, Framework, FusionKind, Mode, Status, Verdict, member
from xlafuse.measurement import stats
from xlafuse.results.records import CellResult, parse_file

NAME = {"workload": "mlp", "size": "tiny", "mode": "forward", "dtype": "float32"}
NAME |= {"variant": "default", "backend": "cpu", "device_kind": "cpu"}


def test_a_record_read_holds_members_and_writes_the_same_strings():
    line = {**NAME, "status": "error", "framework": "torch", "speedup_verdict": "slower"}
    record = CellResult.from_dict(line)
    assert record.status is Status.ERROR and not record.ok
    assert record.framework is Framework.TORCH
    assert record.speedup.verdict is Verdict.SLOWER
    written = json.loads(json.dumps(record.to_dict()))
    assert (written["status"], written["framework"], written["speedup_verdict"]) == (
        "error",
        "torch",
        "slower",
    )
    assert CellResult(**NAME).status is Status.OK and CellResult(**NAME).framework == "jax"


def test_a_record_of_an_unknown_status_is_a_line_skipped_with_what_is_accepted(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({**NAME, "status": "done"}) + "\n")
    records, skipped = parse_file(path)
    assert records == []
    assert skipped == [(1, "not a cell record (status 'done' is not one of ok, error)")]


def test_variants_and_verdicts_are_members():
    assert get("default").framework is Framework.JAX
    assert get("torch-eager").framework is Framework.TORCH
    with pytest.raises(ValueError, match="unknown framework 'tf'; accepted: jax, torch"):
        Variant("x", framework="tf")
    assert stats.verdict(2.0, (1.9, 2.1)) is Verdict.FASTER
    assert stats.verdict(1.0, (0.9, 1.1)) is Verdict.SAME
    assert stats.VERDICTS == ("faster", "slower", "same")


HLO = """HloModule m

fused_negate {
  p0 = f32[8]{0} parameter(0)
  ROOT n = f32[8]{0} negate(p0)
}

ENTRY e {
  a = f32[8]{0} parameter(0)
  f = f32[8]{0} fusion(a), kind=kInput, calls=fused_negate
  ROOT c = f32[8]{0} copy(f)
}
"""


def test_a_fused_kernels_kind_is_a_member_and_a_single_ops_its_opcode():
    report = analyze_hlo(HLO)
    kinds = {k.name: k.kind for k in report.kernel_details}
    assert kinds == {"f": FusionKind.INPUT, "c": "copy"}
    assert kinds["f"] is FusionKind.INPUT
    assert json.loads(json.dumps(dict(report.kinds))) == {"kInput": 1}


def bare_string_compares(root: Path, values: set[str]) -> list[str]:
    """`FILE:LINE: == 'train'` for each comparison in the package with one of `values` as a bare
    string: an operand of `==`/`!=`, or in a literal tuple, list or set that `in` tests."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            lefts = [node.left, *node.comparators[:-1]]
            for op, left, right in zip(node.ops, lefts, node.comparators, strict=True):
                if isinstance(op, ast.Eq | ast.NotEq):
                    operands = [left, right]
                elif isinstance(op, ast.In | ast.NotIn) and isinstance(
                    right, ast.Tuple | ast.List | ast.Set
                ):
                    operands = right.elts
                else:
                    continue
                for operand in operands:
                    if isinstance(operand, ast.Constant) and operand.value in values:
                        where = path.relative_to(root.parent)
                        found.append(
                            f"{where}:{node.lineno}: {type(op).__name__} {operand.value!r}"
                        )
    return found


# Verdict's "same" is also a kernel group's kind (`hlo.diff`), another set: left out here.
CLOSED_SETS = (Mode, Backend, Figure, Framework, Status, FusionKind)


def test_no_closed_set_is_compared_as_a_bare_string():
    values = {member.value for kind in CLOSED_SETS for member in kind}
    assert bare_string_compares(Path(xlafuse.__file__).parent, values) == []


def test_the_scan_sees_equality_and_membership_in_literals(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(
        'if mode == "train" or "gpu" != backend or lead in ("latency", x):\n    pass\n'
        'if "error" in message or mode == Mode.TRAIN:\n    pass\n'
    )
    assert bare_string_compares(tmp_path / "pkg", {"train", "gpu", "latency", "error"}) == [
        "pkg/a.py:1: Eq 'train'",
        "pkg/a.py:1: NotEq 'gpu'",
        "pkg/a.py:1: In 'latency'",
    ]


def test_mode_backend_and_figure_are_members_that_equal_their_strings():
    assert (Mode.TRAIN, Backend.GPU, Figure.PIPELINED) == ("train", "gpu", "pipelined")
    assert member(Mode, "forward", "mode") is Mode.FORWARD
    with pytest.raises(TypeError, match=r"^backend 'tpu' is not one of cpu, gpu$"):
        member(Backend, "tpu", "backend")
