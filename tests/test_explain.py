"""`xlafuse explain`, `xlafuse.hlo.explain`, `.lineage` and `.priority_dump` on H200 samples and the CPU."""

import json

import jax
import pytest
from helpers import run_cli, usage_error

from xlafuse.hlo import parse_hlo
from xlafuse.hlo.explain import explain_module
from xlafuse.hlo.lineage import trace_module
from xlafuse.hlo.priority_dump import parse_priority_dump, read_priority_dump
from xlafuse.inspect.explain import missed_fusions
from xlafuse.report.explain_text import missed_fusions_markdown

CHAIN = ("chain_module_1325", "module_1325.jit_f")
GELU = ("why_gelu_forward", "module_779532.jit_gelu")


def files(samples, sample):
    folder, prefix = sample
    base = samples / "why" / folder / prefix
    before = (base.parent / f"{prefix}.before_optimizations.txt").read_text()
    after = (base.parent / f"{prefix}.sm_9.0a_gpu_after_optimizations.txt").read_text()
    return before, after, read_priority_dump(base.parent / f"{prefix}.priority_fusion_dump.txt")


def explained(samples, sample):
    before, after, dump = files(samples, sample)
    return explain_module(
        parse_hlo(before),
        parse_hlo(after),
        dump=dump,
        unoptimized_text=before,
        optimized_text=after,
    )


@pytest.mark.parametrize(
    ("sample", "counts"),
    [
        (CHAIN, {"update_priority": 29, "producer_ineligible": 12, "fusion": 10}),
        (GELU, {"update_priority": 48, "producer_ineligible": 8, "fusion": 12}),
    ],
)
def test_priority_dump_steps(samples, sample, counts):
    _, _, dump = files(samples, sample)
    assert {k: len(dump.of_kind(k)) for k in counts} == counts
    assert dump.hlo_before_fusion.startswith("HloModule ")


def test_priority_dump_fields(samples):
    _, _, dump = files(samples, CHAIN)
    first, update = dump.steps[0], dump.steps[3]
    assert (first.kind, first.producer, first.reason) == (
        "producer_ineligible",
        "reduce_max.14.0",
        "the consumer is not fusible",
    )
    assert (update.producer, update.consumers, update.us_fused, update.us_unfused) == (
        "reduce.1.0",
        ("tanh.1.0",),
        2.967,
        4.9555,
    )
    fusion = dump.of_kind("fusion")[0]
    assert (fusion.fusion_name, fusion.producer, fusion.consumers) == (
        "fusion.3",
        "reduce.1.0",
        ("tanh.1.0",),
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no fusion_steps: not a priority-fusion dump"),
        ("fusion_steps {\n  fusion {\n", "truncated: 'fusion' opened at line 2"),
        ('fusion_steps {\n  merge { producer_name: "a" }\n}\n', "unknown fusion step 'merge'"),
        ('fusion_steps {\n  fusion { consumer_name: "a" }\n}\n', "without a producer_name"),
        ("}\n", "unbalanced '}'"),
    ],
)
def test_priority_dump_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse_priority_dump(text, source="x.txt")


def test_priority_dump_errors_name_their_line_deep_into_a_long_dump():
    # the line is counted on as the scan goes (it was counted from the start for every token:
    # quadratic, minutes for a GPT-2 train step's dump)
    step = 'fusion_steps {\n  fusion {\n    producer_name: "a"\n  }\n}\n'
    long = step * 5000
    assert len(parse_priority_dump(long, source="x.txt").steps) == 5000
    with pytest.raises(ValueError, match=r"x.txt:25002: unexpected text '@@'"):
        parse_priority_dump(long + "\n@@", source="x.txt")
    with pytest.raises(ValueError, match=r"'fusion_steps' opened at line 25002"):
        parse_priority_dump(long + "\nfusion_steps {\n", source="x.txt")


def test_gelu_lineage_is_exact(samples):
    before, after, _ = files(samples, GELU)
    lineage = trace_module(
        parse_hlo(before), parse_hlo(after), reference_text=before, optimized_text=after
    )
    assert lineage.counts() == {"kernel": 13, "outside": 0, "lost": 0}
    assert {t.kernel for t in lineage.traces} == {"loop_multiply_fusion"}
    assert {t.how for t in lineage.traces} == {"structure"}
    assert lineage.by_name["tanh.1"].optimized == ("tanh.1.7",)
    assert lineage.names_kept


