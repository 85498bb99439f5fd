"""One program, one truth: every entry point measures the same compiled program, no-fusion means
no fusion, one numerics rule, process-flag cells measured in one child, speedups with verdicts."""

import json
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FAST_TIMING, small_calibration

from xlafuse import models
from xlafuse.compiler import child, protocol, variants
from xlafuse.compiler.jit import compile_workload, unoptimized_hlo
from xlafuse.experiment import fields, runner
from xlafuse.experiment.compare import compare_workload
from xlafuse.experiment.config import parse_config
from xlafuse.inspect.targets import inspect_target
from xlafuse.measurement import stats, timing
from xlafuse.measurement.numerics import compare_train_steps, host_outputs, judge_workload
from xlafuse.models.names import Cell

# The same cells are compiled by run, compare and inspect, test after test (and by
# test_models.py and test_hlo_flops.py): each program is compiled once, then read back from the
# cache (these tests check kernels and numbers).
pytestmark = pytest.mark.usefixtures("shared_compile_cache")

TRAINABLE = models.available(mode="train")
EVERY_CELL = [(name, "forward") for name in models.available()] + [
    (name, "train") for name in TRAINABLE
]


def _slow_if_resnet(cells):
    return [pytest.param(*c, marks=pytest.mark.slow) if c[0] == "resnet50" else c for c in cells]


@pytest.fixture(autouse=True)
def fast_calibration(monkeypatch):
    monkeypatch.setattr(runner, "calibrate", small_calibration)


def _run(tmp_path, workloads, variant_names=("default", "no-fusion")):
    config = parse_config(
        {
            "experiment": {"name": "t", "output": str(tmp_path), "variants": list(variant_names)},
            "workloads": workloads,
            "timing": FAST_TIMING,
        },
        backend=jax.default_backend(),
    )
    return runner.run_experiment(config, progress=False)


# ResNet-50 and cartpole left out for the suite's time (~20 s each on 2 cores): lstm stands for
# the programs under a scan.
@pytest.mark.parametrize("name", [n for n in TRAINABLE if n not in ("resnet50", "cartpole")])
def test_run_compare_and_inspect_count_the_same_kernels(tmp_path, name):
    (record,) = _run(tmp_path, [{"name": name, "mode": "train"}], ("default",))
    workload = models.build(name, size="tiny", mode="train")
    row = compare_workload(workload, variants=["default"]).rows[0]
    inspected = inspect_target(cell=Cell(name, mode="train")).report
    assert record.fusion.kernels == row.kernels == inspected.kernels
    assert record.fusion.modeled_bytes == inspected.modeled_bytes
    assert record.fusion.bytes_per_call == row.modeled_bytes == inspected.modeled_bytes_per_call
    assert record.fusion.launches_per_call == row.launches_per_call == inspected.launches_per_call


def test_a_train_step_records_its_host_time_below_its_pipelined_time(tmp_path):
    # Host time per call is the enqueue time of a pipelined burst: part of the burst's time.
    (record,) = _run(tmp_path, [{"name": "mlp", "mode": "train"}], ("default",))
    timing, rates = record.timing, record.rates
    assert 0 < timing.host_s_per_call <= timing.pipelined_s_per_call
    if record.device.time_s is None:  # no device profile (CPU): nothing to be bound by
        assert rates.host_bound is None
    else:
        bound = timing.pipelined_s_per_call > fields.HOST_BOUND * record.device.time_s
        assert rates.host_bound is bound


@pytest.mark.gpu
def test_a_full_size_train_step_on_the_gpu_is_device_bound(tmp_path):
    # The `full` train sizes are meant to fill the GPU (issue "GPU truth"): pipelined time within
    # the host-bound factor of the profiled device time, the host's enqueue time below both.
    config = parse_config(
        {
            "experiment": {"name": "t", "output": str(tmp_path), "variants": ["default"]},
            # Measured on the H200: 8.2 ms per step pipelined for 8.2 ms of kernels (1.01x).
            "workloads": [
                {
                    "name": "attention",
                    "size": "full",
                    "mode": "train",
                    "overrides": {"implementation": "xla"},
                }
            ],
            "timing": FAST_TIMING,
            "measure": {"profile": True},
        },
        backend="gpu",
    )
    (record,) = runner.run_experiment(config, progress=False)
    timing, device = record.timing, record.device
    assert device.time_s > 0 and device.kernels_per_call >= 1
    assert timing.host_s_per_call < timing.pipelined_s_per_call
    assert record.rates.host_bound is False


