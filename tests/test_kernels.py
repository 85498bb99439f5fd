"""Every kernel's time joined to its HLO kernel: a recorded H200 trace, synthetic launches, the CPU.

`data/trace-chain4/` holds an H200 trace (jax 0.11.2) of the `chain` workload with ops=4 on a
float32 array of 2**20 elements, 3 calls traced under default (1 kernel per call) and no-fusion
(8 kernels per call, fusion-wrapper's `wrapped_*`, three of them run as a reused kernel), with
the optimized HLO of each.
"""

import gzip
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import GPT2_TRAIN, RESNET50_TRAIN, recorded_kernel_times

import xlafuse
from xlafuse.hlo import analyze_hlo
from xlafuse.hlo.diff import diff_modules
from xlafuse.hlo.ir import portable_source
from xlafuse.hlo.parse import parse_hlo
from xlafuse.measurement.kernel_diff import kernel_diff_record, time_groups
from xlafuse.measurement.kernel_table import TABLE_COLUMNS, read_kernel_table
from xlafuse.measurement.kernels import (
    CPU_BASIS,
    GPU_BASIS,
    REPEATED,
    Event,
    join_trace,
    loop_iterations,
    trace_events,
)
from xlafuse.measurement.profile import read_trace, trace_calls
from xlafuse.measurement.stats import difference_interval
from xlafuse.measurement.timing import same_args
from xlafuse.measurement.validate import mangle
from xlafuse.report.kernels import savings_section, top_kernels_table

DATA = Path(__file__).parent / "data" / "trace-chain4"
SAMPLES = Path(__file__).parent / "data" / "h200-jax0.11.2"
CEILING = 4.0e12  # bytes/s: a round ceiling, so the percentages are exact

# Each launch's duration in the recorded traces (ns), calls in order.
DEFAULT_NS = {"loop_add_fusion": (2431, 2465, 2400)}
NO_FUSION_NS = {
    "wrapped_broadcast": (1920, 1760, 1760),
    "wrapped_multiply": (2368, 2305, 2336),
    "wrapped_broadcast.1": (2047, 1983, 1984),
    "wrapped_add": (2368, 2240, 2271),
    "wrapped_broadcast.2": (2048, 1983, 1984),
    "wrapped_maximum": (2369, 2273, 2272),
    "wrapped_broadcast.3": (2016, 1951, 1952),
    "wrapped_add.1": (2688, 2687, 2689),
}


def _joined(variant: str):
    basis, events = trace_events(DATA / f"{variant}.xplane.pb")
    return join_trace(
        (DATA / f"{variant}.hlo.txt").read_text(),
        events,
        3,
        basis=basis,
        copy_ceiling_bytes_per_s=CEILING,
    )


@pytest.mark.parametrize(
    "variant, expected, total_ns",
    [("default", DEFAULT_NS, 7296), ("no-fusion", NO_FUSION_NS, 52254)],
)
def test_recorded_h200_trace_joins_every_kernel_with_exact_times(variant, expected, total_ns):
    times = _joined(variant)
    assert times.basis == GPU_BASIS and times.calls == 3
    assert times.time_s == pytest.approx(total_ns * 1e-9 / 3, rel=1e-12)
    assert times.unattributed == () and times.unattributed_share == 0.0
    assert times.attributed_s == pytest.approx(times.time_s, rel=1e-12)
    got = {k.name: k.time_s for k in times.kernels}
    assert got == pytest.approx({n: sum(ns) * 1e-9 / 3 for n, ns in expected.items()}, rel=1e-12)
    assert all(k.launches_per_call == 1.0 for k in times.kernels)
    # The whole-trace device time the runner records is the same number.
    assert read_trace(DATA / f"{variant}.xplane.pb", 3).device_time_s == pytest.approx(
        times.time_s, rel=1e-12
    )


def test_recorded_trace_rows_carry_bytes_bandwidth_kind_source_and_match():
    rows = {k.name: k for k in _joined("no-fusion").kernels}
    add1 = rows["wrapped_add.1"]  # runs as `wrapped_add`'s kernel: XLA reuses identical fusions
    assert (add1.kind, add1.match, add1.modeled_bytes) == ("kLoop", "reused kernel", 12582912)
    assert add1.time_s == pytest.approx(2688e-9, rel=1e-12)
    assert add1.achieved_bytes_per_s == pytest.approx(12582912 / 2688e-9, rel=1e-12)
    assert add1.pct_of_copy_ceiling == pytest.approx(100 * 12582912 / 2688e-9 / CEILING)
    assert add1.source_lines == ("xlafuse/models/pointwise.py:31",)
    assert rows["wrapped_broadcast"].match == "name"
    fused = _joined("default").kernels[0]
    # outside a command buffer the kernel carries its instruction in the `hlo_op` stat
    assert (fused.name, fused.modeled_bytes, fused.match) == ("loop_add_fusion", 8388608, "hlo_op")
    assert fused.pct_of_copy_ceiling == pytest.approx(100 * 8388608 / 2432e-9 / CEILING)


