"""Lineage across XLA's rewrites (`xlafuse.hlo.lineage`): GPT-2's train steps and forward pass
recorded on the H200 (jax 0.11.2) traced nearly whole (its fixtures, `gpt2_train` and `gpt2_train_diffs`, are in
conftest.py: test_diff.py reads them too), and one small hand-written pair per rule."""

from __future__ import annotations

import pytest
from helpers import GPT2_FORWARD, GPT2_SMALL_TRAIN, RESNET50_TRAIN, recorded_hlo
from lineage_digests import assert_digest, digest, lineage_digest

from xlafuse.hlo.diff import diff_modules
from xlafuse.hlo.lineage import LAYOUT_ONLY, lost_summary, trace_module
from xlafuse.hlo.parse import parse_hlo

# Before these rules (default): 5,661 in kernels, 25 outside, 1,197 lost (885 besides reshapes:
# 12.9%). What is left lost is the embedding lookups' index arithmetic (`jnp.take` and
# `take_along_axis` called as computations, their clamps rewritten), two of their gathers and
# scatters, and constant broadcasts read from several kernels.
GPT2_COUNTS = {
    "default": ({"kernel": 6561, "outside": 305, "lost": 17}, 15),
    "no-gemm-fusion": ({"kernel": 6561, "outside": 305, "lost": 17}, 15),
    "no-fusion": ({"kernel": 6562, "outside": 305, "lost": 16}, 14),
}


@pytest.mark.parametrize("variant", list(GPT2_COUNTS))
def test_gpt2_train_is_traced_but_for_a_few_index_ops(gpt2_train_diffs, variant):
    diff = gpt2_train_diffs["no-fusion" if variant == "no-fusion" else "no-gemm-fusion"]
    lineage = diff.lineage_a if variant == "default" else diff.lineage_b
    counts, besides_layout = GPT2_COUNTS[variant]
    assert lineage.counts() == counts
    assert_digest(f"trace-gpt2-train/{variant}", lineage_digest(lineage))  # every trace as it was
    lost = lineage.lost_by_opcode()
    assert sum(n for op, n in lost.items() if op not in LAYOUT_ONLY) == besides_layout
    assert besides_layout / len(lineage.traces) < 0.05
    assert "dot" not in lost and "reduce" not in lost
    hows = {t.how for t in lineage.traces if t.status == "kernel"}
    assert {"folded", "epilogue", "duplicate", "view"} <= hows
    # Each dot is in a kernel that runs a dot (a Triton GEMM fusion or a cuBLAS call).
    dots = [t for t in lineage.traces if t.opcode == "dot"]
    assert len(dots) == 219 and all(t.kernel in lineage.dot_kernels for t in dots)


@pytest.mark.parametrize("b", ["no-gemm-fusion", "no-fusion"])
def test_gpt2_train_diff_leaves_no_dot_alone(gpt2_train_diffs, b):
    diff = gpt2_train_diffs[b]
    assert diff.unlinked_dots == ()
    assert sum(g.bytes_delta for g in diff.groups) == diff.modeled_bytes_delta
    assert_digest(f"trace-gpt2-train/groups default-{b}", digest(diff.to_dict()))


@pytest.fixture(scope="module")
def resnet50_train():
    """(text, module) of the unoptimized ResNet-50 full train step and of two compilations."""
    return recorded_hlo(RESNET50_TRAIN, ("unoptimized", "default", "no-gemm-fusion"))


def test_resnet50_train_follows_every_convolution_into_a_cudnn_call(resnet50_train):
    # AdamW's update of each convolution's weights runs on a transposed copy of them (XLA's
    # layout), transposed back: before that layout was followed, 99 add, 98 divide and 98
    # multiply of it were lost (3.83%). What stays lost is the labels' lookup and one max pool
    # gradient (select-and-scatter), and 9 broadcasts.
    ref_text, ref = resnet50_train["unoptimized"]
    texts = {n: resnet50_train[n][0] for n in ("default", "no-gemm-fusion")}
    diff = diff_modules(resnet50_train["default"][1], resnet50_train["no-gemm-fusion"][1],
                        labels=("default", "no-gemm-fusion"), reference=ref, texts=(ref_text, *texts.values()))  # fmt: skip
    for side, lineage in zip(texts, (diff.lineage_a, diff.lineage_b), strict=True):
        # each side traced to the unoptimized one
        assert lineage.counts() == {"kernel": 7654, "outside": 427, "lost": 17}
        assert_digest(f"trace-resnet50-train/{side}", lineage_digest(lineage))
        lost = lineage.lost_by_opcode()
        assert "convolution" not in lost and "dot" not in lost
        assert not {"divide", "multiply"} & set(lost) and lost["add"] == 1
        besides_layout = sum(n for op, n in lost.items() if op not in LAYOUT_ONLY)
        assert besides_layout == 16 and besides_layout / len(lineage.traces) < 0.05
        convolutions = [t for t in lineage.traces if t.opcode == "convolution"]
        # 158 convolutions (forward, and the gradients by filter and by input), each its own
        # cuDNN call
        assert len({t.kernel for t in convolutions}) == len(convolutions) == 158
        assert all(t.kernel.startswith("cudnn-conv") for t in convolutions)
    assert diff.unlinked_dots == ()
    assert all(g.kernels_a and g.kernels_b for g in diff.groups)  # nothing on one side alone
    assert_digest("trace-resnet50-train/groups default-no-gemm-fusion", digest(diff.to_dict()))


# GPT-2 full forward (batch 8 x 1024): (counts, lost besides reshapes and bitcasts). Before the
# softmax's reduces were numbered without the vmap's dimension of size 1, each layer's softmax
# was lost (default: 151 lost, 103 besides reshapes, 5.96%); before a cuBLASLt epilogue whose C
# is the layer before's call was looked for again, its bias and residual adds were too
# (no-gemm-fusion: 73 lost, 4.22%). What is left: the causal mask's iota and compare, and
# constant broadcasts read from several kernels.
GPT2_FORWARD_COUNTS = {
    "default": ({"kernel": 1525, "outside": 196, "lost": 7}, 7),
    "no-gemm-fusion": ({"kernel": 1522, "outside": 196, "lost": 10}, 10),
    "no-fusion": ({"kernel": 1521, "outside": 196, "lost": 11}, 10),
}


@pytest.fixture(scope="module")
def gpt2_forward():
    """(text, module) of the unoptimized GPT-2 full forward pass and of three compilations."""
    return recorded_hlo(GPT2_FORWARD, ("unoptimized", *GPT2_FORWARD_COUNTS))


@pytest.mark.parametrize("variant", list(GPT2_FORWARD_COUNTS))
def test_gpt2_forward_traces_each_softmax_and_each_cublas_epilogue(gpt2_forward, variant):
    ref_text, ref = gpt2_forward["unoptimized"]
    text, module = gpt2_forward[variant]
    lineage = trace_module(ref, module, reference_text=ref_text, optimized_text=text)
    counts, besides_layout = GPT2_FORWARD_COUNTS[variant]
    assert lineage.counts() == counts
    assert_digest(f"trace-gpt2-fwd/{variant}", lineage_digest(lineage))
    lost = lineage.lost_by_opcode()
    assert sum(n for op, n in lost.items() if op not in LAYOUT_ONLY) == besides_layout
    assert not {"dot", "reduce", "exponential", "subtract", "multiply"} & set(lost)
    # 12 layers' softmax: max and sum over the keys, each in a kernel (Triton's softmax fusion
    # under default, loop and reduction fusions without fusion)
    reduces = [t for t in lineage.traces if t.opcode == "reduce" and t.status == "kernel"]
    assert len(reduces) >= 24
    # attention's scale of its scores (`* 0.125`): under default each is a cuBLAS call's alpha
    scores = (8, 12, 1024, 1, 1024)
    scales = [lineage.by_name[i.name] for i in ref.entry.instructions
              if i.opcode == "multiply" and i.shape.dims == scores]  # fmt: skip
    assert len(scales) == 12 and all(t.status == "kernel" for t in scales)
    if variant == "default":
        assert {t.how for t in scales} == {"epilogue"}
        calls = {i.name: i for i in module.entry.instructions if i.opcode == "custom-call"}
        assert all('"alpha_real":0.125' in calls[t.kernel].attributes["backend_config"]
                   for t in scales)  # fmt: skip


