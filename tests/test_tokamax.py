"""tokamax's implementations that run on a CPU (its XLA programs), against the zoo's own (issue 46).

Skipped without tokamax (the optional extra ".[tokamax]", installed in CI's second venv), as
the torch tests are without torch. tokamax's GPU kernels (Pallas Triton and Mosaic GPU, cuDNN)
are refused here in one line; tests/test_hand_fused_gpu.py runs them on a GPU.
"""

import dataclasses
import importlib.util
import sys
from pathlib import Path

import jax
import pytest
from helpers import run_cli

tokamax = pytest.importorskip("tokamax", reason='needs tokamax (the optional extra ".[tokamax]")')

from absl import flags  # noqa: E402 - tokamax's dependency: after the skip

from xlafuse.experiment.compare import compare_workload  # noqa: E402
from xlafuse.experiment.config import parse_config  # noqa: E402
from xlafuse.experiment.runner import run_experiment  # noqa: E402
from xlafuse.models import implementations, registry  # noqa: E402
from xlafuse.results import records  # noqa: E402

pytestmark = pytest.mark.tokamax

ON_CPU = [
    ("attention", "forward", "tokamax_xla"),
    ("attention", "forward", "xla_chunked"),
    ("attention", "train", "xla_chunked"),
    ("layernorm", "forward", "tokamax_xla"),
    ("layernorm", "train", "tokamax_xla"),
    ("swiglu", "forward", "tokamax_xla"),
    ("swiglu", "train", "tokamax_xla"),
    ("gpt2", "train", "tokamax_xla"),
]


@pytest.mark.parametrize("name, mode, implementation", ON_CPU)
def test_tokamax_agrees_with_the_workloads_own_program(name, mode, implementation):
    assert registry.implementation_problem(name, implementation, mode=mode) is None
    workload = registry.build(name, size="tiny", mode=mode)
    other = workload.with_implementation(implementation)
    assert jax.tree.structure(jax.eval_shape(other.fn, *other.args)) == jax.tree.structure(
        jax.eval_shape(workload.fn, *workload.args)
    )
    table = compare_workload(workload, variants=["default", f"impl={implementation}"])
    _, theirs = table.rows
    assert theirs.variant == f"impl={implementation}" and theirs.within_tolerance
    assert theirs.kernels > 0 and theirs.modeled_bytes > 0


def test_a_run_records_tokamax_implementations_crossed_with_xla_options(tmp_path):
    config = parse_config(
        {
            "experiment": {
                "name": "tokamax",
                "variants": ["default", "impl=xla_chunked", "no-fusion+impl=xla_chunked"],
            },
            "workloads": [{"name": "attention"}],
            "timing": {
                "warmup": 1,
                "min_time_s": 0.01,
                "min_iters": 3,
                "max_iters": 10,
                "repeats": 1,
            },
            "measure": {"calibrate": False},
        },
        backend="cpu",
    )
    records = run_experiment(config, out=tmp_path, progress=False, report=False)
    assert [(r.variant, r.implementation, r.ok) for r in records] == [
        ("default", "xla", True),
        ("impl=xla_chunked", "xla_chunked", True),
        ("no-fusion+impl=xla_chunked", "xla_chunked", True),
    ]
    assert all(r.numerics.within_tolerance for r in records[1:])
    settings = records[1].settings["variant"]
    assert (settings["implementation"], settings["tokamax"]) == ("xla_chunked", tokamax.__version__)
    assert records[2].fusion.real_fusions == 0 and not records[1].interpreted


def test_tokamax_reads_no_flag_of_xlafuses_command_line(monkeypatch):
    """tokamax parses sys.argv with absl the first time it reads an option: xlafuse's own
    command line (`--variants ...`) would be refused there, unless the flags are parsed."""
    implementations.tokamax_module.cache_clear()
    flags.FLAGS.unparse_flags()
    monkeypatch.setattr(sys, "argv", ["xlafuse", "compare", "--variants", "default"])
    implementations.tokamax_module()
    q = jax.numpy.ones((1, 8, 2, 8))
    assert implementations.attention(q, q, q, "xla_chunked").shape == (1, 8, 2, 8)


@pytest.mark.parametrize(
    "name, implementation, here",
    [
        ("attention", "triton", "impl=xla, impl=tokamax_xla, impl=xla_chunked"),
        ("layernorm", "triton", "impl=xla, impl=tokamax_xla"),
        ("swiglu", "mosaic", "impl=xla, impl=tokamax_xla"),
    ],
)
def test_tokamax_gpu_kernels_are_refused_on_a_cpu(name, implementation, here):
    assert registry.implementation_problem(name, implementation) == (
        f"implementation {implementation!r} of {name!r} is a GPU kernel and JAX's backend is "
        f"'cpu' (tokamax's GPU kernels have no interpret mode there); here: {here}"
    )


def test_the_chunked_lm_head_loss_is_there_where_tokamax_offers_it():
    problem = registry.implementation_problem("gpt2", "xla_chunked", mode="train")
    if "xla_chunked" in implementations.offered("lm_head_loss"):  # tokamax >= 0.0.13
        assert problem is None
        return
    assert problem == (
        f"implementation 'xla_chunked' of 'gpt2': tokamax {tokamax.__version__} does not "
        "offer 'xla_chunked' for linear_softmax_cross_entropy_loss here; it offers: "
        "impl=tokamax_xla"
    )