def test_train_state_is_donated():
    workload = models.build("mlp", size="tiny", mode="train")
    hlo = compile_workload(workload, "default").hlo_text
    # XLA marks donated parameters that alias outputs in the module header.
    assert "input_output_alias=" in hlo.split("\n", 1)[0]
    state = workload.args[0]
    compiled = compile_workload(workload, "default")
    compiled(*workload.fresh_args())
    assert not any(leaf.is_deleted() for leaf in state)  # the workload's own args survive


@pytest.mark.parametrize(("name", "mode"), _slow_if_resnet(EVERY_CELL))
def test_no_fusion_leaves_no_real_fusion_and_agrees(name, mode):
    workload = models.build(name, size="tiny", mode=mode)
    table = compare_workload(workload, variants=["default", "no-fusion"])
    unfused = table.row("no-fusion")
    assert unfused.real_fusions == 0
    assert unfused.within_tolerance, unfused


def test_run_and_compare_give_one_verdict(tmp_path):
    cells = [{"name": "mlp", "mode": "train"}, {"name": "softmax"}, {"name": "attention"}]
    records = _run(tmp_path, cells)
    for record in records:
        if record.variant != "no-fusion":
            continue
        workload = models.build(record.workload, size="tiny", mode=record.mode)
        row = compare_workload(workload, variants=["default", "no-fusion"]).row("no-fusion")
        assert row.within_tolerance == record.numerics.within_tolerance
        assert row.max_abs_diff == pytest.approx(record.numerics.max_abs_diff, rel=1e-6, abs=1e-12)
        assert row.kernels == record.fusion.kernels


def test_train_step_rule_judges_loss_gradient_and_parameters():
    lr = 1e-3
    grad = {"w": np.array([1.0, -2.0, 1e-6], np.float32)}
    params = {"w": np.array([0.5, 0.5, 0.5], np.float32)}
    base = {"loss": np.float32(1.0), "gradient": grad, "batch_stats": {}, "params": params}
    # The third gradient is zero within tolerance: its sign is noise, so its parameter may end
    # up 2 x lr away (Adam's first step moves it by +-lr).
    flipped = dict(base, params={"w": np.array([0.5, 0.5, 0.5 + 2 * lr], np.float32)})
    assert compare_train_steps(
        base, flipped, compute_dtype="float32", learning_rate=lr
    ).within_tolerance
    # A clear gradient gets no such allowance.
    moved = dict(base, params={"w": np.array([0.5 + 2 * lr, 0.5, 0.5], np.float32)})
    verdict = compare_train_steps(base, moved, compute_dtype="float32", learning_rate=lr)
    assert not verdict.within_tolerance and verdict.worst_part == "params"
    # A wrong gradient is caught whatever the parameters do.
    wrong = dict(base, gradient={"w": np.array([1.0, 2.0, 1e-6], np.float32)})
    verdict = compare_train_steps(base, wrong, compute_dtype="float32", learning_rate=lr)
    assert not verdict.within_tolerance and verdict.worst_part == "gradient"
    # The loss is judged at the compute dtype's tolerance.
    off = dict(base, loss=np.float32(1.001))
    assert not compare_train_steps(
        base, off, compute_dtype="float32", learning_rate=lr
    ).within_tolerance
    assert compare_train_steps(
        base, off, compute_dtype="bfloat16", learning_rate=lr
    ).within_tolerance


def test_judge_workload_flags_a_perturbed_train_step():
    workload = models.build("mlp", size="tiny", mode="train")
    compiled = compile_workload(workload, "default")
    reference = host_outputs(workload, compiled(*workload.fresh_args()))
    assert judge_workload(workload, reference, reference).within_tolerance
    leaves, loss = compiled(*workload.fresh_args())
    params = jax.tree.leaves(workload.structured_state(leaves=leaves)["params"])
    position = next(i for i, leaf in enumerate(leaves) if leaf is params[0])
    leaves = [leaf + 0.1 if i == position else leaf for i, leaf in enumerate(leaves)]
    verdict = judge_workload(workload, reference, host_outputs(workload, (leaves, loss)))
    assert not verdict.within_tolerance and verdict.worst_part == "params"