@pytest.mark.parametrize("b", ["no-gemm-fusion", "no-fusion"])
def test_gpt2_forward_diff_leaves_no_dot_alone(gpt2_forward, b):
    ref_text, ref = gpt2_forward["unoptimized"]
    (text_a, a), (text_b, other) = gpt2_forward["default"], gpt2_forward[b]
    diff = diff_modules(
        a, other, labels=("default", b), reference=ref, texts=(ref_text, text_a, text_b)
    )
    assert diff.unlinked_dots == ()
    assert sum(g.bytes_delta for g in diff.groups) == diff.modeled_bytes_delta
    assert_digest(f"trace-gpt2-fwd/groups default-{b}", digest(diff.to_dict()))


@pytest.mark.parametrize(("variant", "counts"), [
    # Before a layout-moving bitcast was a transpose, a reduce was numbered without its
    # dimensions of size 1 and a split-K GEMM's sum was followed: default 127 lost (113
    # besides reshapes, 1.63%: 25 each of convert, negate, reduce, transpose), no-gemm-fusion
    # 114 (12 dots among them). Left: the embedding lookups' index arithmetic and broadcasts.
    ("default", {"kernel": 6570, "outside": 341, "lost": 16}),
    ("no-gemm-fusion", {"kernel": 6570, "outside": 341, "lost": 16}),
])  # fmt: skip
def test_gpt2_small_train_follows_transposes_xla_made_bitcasts(variant, counts):
    # GPT-2 small train (batch 1 x 128 tokens): XLA lays each attention output's dot out so
    # that the transpose after it is a bitcast to `{0,1}`, reduces drop the batch's dimension
    # of size 1, and under default the weight gradients' GEMMs are split-K (f32 partial dots
    # and a sum).
    hlo = recorded_hlo(GPT2_SMALL_TRAIN, ("unoptimized", variant))
    (ref_text, ref), (text, module) = hlo["unoptimized"], hlo[variant]
    lineage = trace_module(ref, module, reference_text=ref_text, optimized_text=text)
    assert lineage.counts() == counts
    assert_digest(f"trace-gpt2-small-train/{variant}", lineage_digest(lineage))
    lost = lineage.lost_by_opcode()
    assert not {"dot", "negate", "reduce", "convert"} & set(lost) and lost["transpose"] == 1
    dots = [t for t in lineage.traces if t.opcode == "dot"]
    assert len(dots) == 219 and all(t.kernel in lineage.dot_kernels for t in dots)
    bitcasts = [t for t in lineage.traces
                if t.opcode == "transpose" and t.optimized[:1] and t.optimized[0].startswith("bitcast")]  # fmt: skip
    assert len(bitcasts) == 24
    assert {t.status for t in bitcasts} == {"outside"}


def test_a_bitcast_that_moves_dimensions_is_the_transpose():
    # transpose(dot) then a reshape merging two dimensions; XLA writes the dot as it is and
    # reads it through a bitcast to a column-major layout: the same value, so the tanh that
    # reads it is found by structure.
    ref = """HloModule m

ENTRY %main (a: f32[4,8,16], b: f32[4,16,8]) -> f32[8,32] {
  %a = f32[4,8,16]{2,1,0} parameter(0)
  %b = f32[4,16,8]{2,1,0} parameter(1)
  %d = f32[4,8,8]{2,1,0} dot(%a, %b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  %t = f32[8,4,8]{2,1,0} transpose(%d), dimensions={2,0,1}
  %r = f32[8,32]{1,0} reshape(%t)
  ROOT %h = f32[8,32]{1,0} tanh(%r)
}
"""
    opt = """HloModule m

%gemm (p0: f32[4,8,16], p1: f32[4,16,8]) -> f32[4,8,8] {
  %p0 = f32[4,8,16]{2,1,0} parameter(0)
  %p1 = f32[4,16,8]{2,1,0} parameter(1)
  ROOT %d.1 = f32[4,8,8]{2,1,0} dot(%p0, %p1), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
}

%fused (q: f32[8,32]) -> f32[8,32] {
  %q = f32[8,32]{0,1} parameter(0)
  ROOT %h.1 = f32[8,32]{1,0} tanh(%q)
}

ENTRY %main (a: f32[4,8,16], b: f32[4,16,8]) -> f32[8,32] {
  %a = f32[4,8,16]{2,1,0} parameter(0)
  %b = f32[4,16,8]{2,1,0} parameter(1)
  %gemm_fusion = f32[4,8,8]{2,1,0} fusion(%a, %b), kind=kCustom, calls=%gemm
  %bc = f32[8,32]{0,1} bitcast(%gemm_fusion)
  ROOT %loop_fusion = f32[8,32]{1,0} fusion(%bc), kind=kLoop, calls=%fused
}
"""
    by = trace(ref, opt)
    assert (by["d"].how, by["d"].kernel) == ("structure", "gemm_fusion")
    assert (by["t"].status, by["t"].optimized) == ("outside", ("bc",))
    assert (by["h"].how, by["h"].optimized) == ("structure", ("h.1",))


def test_the_lost_summary_gives_each_opcode_its_share():
    lost = {"reshape": 312, "broadcast": 208, "divide": 1}
    assert lost_summary(lost, 6883, limit=2) == (
        "521 of 6,883 (7.57%; 209 besides reshapes and bitcasts, 3.04%): "
        "312 reshape 4.53%, 208 broadcast 3.02%, ..."
    )
    assert lost_summary(lost, None) == "521 (312 reshape, 208 broadcast, 1 divide)"


def test_the_report_gives_the_lost_shares_of_a_record_with_its_total():
    from xlafuse.report.kernels import savings_section

    record = {"a": "default", "b": "no-fusion", "groups": 3, "time_a_s": 1e-3, "time_b_s": 2e-3,
              "unattributed_a_s": 0.0, "unattributed_b_s": 0.0, "top": [], "gains": [],
              "losses": [], "changed_s": {"faster": 0.0, "slower": 1e-3, "same": 0.0},
              "changed_groups": {"faster": 0, "slower": 1, "same": 2}, "instructions": 400,
              "lost_by_opcode": {"a": {"reshape": 3, "divide": 1}, "b": {}},
              "unlinked_dots": []}  # fmt: skip
    text = "\n".join(savings_section(record))
    assert (
        "Instructions of the program not traced to a kernel of default: 4 of 400 (1.00%; 1 "
        "besides reshapes and bitcasts, 0.25%): 3 reshape 0.75%, 1 divide 0.25%."
    ) in text


def trace(ref_text: str, opt_text: str):
    return trace_module(
        parse_hlo(ref_text), parse_hlo(opt_text), reference_text=ref_text, optimized_text=opt_text
    ).by_name


def test_a_dropped_round_trip_is_the_value_under_it_both_ways():
    # f32 -> bf16 -> f32: XLA keeps the f32 (the first convert has no other reader).
    ref = """HloModule m

ENTRY %main (p: f32[64]) -> f32[64] {
  %p = f32[64]{0} parameter(0)
  %e = f32[64]{0} exponential(%p)
  %down = bf16[64]{0} convert(%e)
  %r = bf16[8,8]{1,0} reshape(%down)
  %up = f32[8,8]{1,0} convert(%r)
  %flat = f32[64]{0} reshape(%up)
  ROOT %t = f32[64]{0} tanh(%flat)
}
"""
    opt = """HloModule m

%fused (a: f32[64]) -> f32[64] {
  %a = f32[64]{0} parameter(0)
  %e.1 = f32[64]{0} exponential(%a)
  ROOT %t.1 = f32[64]{0} tanh(%e.1)
}

ENTRY %main (p: f32[64]) -> f32[64] {
  %p = f32[64]{0} parameter(0)
  ROOT %loop_fusion = f32[64]{0} fusion(%p), kind=kLoop, calls=%fused
}
"""
    by = trace(ref, opt)
    for name in ("down", "r", "up"):
        assert (by[name].kernel, by[name].how, by[name].optimized) == (
            "loop_fusion",
            "view",
            ("e.1",),
        )
    assert (by["t"].how, by["t"].optimized) == ("structure", ("t.1",))


