"""Timing statistics (on a fake clock), calibration figures, and the GPU profiler path."""

import jax
import jax.numpy as jnp
import pytest

from xlafuse.measure import calibrate as calibrate_module
from xlafuse.measure import timing
from xlafuse.measure.calibrate import calibrate
from xlafuse.measure.profile import profile_device_time


class FakeClock:
    """Advances only when a fake function runs: each call takes the next duration in the list."""

    def __init__(self, durations):
        self.now = 0.0
        self.durations = list(durations)
        self.calls = 0

    def __call__(self) -> float:
        return self.now

    def fn(self, x):
        self.now += self.durations[self.calls % len(self.durations)]
        self.calls += 1
        return x


def test_latency_stats_on_a_fake_clock():
    # Warm-up calls take 100 s each: the first call (a compile) must never be timed.
    clock = FakeClock([100.0, 100.0] + [float(i) for i in range(1, 11)] + [1.0] * 100)
    settings = timing.TimingSettings(warmup=2, min_time_s=0, min_iters=10, max_iters=10, repeats=2)
    result = timing.measure(clock.fn, (jnp.zeros(3),), settings, clock=clock)
    assert result.iters == 10
    assert result.warmup_iters == 2
    assert result.time_median_s == pytest.approx(5.5)
    assert result.time_p10_s == pytest.approx(1.9)
    assert result.time_p90_s == pytest.approx(9.1)
    assert result.time_min_s == 1.0
    assert result.time_p10_s <= result.time_median_s <= result.time_p90_s
    assert result.pipelined_iters == 10
    assert result.pipelined_s_per_call == pytest.approx(1.0)
    assert clock.calls == 2 + 10 + 2 * 10


def test_min_time_keeps_timing_past_min_iters():
    clock = FakeClock([0.1])
    settings = timing.TimingSettings(warmup=1, min_time_s=2.0, min_iters=3, max_iters=100)
    samples, _ = timing.time_latency(clock.fn, (1,), settings, clock=clock)
    assert len(samples) == 20  # 20 calls of 0.1 s reach min_time_s


def test_max_iters_caps_timing():
    clock = FakeClock([0.1])
    settings = timing.TimingSettings(warmup=1, min_time_s=1e9, min_iters=3, max_iters=7)
    samples, _ = timing.time_latency(clock.fn, (1,), settings, clock=clock)
    assert len(samples) == 7


def test_real_function_stats_are_ordered():
    f = jax.jit(lambda x: jnp.sin(x) * 2)
    settings = timing.TimingSettings(warmup=1, min_time_s=0, min_iters=5, max_iters=5, repeats=2)
    result = timing.measure(f, (jnp.ones((64, 64)),), settings)
    assert result.iters == 5
    assert 0 < result.time_p10_s <= result.time_median_s <= result.time_p90_s
    assert result.pipelined_s_per_call > 0


def test_train_state_is_threaded_through_calls():
    step = jax.jit(lambda state, batch: (state + batch, jnp.sum(state)), donate_argnums=0)
    settings = timing.TimingSettings(warmup=2, min_time_s=0, min_iters=3, max_iters=3, repeats=1)
    args = (jnp.zeros(4), jnp.ones(4))
    # With a donated state, reusing the first state would raise "buffer has been deleted".
    warm = timing.warm_up(step, args, settings.warmup, timing.thread_state)
    assert float(warm[0][0]) == 2.0
    samples, after = timing.time_latency(step, warm, settings, timing.thread_state)
    assert len(samples) == 3
    assert float(after[0][0]) == 5.0


def test_calibration_divides_bytes_and_flops_by_the_time_per_call(monkeypatch):
    if jax.default_backend() == "gpu":
        pytest.skip("on a GPU the copy time is the profiled kernel time, not the wall clock")
    calls = []

    def pipelined(fn, args, calls_per_burst, repeats, *rest, **kwargs):
        calls.append((calls_per_burst, repeats))
        return 2e-3, 0.0, 0.0  # seconds per call (median, p10, p90)

    monkeypatch.setattr(calibrate_module, "time_pipelined", pipelined)
    ceilings = calibrate(copy_bytes=1 << 20, matmul_size=64)
    assert ceilings.backend == "cpu" and ceilings.copy_basis == "pipelined_s_per_call"
    assert ceilings.copy_bytes_per_s == 2 * (1 << 20) / 2e-3  # read + write, per second
    assert ceilings.matmul_flops_per_s == 2 * 64**3 / 2e-3
    assert (ceilings.copy_array_bytes, ceilings.matmul_size) == (1 << 20, 64)
    assert calls == [(calibrate_module.CALLS_PER_BURST, 7), (calibrate_module.CALLS_PER_BURST, 5)]


def test_profile_is_none_without_a_gpu():
    if jax.default_backend() == "gpu":
        pytest.skip("this checks the CPU answer")
    assert profile_device_time(jax.jit(lambda x: x + 1), (jnp.ones(8),)) is None


@pytest.mark.gpu
def test_profile_counts_gpu_kernels(tmp_path):
    f = jax.jit(lambda x: jnp.cos(x) + 1)
    compiled = f.lower(jnp.ones((1024, 1024))).compile(
        compiler_options={"xla_disable_hlo_passes": "fusion"}
    )
    profile = profile_device_time(compiled, (jnp.ones((1024, 1024)),), calls=5, log_dir=tmp_path)
    assert profile is not None
    assert profile.calls == 5
    assert profile.device_kernels_per_call >= 2  # cos and add, unfused
    assert profile.device_time_s > 0
    assert list(tmp_path.rglob("*.xplane.pb"))