def test_summary_keeps_totals_and_the_top_kernels():
    summary = _joined("no-fusion").summary(top=3)
    assert summary["schema"] == "xlafuse.kernel_times/2" and "kernel_table" not in summary
    assert (summary["kernels"], summary["kernels_seen"], summary["launches_per_call"]) == (8, 8, 8)
    assert [r["name"] for r in summary["top"]] == [
        "wrapped_add.1",
        "wrapped_multiply",
        "wrapped_maximum",
    ]
    assert summary["unattributed_share"] == 0.0 and summary["unattributed_top"] == []


def test_the_record_keeps_every_traced_kernel_and_the_kernels_it_reads():
    # GPT-2 full train on the H200: 840 kernels, every one seen in the trace
    times, summary, report, _ = recorded_kernel_times(GPT2_TRAIN, "default")
    assert summary["schema"] == "xlafuse.kernel_times/2"
    assert summary["kernel_table"]["columns"] == list(TABLE_COLUMNS)
    rows = read_kernel_table(summary)
    assert len(rows) == summary["kernels_seen"] == len(report.kernel_details) == 840
    assert [r["name"] for r in rows] == [k.name for k in times.kernels]  # longest first
    # the sums are the totals
    assert sum(r["time_s"] for r in rows) == summary["attributed_s"]
    assert summary["attributed_s"] == pytest.approx(summary["time_s"], rel=1e-12)
    assert sum(r["launches_per_call"] for r in rows) == summary["launches_per_call"] == 912
    assert sum(r["modeled_bytes"] for r in rows) == report.modeled_bytes
    assert sum(r["flops"] or 0 for r in rows) == report.flops
    # every figure of a kernel is its KernelTime's, the derived ones included
    for row, k in zip(rows, times.kernels, strict=True):
        assert (row["kind"], row["bound"], row["bound_s"], row["match"]) == (
            k.kind, k.bound, k.bound_s, k.match,
        )  # fmt: skip
        assert (row["pct_of_bound"], row["headroom_s"]) == (k.pct_of_bound, k.headroom_s)
        assert row["source"] == (k.source_lines[0] if k.source_lines else None)
    # producers: row indices, none its own; the GEMM reads the logits' convert through a bitcast
    assert all(0 <= p < len(rows) and p != i for i, r in enumerate(rows) for p in r["producers"])
    by_name = {r["name"]: r for r in rows}
    gemm = by_name["gemm_fusion_dot.169"]  # fusion(%bitcast.2445.0, %wrapped_convert)
    assert [rows[p]["name"] for p in gemm["producers"]] == sorted(
        ["wrapped_convert", "wrapped_convert.61"], key=lambda n: by_name[n]["time_s"], reverse=True
    )
    assert sum(map(len, (r["producers"] for r in rows))) == 1643
    size = len(json.dumps(summary["kernel_table"]))
    print(f"kernel_table of GPT-2 full train: {len(rows)} kernels, {size / 1e3:.1f} KB")
    assert size < 150_000


def test_a_kernel_times_1_record_has_no_table_and_a_newer_one_is_refused():
    assert read_kernel_table({"schema": "xlafuse.kernel_times/1", "top": []}) is None
    assert read_kernel_table(None) is None
    with pytest.raises(ValueError) as info:
        read_kernel_table({"schema": "xlafuse.kernel_times/3"})
    assert str(info.value) == (
        "kernel_times schema 'xlafuse.kernel_times/3' is not one this xlafuse reads "
        "(xlafuse.kernel_times/1, xlafuse.kernel_times/2)"
    )


def test_recorded_before_after_measures_the_fusion_saving():
    texts = [(DATA / f"{v}.hlo.txt").read_text() for v in ("default", "no-fusion")]
    a, b = (parse_hlo(t, source=v) for t, v in zip(texts, ("default", "no-fusion"), strict=True))
    diff = diff_modules(a, b, labels=("default", "no-fusion"), reference=None, texts=(None, *texts))
    fused, unfused = _joined("default"), _joined("no-fusion")
    timed = time_groups(diff, fused.times_by_kernel(), unfused.times_by_kernel())
    assert sum(len(t.group.kernels_b) for t in timed) == 8
    assert sum(t.time_a_s for t in timed) == pytest.approx(2432e-9, rel=1e-12)
    assert sum(t.time_b_s for t in timed) == pytest.approx(17418e-9, rel=1e-12)
    top = timed[0]
    assert top.group.kernels_a == ("loop_add_fusion",)
    assert top.saved_s == pytest.approx(top.time_b_s - 2432e-9, rel=1e-12)
    record = kernel_diff_record(diff, fused, unfused)
    assert (record["a"], record["b"], record["kernels_a"], record["kernels_b"]) == (
        "default",
        "no-fusion",
        1,
        8,
    )
    assert record["top"][0]["saved_s"] == pytest.approx(top.saved_s)
    assert len(record["top"][0]["kernels_b"]) <= 4