def test_a_cse_merged_duplicate_is_the_kept_one():
    # Two divisions of x by 4 (two lines of the program); XLA keeps one, as x * 0.25, found by
    # its metadata: the other is it.
    ref = """HloModule m

ENTRY %main (x: f32[64]) -> (f32[64], f32[64]) {
  %x = f32[64]{0} parameter(0)
  %four = f32[] constant(4)
  %b = f32[64]{0} broadcast(%four), dimensions={}
  %div.1 = f32[64]{0} divide(%x, %b), metadata={op_name="jit(f)/div" source_file="f.py" source_line=3}
  %div.2 = f32[64]{0} divide(%x, %b), metadata={op_name="jit(f)/div" source_file="f.py" source_line=4}
  %n.1 = f32[64]{0} negate(%div.1)
  %n.2 = f32[64]{0} abs(%div.2)
  ROOT %out = (f32[64]{0}, f32[64]{0}) tuple(%n.1, %n.2)
}
"""
    opt = """HloModule m

%fused (a: f32[64]) -> (f32[64], f32[64]) {
  %a = f32[64]{0} parameter(0)
  %quarter = f32[] constant(0.25)
  %bq = f32[64]{0} broadcast(%quarter), dimensions={}
  %div.1.3 = f32[64]{0} multiply(%a, %bq), metadata={op_name="jit(f)/div" source_file="f.py" source_line=3}
  %n.1.1 = f32[64]{0} negate(%div.1.3)
  %n.2.1 = f32[64]{0} abs(%div.1.3)
  ROOT %t = (f32[64]{0}, f32[64]{0}) tuple(%n.1.1, %n.2.1)
}

ENTRY %main (x: f32[64]) -> (f32[64], f32[64]) {
  %x = f32[64]{0} parameter(0)
  ROOT %loop_fusion = (f32[64]{0}, f32[64]{0}) fusion(%x), kind=kLoop, calls=%fused
}
"""
    by = trace(ref, opt)
    assert (by["div.1"].how, by["div.1"].optimized) == ("metadata", ("div.1.3",))
    assert (by["div.2"].how, by["div.2"].optimized) == ("duplicate", ("div.1.3",))
    assert by["n.2"].optimized == ("n.2.1",)
    assert (by["b"].kernel, by["b"].how) == ("loop_fusion", "folded")  # 4 became 0.25


def test_a_transpose_folded_into_a_reduce_and_merged_by_cse():
    ref = """HloModule m

%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(%a, %b)
}

ENTRY %main (x: f32[16,32]) -> (f32[16], f32[16]) {
  %x = f32[16,32]{1,0} parameter(0)
  %e = f32[16,32]{1,0} exponential(%x)
  %inf = f32[] constant(-inf)
  %r.1 = f32[16]{0} reduce(%e, %inf), dimensions={1}, to_apply=%max
  %t = f32[32,16]{0,1} transpose(%e), dimensions={1,0}
  %r.2 = f32[16]{0} reduce(%t, %inf), dimensions={0}, to_apply=%max
  ROOT %out = (f32[16]{0}, f32[16]{0}) tuple(%r.1, %r.2)
}
"""
    opt = """HloModule m

%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(%a, %b)
}

%fused (p: f32[16,32]) -> f32[16] {
  %p = f32[16,32]{1,0} parameter(0)
  %e.3 = f32[16,32]{1,0} exponential(%p)
  %inf = f32[] constant(-inf)
  ROOT %reduce.9 = f32[16]{0} reduce(%e.3, %inf), dimensions={1}, to_apply=%max
}

ENTRY %main (x: f32[16,32]) -> (f32[16], f32[16]) {
  %x = f32[16,32]{1,0} parameter(0)
  %input_reduce_fusion = f32[16]{0} fusion(%x), kind=kInput, calls=%fused
  ROOT %out = (f32[16]{0}, f32[16]{0}) tuple(%input_reduce_fusion, %input_reduce_fusion)
}
"""
    by = trace(ref, opt)
    assert [by[n].optimized for n in ("r.1", "r.2")] == [("reduce.9",), ("reduce.9",)]
    assert (by["t"].kernel, by["t"].how) == ("input_reduce_fusion", "folded")


def test_a_division_of_a_division_is_folded_into_the_outer_one():
    # Adam's bias correction: (m / c1) / d -> m / (c1 * d); m / c1 is computed nowhere.
    ref = """HloModule m

ENTRY %main (m: f32[64], c: f32[], d: f32[64]) -> f32[64] {
  %m = f32[64]{0} parameter(0)
  %c = f32[] parameter(1)
  %d = f32[64]{0} parameter(2)
  %e = f32[64]{0} exponential(%m)
  %bc = f32[64]{0} broadcast(%c), dimensions={}
  %div.1 = f32[64]{0} divide(%e, %bc)
  %div.2 = f32[64]{0} divide(%div.1, %d)
  ROOT %n = f32[64]{0} negate(%div.2)
}
"""
    opt = """HloModule m

%fused (a: f32[64], fc: f32[], fd: f32[64]) -> f32[64] {
  %a = f32[64]{0} parameter(0)
  %fc = f32[] parameter(1)
  %fd = f32[64]{0} parameter(2)
  %e.1 = f32[64]{0} exponential(%a)
  %bc.1 = f32[64]{0} broadcast(%fc), dimensions={}
  %multiply.4 = f32[64]{0} multiply(%bc.1, %fd)
  %div.2.1 = f32[64]{0} divide(%e.1, %multiply.4)
  ROOT %n.1 = f32[64]{0} negate(%div.2.1)
}

ENTRY %main (m: f32[64], c: f32[], d: f32[64]) -> f32[64] {
  %m = f32[64]{0} parameter(0)
  %c = f32[] parameter(1)
  %d = f32[64]{0} parameter(2)
  ROOT %loop_fusion = f32[64]{0} fusion(%m, %c, %d), kind=kLoop, calls=%fused
}
"""
    by = trace(ref, opt)
    assert (by["div.2"].how, by["div.2"].optimized) == ("neighbours", ("div.2.1",))
    assert (by["div.1"].status, by["div.1"].kernel, by["div.1"].how, by["div.1"].optimized) == (
        "kernel",
        "loop_fusion",
        "folded",
        (),
    )
    assert by["n"].optimized == ("n.1",)


def test_a_fold_into_readers_of_two_kernels_stays_lost():
    # x / c read by two divisions XLA rewrote in two kernels (x / (c * y1), x / (c * y2)).
    ref = """HloModule m

ENTRY %main (x: f32[64], c: f32[], y1: f32[64], y2: f32[64]) -> (f32[64], f32[64]) {
  %x = f32[64]{0} parameter(0)
  %c = f32[] parameter(1)
  %y1 = f32[64]{0} parameter(2)
  %y2 = f32[64]{0} parameter(3)
  %bc = f32[64]{0} broadcast(%c), dimensions={}
  %d = f32[64]{0} divide(%x, %bc), metadata={op_name="jit(f)/div" source_file="f.py" source_line=2}
  %e.1 = f32[64]{0} divide(%d, %y1), metadata={op_name="jit(f)/div" source_file="f.py" source_line=3}
  %e.2 = f32[64]{0} divide(%d, %y2), metadata={op_name="jit(f)/div" source_file="f.py" source_line=4}
  ROOT %out = (f32[64]{0}, f32[64]{0}) tuple(%e.1, %e.2)
}
"""
    fused = """%f{n} (x{n}: f32[64], c{n}: f32[], y{n}: f32[64]) -> f32[64] {{
  %x{n} = f32[64]{{0}} parameter(0)
  %c{n} = f32[] parameter(1)
  %y{n} = f32[64]{{0}} parameter(2)
  %bc{n} = f32[64]{{0}} broadcast(%c{n}), dimensions={{}}
  %m{n} = f32[64]{{0}} multiply(%bc{n}, %y{n})
  ROOT %q{n} = f32[64]{{0}} divide(%x{n}, %m{n}), metadata={{op_name="jit(f)/div" source_file="f.py" source_line={line}}}
}}

"""
    opt = (
        "HloModule m\n\n"
        + fused.format(n=1, line=3)
        + fused.format(n=2, line=4)
        + """ENTRY %main (x: f32[64], c: f32[], y1: f32[64], y2: f32[64]) -> (f32[64], f32[64]) {
  %x = f32[64]{0} parameter(0)
  %c = f32[] parameter(1)
  %y1 = f32[64]{0} parameter(2)
  %y2 = f32[64]{0} parameter(3)
  %k1 = f32[64]{0} fusion(%x, %c, %y1), kind=kLoop, calls=%f1
  %k2 = f32[64]{0} fusion(%x, %c, %y2), kind=kLoop, calls=%f2
  ROOT %out = (f32[64]{0}, f32[64]{0}) tuple(%k1, %k2)
}
"""
    )
    by = trace(ref, opt)
    assert [(by[n].kernel, by[n].how) for n in ("e.1", "e.2")] == [
        ("k1", "metadata"),
        ("k2", "metadata"),
    ]
    assert by["d"].status == "lost"  # folded into two kernels: which one is not said
    assert by["bc"].holders == ("k1", "k2")  # broadcast again in each kernel