def test_chain_lineage_says_what_is_lost(samples):
    before, after, _ = files(samples, CHAIN)
    lineage = trace_module(
        parse_hlo(before), parse_hlo(after), reference_text=before, optimized_text=after
    )
    assert lineage.counts() == {"kernel": 24, "outside": 1, "lost": 0}
    by = lineage.by_name
    # XLA folded transpose.1 into reduce_max.15 (a reduce over the other dimension), which CSE
    # then merged into reduce_max.14: one value, numbered as one.
    assert (by["reduce_max.15"].optimized, by["reduce_max.15"].how) == (
        ("reduce_max.14.1",),
        "duplicate",
    )
    assert (by["transpose.1"].kernel, by["transpose.1"].how) == ("input_reduce_fusion", "folded")
    # max(x, -inf) is x (XLA drops it); its -inf broadcast is dropped with it.
    assert (by["max.3"].kernel, by["max.3"].how) == ("input_reduce_fusion", "view")
    assert (by["max.2"].status, by["max.2"].how) == ("outside", "dropped")
    # split-k rewrote the dot into f32[4,512,512] (K in 4 parts) summed by the next kernel: the
    # one dot of its line, found by order; the reshapes under reduce_sum.14's users are views.
    dot = lineage.by_name["dot_general.1"]
    assert (dot.kernel, dot.how, dot.optimized) == ("gemm_fusion_dot", "order", ("dot.1",))
    assert (lineage.by_name["div.5"].kernel, lineage.by_name["div.5"].how) == ("fusion.7", "view")
    assert lineage.by_name["div.7"].kernel == "fusion.7"  # renamed div.14 by the softmax rewriter
    assert lineage.by_name["div.7"].how == "metadata"


def test_boundary_bytes_by_hand(samples):
    e = explained(samples, CHAIN)
    got = [
        (b.producer, b.producer_kernel, b.consumer_kernel, b.consumers, b.boundary_bytes)
        for b in e.boundaries
    ]
    # add.3 is f32[512,512]: 512 * 512 * 4 = 1,048,576 bytes written, then read back.
    # reduce_max.14 is f32[512]: 2,048 bytes written, then read back.
    assert got == [
        ("add.3", "loop_add_fusion", "fusion.7", ("sub.7",), 2 * 512 * 512 * 4),
        # transpose.1 read add.3 there too: XLA folded it into the reduce
        (
            "add.3",
            "loop_add_fusion",
            "input_reduce_fusion",
            ("reduce_max.14", "transpose.1"),
            2 * 512 * 512 * 4,
        ),
        ("dot_general.1", "gemm_fusion_dot", "loop_add_fusion", ("tanh.1",), 2 * 512 * 512 * 4),
        ("reduce_max.14", "input_reduce_fusion", "fusion.7", ("sub.6",), 2 * 512 * 4),
    ]
    add, _, _, reduce_max = e.boundaries
    assert (add.readers, add.us_fused, add.us_unfused, add.reason) == (2, 8.62275, 5.78275, None)
    assert reduce_max.reason == "the consumer is not fusible"
    # max(x, -inf), the reshapes and the identity broadcast were simplified away: looked through.
    assert reduce_max.via == ("sub.5", "sub.4", "broadcast_in_dim.2", "max.3")
    # sub.6 = broadcast(sub.5) is identified by name (sub.6.3) through the dropped max(x, -inf).
    assert e.lineage.by_name["sub.6"].how == "name"
    assert (add.producer_source, add.consumer_source) == ("why_probe.py:6", "why_probe.py:7")


@pytest.mark.parametrize(("sample", "created"), [(CHAIN, ["reduce.1.0"]), (GELU, [])])
def test_every_step_name_found(samples, sample, created):
    e = explained(samples, sample)
    assert e.missing_names == ()
    fusions = [s for s in e.steps if s.step.kind == "fusion"]
    assert all(all(s.consumer_holds) for s in fusions)
    # Only the split-k reduce that the GEMM rewriter created holds no unoptimized instruction.
    assert [s.step.producer for s in fusions if not s.producer_holds] == created


def test_history(samples):
    e = explained(samples, CHAIN)
    assert [s.step.index for s in e.history("fusion.7")] == [26, 29, 32, 36, 40]
    assert [s.step.fusion_name for s in e.history("loop_add_fusion")] == [
        "fusion.3",
        "fusion.4",
        "fusion.5",
        "fusion.5",
        "fusion.5",
    ]
    assert e.history("gemm_fusion_dot") == ()
    with pytest.raises(ValueError, match=r"no kernel 'fusion\.99' in module 'jit_f'; kernels: "):
        e.history("fusion.99")


@pytest.mark.parametrize("sample", [CHAIN, GELU])
def test_cli_lists_every_ineligible_producer(capsys, samples, sample):
    _, _, dump = files(samples, sample)
    code, out, err = run_cli(capsys, "explain", samples / "why" / sample[0])
    assert code == 0 and err == ""
    pairs = {(s.producer, s.reason) for s in dump.of_kind("producer_ineligible")}
    for producer, reason in pairs:
        assert f'  {producer}: "{reason}"\n' in out
    assert f"XLA producer_ineligible: {len(dump.of_kind('producer_ineligible'))} steps" in out
    assert "names not found in the HLO: 0" in out


def test_cli_chain_text(capsys, samples):
    code, out, _ = run_cli(capsys, "explain", samples / "why" / CHAIN[0], "--top", "2")
    assert code == 0
    assert "unoptimized instructions: 25; in kernels 24, outside kernels 1, lost 0\n" in out
    assert "kernel boundaries (missed fusions): 4, largest first\n" in out
    assert (
        "    2.10 MB  add.3 (loop_add_fusion, why_probe.py:6) -> sub.7 (fusion.7, why_probe.py:7)"
        " [read by 2 kernels]\n"
        "             why: cost model 8.62275 us fused vs 5.78275 us unfused\n"
    ) in out
    assert "  ... 2 more (--top 4 or --json shows all)" in out