def test_process_flag_variant_is_measured_in_one_child_per_cell(tmp_path, monkeypatch):
    flags = variants.Variant("fast-math-off", process_flags=("--xla_cpu_enable_fast_math=false",))
    monkeypatch.setitem(variants._PRESETS, flags.name, flags)
    starts = {"n": 0}
    timed_in_child = []
    real = protocol.subprocess.run

    def counting(*args, **kwargs):
        done = real(*args, **kwargs)
        if args and child.CHILD_MODULE in args[0]:
            starts["n"] += 1
            result = json.loads((Path(args[0][-1]) / protocol.RESULT_FILE).read_text())
            timed_in_child.append(result["timing"])
        return done

    monkeypatch.setattr(protocol.subprocess, "run", counting)
    records = _run(tmp_path, [{"name": "mul_add_relu"}], ("default", "fast-math-off"))
    default, in_child = records
    assert starts["n"] == 1
    assert in_child.fusion.kernels == default.fusion.kernels
    assert in_child.numerics.within_tolerance is True
    assert in_child.timing.iters == FAST_TIMING["max_iters"]
    lead = timing.leading_figure(False, jax.default_backend())
    assert in_child.speedup.basis == timing.BASES[(lead, False)]
    # Timed in the child, not in this process over calls into it: the record's figures are the
    # ones the child wrote, samples and all.
    (child_timing,) = timed_in_child
    assert in_child.timing.median_s == child_timing["time_median_s"]
    assert in_child.timing.pipelined_s_per_call == child_timing["pipelined_s_per_call"]
    assert len(child_timing["samples_s"]) == FAST_TIMING["max_iters"]


def test_speedup_interval_on_known_samples():
    rng = np.random.default_rng(1)
    same = 1e-3 * (1 + 0.05 * rng.standard_normal(400))
    other = 1e-3 * (1 + 0.05 * rng.standard_normal(400))
    result = stats.speedup_interval(same, other)
    assert result.verdict == "same"
    assert result.ci[0] <= 1.0 <= result.ci[1]
    faster = stats.speedup_interval(same, same / 2)
    assert faster.speedup == pytest.approx(2.0)
    assert faster.verdict == "faster" and faster.decided
    assert faster.ci[0] > 1.9 and faster.ci[1] < 2.1
    slower = stats.speedup_interval(same, same * 1.5)
    assert slower.verdict == "slower" and slower.speedup == pytest.approx(1 / 1.5)
    # The same samples give the same interval (fixed resampling seed).
    assert stats.speedup_interval(same, other) == result


def test_paired_interval_spans_the_rounds():
    steady = stats.paired_speedup(np.full((12, 3), 2e-3), np.full((12, 3), 1e-3))
    assert steady.speedup == 2.0 and steady.ci == (2.0, 2.0) and steady.verdict == "faster"
    assert steady.samples == (36, 36)
    # Rounds that disagree (the machine changed) widen the interval: no verdict is forced.
    reference = np.full((20, 3), 1e-3)
    variant = np.array([[1.25e-3] * 3, [0.77e-3] * 3] * 10)
    mixed = stats.paired_speedup(reference, variant)
    assert mixed.ci[0] <= 0.81 and mixed.ci[1] >= 1.29  # 1e-3 / 1.25e-3, 1e-3 / 0.77e-3
    assert mixed.verdict == "same" and not mixed.decided
    # A drift that moves both sides of a round alike does not widen the interval.
    drift = np.linspace(1.0, 3.0, 20)[:, None] * np.ones((1, 3))
    paired = stats.paired_speedup(2e-3 * drift, 1e-3 * drift)
    assert paired.ci[0] > 1.5 and paired.verdict == "faster"
    with pytest.raises(ValueError, match="at least one round"):
        stats.paired_speedup(np.zeros((0, 3)), np.zeros((0, 3)))
    with pytest.raises(ValueError, match="different shapes"):
        stats.paired_speedup(np.ones((2, 3)), np.ones((3, 3)))


