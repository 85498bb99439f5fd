"""Kernel times on a real GPU: the 1 GiB chain's every kernel joined, summing to the device time."""

import pytest

from xlafuse import models
from xlafuse.compiler.jit import compile_workload
from xlafuse.measurement.kernel_diff import measure_workload_diff, trace_kernel_times
from xlafuse.measurement.kernels import GPU_BASIS, find_trace
from xlafuse.measurement.profile import read_trace
from xlafuse.models.names import Cell

pytestmark = pytest.mark.gpu
CALLS = 5


@pytest.mark.parametrize("variant", ["default", "no-fusion"])
def test_1gib_chain_is_fully_attributed_and_sums_to_the_device_time(tmp_path, variant):
    work = models.build("chain", size="full", ops=8)  # 2**28 float32: 1 GiB per array
    assert work.args[0].size == 1 << 28
    compiled = compile_workload(work, variant)
    kernels = compiled.report.kernels
    assert kernels == 1 if variant == "default" else kernels > 8
    times = trace_kernel_times(compiled, work, CALLS, tmp_path)
    assert times.basis == GPU_BASIS
    assert times.unattributed == () and times.unattributed_share == 0.0
    assert times.attributed_s == pytest.approx(times.time_s, rel=1e-9)
    assert times.launches_per_call == kernels
    device = read_trace(find_trace(tmp_path), CALLS)
    assert times.time_s == pytest.approx(device.device_time_s, rel=1e-9)
    assert device.device_kernels_per_call == kernels


def test_measured_diff_of_the_1gib_chain_saves_time_in_its_one_fusion():
    measured = measure_workload_diff(Cell("chain", "full"), ("default", "no-fusion"), calls=CALLS)
    assert len(measured.timed) == 1
    group = measured.timed[0]
    assert len(group.group.kernels_a) == 1
    assert len(group.group.kernels_b) == measured.diff.kernels_b > 8
    assert group.time_a_s == pytest.approx(measured.times_a.time_s, rel=1e-9)
    assert group.time_b_s == pytest.approx(measured.times_b.time_s, rel=1e-9)
    assert group.saved_s > 5 * group.time_a_s  # 8 round trips of 1 GiB vs one


@pytest.mark.parametrize("variant", ["default", "no-gemm-fusion"])
def test_a_gpt2_train_step_is_attributed_within_one_percent(tmp_path, variant):
    # issue 27's goal on a GEMM-heavy train step: cuBLAS launches (`nvjet_*`, memsets) and
    # Triton GEMMs all joined to the HLO kernel that launched them, every kernel seen
    work = models.build("gpt2", size="small", mode="train")
    compiled = compile_workload(work, variant)
    times = trace_kernel_times(compiled, work, 3, tmp_path)
    assert times.unattributed_share < 0.01, times.unattributed[:5]
    assert sum(1 for k in times.kernels if k.launches_per_call) == len(times.kernels)