def _launches(report, library_names=("sm90_xmma_gemm_f32f32_tn", "splitKreduce_kernel")):
    """Launch names XLA would use: fusions mangled, a triton GEMM with a suffix, each cuBLAS
    custom-call as a GEMM kernel (the first one plus a split-K reduction)."""
    names, first_library = [], True
    for k in report.kernel_details:
        if k.opcode == "custom-call":
            names.append(library_names[0])
            if first_library:
                names.append(library_names[1])
                first_library = False
        elif k.name.startswith("gemm_fusion"):
            names.append(mangle(k.name) + "_0")
        else:
            names.append(mangle(k.name))
    return names


def test_library_and_suffixed_launches_join_their_hlo_kernels_and_strangers_are_unattributed():
    report = analyze_hlo(SAMPLES / "block_fwd.default.hlo.txt")
    names = [*_launches(report), "memset_kernel"]
    events = [
        Event(n, call * 10**6 + j * 1000, (j + 1) * 100)
        for call in range(2)
        for j, n in enumerate(names)
    ]
    times = join_trace(report, events, 2)
    rows = {k.name: k for k in times.kernels}
    assert len(rows) == report.kernels == 20
    assert rows["custom-call.0"].match == "library"
    assert rows["custom-call.0"].launches_per_call == 2  # the GEMM and its split-K reduction
    assert rows["custom-call.0"].time_s == pytest.approx((500 + 600) * 1e-9)
    assert rows["gemm_fusion_dot.11"].match == "name + suffix"
    assert times.launches_per_call == 21
    assert times.unattributed == (("memset_kernel", len(names) * 100e-9),)
    total = sum((j + 1) * 100 for j in range(len(names))) * 1e-9
    assert times.time_s == pytest.approx(total)
    assert times.unattributed_share == pytest.approx(len(names) * 100e-9 / total)


def test_loop_body_kernels_launched_per_iteration_count_as_repeated_launches():
    report = analyze_hlo(SAMPLES / "scan_rnn.default.hlo.txt")
    body = [
        "gemm_fusion_dot_general_1_0",
        "loop_tanh_fusion",
        "input_reduce_fusion",
        "loop_add_fusion",
    ]
    names = ["copy_12", "copy_13", "loop_broadcast_fusion", *body * 3, "loop_compare_fusion"]
    events = [Event(n, j * 1000, 1000) for j, n in enumerate(names)]
    times = join_trace(report, events, 1)
    rows = {k.name: k for k in times.kernels}
    assert rows["loop_tanh_fusion"].launches_per_call == 3
    assert rows["loop_tanh_fusion"].time_s == pytest.approx(3e-6)
    assert rows["loop_tanh_fusion"].match == "name"
    assert times.unattributed == ()
    assert rows["fusion-start"].launches_per_call == 0 and rows["fusion-start"].match == "-"
    assert REPEATED == "repeated launch"


def test_join_refuses_zero_calls():
    with pytest.raises(ValueError, match="calls must be a positive number of traced calls, not 0"):
        join_trace((DATA / "default.hlo.txt").read_text(), [], 0)


def test_cpu_trace_joins_host_thunks_by_their_hlo_op(tmp_path):
    def chain(x):
        for _ in range(3):
            x = jnp.maximum(x * 1.5 + 1.0, 0.1)
        return x

    x = jnp.ones((4096,))
    compiled = jax.jit(chain).lower(x).compile({"xla_disable_hlo_passes": "fusion"})
    path = trace_calls(compiled, (x,), 4, same_args, tmp_path)
    basis, events = trace_events(path)
    assert basis == CPU_BASIS
    times = join_trace(compiled.as_text(), events, 4, basis=basis)
    report = analyze_hlo(compiled.as_text())
    assert {k.name for k in times.kernels} == {k.name for k in report.kernel_details}
    assert times.unattributed == ()
    assert all(k.match == "hlo_op" and k.launches_per_call == 1 for k in times.kernels)
    assert times.launches_per_call == report.kernels == 12