def test_cli_kernel_history(capsys, samples):
    code, out, _ = run_cli(
        capsys, "explain", samples / "why" / GELU[0], "--kernel", "loop_multiply_fusion"
    )
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "kernel loop_multiply_fusion: 12 fusion steps"
    assert lines[1] == (
        "  #12: integer_pow.2.0 into integer_pow.3.0 -> fusion (cost model 2.74725 us fused "
        "vs 7.232 us)"
    )


def test_cli_json(capsys, samples):
    code, out, _ = run_cli(
        capsys, "explain", samples / "why" / CHAIN[0], "--json", "--kernel", "fusion.7"
    )
    got = json.loads(out)
    assert code == 0
    assert [b["boundary_bytes"] for b in got["boundaries"]] == [2097152, 2097152, 2097152, 4096]
    assert len(got["ineligible"]) == 12 and len(got["fusion_steps"]) == 10
    assert [s["index"] for s in got["history"]] == [26, 29, 32, 36, 40]


def test_missed_fusions_markdown(samples):
    before, after, _ = files(samples, CHAIN)
    summary = missed_fusions(before, after, top=2)
    assert (summary["boundaries"], summary["boundary_bytes"], summary["lost"]) == (
        4,
        3 * 2097152 + 4096,
        0,
    )
    assert json.loads(json.dumps(summary)) == summary
    lines = missed_fusions_markdown(summary)
    assert lines[0] == (
        "Top 2 of 4 missed fusions (modeled bytes: the intermediate written and read back; "
        "0 of 25 instructions not traced):"
    )
    assert lines[4] == (
        "| 2.10 MB | `add.3` (loop_add_fusion, why_probe.py:6) | `sub.7` (fusion.7, why_probe.py:7) |"
    )
    assert len(lines) == 6
    fused = missed_fusions_markdown(missed_fusions(*files(samples, GELU)[:2]))
    assert fused == ["No kernel boundary between ops of the program: nothing left to fuse."]


ON_CPU = pytest.mark.skipif(jax.default_backend() != "cpu", reason="CPU figures")


@ON_CPU
def test_cpu_workload_mlp(capsys):
    code, out, _ = run_cli(capsys, "explain", "--workload", "mlp", "--json")
    assert code == 0
    got = json.loads(out)
    assert got["has_dump"] is False
    # The means' divisions by a constant are XLA's multiplications by its inverse (the constant's
    # broadcast folded into it); the rest of the norm follows them. The two sums are split by
    # XLA:CPU into a reduce-window and a reduce: lost, never folded.
    assert got["lineage"]["lost_by_opcode"] == {"reduce": 2}
    # default keeps 5 boundaries around the two YNN dots and the norm; no-fusion had 40.
    assert len(got["boundaries"]) == 5
    assert len(got["removed"]) == 35
    assert sum(b["boundary_bytes"] for b in got["removed"]) == 1263872
    removed = {(b["producer"], b["consumers"][0]) for b in got["removed"]}
    kept = {(b["producer"], c) for b in got["boundaries"] for c in b["consumers"]}
    assert ("integer_pow.2", "integer_pow.3") in removed and not removed & kept


@ON_CPU
def test_cpu_workload_text_says_no_reasons(capsys):
    code, out, _ = run_cli(capsys, "explain", "--workload", "mul_add_relu", "--top", "2")
    assert code == 0
    assert "reasons: XLA wrote no reasons for this compile (the CPU writes no" in out
    assert "kernel boundaries (missed fusions): 0, largest first" in out
    assert "boundaries of no-fusion that default fused away: 2, 131 kB" in out
    assert "    65.5 kB  mul.1 (wrapped_multiply, pointwise.py:48) -> add.1 (wrapped_add," in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["explain", "/no/such/folder"], "no such folder: '/no/such/folder'"),
        (["explain", "{dump}"], "holds no *.priority_fusion_dump.txt"),
        (["explain", "--workload", "nope"], "unknown workload 'nope'"),
        (["explain", "{chain}", "--top", "0"], "--top must be 1 or more, got 0"),
        (["explain"], "give a dump folder or --workload NAME (exactly one)"),
        (["explain", "{chain}", "--kernel", "nope"], "no kernel 'nope' in module 'jit_f'"),
    ],
)
def test_bad_input(capsys, samples, dump_folder, argv, message):
    paths = {"dump": dump_folder, "chain": samples / "why" / CHAIN[0]}
    assert message in usage_error(capsys, *(x.format(**paths) for x in argv))


@pytest.mark.gpu
def test_gpu_workload_gelu_has_reasons(capsys):
    code, out, _ = run_cli(
        capsys, "explain", "--workload", "gelu", "--json", "--against", "default"
    )
    got = json.loads(out)
    assert code == 0 and got["has_dump"] is True
    assert got["missing_names"] == []
    assert got["lineage"]["names_kept"] is True
    assert len(got["fusion_steps"]) >= 1
