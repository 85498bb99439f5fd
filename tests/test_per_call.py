"""Loop programs counted per call (issue 43): a loop body's kernels by XLA's known trip count,
nested loops multiplied, a conditional's branches with the basis said, and no per-call figure
where a trip count is unknown."""

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from helpers import run_cli

import xlafuse
from xlafuse import models
from xlafuse.compiler.jit import compile_workload
from xlafuse.hlo.loops import PER_CALL, PER_ITERATION
from xlafuse.inspect.schema import InspectResult
from xlafuse.report.inspect_text import render_summary

EXAMPLE = Path(__file__).parent.parent / "examples" / "cartpole.py"


def _zoo_report(name, **overrides):
    workload = models.build(name, size="tiny", mode="forward", **overrides)
    return compile_workload(workload, "default").report


def _example_report(capsys, steps):
    code, out, err = run_cli(
        capsys, "inspect", "--workload", f"{EXAMPLE}:rollout",
        "--overrides", f"envs=64,steps={steps}", "--json",
    )  # fmt: skip
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize(("name", "length"), [("cartpole", "steps"), ("lstm", "seq_len")])
def test_zoo_loops_count_per_call_by_the_trip_count(name, length):
    short, long = (_zoo_report(name, **{length: n}) for n in (10, 200))
    assert short.per_call_basis == long.per_call_basis == PER_CALL
    assert short.kernels == long.kernels  # the program text: one body either way
    for field in ("modeled_bytes_per_call", "flops_per_call"):
        ratio = getattr(long, field) / getattr(short, field)
        assert ratio == pytest.approx(20, rel=0.05), (field, ratio)
    assert 200 in {long.runs_of(k) for k in long.kernel_details}
    growth = long.launches_per_call - short.launches_per_call  # 190 more runs of the loop
    assert growth > 0 and growth % 190 == 0


def test_example_rollout_counts_per_call_in_inspect_json(capsys):
    short, long = _example_report(capsys, 10), _example_report(capsys, 200)
    for field in ("modeled_bytes_per_call", "flops_per_call"):
        assert long[field] / short[field] == pytest.approx(20, rel=0.05), field
    assert long["kernels"] == short["kernels"]
    body = [k for k in long["kernels_detail"] if k["launches_per_call"] == 200]
    assert body, "the scan body's kernels launch 200 times per call"
    total = sum((k["bytes_in"] + k["bytes_out"]) * k["launches_per_call"]
                for k in long["kernels_detail"])  # fmt: skip
    assert total == long["modeled_bytes_per_call"]
    assert sum(k["traffic_share"] for k in long["kernels_detail"]) == pytest.approx(1.0)


def _nested(x):
    def inner(_, y):
        return jnp.sin(y) * 1.5

    def outer(_, y):
        return jax.lax.fori_loop(0, 7, inner, y) + 1.0

    return jax.lax.fori_loop(0, 3, outer, x)


def test_nested_loops_multiply():
    report = xlafuse.compile(_nested).compile(jnp.ones((1024,))).report
    runs = {report.runs_of(k) for k in report.kernel_details}
    assert 21 in runs  # the inner body: 7 iterations in each of 3
    assert report.per_call_basis == PER_CALL
    per_call = sum((k.bytes_in + k.bytes_out) * report.runs_of(k) for k in report.kernel_details)
    assert report.modeled_bytes_per_call == per_call > 20 * report.modeled_bytes / 3


def _data_dependent(x):
    return jax.lax.while_loop(lambda y: y.sum() < 1e6, lambda y: y * 1.5 + 1.0, x)