def test_recorded_source_lines_carry_no_folders_of_the_machine():
    checkout = Path(xlafuse.__file__).resolve().parents[1]
    assert portable_source(f"{checkout}/xlafuse/models/mlp.py:52") == "xlafuse/models/mlp.py:52"
    assert (
        portable_source("/opt/venv/lib/python3.12/site-packages/flax/nnx/nn/linear.py:422")
        == "flax/nnx/nn/linear.py:422"
    )
    assert portable_source("/home/me/model.py:7") == "/home/me/model.py:7"  # the user's own
    assert portable_source("model.py") == "model.py"


def test_copies_run_as_memcpys_are_attributed_also_in_a_while_loop():
    # The rollout of examples/cartpole.py (20 steps) compiled on the H200: a `copy` in the entry
    # and one in the loop body; inside command buffers each runs as the driver's memcpy kernel,
    # named `memcpy32_post`, not after the copy. Launch order as the H200 trace gave it.
    report = analyze_hlo(SAMPLES / "cartpole.default.hlo.txt")
    entry = ["memcpy32_post", "loop_broadcast_fusion", "input_concatenate_fusion_1",
             "loop_broadcast_fusion_1", "loop_maximum_fusion"]  # fmt: skip
    body = ["loop_add_and_fusion", "gemm_fusion_dot_general_3", "gemm_fusion_dot_general_4",
            "gemm_fusion_dot_general_5", "input_reduce_fusion", "loop_add_fusion",
            "input_concatenate_fusion", "memcpy32_post"]  # fmt: skip
    names = [*entry, *body * 3, "input_reduce_fusion_1", "loop_multiply_fusion"]
    events = [
        Event(n, call * 10**6 + j * 1000, 100) for call in range(2) for j, n in enumerate(names)
    ]
    times = join_trace(report, events, 2)
    rows = {k.name: k for k in times.kernels}
    assert times.unattributed == ()
    assert (rows["copy.14"].launches_per_call, rows["copy.14"].match) == (1, "memcpy")
    assert (rows["copy.10"].launches_per_call, rows["copy.10"].match) == (3, "memcpy")
    assert rows["copy.10"].time_s == pytest.approx(3 * 100e-9)
    assert rows["loop_add_fusion"].launches_per_call == 3


# Written by hand after tokamax's chunked LM-head loss (gradient of the weights accumulated into
# a buffer chunk by chunk, in place): a while loop of 8 chunks whose body runs two cuBLAS calls,
# and cuBLAS calls before and after the loop in the entry, all launching the same GEMM kernel.
CHUNKED = Path(__file__).parent / "data" / "chunked-accumulate.hlo.txt"
CHUNKED_TRACE = Path(__file__).parent / "data" / "trace-gpt2-small-chunked"


def test_a_loops_library_launches_stay_with_the_loops_calls():
    # The launches as a command buffer gives them: no `hlo_op`, cuBLAS's own kernel names; the
    # second call of the body also launches a split-K reduction. Joined by name alone, every
    # iteration after the first gave its GEMMs to the last call that launched that kernel name.
    report = analyze_hlo(CHUNKED)
    body = ["loop_dynamic_slice_fusion", "nvjet_gemm", "nvjet_gemm", "splitKreduce_kernel",
            "loop_dynamic_update_slice_fusion", "loop_add_fusion"]  # fmt: skip
    names = ["nvjet_gemm", "loop_broadcast_fusion", *body * 8, "nvjet_gemm"]
    events = [
        Event(n, call * 10**6 + j * 1000, 100) for call in range(2) for j, n in enumerate(names)
    ]
    times = join_trace(report, events, 2)
    launches = {k.name: k.launches_per_call for k in times.kernels}
    assert times.unattributed == ()
    assert launches["custom-call.1"] == launches["custom-call.4"] == 1  # the entry's
    assert launches["custom-call.2"] == 8  # one GEMM per iteration
    assert launches["custom-call.3"] == 16  # a GEMM and its split-K reduction
    assert launches["loop_dynamic_update_slice_fusion"] == 8
    assert times.launches_per_call == len(names)