def test_an_op_that_gives_its_operand_back_is_a_view_and_its_constant_dropped():
    # max(r, -inf) and jnp.tril's select(mask, true, false) over a broadcast iota.
    ref = """HloModule m

%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(%a, %b)
}

ENTRY %main (x: f32[16,16]) -> f32[16,16] {
  %x = f32[16,16]{1,0} parameter(0)
  %inf = f32[] constant(-inf)
  %r = f32[16]{0} reduce(%x, %inf), dimensions={1}, to_apply=%max
  %ninf = f32[16]{0} broadcast(%inf), dimensions={}
  %max.1 = f32[16]{0} maximum(%r, %ninf)
  %bm = f32[16,16]{1,0} broadcast(%max.1), dimensions={0}
  %iota.1 = s32[16]{0} iota(), iota_dimension=0
  %rows = s32[16,16]{1,0} broadcast(%iota.1), dimensions={0}
  %iota.2 = s32[16]{0} iota(), iota_dimension=0
  %cols = s32[16,16]{1,0} broadcast(%iota.2), dimensions={1}
  %ge = pred[16,16]{1,0} compare(%rows, %cols), direction=GE
  %true = pred[] constant(true)
  %ones = pred[16,16]{1,0} broadcast(%true), dimensions={}
  %false = pred[] constant(false)
  %zeros = pred[16,16]{1,0} broadcast(%false), dimensions={}
  %tril = pred[16,16]{1,0} select(%ge, %ones, %zeros)
  %low = f32[] constant(-1e+30)
  %lows = f32[16,16]{1,0} broadcast(%low), dimensions={}
  %sub = f32[16,16]{1,0} subtract(%x, %bm)
  ROOT %masked = f32[16,16]{1,0} select(%tril, %sub, %lows)
}
"""
    opt = """HloModule m

%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(%a, %b)
}

%fused_reduce (rp: f32[16,16]) -> f32[16] {
  %rp = f32[16,16]{1,0} parameter(0)
  %inf = f32[] constant(-inf)
  ROOT %reduce.3 = f32[16]{0} reduce(%rp, %inf), dimensions={1}, to_apply=%max
}

%fused (fx: f32[16,16], fr: f32[16]) -> f32[16,16] {
  %fx = f32[16,16]{1,0} parameter(0)
  %fr = f32[16]{0} parameter(1)
  %iota.7 = s32[16,16]{1,0} iota(), iota_dimension=0
  %iota.8 = s32[16,16]{1,0} iota(), iota_dimension=1
  %compare.2 = pred[16,16]{1,0} compare(%iota.7, %iota.8), direction=GE
  %bcast = f32[16,16]{1,0} broadcast(%fr), dimensions={0}
  %subtract.5 = f32[16,16]{1,0} subtract(%fx, %bcast)
  %low = f32[] constant(-1e+30)
  %lows = f32[16,16]{1,0} broadcast(%low), dimensions={}
  ROOT %select.9 = f32[16,16]{1,0} select(%compare.2, %subtract.5, %lows)
}

ENTRY %main (x: f32[16,16]) -> f32[16,16] {
  %x = f32[16,16]{1,0} parameter(0)
  %input_reduce_fusion = f32[16]{0} fusion(%x), kind=kInput, calls=%fused_reduce
  ROOT %loop_fusion = f32[16,16]{1,0} fusion(%x, %input_reduce_fusion), kind=kLoop, calls=%fused
}
"""
    by = trace(ref, opt)
    assert (by["max.1"].how, by["max.1"].optimized) == ("view", ("reduce.3",))
    assert (by["ninf"].status, by["ninf"].how) == ("outside", "dropped")
    assert (by["tril"].how, by["tril"].optimized) == ("view", ("compare.2",))
    assert (by["rows"].how, by["rows"].optimized) == ("structure", ("iota.7",))
    assert (by["masked"].how, by["masked"].optimized) == ("structure", ("select.9",))
    assert {by[n].status for n in ("ones", "zeros")} == {"outside"}


def test_each_call_of_a_computation_is_numbered_for_its_own_operands():
    # `_where` called for two layers: what reads each call is found by structure; the body's
    # own select is its first caller's (numbered once), and its op_name is the callers'.
    ref = """HloModule m

%_where (p: pred[64], x: f32[64], c: f32[]) -> f32[64] {
  %p = pred[64]{0} parameter(0)
  %x = f32[64]{0} parameter(1)
  %c = f32[] parameter(2)
  %bc = f32[64]{0} broadcast(%c), dimensions={}
  ROOT %select_n.1 = f32[64]{0} select(%p, %x, %bc), metadata={op_name="select_n"}
}

ENTRY %main (m: pred[64], a: f32[64], b: f32[64]) -> (f32[64], f32[64]) {
  %m = pred[64]{0} parameter(0)
  %a = f32[64]{0} parameter(1)
  %b = f32[64]{0} parameter(2)
  %low = f32[] constant(-1e+30)
  %ea = f32[64]{0} exponential(%a)
  %eb = f32[64]{0} exponential(%b)
  %w.1 = f32[64]{0} call(%m, %ea, %low), to_apply=%_where, metadata={op_name="jit(f)/jit(_where)"}
  %w.2 = f32[64]{0} call(%m, %eb, %low), to_apply=%_where, metadata={op_name="jit(f)/jit(_where)"}
  %t.1 = f32[64]{0} tanh(%w.1)
  %t.2 = f32[64]{0} tanh(%w.2)
  ROOT %out = (f32[64]{0}, f32[64]{0}) tuple(%t.1, %t.2)
}
"""
    fused = """%{name} (p{n}: pred[64], x{n}: f32[64]) -> f32[64] {{
  %p{n} = pred[64]{{0}} parameter(0)
  %x{n} = f32[64]{{0}} parameter(1)
  %e{n} = f32[64]{{0}} exponential(%x{n})
  %low{n} = f32[] constant(-1e+30)
  %bc{n} = f32[64]{{0}} broadcast(%low{n}), dimensions={{}}
  %select_n.{n} = f32[64]{{0}} select(%p{n}, %e{n}, %bc{n}), metadata={{op_name="jit(f)/jit(_where)/select_n"}}
  ROOT %tanh.{n} = f32[64]{{0}} tanh(%select_n.{n})
}}
"""
    opt = (
        "HloModule m\n\n"
        + fused.format(name="f1", n=7)
        + "\n"
        + fused.format(name="f2", n=8)
        + """
ENTRY %main (m: pred[64], a: f32[64], b: f32[64]) -> (f32[64], f32[64]) {
  %m = pred[64]{0} parameter(0)
  %a = f32[64]{0} parameter(1)
  %b = f32[64]{0} parameter(2)
  %k1 = f32[64]{0} fusion(%m, %a), kind=kLoop, calls=%f1
  %k2 = f32[64]{0} fusion(%m, %b), kind=kLoop, calls=%f2
  ROOT %out = (f32[64]{0}, f32[64]{0}) tuple(%k1, %k2)
}
"""
    )
    lineage = trace_module(parse_hlo(ref), parse_hlo(opt), reference_text=ref, optimized_text=opt)
    by = lineage.by_name
    assert [(by[n].kernel, by[n].how) for n in ("t.1", "t.2")] == [
        ("k1", "structure"),
        ("k2", "structure"),
    ]
    assert lineage.counts()["lost"] == 0


CUBLAS = (
    'custom_call_target="__cublas$lt$matmul", backend_config={{"gemm_backend_config":'
    '{{"beta":{beta},"epilogue":"{epilogue}","dot_dimension_numbers":{{}}}}}}'
)


