"""`xlafuse diff` and `xlafuse.hlo.diff`: every kernel in one group, deltas adding up exactly."""

import json
from collections import Counter

import jax
import pytest

from xlafuse.cli import main
from xlafuse.hlo import analyze_module, parse_hlo
from xlafuse.hlo.diff import diff_modules
from xlafuse.hlo.lineage import kind, trace_module
from xlafuse.report.explain_text import render_diff

PAIRS = ("mul_add_relu", "reductions", "softmax", "sdpa_xla", "sdpa_cudnn", "convnet", "scan_rnn")


def run(capsys, *argv):
    code = main(list(map(str, argv)))
    out, err = capsys.readouterr()
    return code, out, err


def load(path):
    text = path.read_text()
    return parse_hlo(text, source=str(path)), text


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
    assert got["lineage"]["a"] == {"kernel": 24, "outside": 1, "lost": 0}
    assert [g["kind"] for g in got["groups"]] == ["same"] * 4


def test_every_dot_of_a_train_step_is_followed_through_triton_and_cublas(
    gpt2_train, gpt2_train_diffs
):
    # default runs 99 of the step's 219 dots as Triton GEMM fusions and 120 as cuBLASLt calls
    # (some split in K, XLA's metadata dropped on some); no-gemm-fusion runs all 219 as
    # cuBLASLt calls (the 50,257-word vocabulary padded). Every dot lands in a kernel of both.
    # (the recorded GPT-2 full train step, tests/conftest.py)
    diff = gpt2_train_diffs["no-gemm-fusion"]
    a, b = gpt2_train["default"][1], gpt2_train["no-gemm-fusion"][1]
    assert_one_to_one(diff, a, b)
    dots = [t for t in diff.lineage_a.traces if t.opcode == "dot"]
    assert len(dots) == 219
    for lineage in (diff.lineage_a, diff.lineage_b):
        assert all(lineage.by_name[t.instruction].status == "kernel" for t in dots)
    assert diff.unlinked_dots == ()
    kinds = Counter(kind(i) for c in b.computations for i in c.instructions)
    assert (kinds["dot"], sum(i.opcode == "custom-call" for c in b.computations
                              for i in c.instructions)) == (219, 219)  # fmt: skip
    in_b = {diff.lineage_b.by_name[t.instruction].kernel for t in dots}
    assert all(k.startswith(("cublas-lt-matmul", "custom-call")) for k in in_b)
    # What stays on one side is what XLA added for cuBLAS: layout copies. (Its transposes of a
    # cuBLAS result hold the convert of it that the Triton GEMM fusion holds in A.)
    alone = [k for g in diff.groups if not (g.kernels_a and g.kernels_b)
             for k in g.kernels_a + g.kernels_b]  # fmt: skip
    assert {k.rsplit(".", 1)[0] for k in alone} == {"copy"}


def test_the_diff_says_what_it_could_not_follow(gpt2_train_diffs):
    diff = gpt2_train_diffs["no-gemm-fusion"]
    text = render_diff(diff, top=3)
    lost = diff.lineage_b.lost_by_opcode()
    assert "dot" not in lost and "gather" in lost
    assert (
        "  lost in B: 17 of 6,883 (0.25%; 15 besides reshapes and bitcasts, 0.22%): "
        "5 broadcast 0.07%, 2 compare 0.03%, 2 reshape 0.03%, 2 scatter 0.03%, 2 select 0.03%, "
        "1 add 0.01%, 1 gather 0.01%, 1 iota 0.01%, ..."
    ) in text
    assert "dots/convolutions in no group" not in text
    got = diff.to_dict()["lineage"]
    assert (got["unlinked_dots"], got["lost_by_opcode"]["b"]) == ([], lost)


