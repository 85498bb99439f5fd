"""Timing statistics (on a fake clock), calibration figures, and the GPU profiler path."""

import jax
import jax.numpy as jnp
import pytest

from xlafuse.measurement import calibrate as calibrate_module
from xlafuse.measurement import timing
from xlafuse.measurement.calibrate import calibrate
from xlafuse.measurement.profile import profile_device_time


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


def test_rounds_on_a_fake_clock():
    # Warm-up calls take 100 s each: the first calls (a compile) must never be timed; the next
    # one (5 s) only sizes the rounds. Then each round: 3 synchronized calls, a burst of 10.
    burst = timing.BURST_MIN
    rounds = [[1.0, 2.0, 3.0], [1.0] * burst, [4.0, 5.0, 6.0], [2.0] * burst]
    rounds += [[7.0, 8.0, 9.0], [3.0] * burst]
    clock = FakeClock([100.0, 100.0, 5.0] + [d for r in rounds for d in r])
    settings = timing.TimingSettings(warmup=2, min_time_s=0, min_iters=9, max_iters=9, repeats=3)
    result = timing.measure(clock.fn, (jnp.zeros(3),), settings=settings, clock=clock)
    assert (result.iters, result.pipelined_iters, result.warmup_iters) == (9, burst, 2)
    assert result.time_median_s == pytest.approx(5.0)
    assert result.time_p10_s == pytest.approx(1.8)
    assert result.time_p90_s == pytest.approx(8.2)
    assert result.time_min_s == 1.0
    assert result.pipelined_samples_s == pytest.approx((1.0, 2.0, 3.0))
    assert result.pipelined_s_per_call == pytest.approx(2.0)
    assert clock.calls == 3 + 9 + 3 * burst


def test_min_time_keeps_timing_past_min_iters():
    clock = FakeClock([0.1])
    settings = timing.TimingSettings(warmup=1, min_time_s=5.0, min_iters=3, max_iters=100)
    result = timing.measure(clock.fn, (1,), settings=settings, clock=clock)
    # Rounds of 3 + 10 calls of 0.1 s: the fourth round is the first to end past min_time_s
    # (5.2 s), after the 3 rounds that `repeats` asks for.
    assert result.iters == 12


def test_max_iters_caps_timing():
    clock = FakeClock([0.1])
    settings = timing.TimingSettings(warmup=1, min_time_s=1e9, min_iters=3, max_iters=7)
    result = timing.measure(clock.fn, (1,), settings=settings, clock=clock)
    # A long min_time_s asks for the longest rounds; max_iters caps a round too: one round of 7.
    assert (result.iters, result.pipelined_iters) == (7, timing.BURST_MIN)
    settings = timing.TimingSettings(warmup=1, min_time_s=1e9, min_iters=3, max_iters=170)
    assert (
        timing.measure(clock.fn, (1,), settings=settings, clock=clock).iters == 150
    )  # 3 rounds of 50


def test_real_function_stats_are_ordered():
    f = jax.jit(lambda x: jnp.sin(x) * 2)
    settings = timing.TimingSettings(warmup=1, min_time_s=0, min_iters=6, max_iters=6, repeats=2)
    result = timing.measure(f, (jnp.ones((64, 64)),), settings=settings)
    assert result.iters == 6
    assert 0 < result.time_p10_s <= result.time_median_s <= result.time_p90_s
    assert result.pipelined_s_per_call > 0


def test_train_state_is_threaded_through_calls():
    step = jax.jit(lambda state, batch: (state + batch, jnp.sum(state)), donate_argnums=0)
    settings = timing.TimingSettings(warmup=2, min_time_s=0, min_iters=3, max_iters=3, repeats=1)
    args = (jnp.zeros(4), jnp.ones(4))
    # With a donated state, reusing the first state would raise "buffer has been deleted".
    warm = timing.warm_up(step, args, settings.warmup, advance=timing.thread_state)
    assert float(warm[0][0]) == 2.0
    timed = timing.measure(step, warm, settings=settings, advance=timing.thread_state)
    assert timed.iters == 3  # rounds of 3 synchronized calls and a burst of 3, on a fresh state


def test_calibration_divides_bytes_and_flops_by_the_time_per_call(monkeypatch):
    if jax.default_backend() == "gpu":
        pytest.skip("on a GPU the copy time is the profiled kernel time, not the wall clock")
    bursts = []
    seconds = iter([2e-3, 4e-3, 1e-3, 2e-3, 2e-3] + [2e-3] * 5)

    def pipelined(fn, args, calls_per_burst, repeats, *rest, **kwargs):
        bursts.append((calls_per_burst, repeats))
        return next(seconds), 0.0, args

    monkeypatch.setattr(calibrate_module, "time_pipelined", pipelined)
    monkeypatch.setattr(calibrate_module, "last_level_cache_bytes", lambda backend: 1 << 20)
    ceilings = calibrate(copy_bytes=1 << 20, matmul_size=64)
    assert ceilings.backend == "cpu" and ceilings.copy_basis == "pipelined_s_per_call"
    assert ceilings.copy_bytes_per_s == 2 * (1 << 20) / 2e-3  # read + write, median burst
    assert ceilings.copy_range == (2 * (1 << 20) / 4e-3, 2 * (1 << 20) / 1e-3)
    assert ceilings.matmul_flops_per_s == 2 * 64**3 / 2e-3
    assert (ceilings.copy_array_bytes, ceilings.matmul_size) == (1 << 20, 64)
    assert ceilings.cache_bytes == 1 << 20
    copy_calls, copy_bursts = calibrate_module.COPY_BURSTS["cpu"]
    assert bursts == [(copy_calls, 1)] * copy_bursts + [(calibrate_module.CALLS_PER_BURST, 1)] * 5


def test_the_cpu_copy_array_is_far_larger_than_the_cache():
    mib = calibrate_module.MIB
    assert calibrate_module.copy_array_bytes("cpu", 32 * mib) == 256 * mib
    assert calibrate_module.copy_array_bytes("cpu", 64 * mib) == 512 * mib  # 8x the cache
    assert calibrate_module.copy_array_bytes("cpu", None) == 256 * mib
    assert calibrate_module.copy_array_bytes("gpu", 60 * mib) == 1024 * mib


def test_the_cache_size_is_read_on_this_machine():
    cache = calibrate_module.last_level_cache_bytes(jax.default_backend())
    # Every Linux CPU in sysfs has caches; a GPU reports its L2. Megabytes, not bytes or TB.
    assert cache is None or (1 << 18) <= cache <= (1 << 31)


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