def test_a_cublas_epilogue_holds_the_bias_and_residual_adds():
    ref = """HloModule m

ENTRY %main (x: bf16[64,32], w: bf16[32,16], bias: bf16[16], res: bf16[64,16]) -> bf16[64,16] {
  %x = bf16[64,32]{1,0} parameter(0)
  %w = bf16[32,16]{1,0} parameter(1)
  %bias = bf16[16]{0} parameter(2)
  %res = bf16[64,16]{1,0} parameter(3)
  %dot_general.1 = bf16[64,16]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(f)/dot_general"}
  %add.1 = bf16[64,16]{1,0} broadcast(%bias), dimensions={1}
  %add.2 = bf16[64,16]{1,0} add(%dot_general.1, %add.1)
  %add.3 = bf16[64,16]{1,0} add(%add.2, %res)
  ROOT %t = bf16[64,16]{1,0} tanh(%add.3)
}
"""
    opt = """HloModule m

%fused (p: bf16[64,16]) -> bf16[64,16] {
  %p = bf16[64,16]{1,0} parameter(0)
  ROOT %tanh.4 = bf16[64,16]{1,0} tanh(%p)
}

ENTRY %main (x: bf16[64,32], w: bf16[32,16], bias: bf16[16], res: bf16[64,16]) -> bf16[64,16] {
  %x = bf16[64,32]{1,0} parameter(0)
  %w = bf16[32,16]{1,0} parameter(1)
  %bias = bf16[16]{0} parameter(2)
  %res = bf16[64,16]{1,0} parameter(3)
  %cublas-lt-matmul.1 = (bf16[64,16]{1,0}, s8[1024]{0}) custom-call(%x, %w, %res, %bias), GEMM, metadata={op_name="jit(f)/dot_general"}
  %gte = bf16[64,16]{1,0} get-tuple-element(%cublas-lt-matmul.1), index=0
  ROOT %loop_fusion = bf16[64,16]{1,0} fusion(%gte), kind=kLoop, calls=%fused
}
""".replace("GEMM", CUBLAS.format(beta=1, epilogue="BIAS"))
    by = trace(ref, opt)
    assert by["dot_general.1"].kernel == "cublas-lt-matmul.1"
    assert [(by[n].kernel, by[n].how) for n in ("add.2", "add.3", "add.1")] == [
        ("cublas-lt-matmul.1", "epilogue"),
        ("cublas-lt-matmul.1", "epilogue"),
        ("cublas-lt-matmul.1", "folded"),  # the broadcast of the bias vector
    ]
    assert (by["t"].kernel, by["t"].how) == ("loop_fusion", "structure")


SCALED = (
    'custom_call_target="__cublas$lt$matmul", backend_config={{"gemm_backend_config":'
    '{{"alpha_imag":0,"alpha_real":{alpha},"beta":0,"epilogue":"DEFAULT",'
    '"dot_dimension_numbers":{{}}}}}}'
)


@pytest.mark.parametrize(
    ("alpha", "scale"), [("0.125", "multiply"), ("0.125", "divide"), ("1", "multiply")]
)
def test_a_scale_folded_into_cublas_alpha_is_the_call(alpha, scale):
    # Attention's `scores * 0.125` that XLA's GEMM rewriter folds into the cuBLAS call's
    # alpha. Its reader is `_where`, called for two layers: a call's value is identified by
    # structure only, so with the multiply lost everything after it was lost too.
    ref = """HloModule m

%_where (p: pred[16,16], x: f32[16,16], c: f32[]) -> f32[16,16] {
  %p = pred[16,16]{1,0} parameter(0)
  %x = f32[16,16]{1,0} parameter(1)
  %c = f32[] parameter(2)
  %bc = f32[16,16]{1,0} broadcast(%c), dimensions={}
  ROOT %select_n.1 = f32[16,16]{1,0} select(%p, %x, %bc), metadata={op_name="select_n"}
}

ENTRY %main (m: pred[16,16], q1: f32[16,8], q2: f32[16,8], k: f32[8,16]) -> (f32[16,16], f32[16,16]) {
  %m = pred[16,16]{1,0} parameter(0)
  %q1 = f32[16,8]{1,0} parameter(1)
  %q2 = f32[16,8]{1,0} parameter(2)
  %k = f32[8,16]{1,0} parameter(3)
  %scale = f32[] constant(SCALE)
  %bs = f32[16,16]{1,0} broadcast(%scale), dimensions={}
  %low = f32[] constant(-1e+30)
  %dot_general.1 = f32[16,16]{1,0} dot(%q1, %k), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(f)/dot_general"}
  %mul.1 = f32[16,16]{1,0} OP(%dot_general.1, %bs), metadata={op_name="jit(f)/mul"}
  %dot_general.2 = f32[16,16]{1,0} dot(%q2, %k), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(f)/dot_general"}
  %mul.2 = f32[16,16]{1,0} OP(%dot_general.2, %bs), metadata={op_name="jit(f)/mul"}
  %w.1 = f32[16,16]{1,0} call(%m, %mul.1, %low), to_apply=%_where, metadata={op_name="jit(f)/jit(_where)"}
  %w.2 = f32[16,16]{1,0} call(%m, %mul.2, %low), to_apply=%_where, metadata={op_name="jit(f)/jit(_where)"}
  %exp.1 = f32[16,16]{1,0} exponential(%w.1), metadata={op_name="jit(f)/exp"}
  %exp.2 = f32[16,16]{1,0} exponential(%w.2), metadata={op_name="jit(f)/exp"}
  ROOT %out = (f32[16,16]{1,0}, f32[16,16]{1,0}) tuple(%exp.1, %exp.2)
}
""".replace("OP", scale).replace("SCALE", "0.125" if scale == "multiply" else "8")
    fused = """%{name} (p{n}: pred[16,16], x{n}: f32[16,16]) -> f32[16,16] {{
  %p{n} = pred[16,16]{{1,0}} parameter(0)
  %x{n} = f32[16,16]{{1,0}} parameter(1)
  %low{n} = f32[] constant(-1e+30)
  %bc{n} = f32[16,16]{{1,0}} broadcast(%low{n}), dimensions={{}}
  %select_n.{n} = f32[16,16]{{1,0}} select(%p{n}, %x{n}, %bc{n}), metadata={{op_name="jit(f)/jit(_where)/select_n"}}
  ROOT %exp.{n} = f32[16,16]{{1,0}} exponential(%select_n.{n}), metadata={{op_name="jit(f)/exp"}}
}}
"""
    opt = (
        "HloModule m\n\n"
        + fused.format(name="f1", n=7)
        + "\n"
        + fused.format(name="f2", n=8)
        + """
ENTRY %main (m: pred[16,16], q1: f32[16,8], q2: f32[16,8], k: f32[8,16]) -> (f32[16,16], f32[16,16]) {
  %m = pred[16,16]{1,0} parameter(0)
  %q1 = f32[16,8]{1,0} parameter(1)
  %q2 = f32[16,8]{1,0} parameter(2)
  %k = f32[8,16]{1,0} parameter(3)
  %custom-call.1 = (f32[16,16]{1,0}, s8[1024]{0}) custom-call(%q1, %k), GEMM, metadata={op_name="jit(f)/dot_general"}
  %gte.1 = f32[16,16]{1,0} get-tuple-element(%custom-call.1), index=0
  %custom-call.2 = (f32[16,16]{1,0}, s8[1024]{0}) custom-call(%q2, %k), GEMM, metadata={op_name="jit(f)/dot_general"}
  %gte.2 = f32[16,16]{1,0} get-tuple-element(%custom-call.2), index=0
  %k1 = f32[16,16]{1,0} fusion(%m, %gte.1), kind=kLoop, calls=%f1
  %k2 = f32[16,16]{1,0} fusion(%m, %gte.2), kind=kLoop, calls=%f2
  ROOT %out = (f32[16,16]{1,0}, f32[16,16]{1,0}) tuple(%k1, %k2)
}
""".replace("GEMM", SCALED.format(alpha=alpha))
    )
    by = trace(ref, opt)
    assert [by[n].kernel for n in ("dot_general.1", "dot_general.2")] == [
        "custom-call.1",
        "custom-call.2",
    ]
    if alpha == "1":  # the program does not scale: no multiply is found in the call
        assert [by[n].status for n in ("mul.1", "mul.2")] == ["lost", "lost"]
        return
    assert [(by[n].kernel, by[n].how) for n in ("mul.1", "mul.2")] == [
        ("custom-call.1", "epilogue"),
        ("custom-call.2", "epilogue"),
    ]
    assert [(by[n].kernel, by[n].how) for n in ("exp.1", "exp.2")] == [
        ("k1", "structure"),
        ("k2", "structure"),
    ]


