"""A loop program on a real GPU (issue 43): per-call bytes are one iteration's times the trip
count, and its device figure is within 3% of its untraced pipelined time or marked."""

import pytest

import xlafuse
from xlafuse import models
from xlafuse.compiler.jit import compile_workload
from xlafuse.hlo.loops import PER_CALL

pytestmark = pytest.mark.gpu


def _loop_bytes(report):
    """(bytes per call of the kernels that run once, of those inside the scan)."""
    once = looped = 0
    for k in report.kernel_details:
        runs = report.runs_of(k)
        if runs == 1:
            once += k.bytes_in + k.bytes_out
        else:
            looped += (k.bytes_in + k.bytes_out) * runs
    return once, looped


def test_cartpole_full_counts_its_scan_body_by_the_trip_count():
    reports = {
        steps: compile_workload(
            models.build("cartpole", size="full", steps=steps), "default"
        ).report
        for steps in (250, 500)
    }
    full = reports[500]
    assert full.per_call_basis == PER_CALL
    assert 500 in {full.runs_of(k) for k in full.kernel_details}  # the scan body
    once, looped = _loop_bytes(full)
    assert full.modeled_bytes_per_call == once + looped
    assert full.launches_per_call == sum(full.runs_of(k) for k in full.kernel_details)
    # one iteration's bytes (the body's, and the loops nested in it, by their trip counts)
    # times the trip count: half the steps, half the loop's bytes (a counted loop's condition
    # does not run)
    half_once, half_looped = _loop_bytes(reports[250])
    assert half_once == once and half_looped * 2 == pytest.approx(looped, rel=1e-6)


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
