"""`xlafuse diff` and `xlafuse.hlo.diff`: counts, deltas and which ops were split or fused."""

import json

import pytest

from xlafuse.cli import main
from xlafuse.hlo import analyze_hlo, parse_hlo
from xlafuse.hlo.diff import diff_reports


def run(capsys, *argv):
    code = main(list(map(str, argv)))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("name", "kernels", "bytes_delta", "real_delta"),
    [
        ("mul_add_relu", (1, 4), 100663300, -1),
        ("reductions", (3, 7), 67158032, -1),
        ("sdpa_xla", (7, 16), 1428160516, 1),
    ],
)
def test_default_vs_nofusion_json(capsys, samples, name, kernels, bytes_delta, real_delta):
    a, b = samples / f"{name}.default.hlo.txt", samples / f"{name}.nofusion.hlo.txt"
    code, out, _ = run(capsys, "diff", a, b, "--json")
    got = json.loads(out)
    assert code == 0
    assert (got["kernels"]["a"], got["kernels"]["b"]) == kernels
    assert got["kernels"]["delta"] > 0
    assert got["modeled_bytes"]["delta"] == bytes_delta
    assert got["real_fusions"]["delta"] == real_delta  # Triton softmax stays fused
    assert len(got["split"]) >= 1 and got["fused"] == []


def test_split_is_named(samples):
    a = analyze_hlo(samples / "reductions.default.hlo.txt")
    b = analyze_hlo(samples / "reductions.nofusion.hlo.txt")
    diff = diff_reports(a, b)
    (change,) = diff.split
    assert change.kernel == "input_reduce_fusion"
    assert sorted(change.parts) == [
        "wrapped_multiply.1",
        "wrapped_reduce",
        "wrapped_reduce.1",
        "wrapped_reduce.2",
    ]
    assert change.bytes_delta == 67108876
    reverse = diff_reports(b, a)
    assert reverse.kernels_delta == -4 and [c.kernel for c in reverse.fused] == [
        "input_reduce_fusion"
    ]
    assert reverse.fused[0].bytes_delta == -67108876


def test_accepts_modules(samples):
    text = (samples / "mul_add_relu.default.hlo.txt").read_text()
    diff = diff_reports(parse_hlo(text), parse_hlo(text))
    assert (diff.kernels_delta, diff.modeled_bytes_delta, diff.changes) == (0, 0, ())


def test_text(capsys, samples):
    a, b = samples / "sdpa_xla.default.hlo.txt", samples / "sdpa_xla.nofusion.hlo.txt"
    code, out, _ = run(capsys, "diff", a, b)
    assert code == 0
    assert "A: sdpa_xla.default.hlo.txt\nB: sdpa_xla.nofusion.hlo.txt\n" in out
    assert "kernels: 7 -> 16 (+9)" in out
    assert "modeled bytes: 452.98 MB -> 1881.15 MB (+1428.16 MB)" in out
    assert "fused in A, split in B: 1\n  fusion.9 -> 10 kernels [" in out
    assert "split in A, fused in B: 0" in out


def test_workload_variants(capsys):
    code, out, _ = run(
        capsys, "diff", "--workload", "mul_add_relu", "--variants", "default,no-fusion", "--json"
    )
    got = json.loads(out)
    assert code == 0 and (got["a"], got["b"]) == ("default", "no-fusion")
    assert (got["kernels"]["a"], got["kernels"]["b"]) == (1, 4)
    assert got["modeled_bytes"]["delta"] > 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["diff", "{a}"], "give two HLO files A B, or --workload NAME --variants V1,V2"),
        (["diff", "{a}", "/no/such.hlo"], "no such file or folder: '/no/such.hlo'"),
        (["diff", "{a}", "{dump}"], "diff compares two HLO files; '{dump}' is a dump folder"),
        (
            ["diff", "--workload", "mul_add_relu", "--variants", "default"],
            "--variants needs two names",
        ),
        (
            ["diff", "--workload", "mul_add_relu", "--variants", "default,nope"],
            "unknown variant 'nope'",
        ),
    ],
)
def test_bad_input(capsys, samples, dump_folder, argv, message):
    paths = {"a": samples / "softmax.default.hlo.txt", "dump": dump_folder}
    argv = [x.format(**paths) for x in argv]
    message = message.format(**paths)
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("xlafuse diff: error: ") and message in err