def test_a_recorded_chunked_loss_gives_each_loop_kernel_one_launch_per_iteration():
    # GPT-2 small train with tokamax's chunked LM-head loss on the H100 (tests/data/
    # trace-gpt2-small-chunked: `PYTHONPATH=.:SITE python3 tests/data/record_kernel_trace.py
    # gpt2 small train impl=xla_chunked --out OUT --calls 2`, tokamax 0.0.17 installed from
    # .whl/ into SITE; the files renamed without `impl=`, SITE's path taken out): two
    # loops of 25 chunks, forward and backward; the backward body runs kernels XLA compiled once
    # for the forward's identical fusions (its `loop_dynamic_slice_fusion.1` launches as
    # `loop_dynamic_slice_fusion`), and entry fusions of the same base names. Joined by names
    # alone, 18 kernels had other launch counts: the entry's `input_reduce_fusion.4` took
    # iterations of the body's `input_reduce_fusion`, the backward body's kernels 49 launches.
    times, _, report, _ = recorded_kernel_times(CHUNKED_TRACE, "xla_chunked")
    launches = {k.name: k.launches_per_call for k in times.kernels}
    runs = {k.name: report.runs_of(k) for k in report.kernel_details}
    assert times.unattributed == () and times.launches_per_call == 1137
    off = {n: (launches[n], runs[n]) for n in runs if launches[n] not in (runs[n], 2 * runs[n])}
    assert off == {}
    assert launches["input_reduce_fusion"] == launches["loop_dynamic_slice_fusion.1"] == 25
    assert launches["custom-call.1"] == 25  # the backward body's cuBLAS GEMM
    assert launches["input_reduce_fusion.4"] == 1


@pytest.mark.parametrize(
    ("names", "repeats"),
    [
        # a body launching `a` twice: its iterations start four launches apart, not two
        (["x", "a", "g", "a", "h", "a", "g", "a", "h", "a", "g", "a", "h", "y"], range(5, 13)),
        # a GEMM launched twice in a row in the entry is not a loop: no body kernel's name
        (["x", "nvjet", "nvjet", "y"], ()),
        # a nested loop: (i i) repeats inside the outer body, the outer body whole after it
        (["o", "i", "i", "p", "o", "i", "i", "p"], (2, 4, 5, 6, 7)),
    ],
)
def test_loop_iterations_are_blocks_repeating_the_block_before(names, repeats):
    found = loop_iterations(names, {"a", "g", "h", "o", "i", "p"})
    assert sorted(found) == list(repeats)
    assert all(names[j] == names[earlier] for j, earlier in found.items())


# A loop of 2 iterations, then two entry fusions identical to the body's first: XLA compiles
# the three once, and all launch as `loop_add_fusion`.
TWINS_AFTER_A_LOOP = """
HloModule twins

%fused_add (p0: f32[1024]) -> f32[1024] {
  %p0 = f32[1024]{0} parameter(0)
  ROOT %add.0 = f32[1024]{0} add(%p0, %p0)
}

%fused_mul (p1: f32[1024]) -> f32[1024] {
  %p1 = f32[1024]{0} parameter(0)
  ROOT %mul.1 = f32[1024]{0} multiply(%p1, %p1)
}

%body (arg: (s32[], f32[1024])) -> (s32[], f32[1024]) {
  %arg = (s32[], f32[1024]{0}) parameter(0)
  %i = s32[] get-tuple-element(%arg), index=0
  %x = f32[1024]{0} get-tuple-element(%arg), index=1
  %loop_add_fusion = f32[1024]{0} fusion(%x), kind=kLoop, calls=%fused_add
  %loop_multiply_fusion = f32[1024]{0} fusion(%loop_add_fusion), kind=kLoop, calls=%fused_mul
  ROOT %t = (s32[], f32[1024]{0}) tuple(%i, %loop_multiply_fusion)
}

%cond (arg.1: (s32[], f32[1024])) -> pred[] {
  %arg.1 = (s32[], f32[1024]{0}) parameter(0)
  ROOT %c = pred[] constant(true)
}

ENTRY %main (a: f32[1024]) -> (f32[1024], f32[1024]) {
  %a = f32[1024]{0} parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[1024]{0}) tuple(%zero, %a)
  %while = (s32[], f32[1024]{0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"2"}}
  %y = f32[1024]{0} get-tuple-element(%while), index=1
  %loop_add_fusion.3 = f32[1024]{0} fusion(%y), kind=kLoop, calls=%fused_add
  %loop_add_fusion.4 = f32[1024]{0} fusion(%loop_add_fusion.3), kind=kLoop, calls=%fused_add
  ROOT %out = (f32[1024]{0}, f32[1024]{0}) tuple(%loop_add_fusion.3, %loop_add_fusion.4)
}
"""


