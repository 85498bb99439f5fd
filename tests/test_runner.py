"""The experiment runner on a CPU: records, report, resume, error cells, truncated files."""

import dataclasses
import json
import pathlib

import jax
import pytest
from helpers import FAST_TIMING, config_file, copy_results, run_in_new_folder, small_calibration

from xlafuse.cli import main
from xlafuse.errors import XlafuseError
from xlafuse.experiment import runner
from xlafuse.experiment.config import VariantConfig, parse_config
from xlafuse.measurement import timing
from xlafuse.results.records import (
    FLAT_KEYS,
    append_result,
    finished_cells,
    load_results,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent
WORKLOADS = [
    {"name": "mul_add_relu"},
    {"name": "chain", "overrides": {"ops": 4}},
    {"name": "mlp", "mode": "train"},
]


def _config(out, workloads=WORKLOADS, variants=("default", "no-fusion")):
    return parse_config(
        {
            "experiment": {"name": "test", "output": str(out), "variants": list(variants)},
            "workloads": workloads,
            "timing": FAST_TIMING,
        },
        backend="cpu",
    )


@pytest.fixture(autouse=True)
def fast_calibration(monkeypatch):
    monkeypatch.setattr(runner, "calibrate", small_calibration)


@pytest.fixture
def compiles(monkeypatch):
    """Counts compile_workload calls made by the runner."""
    count = {"n": 0}
    real = runner.compile_workload

    def counting(*args, **kwargs):
        count["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "compile_workload", counting)
    return count


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    return run_in_new_folder(tmp_path_factory, "run", _config)


def test_records_are_complete_and_ok(first_run):
    out, records = first_run
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == len(records) == 6
    for line in lines:
        data = json.loads(line)
        assert set(FLAT_KEYS) <= set(data)
        assert data["status"] == "ok", data["error"]
        assert data["env"]["config_hash"] and data["env"]["jax"]
        assert data["copy_ceiling_bytes_per_s"] > 0
        assert data["iters"] == 3
        assert data["time_p10_s"] <= data["time_median_s"] <= data["time_p90_s"]


def test_reference_and_fusion_figures(first_run):
    _, records = first_run
    cells = {(r.workload, r.mode, r.variant): r for r in records}
    default = cells["mul_add_relu", "forward", "default"]
    unfused = cells["mul_add_relu", "forward", "no-fusion"]
    assert default.speedup.vs_reference == 1.0
    assert default.numerics.within_tolerance is None  # the reference is not compared with itself
    assert unfused.fusion.kernels > default.fusion.kernels
    assert unfused.fusion.modeled_bytes > default.fusion.modeled_bytes
    assert unfused.numerics.within_tolerance is True
    # Timed in alternation with the reference: the speedup is the ratio of the two medians of
    # the leading figure over the same rounds, and lies in its interval.
    s = unfused.speedup
    assert s.ci[0] <= s.vs_reference <= s.ci[1]
    assert s.latency == pytest.approx(s.reference_median_s / unfused.timing.median_s)
    assert s.pipelined == pytest.approx(
        s.reference_pipelined_s / unfused.timing.pipelined_s_per_call
    )
    lead = timing.leading_figure(False, jax.default_backend())
    assert s.lead == lead and s.basis == timing.BASES[(lead, True)]
    assert s.vs_reference == (s.latency if lead == timing.LATENCY else s.pipelined)
    assert default.speedup.ci is None and default.speedup.verdict is None
    train = cells["mlp", "train", "no-fusion"]
    assert train.model.num_params > 0 and train.model.flops > 0 and train.rates.tflops > 0
    assert train.compile.peak_memory_bytes > 0
    assert cells["chain", "forward", "default"].overrides == {"ops": 4}


def test_report_has_tables_and_plots(first_run):
    out, _ = first_run
    text = (out / "report.md").read_text()
    assert "## mul_add_relu / tiny / forward / float32" in text
    assert "## chain[ops=4] / tiny / forward / float32" in text
    assert "| no-fusion |" in text
    assert "## Measured ceilings" in text
    for png in ("speedup.png", "kernels_vs_time.png"):
        assert (out / png).stat().st_size > 1000
        assert f"![{png}]({png})" in text
    # Every tiny cell fits in the cache: no % of the copy ceiling, and no roofline point.
    records = [r for r in load_results(out / "results.jsonl") if r.model.flops]
    assert records and all(r.rates.cache_resident for r in records)
    assert all(r.rates.pct_of_copy_ceiling is None for r in records)
    assert "| cache-resident |" in text
    assert not (out / "roofline.png").exists()
    assert f"Roofline: not drawn, all {len(records)} cells with FLOPs are cache-resident" in text


def test_resume_skips_finished_cells(first_run, tmp_path, compiles):
    out, _ = first_run
    copy = copy_results(out, tmp_path / "resume")
    records = runner.run_experiment(_config(copy), progress=False)
    assert compiles["n"] == 0
    assert len(records) == 6
    assert len((copy / "results.jsonl").read_text().splitlines()) == 6


def test_resume_runs_only_new_cells_and_compares_with_the_recorded_reference(
    first_run, tmp_path, compiles
):
    out, _ = first_run
    copy = copy_results(out, tmp_path / "more")
    inline = {"name": "no-fusion-inline", "xla_disable_hlo_passes": "fusion"}
    config = _config(copy, variants=("default", "no-fusion", inline))
    records = runner.run_experiment(config, only=["mul_add_relu"], progress=False)
    # The reference is compiled again for its outputs; the new variant once.
    assert compiles["n"] == 2
    assert [r.variant for r in records] == ["default", "no-fusion", "no-fusion-inline"]
    new = records[-1]
    assert new.numerics.within_tolerance is True and new.speedup.vs_reference is not None
    assert new.fusion.kernels == records[1].fusion.kernels


def test_a_reference_that_fails_to_recompile_on_resume_is_named_in_records_and_report(
    first_run, tmp_path, monkeypatch
):
    out, _ = first_run
    copy = copy_results(out, tmp_path / "broken-reference")
    real = runner.compile_workload

    def failing_reference(workload, variant, *args, **kwargs):
        if variant.name == "default":
            raise RuntimeError("out of memory\nsecond line")
        return real(workload, variant, *args, **kwargs)

    monkeypatch.setattr(runner, "compile_workload", failing_reference)
    inline = {"name": "no-fusion-inline", "xla_disable_hlo_passes": "fusion"}
    config = _config(copy, variants=("default", "no-fusion", inline))
    records = runner.run_experiment(config, only=["mul_add_relu"], progress=False)
    new = records[-1]
    message = "recompiling the reference failed: RuntimeError: out of memory"
    assert new.status == "ok" and new.numerics.reference_error == message
    assert new.numerics.within_tolerance is None and new.speedup.vs_reference is None
    assert (
        records[1].numerics.reference_error is None
    )  # recorded before, against the live reference
    report = (copy / "report.md").read_text()
    assert f"| not checked: {message} |" in report


def test_fresh_starts_over(first_run, tmp_path, compiles):
    out, _ = first_run
    copy = copy_results(out, tmp_path / "fresh")
    config = _config(copy, workloads=[{"name": "mul_add_relu"}])
    runner.run_experiment(config, fresh=True, progress=False)
    assert compiles["n"] == 2
    assert len(load_results(copy / "results.jsonl")) == 2
    assert len(list(copy.glob("results.*.jsonl.old"))) == 1


def test_failing_cells_are_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch):
    from xlafuse.models import registry

    real_build = registry.build

    def build(name, *args, **kwargs):
        if name == "cos_relu":
            raise RuntimeError("RESOURCE_EXHAUSTED: out of memory (simulated)")
        return real_build(name, *args, **kwargs)

    monkeypatch.setattr(registry, "build", build)  # what `Cell.build` calls
    config = _config(tmp_path, workloads=[{"name": "cos_relu"}, {"name": "gelu"}])
    # Past validation (which rejects it): XLA refuses the option when the cell compiles.
    bad = VariantConfig("bad-option", None, {"xla_no_such_option": True})
    config = dataclasses.replace(config, variants=(config.variants[0], bad))
    records = runner.run_experiment(config, progress=False)
    status = {(r.workload, r.variant): (r.status, r.error) for r in records}
    assert status["cos_relu", "default"] == (
        "error",
        "RESOURCE_EXHAUSTED: out of memory (simulated)",
    )
    assert status["cos_relu", "bad-option"][0] == "error"
    assert status["gelu", "default"] == ("ok", None)
    assert status["gelu", "bad-option"][0] == "error"
    assert "xla_no_such_option" in status["gelu", "bad-option"][1]
    text = (tmp_path / "report.md").read_text()
    assert "## Errors" in text and "simulated" in text
    # Error cells are not "finished": a resume runs them again.
    assert set(finished_cells(tmp_path / "results.jsonl")) == {
        f"gelu/tiny/forward/auto/{{}}/default/{jax.default_backend()}"
    }


def test_load_results_skips_a_truncated_last_line(tmp_path):
    path = tmp_path / "results.jsonl"
    append_result(
        path,
        {
            "workload": "a",
            "size": "tiny",
            "mode": "forward",
            "dtype": "float32",
            "variant": "default",
            "backend": "cpu",
            "device_kind": "cpu",
        },
    )
    with open(path, "a") as f:
        f.write('{"workload": "b", "size": "ti')
    with pytest.warns(RuntimeWarning, match=r"results.jsonl:2: skipping a record"):
        records = load_results(path)
    assert [r.workload for r in records] == ["a"]


def test_select_rejects_unknown_names(tmp_path):
    config = _config(tmp_path)
    with pytest.raises(
        XlafuseError, match=r"no workload 'mpl' in the config \(did you mean 'mlp'\?\)"
    ):
        runner.select(config, ["mpl"], None)
    with pytest.raises(XlafuseError, match=r"no variant 'nofusion'"):
        runner.select(config, None, ["nofusion"])
    picked = runner.select(config, ["mlp/tiny/train"], ["no-fusion"])
    assert [w.label for w in picked.workloads] == ["mlp/tiny/train"]
    assert [v.name for v in picked.variants] == ["default", "no-fusion"]


def test_cli_run_config_error_lists_every_problem(tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text('[[workloads]]\nname = "mlpp"\n[[workloads]]\nname = "chain"\nsize = "huge"\n')
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "2 problems in the config" in err
    assert "workloads[0].name: unknown workload 'mlpp' (did you mean 'mlp'?)" in err
    assert (
        "workloads[1].size: unknown size 'huge' for workload 'chain'; accepted: tiny, small, full"
        in err
    )


def test_cli_run_and_report(tmp_path, capsys):
    path = config_file(
        tmp_path,
        '[experiment]\nvariants = ["default", {name = "nf", xla_disable_hlo_passes = "fusion"}]\n'
        '[[workloads]]\nname = "gelu"\n'
        "[timing]\nwarmup = 1\nmin_time_s = 0\nmin_iters = 2\nmax_iters = 2\nrepeats = 1\n"
        "[measure]\ncalibrate = false\n",
    )
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--no-progress"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert any(
        line.startswith("gelu/tiny/forward  default  ") and " kernels" in line for line in lines
    )
    nf = next(line for line in lines if line.startswith("gelu/tiny/forward  nf  "))
    assert " kernels (+" in nf and " vs " in nf
    assert nf.rsplit("x ", 1)[1] in ("slower", "faster", "same")
    assert main(["report", str(out / "results.jsonl"), "--out", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "report.md").exists()


def test_workloads_for_other_backends_are_skipped(tmp_path, capsys):
    workloads = [{"name": "mul_add_relu"}, {"name": "gelu", "backends": ["gpu"]}]
    config = _config(tmp_path, workloads, variants=("default",))
    assert [w.backends for w in config.workloads] == [("cpu", "gpu"), ("gpu",)]
    records = runner.run_experiment(config, progress=False)
    assert [r.workload for r in records] == ["mul_add_relu"]
    assert (
        "skipped on cpu (the config's backends key): gelu/tiny/forward" in capsys.readouterr().out
    )


def test_backends_key_is_validated():
    with pytest.raises(XlafuseError) as info:
        _config("x", [{"name": "gelu", "backends": ["tpu"]}, {"name": "gelu", "backends": "gpu"}])
    message = str(info.value)
    assert (
        "workloads[0].backends: 'tpu' is not a backend (did you mean 'gpu'?) (accepted: cpu, gpu)"
        in message
    )
    assert "workloads[1].backends: must be a non-empty array of backend names (cpu, gpu)" in message


def test_cold_start_cells_carry_cache_figures(tmp_path):
    config = parse_config(
        {
            "experiment": {"name": "cold", "output": str(tmp_path), "variants": ["default"]},
            "workloads": [{"name": "mul_add_relu"}],
            "timing": FAST_TIMING,
            "measure": {"cold_start": True, "calibrate": False},
        },
        backend="cpu",
    )
    (record,) = runner.run_experiment(config, progress=False)
    assert record.ok, record.error
    assert record.cold_start.cache_hit is True
    assert record.cold_start.cache_entries >= 1
    assert record.cold_start.cold_compile_s > 0 and record.cold_start.warm_compile_s > 0
    assert record.cold_start.cache_speedup == pytest.approx(
        record.cold_start.cold_compile_s / record.cold_start.warm_compile_s
    )
    assert record.cold_start.aot_load_s > 0
    report = (tmp_path / "report.md").read_text()
    assert "## Cold start" in report and "| mul_add_relu/tiny/forward | default |" in report
    assert "_skipped: CUDA graphs exist only on the GPU_" in report
