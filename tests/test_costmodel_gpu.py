"""XLA's cost model against the measured kernels on a real GPU (issue 28).

The option `xla_gpu_collect_cost_model_stats` must change no kernel and no device time (the
run's twin compile relies on it: `xlafuse.measurement.predicted`), and on transformer_block's full
forward every fusion must get a prediction and a measured time (the recording of the same,
`tests/data/costmodel-transformer_block`, is read on the CPU by `tests/test_costmodel.py`).
"""

import pytest
from helpers import FAST_TIMING, run_in_new_folder

from xlafuse import models
from xlafuse.compiler.jit import compile_workload
from xlafuse.compiler.variants import from_options
from xlafuse.compiler.variants import get as get_variant
from xlafuse.experiment.config import parse_config
from xlafuse.hlo.estimates import COST_MODEL_OPTION
from xlafuse.kinds import Verdict
from xlafuse.measurement.costmodel import NO_LIBRARY, join_costs
from xlafuse.measurement.kernel_diff import trace_kernel_times
from xlafuse.measurement.predicted import compile_twin
from xlafuse.measurement.profile import profile_device_time
from xlafuse.measurement.stats import difference_interval

pytestmark = pytest.mark.gpu
CALLS = 20


@pytest.fixture(scope="module")
def block():
    """transformer_block full forward, compiled as is and with the option."""
    work = models.build("transformer_block", size="full", mode="forward")
    plain = compile_workload(work, get_variant("default"))
    option = compile_workload(work, from_options({COST_MODEL_OPTION: True}, name="costmodel"))
    return work, plain, option


def test_the_option_changes_no_kernel_and_no_device_time_beyond_noise(block):
    work, plain, option = block
    names = [[k.name for k in c.report.kernel_details] for c in (plain, option)]
    assert names[0] == names[1] and plain.report.kernels == option.report.kernels
    plain(*work.fresh_args())
    option(*work.fresh_args())
    # profiles of both programs in alternation, so a drift of the device affects both alike
    per_call, kernels = ([], []), set()
    for _ in range(3):
        for side, compiled in zip(per_call, (plain, option), strict=True):
            profile = profile_device_time(compiled, work.fresh_args(), calls=CALLS)
            kernels.add(profile.device_kernels_per_call)
            side.extend(profile.per_call_s)
    assert len(kernels) == 1 and len(per_call[0]) == len(per_call[1]) == 3 * CALLS
    change = difference_interval(*per_call)
    assert change.verdict == Verdict.SAME, change


def test_every_fusion_of_the_block_gets_a_prediction_and_a_measured_time(block, tmp_path):
    work, plain, _ = block
    twin = compile_twin(work, plain.variant, plain.report)
    assert twin.same_kernels and twin.dump is not None
    fusions = [k for k in twin.report.kernel_details if k.opcode == "fusion"]
    assert fusions and all(k.predicted_us is not None for k in fusions), [
        k.name for k in fusions if k.predicted_us is None
    ]
    times = trace_kernel_times(plain, work, 10, tmp_path)
    join = join_costs(twin.report.kernel_details, times, runs=twin.runs)
    paired = {p.name for p in join.pairs}
    assert paired >= {k.name for k in fusions}
    # a library call is paired where a model (XLA's speed-of-light one) estimated it
    assert all(reason.startswith(NO_LIBRARY) for _, reason in join.uncovered), join.uncovered
    assert len(paired) + len(join.uncovered) == twin.report.kernels
    assert all(p.predicted_s > 0 and p.measured_s > 0 for p in join.pairs)


def test_a_profiled_gpu_run_records_the_cost_model_and_the_decisions(tmp_path_factory):
    def config(out):
        return parse_config(
            {
                "experiment": {
                    "name": "costmodel",
                    "output": str(out),
                    "variants": ["default", "no-fusion"],
                },
                "workloads": [{"name": "transformer_block", "size": "full"}],
                "timing": FAST_TIMING,
                "measure": {"profile": True, "keep_traces": False},
            },
            backend="gpu",
        )

    _, records = run_in_new_folder(tmp_path_factory, "costmodel", config)  # small calibration
    by_variant = {r.variant: r for r in records}
    for record in by_variant.values():
        cost = record.trace.cost_model
        assert cost["same_kernels"] and cost["paired"] >= record.fusion.fusions, cost
        assert cost["spearman"] is not None and cost["median_abs_error_pct"] is not None
    decisions = by_variant["no-fusion"].trace.cost_model["decisions"]
    assert decisions["decisions"] > 0 and decisions["measured"] > 0, decisions
    assert 0 <= decisions["agree"] <= decisions["decided"] <= decisions["measured"]