def test_a_transposed_gemm_result_is_the_gemm_and_a_convert_moved_before_a_transpose():
    # cuBLAS writes transpose(dot(x, w)) itself (dot(w', x')), with the transpose's op_name;
    # a Triton GEMM fusion converts a dot's f32 result before the transpose the program makes.
    ref = """HloModule m

ENTRY %main (x: bf16[64,32], w: bf16[32,16], y: f32[8,4,2]) -> (bf16[16,64], bf16[4,8,2]) {
  %x = bf16[64,32]{1,0} parameter(0)
  %w = bf16[32,16]{1,0} parameter(1)
  %dot_general.1 = bf16[64,16]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(f)/dot_general"}
  %transpose.1 = bf16[16,64]{0,1} transpose(%dot_general.1), dimensions={1,0}, metadata={op_name="jit(f)/transpose"}
  %square.1 = bf16[16,64]{1,0} multiply(%transpose.1, %transpose.1)
  %y = f32[8,4,2]{2,1,0} parameter(2)
  %e = f32[8,4,2]{2,1,0} exponential(%y)
  %transpose.2 = f32[4,8,2]{2,1,0} transpose(%e), dimensions={1,0,2}
  %convert.2 = bf16[4,8,2]{2,1,0} convert(%transpose.2), metadata={op_name="jit(f)/convert_element_type"}
  ROOT %out = (bf16[16,64]{1,0}, bf16[4,8,2]{2,1,0}) tuple(%square.1, %convert.2)
}
"""
    opt = """HloModule m

%fused (p: bf16[16,64]) -> bf16[16,64] {
  %p = bf16[16,64]{1,0} parameter(0)
  ROOT %multiply.77 = bf16[16,64]{1,0} multiply(%p, %p)
}

%fused_t (fy: f32[8,4,2]) -> bf16[4,8,2] {
  %fy = f32[8,4,2]{2,1,0} parameter(0)
  %e.1 = f32[8,4,2]{2,1,0} exponential(%fy)
  %convert.9 = bf16[8,4,2]{2,1,0} convert(%e.1), metadata={op_name="jit(f)/convert_element_type"}
  ROOT %transpose.9 = bf16[4,8,2]{2,1,0} transpose(%convert.9), dimensions={1,0,2}
}

ENTRY %main (x: bf16[64,32], w: bf16[32,16], y: f32[8,4,2]) -> (bf16[16,64], bf16[4,8,2]) {
  %x = bf16[64,32]{1,0} parameter(0)
  %w = bf16[32,16]{1,0} parameter(1)
  %y = f32[8,4,2]{2,1,0} parameter(2)
  %custom-call.1 = (bf16[16,64]{1,0}, s8[1024]{0}) custom-call(%w, %x), GEMM, metadata={op_name="jit(f)/transpose"}
  %gte = bf16[16,64]{1,0} get-tuple-element(%custom-call.1), index=0
  %loop_multiply_fusion = bf16[16,64]{1,0} fusion(%gte), kind=kLoop, calls=%fused
  %input_transpose_fusion = bf16[4,8,2]{2,1,0} fusion(%y), kind=kInput, calls=%fused_t
  ROOT %out = (bf16[16,64]{1,0}, bf16[4,8,2]{2,1,0}) tuple(%loop_multiply_fusion, %input_transpose_fusion)
}
""".replace("GEMM", CUBLAS.format(beta=0, epilogue="DEFAULT"))
    by = trace(ref, opt)
    assert [(by[n].kernel, by[n].how) for n in ("dot_general.1", "transpose.1")] == [
        ("custom-call.1", "order"),
        ("custom-call.1", "epilogue"),
    ]
    # The call is numbered as what it writes, the transpose: what reads it follows by structure.
    assert (by["square.1"].optimized, by["square.1"].how) == (("multiply.77",), "structure")
    # the convert of a transposed value is the transpose of the convert: the same op, laid out
    # transposed (both instructions compute it)
    assert (by["convert.2"].optimized, by["convert.2"].how) == (
        ("convert.9", "transpose.9"),
        "structure",
    )
    assert (by["transpose.2"].kernel, by["transpose.2"].how) == ("input_transpose_fusion", "folded")


def test_a_reduce_over_dimensions_of_size_one_is_a_view():
    ref = """HloModule m

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (x: f32[8,1,16]) -> f32[128] {
  %x = f32[8,1,16]{2,1,0} parameter(0)
  %e = f32[8,1,16]{2,1,0} exponential(%x)
  %zero = f32[] constant(0)
  %r = f32[8,16]{1,0} reduce(%e, %zero), dimensions={1}, to_apply=%add
  %flat = f32[128]{0} reshape(%r)
  ROOT %t = f32[128]{0} tanh(%flat)
}
"""
    opt = """HloModule m

%fused (p: f32[128]) -> f32[128] {
  %p = f32[128]{0} parameter(0)
  %e.1 = f32[128]{0} exponential(%p)
  ROOT %t.1 = f32[128]{0} tanh(%e.1)
}

ENTRY %main (x: f32[8,1,16]) -> f32[128] {
  %x = f32[8,1,16]{2,1,0} parameter(0)
  %bc = f32[128]{0} bitcast(%x)
  ROOT %loop_fusion = f32[128]{0} fusion(%bc), kind=kLoop, calls=%fused
}
"""
    by = trace(ref, opt)
    assert (by["r"].how, by["r"].optimized) == ("view", ("e.1",))
    assert (by["t"].how, by["t"].optimized) == ("structure", ("t.1",))


def test_a_reduce_of_a_value_with_a_dimension_of_size_one_is_the_reduce_without_it():
    # A vmapped softmax reduces f32[1,8,16] over dimension 2; XLA drops the vmap's dimension of
    # size 1 and reduces f32[8,16] over dimension 1: the same reduce, found by structure, and
    # so is what reads it.
    ref = """HloModule m

%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(%a, %b)
}

ENTRY %main (x: f32[1,8,16]) -> f32[1,8] {
  %x = f32[1,8,16]{2,1,0} parameter(0)
  %e = f32[1,8,16]{2,1,0} exponential(%x)
  %low = f32[] constant(-inf)
  %r = f32[1,8]{1,0} reduce(%e, %low), dimensions={2}, to_apply=%max
  ROOT %t = f32[1,8]{1,0} tanh(%r)
}
"""
    opt = """HloModule m

%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(%a, %b)
}

%fused (p: f32[8,16]) -> f32[8] {
  %p = f32[8,16]{1,0} parameter(0)
  %e.1 = f32[8,16]{1,0} exponential(%p)
  %c = f32[] constant(-inf)
  %reduce.3 = f32[8]{0} reduce(%e.1, %c), dimensions={1}, to_apply=%max
  ROOT %tanh.4 = f32[8]{0} tanh(%reduce.3)
}

ENTRY %main (x: f32[1,8,16]) -> f32[1,8] {
  %x = f32[1,8,16]{2,1,0} parameter(0)
  %bc = f32[8,16]{1,0} bitcast(%x)
  %input_fusion = f32[8]{0} fusion(%bc), kind=kInput, calls=%fused
  ROOT %out = f32[1,8]{1,0} bitcast(%input_fusion)
}
"""
    by = trace(ref, opt)
    assert (by["r"].how, by["r"].optimized) == ("structure", ("reduce.3",))
    assert (by["t"].how, by["t"].optimized) == ("structure", ("tanh.4",))