def test_verdict_rule():
    assert stats.verdict(1.02, (1.01, 1.03)) == "same"  # real, but under 3%
    assert stats.verdict(1.20, (0.95, 1.40)) == "same"  # the interval contains 1.0
    assert stats.verdict(1.20, (1.10, 1.30)) == "faster"
    assert stats.verdict(0.80, (0.70, 0.90)) == "slower"
    assert stats.is_decided((1.04, 1.30)) and stats.is_decided((0.98, 0.99))
    assert not stats.is_decided((1.01, 1.05))
    with pytest.raises(ValueError, match="at least one sample"):
        stats.speedup_interval([], [1.0])


class PairClock:
    """A fake clock: calls of `slow` take 2 ms, calls of `fast` 1 ms."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def slow(self, x):
        self.now += 2e-3
        return x

    def fast(self, x):
        self.now += 1e-3
        return x


def test_measure_pair_alternates_and_stops_when_decided():
    clock = PairClock()
    settings = timing.TimingSettings(warmup=1, min_time_s=0.1, min_iters=5, max_iters=10_000)
    measured, comparison = timing.measure_pair(
        clock.slow, (jnp.zeros(1),), clock.fast, (jnp.zeros(1),), settings=settings, clock=clock
    )
    speedup = comparison.latency
    assert speedup.speedup == pytest.approx(2.0)
    assert speedup.verdict == "faster" and speedup.decided
    assert comparison.pipelined.speedup == pytest.approx(2.0)
    assert comparison.paired
    assert timing.leading_figure(train=False, backend="gpu") == timing.LATENCY
    assert timing.leading_figure(train=True, backend="gpu") == timing.PIPELINED
    assert timing.leading_figure(train=False, backend="cpu") == timing.PIPELINED
    assert measured.time_median_s == pytest.approx(1e-3)
    assert comparison.reference.time_median_s == pytest.approx(2e-3)
    # The point is exactly the ratio of the two shown medians.
    assert speedup.speedup == comparison.reference.time_median_s / measured.time_median_s
    assert measured.iters == comparison.reference.iters == speedup.samples[1]
    # 0.01 x 0.1 s per side at 1 ms a call: the 3-call minimum, and a burst of 10, per side:
    # 39 ms a round; MIN_ROUNDS (10) end past min_time_s, and the first check decides.
    assert measured.iters == 3 * timing.MIN_ROUNDS
    assert clock.now < timing.PAIR_BUDGET * settings.min_time_s


def test_a_pair_leads_with_the_pipelined_figure_for_a_train_step():
    clock = PairClock()
    settings = timing.TimingSettings(warmup=1, min_time_s=0.1, min_iters=5, max_iters=10_000)
    _, comparison = timing.measure_pair(
        clock.slow, (1,), clock.fast, (1,), settings=settings, clock=clock, lead=timing.PIPELINED
    )
    assert comparison.speedup(timing.PIPELINED) is comparison.pipelined
    assert comparison.basis(timing.PIPELINED) == timing.BASES[(timing.PIPELINED, True)]
    pipelined = comparison.pipelined
    assert pipelined.speedup == pytest.approx(2.0) and pipelined.decided


def test_the_kept_lowering_is_the_program_before_optimization():
    # The runner's missed-fusions summary reads the compile's own lowering instead of lowering
    # the workload again: it must be the very program `unoptimized_hlo` gives.
    workload = models.build("mlp", size="tiny", mode="train")
    compiled = compile_workload(workload, "default")
    assert compiled.unoptimized_hlo() == unoptimized_hlo(workload)
    # The kept lowering donates the train state: on one device its header aliases each state
    # leaf (parameter i) to new state leaf i, and nothing else (not the batch, not the loss).
    header = compiled.unoptimized_hlo().split("\n", 1)[0]
    aliases = re.findall(r"\{(\d+)\}: \((\d+), \{\}, may-alias\)", header)
    state = range(len(workload.args[0]))
    assert sorted((int(out), int(param)) for out, param in aliases) == [(i, i) for i in state]
