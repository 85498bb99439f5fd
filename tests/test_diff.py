"""`xlafuse diff` and `xlafuse.hlo.diff`: every kernel in one group, deltas adding up exactly."""

import json

import jax
import pytest

from xlafuse.cli import main
from xlafuse.hlo import analyze_module, parse_hlo
from xlafuse.hlo.diff import diff_modules

PAIRS = ("mul_add_relu", "reductions", "softmax", "sdpa_xla", "sdpa_cudnn", "convnet", "scan_rnn")


def run(capsys, *argv):
    code = main(list(map(str, argv)))
    out, err = capsys.readouterr()
    return code, out, err


def load(path):
    text = path.read_text()
    return parse_hlo(text, str(path)), text


def assert_one_to_one(diff, a, b):
    """Each kernel of A and of B in exactly one group; the groups' deltas sum to the total."""
    names_a = [k for g in diff.groups for k in g.kernels_a]
    names_b = [k for g in diff.groups for k in g.kernels_b]
    assert sorted(names_a) == sorted(k.name for k in analyze_module(a).kernel_details)
    assert sorted(names_b) == sorted(k.name for k in analyze_module(b).kernel_details)
    assert len(set(names_a)) == len(names_a) and len(set(names_b)) == len(names_b)
    assert sum(g.bytes_delta for g in diff.groups) == diff.modeled_bytes_delta


@pytest.mark.parametrize("name", PAIRS)
def test_samples_one_to_one(samples, name):
    (a, at), (b, bt) = (load(samples / f"{name}.{v}.hlo.txt") for v in ("default", "nofusion"))
    diff = diff_modules(a, b, texts=(None, at, bt))
    assert_one_to_one(diff, a, b)
    assert diff.reference == "A"


@pytest.mark.parametrize(
    ("name", "groups"),
    [
        ("mul_add_relu", [("split", 1, 4, 100663300)]),
        (
            "reductions",
            [("split", 1, 4, 67108876), ("split", 1, 2, 32772), ("changed", 1, 1, 16384)],
        ),
    ],
)
def test_sample_groups(samples, name, groups):
    (a, at), (b, bt) = (load(samples / f"{name}.{v}.hlo.txt") for v in ("default", "nofusion"))
    diff = diff_modules(a, b, texts=(None, at, bt))
    got = [(g.kind, len(g.kernels_a), len(g.kernels_b), g.bytes_delta) for g in diff.groups]
    assert got == groups


def test_reverse_is_fused(samples):
    (a, at), (b, bt) = (load(samples / f"reductions.{v}.hlo.txt") for v in ("default", "nofusion"))
    diff = diff_modules(b, a, texts=(None, bt, at))
    assert_one_to_one(diff, b, a)
    first = diff.groups[0]
    assert (first.kind, first.kernels_b, first.bytes_delta) == (
        "fused",
        ("input_reduce_fusion",),
        -67108876,
    )


def test_same_module_is_all_same(samples):
    a, text = load(
        samples
        / "why"
        / "chain_module_1325"
        / "module_1325.jit_f.sm_9.0a_gpu_after_optimizations.txt"
    )
    ref, ref_text = load(
        samples / "why" / "chain_module_1325" / "module_1325.jit_f.before_optimizations.txt"
    )
    diff = diff_modules(a, a, reference=ref, texts=(ref_text, text, text))
    assert diff.reference == "unoptimized"
    assert [g.kind for g in diff.groups] == ["same"] * 4
    assert diff.changes == () and diff.modeled_bytes_delta == 0


def test_text(capsys, samples):
    a, b = samples / "sdpa_xla.default.hlo.txt", samples / "sdpa_xla.nofusion.hlo.txt"
    code, out, _ = run(capsys, "diff", a, b)
    assert code == 0
    assert out.startswith("A: sdpa_xla.default.hlo.txt\nB: sdpa_xla.nofusion.hlo.txt\n")
    assert "kernels: 7 -> 16 (+9)" in out
    assert "modeled bytes: 452.98 MB -> 1881.15 MB (+1428.16 MB)" in out
    assert "kernel groups that differ: 1 of 7\n  split: fusion.9 -> 10 [" in out
    assert out.endswith("sum of the groups: +1428.16 MB (= the modeled bytes difference)\n")


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="CPU figures")
def test_workload_mlp(capsys):
    code, out, _ = run(
        capsys, "diff", "--workload", "mlp", "--variants", "default,no-fusion", "--json"
    )
    got = json.loads(out)
    assert code == 0 and (got["a"], got["b"], got["reference"]) == (
        "default",
        "no-fusion",
        "unoptimized",
    )
    assert (got["kernels"]["a"], got["kernels"]["b"]) == (10, 43)
    assert got["modeled_bytes"]["delta"] == 1165984
    assert sum(g["bytes_delta"] for g in got["groups"]) == 1165984
    splits = {g["kernels_a"][0]: len(g["kernels_b"]) for g in got["groups"] if g["kind"] == "split"}
    # Each of the four fusions listed once, with the unfused kernels that hold its ops.
    assert splits == {
        "multiply_bitcast_fusion": 15,
        "add_bitcast_fusion": 8,
        "add_add_fusion": 3,
        "add_rsqrt_fusion": 11,
    }
    every_b = [k for g in got["groups"] for k in g["kernels_b"]]
    assert len(every_b) == len(set(every_b)) == 43


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
        (["diff", "--workload", "nope"], "unknown workload 'nope'"),
        (["diff", "{a}", "{a}", "--top", "0"], "--top must be 1 or more, got 0"),
    ],
)
def test_bad_input(capsys, samples, dump_folder, argv, message):
    paths = {"a": samples / "softmax.default.hlo.txt", "dump": dump_folder}
    argv = [x.format(**paths) for x in argv]
    message = message.format(**paths)
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("xlafuse diff: error: ") and message in err
    assert err.count("\n") == 1


@pytest.mark.gpu
def test_gpu_workload_mlp_one_to_one(capsys):
    code, out, _ = run(capsys, "diff", "--workload", "mlp", "--json")
    got = json.loads(out)
    assert code == 0 and got["reference"] == "unoptimized"
    assert sum(g["bytes_delta"] for g in got["groups"]) == got["modeled_bytes"]["delta"]
    every_b = [k for g in got["groups"] for k in g["kernels_b"]]
    assert len(every_b) == len(set(every_b)) == got["kernels"]["b"]


def test_reference_beside_a_dumped_file(capsys, samples):
    chain = samples / "why" / "chain_module_1325"
    a = chain / "module_1325.jit_f.sm_9.0a_gpu_after_optimizations.txt"
    code, out, _ = run(capsys, "diff", a, a, "--json")
    got = json.loads(out)
    assert code == 0 and got["reference"] == "unoptimized"
    assert got["lineage"]["a"] == {"kernel": 14, "outside": 0, "lost": 11}
    assert [g["kind"] for g in got["groups"]] == ["same"] * 4
