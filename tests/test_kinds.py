"""The closed sets of values (`xlafuse.kinds`) are members past the boundary that reads them, and
are written as the strings records have always held (issue 30)."""

from __future__ import annotations

import json

import pytest

from xlafuse.compile.variants import Variant, get
from xlafuse.hlo import analyze_hlo
from xlafuse.kinds import Framework, FusionKind, Status, Verdict
from xlafuse.measure import stats
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