def test_a_repeat_of_an_entry_kernel_is_not_a_loop_iteration():
    # The entry's two `loop_add_fusion` launches in a row look like two iterations of a
    # one-launch loop; the first is the entry's `loop_add_fusion.3`, which runs once, so the
    # second is not its repeat but its twin's launch.
    names = ["loop_add_fusion", "loop_multiply_fusion"] * 2 + ["loop_add_fusion"] * 2
    events = [Event(n, j * 1000, 100) for j, n in enumerate(names)]
    times = join_trace(analyze_hlo(TWINS_AFTER_A_LOOP), events, 1)
    launches = {k.name: k.launches_per_call for k in times.kernels}
    assert launches == {
        "loop_add_fusion": 2, "loop_multiply_fusion": 2,
        "loop_add_fusion.3": 1, "loop_add_fusion.4": 1,
    }  # fmt: skip


def test_launches_are_attributed_by_their_hlo_op_before_any_name_rule():
    # Two cuBLAS calls of block_fwd: each launches `nvjet_...` kernels whose names say nothing
    # of the call, and the first a split-K reduction after a fusion launched in between (out of
    # program order). The `hlo_op` stat of each launch names its instruction: no guess is made.
    report = analyze_hlo(SAMPLES / "block_fwd.default.hlo.txt")
    calls = [k.name for k in report.kernel_details if k.opcode == "custom-call"]
    assert len(calls) >= 2
    names, ops = [], []
    for k in report.kernel_details:
        if k.opcode == "custom-call":
            names.append("nvjet_sm90_tst_128x256_64x4_1x2_h_bz_coopA_NNT")
            ops.append(k.name)
        else:
            names.append(mangle(k.name) + ("_0" if k.name.startswith("gemm_fusion") else ""))
            ops.append("command_buffer_3")  # inside a command buffer: the name rules decide
    names.append("splitKreduce_kernel")
    ops.append(calls[0])
    events = [
        Event(n, j * 1000, 100, "", op) for j, (n, op) in enumerate(zip(names, ops, strict=True))
    ]
    times = join_trace(report, events, 1)
    rows = {k.name: k for k in times.kernels}
    assert times.unattributed == ()
    assert (rows[calls[0]].launches_per_call, rows[calls[0]].match) == (2, "hlo_op")
    assert (rows[calls[1]].launches_per_call, rows[calls[1]].match) == (1, "hlo_op")
    without_ops = join_trace(report, [Event(*e[:3]) for e in events], 1)
    assert [name for name, _ in without_ops.unattributed] == ["splitKreduce_kernel"]


@pytest.mark.parametrize(
    ("a", "b", "verdict"),
    [
        ([10e-6] * 5, [10e-6] * 5, "same"),  # identical
        ([10e-6, 11e-6, 9e-6, 10e-6, 10e-6], [5e-6, 5.5e-6, 4.5e-6, 5e-6, 5e-6], "faster"),
        ([5e-6, 5.5e-6, 4.5e-6, 5e-6, 5e-6], [10e-6, 11e-6, 9e-6, 10e-6, 10e-6], "slower"),
        ([10e-6] * 5, [10.2e-6] * 5, "same"),  # real but under 3%
        ([10e-6, 20e-6, 10e-6, 20e-6], [12e-6, 22e-6, 11e-6, 21e-6], "same"),  # within the noise
        ([0.0] * 4, [3e-6] * 4, "slower"),  # only in B
    ],
)
def test_a_groups_change_has_its_interval_and_verdict(a, b, verdict):
    change = difference_interval(a, b)
    assert change.delta_s == pytest.approx(np.mean(b) - np.mean(a))
    assert change.ci[0] <= change.delta_s <= change.ci[1]
    assert change.verdict == verdict


def test_recorded_diff_splits_the_groups_by_verdict_and_their_sums_add_up():
    texts = [(DATA / f"{v}.hlo.txt").read_text() for v in ("default", "no-fusion")]
    a, b = (parse_hlo(t, source=v) for t, v in zip(texts, ("default", "no-fusion"), strict=True))
    diff = diff_modules(a, b, labels=("default", "no-fusion"), reference=None, texts=(None, *texts))
    fused, unfused = _joined("default"), _joined("no-fusion")
    assert len(fused.samples_by_kernel()["loop_add_fusion"]) == 3  # one time per traced call
    record = kernel_diff_record(diff, fused, unfused)
    assert record["changed_groups"] == {"faster": 0, "slower": 1, "same": 0}
    (loss,) = record["losses"]
    assert loss["kernels_a"] == ["loop_add_fusion"] and loss["verdict"] == "slower"
    assert loss["ci_s"][0] <= loss["saved_s"] <= loss["ci_s"][1] and loss["ci_s"][0] > 0
    assert record["gains"] == []
    groups = sum(record["changed_s"].values())
    assert groups == pytest.approx(
        (unfused.time_s - unfused.unattributed_s) - (fused.time_s - fused.unattributed_s)
    )
    text = "\n".join(savings_section(record))
    assert "#### Where no-fusion gains and loses against default" in text
    assert "no-fusion gains (faster): no groups" in text
    assert "no-fusion loses (slower): 1 group\n" in text
    assert "| 95% CI µs |" in text