def test_a_split_k_sum_is_the_dot_in_f32_and_rounded_back_the_dot():
    # XLA splits a long contraction (K = 4096) into 4 partial dots in f32 and a reduce that
    # carries the dot's op_name: the f32 sum is the program's `convert(dot)` to f32, and the
    # sum rounded to bf16 is the dot itself, so what reads either is found by structure.
    ref = """HloModule m

ENTRY %main (a: bf16[8,4096], b: bf16[4096,16]) -> (f32[8,16], bf16[8,16]) {
  %a = bf16[8,4096]{1,0} parameter(0)
  %b = bf16[4096,16]{1,0} parameter(1)
  %d = bf16[8,16]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(f)/dot_general"}
  %c = f32[8,16]{1,0} convert(%d), metadata={op_name="jit(f)/convert_element_type"}
  %t = f32[8,16]{1,0} tanh(%c), metadata={op_name="jit(f)/tanh"}
  %n = bf16[8,16]{1,0} negate(%d), metadata={op_name="jit(f)/neg"}
  ROOT %r = (f32[8,16]{1,0}, bf16[8,16]{1,0}) tuple(%t, %n)
}
"""
    opt = """HloModule m

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

%gemm (p0: bf16[8,4,1024], p1: bf16[4,1024,16]) -> f32[4,8,16] {
  %p0 = bf16[8,4,1024]{2,1,0} parameter(0)
  %p1 = bf16[4,1024,16]{2,1,0} parameter(1)
  ROOT %dot.1 = f32[4,8,16]{2,1,0} dot(%p0, %p1), lhs_batch_dims={1}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}, metadata={op_name="jit(f)/dot_general"}
}

%sum (q: f32[4,8,16]) -> f32[8,16] {
  %q = f32[4,8,16]{2,1,0} parameter(0)
  %zero = f32[] constant(0)
  %reduce.2 = f32[8,16]{1,0} reduce(%q, %zero), dimensions={0}, to_apply=%add, metadata={op_name="jit(f)/dot_general"}
  ROOT %tanh.3 = f32[8,16]{1,0} tanh(%reduce.2), metadata={op_name="jit(f)/tanh"}
}

%neg (q.1: f32[4,8,16]) -> bf16[8,16] {
  %q.1 = f32[4,8,16]{2,1,0} parameter(0)
  %zero.1 = f32[] constant(0)
  %reduce.4 = f32[8,16]{1,0} reduce(%q.1, %zero.1), dimensions={0}, to_apply=%add, metadata={op_name="jit(f)/dot_general"}
  %convert.5 = bf16[8,16]{1,0} convert(%reduce.4), metadata={op_name="jit(f)/dot_general"}
  ROOT %negate.6 = bf16[8,16]{1,0} negate(%convert.5), metadata={op_name="jit(f)/neg"}
}

ENTRY %main (a: bf16[8,4096], b: bf16[4096,16]) -> (f32[8,16], bf16[8,16]) {
  %a = bf16[8,4096]{1,0} parameter(0)
  %b = bf16[4096,16]{1,0} parameter(1)
  %bitcast.a = bf16[8,4,1024]{2,1,0} bitcast(%a)
  %bitcast.b = bf16[4,1024,16]{2,1,0} bitcast(%b)
  %gemm_fusion = f32[4,8,16]{2,1,0} fusion(%bitcast.a, %bitcast.b), kind=kCustom, calls=%gemm
  %loop_reduce_fusion = f32[8,16]{1,0} fusion(%gemm_fusion), kind=kLoop, calls=%sum
  %loop_reduce_fusion.1 = bf16[8,16]{1,0} fusion(%gemm_fusion), kind=kLoop, calls=%neg
  ROOT %r = (f32[8,16]{1,0}, bf16[8,16]{1,0}) tuple(%loop_reduce_fusion, %loop_reduce_fusion.1)
}
"""
    by = trace(ref, opt)
    assert (by["d"].status, by["d"].kernel) == ("kernel", "gemm_fusion")
    # both kernels sum the partial products again: each holds the f32 value
    assert (by["c"].how, by["c"].optimized) == ("structure", ("reduce.2", "reduce.4"))
    assert by["c"].holders == ("loop_reduce_fusion", "loop_reduce_fusion.1")
    assert (by["t"].how, by["t"].optimized) == ("structure", ("tanh.3",))
    assert (by["n"].how, by["n"].optimized) == ("structure", ("negate.6",))


def test_a_sum_of_a_negation_is_the_negation_of_the_sum_xla_makes():
    # A layer norm's gradient sums `-x`; XLA's simplifier negates the sum instead (GPT-2 small
    # train on the CPU: 25 negates and 25 sums lost before this rule, none after)
    ref = """HloModule m

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (x: f32[8,64]) -> f32[8] {
  %x = f32[8,64]{1,0} parameter(0)
  %e = f32[8,64]{1,0} exponential(%x)
  %neg.1 = f32[8,64]{1,0} negate(%e), metadata={op_name="jit(f)/neg"}
  %zero = f32[] constant(0)
  %reduce_sum.1 = f32[8]{0} reduce(%neg.1, %zero), dimensions={1}, to_apply=%add, metadata={op_name="jit(f)/reduce_sum"}
  ROOT %t = f32[8]{0} tanh(%reduce_sum.1)
}
"""
    opt = """HloModule m

%add.1 (a.1: f32[], b.1: f32[]) -> f32[] {
  %a.1 = f32[] parameter(0)
  %b.1 = f32[] parameter(1)
  ROOT %s.1 = f32[] add(%a.1, %b.1)
}

%fused_reduce (p: f32[8,64]) -> f32[8] {
  %p = f32[8,64]{1,0} parameter(0)
  %e.1 = f32[8,64]{1,0} exponential(%p)
  %zero.1 = f32[] constant(0)
  ROOT %reduce.7 = f32[8]{0} reduce(%e.1, %zero.1), dimensions={1}, to_apply=%add.1
}

%fused_tanh (q: f32[8]) -> f32[8] {
  %q = f32[8]{0} parameter(0)
  %negate.3 = f32[8]{0} negate(%q)
  ROOT %t.1 = f32[8]{0} tanh(%negate.3)
}

ENTRY %main (x: f32[8,64]) -> f32[8] {
  %x = f32[8,64]{1,0} parameter(0)
  %input_reduce_fusion = f32[8]{0} fusion(%x), kind=kInput, calls=%fused_reduce
  ROOT %loop_tanh_fusion = f32[8]{0} fusion(%input_reduce_fusion), kind=kLoop, calls=%fused_tanh
}
"""
    by = trace(ref, opt)
    assert [(by[n].kernel, by[n].how) for n in ("reduce_sum.1", "t")] == [
        ("loop_tanh_fusion", "structure"),
        ("loop_tanh_fusion", "structure"),
    ]
    # no kernel computes `-e`: it is where its one reader is, folded there
    assert (by["neg.1"].kernel, by["neg.1"].how) == ("loop_tanh_fusion", "folded")
    assert (by["e"].kernel, by["e"].how) == ("input_reduce_fusion", "structure")


def test_a_subtraction_of_a_constant_is_the_addition_xla_makes_of_it():
    # The 1 GiB chain's `x - 0.0005`, twice on one source line: XLA adds -0.0005 instead, and
    # the last one is the program's output (before this rule: both lost, with their constant)
    ref = """HloModule m

ENTRY %main (x: f32[64]) -> f32[64] {
  %x = f32[64]{0} parameter(0)
  %t = f32[64]{0} tanh(%x)
  %c = f32[] constant(0.0005)
  %b = f32[64]{0} broadcast(%c), dimensions={}
  %sub.1 = f32[64]{0} subtract(%t, %b), metadata={op_name="jit(f)/sub" source_file="f.py" source_line=3}
  %e = f32[64]{0} exponential(%sub.1)
  ROOT %sub.2 = f32[64]{0} subtract(%e, %b), metadata={op_name="jit(f)/sub" source_file="f.py" source_line=3}
}
"""
    opt = """HloModule m

%fused (p: f32[64]) -> f32[64] {
  %p = f32[64]{0} parameter(0)
  %t.1 = f32[64]{0} tanh(%p)
  %c.1 = f32[] constant(-0.0005)
  %b.1 = f32[64]{0} broadcast(%c.1), dimensions={}
  %add.3 = f32[64]{0} add(%t.1, %b.1), metadata={op_name="jit(f)/sub" source_file="f.py" source_line=3}
  %e.1 = f32[64]{0} exponential(%add.3)
  ROOT %add.4 = f32[64]{0} add(%e.1, %b.1), metadata={op_name="jit(f)/sub" source_file="f.py" source_line=3}
}

ENTRY %main (x: f32[64]) -> f32[64] {
  %x = f32[64]{0} parameter(0)
  ROOT %loop_fusion = f32[64]{0} fusion(%x), kind=kLoop, calls=%fused
}
"""
    by = trace(ref, opt)
    assert [(by[n].optimized, by[n].how) for n in ("sub.1", "sub.2")] == [
        (("add.3",), "neighbours"),
        (("add.4",), "neighbours"),
    ]
    assert (by["b"].kernel, by["e"].optimized) == ("loop_fusion", ("e.1",))