def test_a_rewritten_dot_left_alone_is_named():
    # A: the dot in a Triton GEMM fusion; B: a cuBLAS call with its metadata dropped and an
    # operand count that matches no signature; both traced to A's instructions.
    a_text = """HloModule m, entry_computation_layout={(f32[64,32]{1,0}, f32[32,16]{1,0})->f32[64,16]{1,0}}

%gemm (p0: f32[64,32], p1: f32[32,16]) -> f32[64,16] {
  %p0 = f32[64,32]{1,0} parameter(0)
  %p1 = f32[32,16]{1,0} parameter(1)
  ROOT %dot.1 = f32[64,16]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (x: f32[64,32], w: f32[32,16]) -> f32[64,16] {
  %x = f32[64,32]{1,0} parameter(0)
  %w = f32[32,16]{1,0} parameter(1)
  ROOT %gemm_fusion_dot = f32[64,16]{1,0} fusion(%x, %w), kind=kCustom, calls=%gemm
}
"""
    b_text = """HloModule m, entry_computation_layout={(f32[64,32]{1,0}, f32[32,16]{1,0})->f32[64,16]{1,0}}

ENTRY %main (x: f32[64,32], w: f32[32,16]) -> f32[64,16] {
  %x = f32[64,32]{1,0} parameter(0)
  %w = f32[32,16]{1,0} parameter(1)
  %cc = (f32[64,16]{1,0}, s8[1024]{0}) custom-call(%x, %w), custom_call_target="__cublas$lt$matmul"
  ROOT %gte = f32[64,16]{1,0} get-tuple-element(%cc), index=0
}
"""
    a, b = parse_hlo(a_text), parse_hlo(b_text)
    diff = diff_modules(a, b, texts=(None, a_text, b_text))
    (group,) = diff.groups
    assert (group.kernels_a, group.kernels_b, diff.unlinked_dots) == (
        ("gemm_fusion_dot",),
        ("cc",),
        (),
    )
    assert diff.lineage_b.by_name["dot.1"].how == "order"
    # Against a program without the dot (B adds two parameters): A's GEMM is named as left alone.
    c_text = b_text.replace(
        "%cc = (f32[64,16]{1,0}, s8[1024]{0}) custom-call(%x, %w), "
        'custom_call_target="__cublas$lt$matmul"',
        "%y = f32[64,16]{1,0} parameter(2)\n  %cc = f32[64,16]{1,0} add(%y, %y)",
    ).replace(
        "ROOT %gte = f32[64,16]{1,0} get-tuple-element(%cc), index=0",
        "ROOT %n = f32[64,16]{1,0} negate(%cc)",
    )
    alone = diff_modules(a, parse_hlo(c_text), texts=(None, a_text, c_text))
    assert alone.unlinked_dots == ("A:gemm_fusion_dot",)
    assert "dots/convolutions in no group of the other side: 1 (A:gemm_fusion_dot)" in render_diff(
        alone
    )


def test_layout_copies_made_in_both_are_one_group():
    # A copy computes nothing, so it holds no instruction of the program: the copy of A and
    # the copy of B that change the same value's layout are linked by what they copy.
    text = """HloModule m

ENTRY %main (p: f32[64,32]) -> f32[64,32] {
  %p = f32[64,32]{1,0} parameter(0)
  %copy.1 = f32[64,32]{0,1} copy(%p)
  ROOT %negate.1 = f32[64,32]{0,1} negate(%copy.1)
}
"""
    a = parse_hlo(text)
    diff = diff_modules(a, a, texts=(None, text, text))
    assert diff.lineage_a.copy_of == {"copy.1": ("parameter 0",)}
    assert sorted((g.kind, g.kernels_a, g.kernels_b) for g in diff.groups) == [
        ("same", ("copy.1",), ("copy.1",)),
        ("same", ("negate.1",), ("negate.1",)),
    ]