def test_tune_searches_the_targets_implementations_that_run_here(tmp_path, capsys):
    code, out, _ = run_cli(
        capsys, "tune", "attention", "--space", "implementation", "--search", "grid",
        "--no-rerun", "--budget-s", "30", "--out", str(tmp_path),
    )  # fmt: skip
    assert code == 0
    assert "implementation=xla_chunked" in out and "implementation=triton" not in out
    assert "implementation=tokamax_xla" in out


def test_a_tuned_variant_keeps_its_implementation_in_a_config():
    config = parse_config(
        {
            "experiment": {
                "variants": ["default", {"name": "tuned", "implementation": "xla_chunked"}]
            },
            "workloads": [{"name": "attention"}],
        },
        backend="cpu",
    )
    tuned = config.variant("tuned")
    assert tuned.resolve().implementation == "xla_chunked"
    assert tuned.to_dict() == {
        "name": "tuned", "spec": None, "options": {}, "implementation": "xla_chunked"
    }  # fmt: skip


def test_measure_of_a_zoo_workload_takes_its_implementations_as_variants():
    import xlafuse

    m = xlafuse.measure(
        registry.build("layernorm", size="tiny"),
        variants=["default", "impl=tokamax_xla"],
        calibrate=False,
        timing={"warmup": 1, "min_time_s": 0.01, "min_iters": 3, "repeats": 1},
    )
    assert [(r.variant, r.implementation, r.ok) for r in m.records] == [
        ("default", "xla", True),
        ("impl=tokamax_xla", "tokamax_xla", True),
    ]
    assert m.records[1].numerics.within_tolerance


def test_the_hand_fused_studys_summary_has_a_cell_per_dtype_with_its_verdict(tmp_path):
    """experiments/h100/hand_fused/summarize.py on a small run of its LayerNorm study's shape:
    float32 and bfloat16 are two cells, each with XLA's verdict and the timed speedup."""
    script = Path(__file__).parents[1] / "experiments/h100/hand_fused/summarize.py"
    spec = importlib.util.spec_from_file_location("hand_fused_summarize", script)
    summarize = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(summarize)
    config = parse_config(
        {
            "experiment": {"name": "hand_fused", "variants": ["default", "impl=tokamax_xla"]},
            "workloads": [
                {"name": "layernorm", "dtype": "float32"},
                {"name": "layernorm", "dtype": "bfloat16"},
            ],
            "timing": {"warmup": 1, "min_time_s": 0.01, "min_iters": 3, "repeats": 1},
            "measure": {"calibrate": False, "profile": True},
        },
        backend="cpu",
    )
    run_experiment(config, out=tmp_path / "layernorm", progress=False, report=False)
    lines = summarize.study_section(tmp_path / "layernorm")
    assert [line for line in lines if line.startswith("### ")] == [
        "### layernorm/tiny/forward/float32",
        "### layernorm/tiny/forward/bfloat16",
    ]
    verdicts = [line for line in lines if line.startswith("XLA's own fusion")]
    assert len(verdicts) == 2
    assert all("; timed (wall clock, " in line for line in verdicts), verdicts
    rows = [line for line in lines if line.startswith("| impl=tokamax_xla |")]
    assert len(rows) == 2 and all(row.endswith(("same |", "faster |", "slower |")) for row in rows)
    # a timed verdict against the device times' direction is said, never left to the reader
    cells = records.latest_per_cell(
        records.read_results(tmp_path / "layernorm/results.jsonl").records
    )
    own, best = cells[:2]
    device = dataclasses.replace(own.device, time_s=2 * summarize._time(best))
    against = dataclasses.replace(best.speedup, verdict="slower", vs_reference=0.8, ci=(0.7, 0.9))
    line = summarize.verdict([dataclasses.replace(own, device=device),
                              dataclasses.replace(best, speedup=against)])  # fmt: skip
    assert line.splitlines()[0].endswith(
        "timed (wall clock, pipelined): 0.80x [0.70, 0.90] slower, which disagrees with the "
        "device times (impl=tokamax_xla faster there: traced kernels, against the whole call "
        "timed untraced)."
    ), line
    # XLA's own program faster than every hand-fused one, within 10% of the best, or slower
    heads = {}
    for factor in (0.5, 1.05, 2.0):
        device = dataclasses.replace(own.device, time_s=factor * summarize._time(best))
        line = summarize.verdict([dataclasses.replace(own, device=device), best])
        heads[factor] = line.split(";")[0]
    assert heads == {
        0.5: "XLA's own fusion is faster than every hand-fused implementation: 0.50x the device "
        "time of the best (impl=tokamax_xla)",
        1.05: "XLA's own fusion is within 10% of the best hand-fused (impl=tokamax_xla): 1.05x "
        "its device time",
        2.0: "XLA's own fusion takes 2.00x the device time of impl=tokamax_xla",
    }
    # a cell whose device time tracing changed says so, in its row and in the verdict
    traced = dataclasses.replace(best, rates=dataclasses.replace(best.rates, trace_perturbed=True))
    assert " TRACE-PERTURBED |" in summarize._row(traced)
    assert (
        "; impl=tokamax_xla TRACE-PERTURBED: the device time is of the traced program, the "
        "timed figure of the one that runs." in summarize.verdict([own, traced])
    )
