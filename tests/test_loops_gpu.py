"""A loop program on a real GPU (issue 43): per-call bytes are one iteration's times the trip
count, and its device figure is within 3% of its untraced pipelined time or marked."""

import pytest

import xlafuse
from xlafuse import models
from xlafuse.compile.jit import compile_workload
from xlafuse.hlo.loops import PER_CALL

pytestmark = pytest.mark.gpu


def test_cartpole_full_counts_its_scan_body_500_times():
    report = compile_workload(models.build("cartpole", size="full"), "default").report
    assert report.per_call_basis == PER_CALL
    body = [k for k in report.kernel_details if report.runs_of(k) == 500]
    assert body, "the scan body's kernels run 500 times per call"
    once = sum(k.bytes_in + k.bytes_out for k in report.kernel_details if report.runs_of(k) == 1)
    per_step = sum(k.bytes_in + k.bytes_out for k in body)
    assert report.modeled_bytes_per_call == once + 500 * per_step
    assert report.launches_per_call == len(report.kernel_details) - len(body) + 500 * len(body)


def test_cartpole_full_device_figure_is_the_programs_or_marked(tmp_path):
    work = models.build("cartpole", size="full")
    measured = xlafuse.measure(
        work, variants=["default"], out=tmp_path, profile=True,
        timing={"warmup": 2, "min_time_s": 0.2, "min_iters": 10, "repeats": 3},
    )  # fmt: skip
    (record,) = measured.records
    device, pipelined = record.device.time_s, record.timing.pipelined_s_per_call
    assert device and pipelined
    if record.rates.trace_perturbed:
        assert device > 1.05 * pipelined
        assert record.rates.basis == "pipelined_s_per_call"
    else:
        assert device <= 1.05 * pipelined
    assert record.fusion.modeled_bytes_per_call > 400 * record.fusion.modeled_bytes / 2