def test_a_dropped_precision_round_trip_and_a_folded_division_are_followed():
    # XLA on a GPU may keep excess precision: f32 -> bf16 -> f32 is dropped, and x / 4 becomes
    # x * 0.25 (found by its metadata). The reference's ops after them are found too.
    ref_text = """HloModule m

ENTRY %main (p: f32[8,16], q: f32[128]) -> f32[128] {
  %p = f32[8,16]{1,0} parameter(0)
  %q = f32[128]{0} parameter(1)
  %down = bf16[8,16]{1,0} convert(%p)
  %up = f32[8,16]{1,0} convert(%down)
  %four = f32[] constant(4)
  %b = f32[8,16]{1,0} broadcast(%four), dimensions={}
  %div = f32[8,16]{1,0} divide(%up, %b), metadata={op_name="jit(f)/div" source_file="f.py" source_line=3}
  %flat = f32[128]{0} reshape(%div)
  %t = f32[128]{0} tanh(%flat)
  ROOT %add.1 = f32[128]{0} add(%t, %q)
}
"""
    opt_text = """HloModule m

%fused (a: f32[128], c: f32[128]) -> f32[128] {
  %a = f32[128]{0} parameter(0)
  %c = f32[128]{0} parameter(1)
  %quarter = f32[] constant(0.25)
  %b = f32[128]{0} broadcast(%quarter), dimensions={}
  %multiply.7 = f32[128]{0} multiply(%a, %b), metadata={op_name="jit(f)/div" source_file="f.py" source_line=3}
  %tanh.3 = f32[128]{0} tanh(%multiply.7)
  ROOT %add.9 = f32[128]{0} add(%tanh.3, %c)
}

ENTRY %main (p: f32[8,16], q: f32[128]) -> f32[128] {
  %p = f32[8,16]{1,0} parameter(0)
  %q = f32[128]{0} parameter(1)
  %bc = f32[128]{0} bitcast(%p)
  ROOT %loop_fusion = f32[128]{0} fusion(%bc, %q), kind=kLoop, calls=%fused
}
"""
    lineage = trace_module(
        parse_hlo(ref_text), parse_hlo(opt_text), reference_text=ref_text, optimized_text=opt_text
    )
    by = lineage.by_name
    assert (by["up"].status, by["up"].how) == ("outside", "view")  # the round trip is p itself
    assert (by["div"].kernel, by["div"].optimized) == ("loop_fusion", ("multiply.7",))
    assert [by[n].kernel for n in ("t", "add.1")] == ["loop_fusion", "loop_fusion"]


def test_the_report_says_what_the_lineage_could_not_follow():
    from xlafuse.report.kernels import savings_section

    record = {"a": "default", "b": "no-fusion", "groups": 3, "time_a_s": 1e-3, "time_b_s": 2e-3,
              "unattributed_a_s": 0.0, "unattributed_b_s": 0.0, "top": [], "gains": [],
              "losses": [], "changed_s": {"faster": 0.0, "slower": 1e-3, "same": 0.0},
              "changed_groups": {"faster": 0, "slower": 1, "same": 2},
              "lost_by_opcode": {"a": {"reshape": 3, "divide": 1}, "b": {}},
              "unlinked_dots": ["A:gemm_fusion_dot.2"]}  # fmt: skip
    text = "\n".join(savings_section(record))
    assert (
        "Instructions of the program not traced to a kernel of default: 4 (3 reshape, 1 divide). "
        "Dots and convolutions in a group of one side only: 1 (`A:gemm_fusion_dot.2`)."
    ) in text
    assert "kernel of no-fusion" not in text
    older = {k: v for k, v in record.items() if k not in ("lost_by_opcode", "unlinked_dots")}
    assert "not traced" not in "\n".join(savings_section(older))


def test_a_one_to_one_group_is_not_named_like_the_verdict_same():
    from xlafuse.report.kernels import savings_section

    def group(kind, a, b, saved):
        return {"kind": kind, "kernels_a": [a], "n_a": 1, "kernels_b": [b], "n_b": 1,
                "time_a_s": 5e-5, "time_b_s": 5e-5 + saved, "saved_s": saved,
                "ci_s": [saved * 1.1, saved * 0.9], "bytes_a": 5e7, "bytes_b": 5e7}  # fmt: skip

    record = {"a": "default", "b": "no-gemm-fusion", "groups": 2, "time_a_s": 1e-4,
              "time_b_s": 7.5e-5, "unattributed_a_s": 0.0, "unattributed_b_s": 0.0, "top": [],
              "gains": [group("same", "gemm_fusion_dot.205", "custom-call.364", -1.3e-5),
                        group("changed", "gemm_fusion_dot.7", "custom-call.9", -1.2e-5)],
              "losses": [], "changed_s": {"faster": -2.5e-5, "slower": 0.0, "same": 0.0},
              "changed_groups": {"faster": 2, "slower": 0, "same": 0}}  # fmt: skip
    text = "\n".join(savings_section(record))
    assert "| pairing | default kernels | no-gemm-fusion kernels |" in text
    assert "| one to one | `gemm_fusion_dot.205` | `custom-call.364` | 50 | 37 | -13 |" in text
    assert "| one to one, bytes differ | `gemm_fusion_dot.7` |" in text
    assert "| same |" not in text and "| changed |" not in text
    assert "a group whose verdict is `same` (within the noise, or under 3%) is left out" in text