def test_a_broadcast_of_a_reshape_adding_ones_is_the_one_broadcast_xla_makes():
    # GPT-2's causal mask: broadcast to every head, then reshaped for `jnp.where`; XLA makes one
    # broadcast of the mask (before this rule: a softmax of every layer lost on the CPU and
    # under no-fusion, 164 of GPT-2 small forward's 1,588 instructions)
    ref = """HloModule m

ENTRY %main (m: pred[4,4], x: f32[1,1,3,4,4]) -> f32[1,1,3,4] {
  %m = pred[4,4]{1,0} parameter(0)
  %x = f32[1,1,3,4,4]{4,3,2,1,0} parameter(1)
  %a = pred[1,4,4]{2,1,0} reshape(%m)
  %heads = pred[1,3,4,4]{3,2,1,0} broadcast(%a), dimensions={0,2,3}
  %r = pred[1,1,3,4,4]{4,3,2,1,0} reshape(%heads)
  %low = f32[] constant(-1e+30)
  %lows = f32[1,1,3,4,4]{4,3,2,1,0} broadcast(%low), dimensions={}
  %sel = f32[1,1,3,4,4]{4,3,2,1,0} select(%r, %x, %lows)
  %e = f32[1,1,3,4,4]{4,3,2,1,0} exponential(%sel)
  %zero = f32[] constant(0)
  ROOT %sum = f32[1,1,3,4]{3,2,1,0} reduce(%e, %zero), dimensions={4}, to_apply=%add
}

%add (p: f32[], q: f32[]) -> f32[] {
  %p = f32[] parameter(0)
  %q = f32[] parameter(1)
  ROOT %s = f32[] add(%p, %q)
}
"""
    opt = """HloModule m

%add (p: f32[], q: f32[]) -> f32[] {
  %p = f32[] parameter(0)
  %q = f32[] parameter(1)
  ROOT %s = f32[] add(%p, %q)
}

%fused (fm: pred[4,4], fx: f32[1,1,3,4,4]) -> f32[1,1,3,4] {
  %fm = pred[4,4]{1,0} parameter(0)
  %fx = f32[1,1,3,4,4]{4,3,2,1,0} parameter(1)
  %bc = pred[1,1,3,4,4]{4,3,2,1,0} broadcast(%fm), dimensions={3,4}
  %low.1 = f32[] constant(-1e+30)
  %lows.1 = f32[1,1,3,4,4]{4,3,2,1,0} broadcast(%low.1), dimensions={}
  %select.3 = f32[1,1,3,4,4]{4,3,2,1,0} select(%bc, %fx, %lows.1)
  %exp.3 = f32[1,1,3,4,4]{4,3,2,1,0} exponential(%select.3)
  %zero.1 = f32[] constant(0)
  ROOT %reduce.3 = f32[1,1,3,4]{3,2,1,0} reduce(%exp.3, %zero.1), dimensions={4}, to_apply=%add
}

ENTRY %main (m: pred[4,4], x: f32[1,1,3,4,4]) -> f32[1,1,3,4] {
  %m = pred[4,4]{1,0} parameter(0)
  %x = f32[1,1,3,4,4]{4,3,2,1,0} parameter(1)
  ROOT %input_reduce_fusion = f32[1,1,3,4]{3,2,1,0} fusion(%m, %x), kind=kInput, calls=%fused
}
"""
    by = trace(ref, opt)
    assert [(by[n].optimized, by[n].how) for n in ("heads", "sel", "sum")] == [
        (("bc",), "structure"),
        (("select.3",), "structure"),
        (("reduce.3",), "structure"),
    ]


def test_an_update_run_on_a_transposed_layout_is_the_update():
    # ResNet-50's AdamW step on a convolution's weights: XLA transposes the weights and the
    # gradient, runs the arithmetic on the copies and transposes the result back
    ref = """HloModule m

ENTRY %main (w: f32[1,4,8], g: f32[1,4,8]) -> f32[1,4,8] {
  %w = f32[1,4,8]{2,1,0} parameter(0)
  %g = f32[1,4,8]{2,1,0} parameter(1)
  %s = f32[1,4,8]{2,1,0} sqrt(%g)
  %lr = f32[] constant(-0.001)
  %lrs = f32[1,4,8]{2,1,0} broadcast(%lr), dimensions={}
  %step = f32[1,4,8]{2,1,0} multiply(%s, %lrs)
  ROOT %new = f32[1,4,8]{2,1,0} add(%w, %step)
}
"""
    opt = """HloModule m

%fused (fw: f32[1,4,8], fg: f32[1,4,8]) -> f32[1,4,8] {
  %fw = f32[1,4,8]{2,1,0} parameter(0)
  %fg = f32[1,4,8]{2,1,0} parameter(1)
  %tw = f32[8,1,4]{2,1,0} transpose(%fw), dimensions={2,0,1}
  %tg = f32[8,1,4]{2,1,0} transpose(%fg), dimensions={2,0,1}
  %sqrt.3 = f32[8,1,4]{2,1,0} sqrt(%tg)
  %lr.1 = f32[] constant(-0.001)
  %lrs.1 = f32[8,1,4]{2,1,0} broadcast(%lr.1), dimensions={}
  %multiply.5 = f32[8,1,4]{2,1,0} multiply(%sqrt.3, %lrs.1)
  %add.7 = f32[8,1,4]{2,1,0} add(%tw, %multiply.5)
  ROOT %back = f32[1,4,8]{2,1,0} transpose(%add.7), dimensions={1,2,0}
}

ENTRY %main (w: f32[1,4,8], g: f32[1,4,8]) -> f32[1,4,8] {
  %w = f32[1,4,8]{2,1,0} parameter(0)
  %g = f32[1,4,8]{2,1,0} parameter(1)
  ROOT %loop_transpose_fusion = f32[1,4,8]{2,1,0} fusion(%w, %g), kind=kLoop, calls=%fused
}
"""
    by = trace(ref, opt)
    assert [(by[n].optimized, by[n].how) for n in ("s", "step")] == [
        (("sqrt.3",), "structure"),
        (("multiply.5",), "structure"),
    ]
    # the transpose back is the sum itself, laid out as the program has it
    assert (by["new"].optimized, by["new"].how) == (("add.7",), "structure")
    assert by["new"].kernel == "loop_transpose_fusion"


def test_a_computation_called_twice_one_call_reading_the_other_ends():
    # From XLA's own tests: looking through what `add` carries on went from the second call's
    # parameter to the first call, whose value is the same `add`, and round again forever.
    text = """HloModule test

Subcomputation {
  subparam0 = f32[] parameter(0)
  subparam1 = f32[] parameter(1)
  ROOT add = f32[] add(subparam0, subparam1)
}

ENTRY main {
  constant1 = f32[] constant(1.0)
  constant2 = f32[] constant(2.0)
  call1 = f32[] call(constant1, constant2), to_apply=Subcomputation
  ROOT call2 = f32[] call(call1, constant2), to_apply=Subcomputation
}
"""
    printed = """HloModule test, entry_computation_layout={()->f32[]}

%Subcomputation (subparam0: f32[], subparam1: f32[]) -> f32[] {
  %subparam0 = f32[] parameter(0)
  %subparam1 = f32[] parameter(1)
  ROOT %add = f32[] add(%subparam0, %subparam1)
}

ENTRY %main () -> f32[] {
  %constant1 = f32[] constant(1)
  %constant2 = f32[] constant(2)
  %call1 = f32[] call(%constant1, %constant2), to_apply=%Subcomputation
  ROOT %call2 = f32[] call(%call1, %constant2), to_apply=%Subcomputation
}
"""  # XLA's canonical re-print of it (the corpus's)
    lineage = trace_module(
        parse_hlo(text), parse_hlo(printed), reference_text=text, optimized_text=printed
    )
    assert [t.instruction for t in lineage.traces] == ["add"]
