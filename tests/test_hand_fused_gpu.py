"""tokamax's hand-fused kernels beside XLA's fusion on a GPU (issue 46): each implementation of
attention and LayerNorm this GPU and the installed tokamax run compiles, its kernels are counted
(a Pallas or cuDNN kernel is one custom-call, one kernel), its numerics agree with XLA's own
program, and its device time is attributed to its kernels.

Skipped without a GPU, or without tokamax (the optional extra ".[tokamax]"); run by
experiments/h100/hand_fused/study.sh.
"""

import jax
import pytest

tokamax = pytest.importorskip("tokamax", reason='needs tokamax (the optional extra ".[tokamax]")')

from xlafuse.compiler.jit import compile_workload  # noqa: E402
from xlafuse.experiment.compare import compare_workload  # noqa: E402
from xlafuse.experiment.config import parse_config  # noqa: E402
from xlafuse.experiment.runner import run_experiment  # noqa: E402
from xlafuse.models import registry  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.tokamax,
    pytest.mark.filterwarnings("ignore::DeprecationWarning:tokamax.*"),
    pytest.mark.filterwarnings("ignore::FutureWarning:tokamax.*"),
]


@pytest.fixture(autouse=True)
def _rank_promotion_as_tokamax_needs():
    """conftest makes implicit rank promotion an error, to keep xlafuse's own code explicit;
    tokamax's Pallas Triton attention backward relies on it ((64, 16) - (16,)), so these tests
    allow it, as a user's program does by default."""
    with jax.numpy_rank_promotion("allow"):
        yield


# The custom-call target each hand-written kernel compiles to (one per forward call).
TARGETS = {
    "cudnn": ("__cudnn$fmha",),
    "mosaic": ("mosaic_gpu",),
    "triton": ("__gpu$xla.gpu.triton", "triton_kernel_call"),
}
CELLS = [("attention", "forward"), ("attention", "train"), ("layernorm", "forward")]


def _runnable(name: str, mode: str) -> list[str]:
    """The implementations of `name` other than its own that run here (bf16)."""
    return [
        n
        for n in registry.implementation_names(name)[1:]
        if registry.implementation_problem(name, n, mode=mode, dtype="bfloat16") is None
    ]


@pytest.mark.parametrize("name, mode", CELLS)
def test_each_implementation_compiles_counts_its_kernels_and_agrees(name, mode):
    implementations = _runnable(name, mode)
    assert "tokamax_xla" in implementations
    workload = registry.build(name, size="small", mode=mode, dtype="bfloat16")
    table = compare_workload(
        workload, variants=["default", *(f"impl={n}" for n in implementations)]
    )
    for n, row in zip(implementations, table.rows[1:], strict=True):
        assert row.variant == f"impl={n}" and row.within_tolerance, row
        assert row.kernels > 0 and row.modeled_bytes > 0
    for n in set(implementations) & set(TARGETS):
        report = compile_workload(workload, f"impl={n}").report
        calls = sum(
            count
            for target, count in report.custom_call_targets.items()
            if target.startswith(TARGETS[n])
        )
        assert calls >= 1, dict(report.custom_call_targets)
        if mode == "forward":
            assert calls == 1  # the forward pass is one hand-written kernel


@pytest.mark.parametrize("name", ["attention", "layernorm"])
def test_each_implementations_device_time_is_attributed_to_its_kernels(name, tmp_path):
    implementations = _runnable(name, "forward")
    config = parse_config(
        {
            "experiment": {
                "name": "hand_fused_gpu",
                "variants": ["default", *(f"impl={n}" for n in implementations)],
            },
            "workloads": [{"name": name, "size": "small", "dtype": "bfloat16"}],
            "timing": {"warmup": 2, "min_time_s": 0.05, "min_iters": 5, "repeats": 1},
            "measure": {"profile": True, "keep_traces": False, "calibrate": False},
        }
    )
    records = run_experiment(config, out=tmp_path, progress=False, report=False)
    assert [r.implementation for r in records] == ["xla", *implementations]
    for record in records:
        assert record.ok, record.error
        assert record.device.time_s > 0
        times = record.trace.kernel_times
        assert times["unattributed_share"] < 0.05, times["unattributed_top"]
        if record.implementation in TARGETS:  # its kernel is among the timed ones
            calls = [k for k in times["top"] if k["kind"] == "custom-call"]
            assert calls and calls[0]["time_s"] > 0 and calls[0]["match"] != "-"