def test_a_data_dependent_loop_is_per_iteration_with_the_words(capsys):
    compiled = xlafuse.compile(_data_dependent).compile(jnp.ones((256,)))
    report = compiled.report
    assert report.per_call_basis == PER_ITERATION == "per iteration, trip count unknown"
    assert report.modeled_bytes_per_call is None and report.flops_per_call is None
    assert report.launches_per_call is None and report.modeled_bytes > 0
    summary = render_summary(InspectResult("t", "file", report=report))
    assert f"modeled traffic: {report.modeled_bytes / 1e6:.2f} MB {PER_ITERATION}" in summary
    table = str(xlafuse.compare(_data_dependent, jnp.ones((256,)), variants=["default"]))
    assert f"default: {PER_ITERATION} (" in table and "MB per iteration)" in table


def _branches(x, flag):
    return jax.lax.cond(flag, lambda y: jnp.sin(y) * 2.0, lambda y: jnp.cos(y) + 1.0, x)


def test_a_conditional_counts_every_branch_and_says_so():
    report = xlafuse.compile(_branches).compile(jnp.ones((4096,)), True).report
    if not any(i for i in report.runs if i != report.module and report.runs[i] == 1):
        pytest.skip("XLA turned the conditional into a select")
    assert report.per_call_basis in (
        PER_CALL,
        f"{PER_CALL}, every branch of a conditional counted as taken (an upper bound)",
    )
    assert report.modeled_bytes_per_call == sum(
        (k.bytes_in + k.bytes_out) * report.runs_of(k) for k in report.kernel_details
    )


def test_bandwidth_divides_the_bytes_of_one_call():
    from xlafuse.experiment.fields import with_rates
    from xlafuse.results import parts
    from xlafuse.results.records import CellResult

    fusion = parts.FusionRecord(
        kernels=10, modeled_bytes=1_000, modeled_bytes_per_call=200_000,
        launches_per_call=2_000, per_call_basis=PER_CALL,
    )  # fmt: skip
    record = CellResult(
        workload="w", size="tiny", mode="forward", dtype=None, variant="default",
        backend="cpu", device_kind="cpu", fusion=fusion, timing=parts.TimingRecord(median_s=1e-3),
        model=parts.ModelRecord(items_per_call=1),
    )  # fmt: skip
    assert with_rates(record, "cpu").rates.achieved_bytes_per_s == pytest.approx(2e8)
    unknown = parts.FusionRecord(kernels=10, modeled_bytes=1_000, per_call_basis=PER_ITERATION)
    record = CellResult(
        workload="w", size="tiny", mode="forward", dtype=None, variant="default",
        backend="cpu", device_kind="cpu", fusion=unknown, timing=parts.TimingRecord(median_s=1e-3),
        model=parts.ModelRecord(items_per_call=1),
    )  # fmt: skip
    assert with_rates(record, "cpu").rates.achieved_bytes_per_s is None


def _timed(device_s, pipelined_s):
    from xlafuse.results import parts
    from xlafuse.results.records import CellResult

    return CellResult(
        workload="cartpole", size="full", mode="forward", dtype=None, variant="default",
        backend="gpu", device_kind="NVIDIA H100 80GB HBM3",
        fusion=parts.FusionRecord(kernels=8, modeled_bytes=1_000, modeled_bytes_per_call=500_000,
                                  launches_per_call=4_000, per_call_basis=PER_CALL),
        timing=parts.TimingRecord(median_s=6.34e-3, pipelined_s_per_call=pipelined_s),
        device=parts.DeviceRecord(time_s=device_s),
        model=parts.ModelRecord(items_per_call=512_000),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("device_s", "pipelined_s", "perturbed"),
    [(6.29e-3, 5.68e-3, True), (5.90e-3, 5.68e-3, False), (5.00e-3, 5.68e-3, False)],
)
def test_a_traced_time_above_the_untraced_one_is_trace_perturbed(device_s, pipelined_s, perturbed):
    from xlafuse.experiment.fields import trace_perturbed, with_rates
    from xlafuse.report.cells import cell_tables
    from xlafuse.report.lines import cell_line

    assert trace_perturbed(device_s, pipelined_s) is perturbed
    record = with_rates(_timed(device_s, pipelined_s), "gpu")
    assert record.rates.trace_perturbed is perturbed
    # a perturbed trace is not the program's time: bandwidth divides the untraced time instead
    seconds = pipelined_s if perturbed else device_s
    assert record.rates.achieved_bytes_per_s == pytest.approx(500_000 / seconds)
    assert record.rates.basis == ("pipelined_s_per_call" if perturbed else "device_time_s")
    assert ("TRACE-PERTURBED" in cell_line(record)) is perturbed
    assert ("TRACE-PERTURBED" in "\n".join(cell_tables([record]))) is perturbed


