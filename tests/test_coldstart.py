"""Cold start, warm-up, AOT export and the graph-capture study.

Child processes cost seconds each on a 2-core CPU: the file starts four (a warm start, an AOT
export and load, a warm-up CLI in-process). Cache hits are asserted from JAX's monitoring events
counted in the child, never from times.
"""

import pickle

import jax
import numpy as np
import pytest
from helpers import config_file, run_cli

from xlafuse import compare_outputs, models
from xlafuse.cli import main
from xlafuse.compiler import variants
from xlafuse.compiler.jit import compile_workload
from xlafuse.errors import XlafuseError
from xlafuse.experiment.warmup import warmup
from xlafuse.measurement import coldstart, timing
from xlafuse.measurement.coldstart import run_aot_load, run_start, workload_spec
from xlafuse.report.coldstart import (
    GRAPH_FLAGS,
    GRAPHS_SKIPPED,
    coldstart_section,
    graphs_section,
)
from xlafuse.report.markdown import render_markdown
from xlafuse.results.records import CellResult

GPT2_TRAIN = {"name": "gpt2", "size": "tiny", "mode": "train"}


def test_warmup_fills_cache_and_a_new_process_hits_it(tmp_path):
    cache = tmp_path / "cache"
    summary = warmup(GPT2_TRAIN, cache_dir=cache)
    assert summary.entries_written >= 1
    assert summary.entries_after == coldstart.cache_entry_count(cache)
    assert summary.compiled == ("gpt2/tiny/train @ default",)

    run = run_start(GPT2_TRAIN, variant="default", cache_dir=cache, steady_calls=1)

    assert run.cache_hit and run.cache_hits == 1
    assert run.cache_misses == 0
    # Imports timed from a bare interpreter (jax + flax + xlafuse: seconds, never ~0.2 ms).
    assert run.import_s > 0.01
    assert run.cache_entries == summary.entries_after  # nothing new had to be written


def test_warmup_leaves_this_process_without_cache(tmp_path):
    warmup(lambda x: x * 2 + 1, np.ones(8, np.float32), cache_dir=tmp_path)
    assert jax.config.jax_compilation_cache_dir is None
    assert coldstart.cache_entry_count(tmp_path) >= 1


def test_aot_export_round_trips_in_a_new_process(tmp_path):
    exported, jit_out, aot_out = (tmp_path / n for n in ("f.bin", "jit.pkl", "aot.pkl"))
    run = run_start(GPT2_TRAIN, steady_calls=1, export_to=exported, outputs_to=jit_out)
    aot_load_s = run_aot_load(GPT2_TRAIN, "default", exported, outputs_to=aot_out)

    assert run.aot_export_s > 0 and aot_load_s > 0
    assert run.import_s > 0.01  # timed in the child before `import jax`
    assert run.cache_entries == 0 and not run.cache_hit  # no cache folder given
    expected, got = (pickle.loads(p.read_bytes()) for p in (jit_out, aot_out))
    assert len(got) == len(expected) > 2  # new params, optimizer state, loss
    assert compare_outputs(expected, got).within_tolerance


def test_warmup_cli_compiles_every_cell_of_a_config_and_says_each_compile(tmp_path, capsys):
    # the labels keep the overrides; stderr has one line per compile
    config = config_file(
        tmp_path,
        '[experiment]\nname = "w"\nvariants = ["default", "no-fusion"]\n'
        '[[workloads]]\nname = "mlp"\noverrides = { batch = 4 }\n',
    )
    cells = ["mlp[batch=4]/tiny/forward @ default", "mlp[batch=4]/tiny/forward @ no-fusion"]
    warmup = ["warmup", config, "--cache", tmp_path / "cache"]
    code, out, err = run_cli(capsys, *warmup)
    assert code == 0 and out.splitlines()[:2] == [f"compiled  {c}" for c in cells]
    assert err.splitlines() == [
        f"xlafuse warmup: [{i}/2] compiling {c}" for i, c in enumerate(cells, 1)
    ]
    assert out.splitlines()[2].startswith("0 of 2 cells were cache hits; ")
    assert coldstart.cache_entry_count(tmp_path / "cache") >= 2
    # Run again: every cell comes from the folder, and it says so.
    code, out, _ = run_cli(capsys, *warmup)
    assert code == 0 and out.splitlines()[:2] == [f"cache hit {c}" for c in cells]
    assert out.splitlines()[2].startswith("2 of 2 cells were cache hits; 0 new cache entries")


def test_coldstart_cli_rejects_a_cache_that_is_a_file(tmp_path, capsys):
    cache = tmp_path / "cache"
    cache.write_text("not a folder")
    assert main(["coldstart", "--workload", "mlp", "--cache", str(cache)]) == 2
    assert capsys.readouterr().err == (
        f"xlafuse coldstart: error: cache folder {str(cache)!r} is a file, not a folder\n"
    )
    with pytest.raises(XlafuseError, match=r"cannot create cache folder .*: .* is a file"):
        coldstart.measure_cold_start("mlp", cache_dir=cache / "sub")
    config = config_file(tmp_path, '[[workloads]]\nname = "mlp"\n')
    assert main(["warmup", str(config), "--cache", str(cache)]) == 2
    assert capsys.readouterr().err == (
        f"xlafuse warmup: error: cache folder {str(cache)!r} is a file, not a folder\n"
    )