def test_each_kernel_gets_its_bound_from_both_ceilings_and_the_headroom_above_it():
    matmul = 5.0e14  # FLOP/s: a round ceiling
    _, events = trace_events(DATA / "default.xplane.pb")
    times = join_trace(
        (DATA / "default.hlo.txt").read_text(),
        events,
        3,
        basis=GPU_BASIS,
        copy_ceiling_bytes_per_s=CEILING,
        matmul_ceiling_flops_per_s=matmul,
    )
    (fused,) = [k for k in times.kernels if k.name == "loop_add_fusion"]
    memory_s = 8388608 / CEILING
    assert fused.flops is not None and fused.flops / matmul < memory_s
    assert (fused.bound, fused.bound_s) == ("memory", pytest.approx(memory_s))
    assert fused.pct_of_bound == pytest.approx(100 * memory_s / fused.time_s)
    assert fused.headroom_s == pytest.approx(fused.time_s - memory_s)
    # a GEMM: its FLOPs over the matmul ceiling outweigh its bytes over the copy ceiling
    report = analyze_hlo(SAMPLES / "block_fwd.default.hlo.txt")
    gemm = next(k for k in report.kernel_details if k.name == "gemm_fusion_dot.11")
    events = [Event(mangle(k.name) + ("_0" if k.name.startswith("gemm") else ""), j * 10**5, 50_000)
              for j, k in enumerate(report.kernel_details) if k.opcode != "custom-call"]  # fmt: skip
    joined = join_trace(
        report,
        events,
        1,
        basis=GPU_BASIS,
        copy_ceiling_bytes_per_s=4.0e12,
        matmul_ceiling_flops_per_s=1.0e12,
    )
    row = next(k for k in joined.kernels if k.name == gemm.name)
    compute_s = gemm.flops / 1.0e12
    assert compute_s > (gemm.bytes_in + gemm.bytes_out) / 4.0e12
    assert (row.bound, row.bound_s) == ("compute", pytest.approx(compute_s))
    summary = joined.summary()
    assert summary["matmul_ceiling_flops_per_s"] == 1.0e12
    headroom = [k["headroom_s"] for k in summary["headroom_top"]]
    assert headroom == sorted(headroom, reverse=True) and headroom[0] > 0
    text = "\n".join(top_kernels_table(summary))
    assert "| GFLOP | bound | % of bound | source |" in text
    assert "| kernel | kind | µs/call | bound µs | bound | headroom µs | source |" in text


@pytest.mark.parametrize(("variant", "library_calls"), [("default", 120), ("no-gemm-fusion", 219)])
def test_a_gemm_heavy_train_step_is_attributed_launch_by_launch(variant, library_calls):
    # GPT-2 full train on the H200 (jax 0.11.2), 2 calls traced: every launch in a command
    # buffer (hlo_op names the buffer only), cuBLASLt calls launching `nvjet_*` GEMMs, a
    # `Memset` before some. Aligned with the HLO's kernels in program order, nothing is left.
    payload = json.loads(gzip.decompress((GPT2_TRAIN / f"{variant}.events.json.gz").read_bytes()))
    text = gzip.decompress((GPT2_TRAIN / f"{variant}.hlo.txt.gz").read_bytes()).decode()
    report = analyze_hlo(text)
    events = [Event(*e) for e in payload["events"]]
    times = join_trace(report, events, payload["calls"])
    assert times.unattributed == ()
    assert all(k.launches_per_call >= 1 for k in times.kernels)  # every kernel seen
    assert times.launches_per_call == len(events) / payload["calls"]
    library = [k for k in times.kernels if k.match == "library"]
    assert len(library) == library_calls == report.custom_calls
    assert {k.launches_per_call for k in library} == {1.0, 2.0}  # a Memset before some GEMMs


@pytest.mark.parametrize(("variant", "kernels", "cublas"), [("default", 1114, 0),
                                                           ("no-gemm-fusion", 1111, 3)])  # fmt: skip