def test_a_gpu_scan_writes_one_step_of_its_outputs_per_iteration(samples):
    """The H200's scan: its async dynamic-update-slice fusion (`fusion-start`) carries its
    operands in its output tuple, and updates the stacked f32[16] in place: per iteration it
    reads the index and the new element and writes that element, not 2 x 64 B and the tuple."""
    report = xlafuse.analyze_hlo(samples / "scan_rnn.default.hlo.txt")
    (start,) = [k for k in report.kernel_details if k.opcode == "fusion-start"]
    assert (start.bytes_in, start.bytes_out, report.runs_of(start)) == (8, 4, 16)
    # x[i] of the scan's f32[16,8,256] input read by a dynamic-slice: one f32[8,256] step
    # (8,192 B of 131,072), beside the dot's f32[8,256] and the s32 index
    tanh = next(k for k in report.kernel_details if k.name == "loop_tanh_fusion")
    assert "dynamic-slice" in tanh.ops and tanh.bytes_in == 8_192 + 8_192 + 4
    assert report.modeled_bytes_per_call == sum(
        (k.bytes_in + k.bytes_out) * report.runs_of(k) for k in report.kernel_details
    )


CHUNKED = Path(__file__).parent / "data" / "chunked-accumulate.hlo.txt"
_WINDOW = 256 * 512 * 4  # one f32[256,512] chunk of the f32[256,4096] gradient


@pytest.mark.parametrize(
    ("edit", "bytes_in", "bytes_out"),
    [
        # dw[:, i] += g: the window read once, the update written; plus g and the index
        ({}, 2 * _WINDOW + 4, _WINDOW),
        # a root bitcast of the update, as XLA allows, is still in place
        (
            {
                "ROOT %dynamic-update-slice.2 = f32[256,4096]{1,0}": "%dynamic-update-slice.2 = "
                "f32[256,4096]{1,0}",
                "%constant_0.2, %start.2)\n": "%constant_0.2, %start.2)\n  ROOT %bitcast.2 = "
                "f32[1048576]{0} bitcast(%dynamic-update-slice.2)\n",
            },
            2 * _WINDOW + 4,
            _WINDOW,
        ),
        # a read of another window: not in place, the whole buffer in and out
        (
            {"dynamic-slice(%param_0.2, %constant_0.2, %start.2)": "dynamic-slice(%param_0.2, "
             "%constant_0.2, %constant_0.2)"},
            256 * 4096 * 4 + _WINDOW + 4,
            256 * 4096 * 4,
        ),
    ],
)  # fmt: skip
def test_an_in_place_accumulation_reads_and_writes_its_window(edit, bytes_in, bytes_out):
    """tokamax's chunked LM-head loss accumulates its weight gradient chunk by chunk with
    `dynamic_update_slice(acc, dynamic_slice(acc, i) + g, i)`: XLA updates the buffer in place
    (on the H100, 6 us per launch for a 157 MB buffer), so a launch moves the window, not the
    buffer; counted whole, GPT-2's loss read and wrote 318 MB per chunk, 1,665% of the ceiling."""
    text = CHUNKED.read_text()
    for old, new in edit.items():
        assert old in text
        text = text.replace(old, new)
    report = xlafuse.analyze_hlo(text)
    (dus,) = [k for k in report.kernel_details if k.name == "loop_dynamic_update_slice_fusion"]
    assert (dus.bytes_in, dus.bytes_out, report.runs_of(dus)) == (bytes_in, bytes_out, 8)