def test_coldstart_cli_rejects_an_unknown_workload_before_any_child(capsys):
    assert main(["coldstart", "--workload", "gtp2"]) == 2
    assert "did you mean 'gpt2'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("mlp", {"name": "mlp", "size": "tiny", "mode": "forward", "seed": 0, "overrides": {}}),
        ({"name": "chain", "overrides": {"ops": 4}}, {"name": "chain", "overrides": {"ops": 4}}),
    ],
)
def test_workload_spec(given, expected):
    spec = workload_spec(given)
    assert {k: spec[k] for k in expected} == expected


def test_a_cpu_report_says_the_graphs_study_was_skipped():
    cell = dict(workload="chain", size="tiny", mode="forward", dtype="float32", variant="default")
    record = CellResult(**cell, backend="cpu", device_kind="cpu")
    assert f"## Graph capture (CUDA graphs)\n\n_{GRAPHS_SKIPPED}_" in render_markdown([record])
    gpu = CellResult(**cell, backend="gpu", device_kind="NVIDIA H200")
    assert GRAPHS_SKIPPED not in render_markdown([gpu])


def _record(flat):
    """A record from its flat keys, as a results file gives them."""
    name = {"dtype": "float32", "backend": "gpu", "device_kind": "NVIDIA H200"}
    return CellResult.from_dict({**name, **flat})


def test_coldstart_section_shows_speedup_and_compile_to_steady():
    record = {
        "workload": "gpt2",
        "size": "tiny",
        "mode": "train",
        "variant": "default",
        "cold_compile_s": 2.0,
        "warm_compile_s": 0.1,
        "first_call_s": 0.2,
        "steady_call_s": 0.004,
        "aot_load_s": 1.5,
        "cache_hit": True,
    }
    other = {"workload": "mlp", "size": "tiny", "mode": "forward", "variant": "default"}
    text = coldstart_section([_record(record), _record(other)])
    assert (
        "| gpt2/tiny/train | default | 2.000 | 0.100 | 20.0x | 1.500 | 0.200 | 4.000 | 500 | yes |"
        in text
    )
    assert "mlp" not in text
    assert coldstart_section([]) == ""


def test_graphs_section_pairs_runner_cells_by_fusion():
    cells = [
        {
            "workload": "chain",
            "size": "tiny",
            "mode": "forward",
            "variant": v,
            "time_median_s": t,
            "time_p10_s": t,
            "time_p90_s": t,
        }
        for v, t in [
            ("default", 20e-6),
            ("no-cuda-graphs", 30e-6),
            ("no-fusion", 73e-6),
            ("no-fusion-no-graphs", 162e-6),
        ]
    ]
    cells = [_record(c) for c in cells]
    text = graphs_section(cells)
    assert "| chain/tiny/forward | off | 73.0 (73.0-73.0) | 162.0 (162.0-162.0) | 2.2x |" in text
    assert "| chain/tiny/forward | on | 20.0 (20.0-20.0) | 30.0 (30.0-30.0) | 1.5x |" in text
    assert graphs_section(cells[:1] + cells[2:3]) == ""  # no graphs-off cell: not this study


@pytest.mark.gpu
def test_command_buffers_cut_per_call_latency_of_a_dispatch_bound_chain():
    workload = models.build("chain", size="tiny", ops=32, rows=32, cols=128)
    settings = timing.TimingSettings(warmup=5, min_time_s=1.0, min_iters=200)
    median = {}
    for name in ("no-fusion", "no-fusion-no-graphs"):
        compiled = compile_workload(workload, variants.get(name))
        median[name] = timing.measure(compiled, workload.args, settings=settings).time_median_s
    assert median["no-fusion-no-graphs"] > median["no-fusion"]


def test_the_graphs_table_flags_match_what_the_presets_switch_off():
    for name, (graphs, fusion) in GRAPH_FLAGS.items():
        preset = variants.get(name)
        assert (preset.options_for("gpu").get("xla_gpu_enable_command_buffer") != "") is graphs
        assert ("fusion" not in preset.passes_for("gpu")) is fusion


def test_warmup_of_a_function_refuses_a_variant_that_names_an_implementation(tmp_path):
    with pytest.raises(XlafuseError) as info:
        warmup(lambda x: x * 2, np.ones(4, np.float32), cache_dir=tmp_path, variants=["impl=mine"])
    assert str(info.value) == (
        "variant impl=mine names an implementation, which a function has none of: warm up a "
        "workload (or a config) that declares it"
    )


def test_warmup_compiles_the_implementation_a_variant_names(tmp_path):
    # the zoo's layernorm by tokamax's own XLA program: compiled where tokamax is installed,
    # refused in one line (the same as `run` gives) where it is not
    variants = ["default", "impl=tokamax_xla"]
    try:
        import tokamax  # noqa: F401
    except ImportError:
        with pytest.raises(XlafuseError) as info:
            warmup([{"name": "layernorm", "size": "tiny"}], cache_dir=tmp_path, variants=variants)
        assert "tokamax" in str(info.value) and "pip install" in str(info.value)
        return
    summary = warmup([{"name": "layernorm", "size": "tiny"}], cache_dir=tmp_path, variants=variants)
    assert summary.compiled == (
        "layernorm/tiny/forward @ default",
        "layernorm/tiny/forward @ impl=tokamax_xla",
    )
    assert summary.entries_after - summary.entries_before >= 2