def test_a_convolution_heavy_train_step_is_attributed_launch_by_launch(variant, kernels, cublas):
    # ResNet-50 full train (batch 64) on the H200 (jax 0.11.2), 2 calls traced: 158 cuDNN calls
    # (forward, backward filter and input, bias+activation) whose engines' kernel names say
    # nothing of the HLO; each found from the event's own `hlo_op`. Nothing is left.
    payload = json.loads(
        gzip.decompress((RESNET50_TRAIN / f"{variant}.events.json.gz").read_bytes())
    )
    text = gzip.decompress((RESNET50_TRAIN / f"{variant}.hlo.txt.gz").read_bytes()).decode()
    report = analyze_hlo(text)
    events = [Event(*e) for e in payload["events"]]
    times = join_trace(report, events, payload["calls"])
    assert (len(report.kernel_details), times.unattributed) == (kernels, ())
    assert all(k.launches_per_call >= 1 for k in times.kernels)
    cudnn = [k for k in report.kernel_details if k.name.startswith("cudnn-conv")]
    assert len(cudnn) == 158 and report.custom_calls == 158 + cublas
    by_name = {k.name: k for k in times.kernels}
    assert all(by_name[k.name].time_s > 0 for k in cudnn)


def test_a_train_step_without_fusion_is_aligned_launch_by_launch():
    # GPT-2 full train under no-fusion: 5,463 launches per call against 5,293 kernels, a table
    # past the old 20 M-cell bound (1.5% of the time, two cuBLAS GEMMs, went unattributed); a
    # contiguous slice of the padded vocabulary runs as the driver's `memcpy32_post`.
    payload = json.loads(gzip.decompress((GPT2_TRAIN / "no-fusion.events.json.gz").read_bytes()))
    report = analyze_hlo(
        gzip.decompress((GPT2_TRAIN / "no-fusion.hlo.txt.gz").read_bytes()).decode()
    )
    events = [Event(*e) for e in payload["events"]]
    assert (len(events) // payload["calls"], len(report.kernel_details)) == (5463, 5293)
    times = join_trace(report, events, payload["calls"])
    assert times.unattributed == ()
    assert all(k.launches_per_call >= 1 for k in times.kernels)
    (piece,) = [k for k in times.kernels if k.name == "wrapped_slice.37"]
    assert piece.match == "memcpy"


def test_the_kernel_roofline_plots_intensity_against_flops_under_both_ceilings(tmp_path):
    from xlafuse.report.kernels import plot_kernel_roofline
    from xlafuse.results.parts import TraceRecord
    from xlafuse.results.records import CellResult

    report = analyze_hlo(SAMPLES / "block_fwd.default.hlo.txt")
    events = [Event(mangle(k.name) + ("_0" if k.name.startswith("gemm") else ""), j * 10**5, 50_000)
              for j, k in enumerate(report.kernel_details) if k.opcode != "custom-call"]  # fmt: skip
    summary = join_trace(
        report,
        events,
        1,
        basis=GPU_BASIS,
        copy_ceiling_bytes_per_s=4.0e12,
        matmul_ceiling_flops_per_s=1.0e12,
    ).summary()
    cell = dict(workload="block", size="full", mode="forward", dtype="bfloat16", variant="default")
    record = CellResult(**cell, backend="gpu", device_kind="NVIDIA H200",
                        trace=TraceRecord(kernel_times=summary))  # fmt: skip
    assert plot_kernel_roofline(record, tmp_path / "roofline.png")
    assert (tmp_path / "roofline.png").stat().st_size > 10_000
    without = {**summary, "matmul_ceiling_flops_per_s": None}  # an older record: bytes only
    old = CellResult(**cell, backend="gpu", device_kind="NVIDIA H200",
                     trace=TraceRecord(kernel_times=without))  # fmt: skip
    assert plot_kernel_roofline(old, tmp_path / "memory.png")


def test_a_library_call_that_launches_two_kernels_is_bounded_by_its_work_once():
    # cuBLAS's split-K GEMM: the main kernel and its reduction, two launches for one HLO op
    # (the H200's mlp full forward: `cublas-lt-matmul.1` read 203% of its bound when the bound
    # was counted per launch)
    report = analyze_hlo(SAMPLES / "block_fwd.default.hlo.txt")
    call = next(k for k in report.kernel_details if k.opcode == "custom-call")
    assert report.runs[call.computation] == 1
    events = [
        Event(name, j * 10**5, 40_000, "", call.name)
        for j, name in enumerate(("nvjet_sm90_tst_splitK", "splitKreduce_kernel"))
    ]
    row = next(k for k in join_trace(report, events, 1, basis=GPU_BASIS, copy_ceiling_bytes_per_s=4.0e12, matmul_ceiling_flops_per_s=1.0e12).kernels
               if k.name == call.name)  # fmt: skip
    assert row.launches_per_call == 2
    work_s = max(call.flops / 1.0e12, (call.bytes_in + call.bytes_out) / 4.0e12)
    assert row.bound_s == pytest.approx(work_s)
    assert row.pct_of_bound == pytest.approx(100 * work_s / 80e-6)
