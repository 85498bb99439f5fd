"""Traces kept per profiled cell, kernel times and kernel diffs recorded, and their report."""

import json
import tempfile

import jax.numpy as jnp
import pytest
from helpers import FAST_TIMING, run_in_new_folder, small_calibration

from xlafuse.cli import main
from xlafuse.experiment import runner
from xlafuse.experiment.config import parse_config
from xlafuse.measurement.cell_kernels import trace_folder_name
from xlafuse.results.records import load_results

CHAIN = [{"name": "chain", "overrides": {"ops": 4}}]


def _config(out, keep: bool = True, workloads=CHAIN):
    return parse_config(
        {
            "experiment": {"name": "t", "output": str(out), "variants": ["default", "no-fusion"]},
            "workloads": workloads,
            "timing": FAST_TIMING,
            "measure": {"profile": True, "keep_traces": keep},
        },
        backend="cpu",
    )


@pytest.fixture(autouse=True)
def fast_calibration(monkeypatch):
    monkeypatch.setattr(runner, "calibrate", small_calibration)


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    out, _ = run_in_new_folder(tmp_path_factory, "kept", _config)
    return out, {r.variant: r for r in load_results(out / "results.jsonl")}


def test_traces_are_kept_under_traces_cell_and_their_path_recorded(kept):
    out, records = kept
    for variant, record in records.items():
        name = f"chain_tiny_forward_auto_ops_4_{variant}_cpu"
        assert record.trace.path == f"traces/{name}"
        assert trace_folder_name(record.cell_id) == name
        files = list((out / record.trace.path).rglob("*.xplane.pb"))
        assert len(files) == 1 and files[0].stat().st_size > 0
    assert sorted(p.name for p in (out / "traces").iterdir()) == [
        "chain_tiny_forward_auto_ops_4_default_cpu",
        "chain_tiny_forward_auto_ops_4_no-fusion_cpu",
    ]


def test_kernel_times_cover_every_kernel_of_each_cell(kept):
    _, records = kept
    for record in records.values():
        kt = record.trace.kernel_times
        assert kt["basis"] == "host thunks" and kt["calls"] == runner.PROFILE_CALLS
        assert kt["kernels"] == kt["kernels_seen"] == record.fusion.kernels
        assert kt["launches_per_call"] == record.fusion.kernels
        assert kt["unattributed_s"] == 0 and kt["unattributed_share"] == 0.0
        assert sum(r["time_s"] for r in kt["top"]) == pytest.approx(kt["time_s"], rel=1e-9)
    assert records["default"].trace.kernel_diff is None


def test_the_other_variant_records_its_kernel_groups_timed_against_the_reference(kept):
    _, records = kept
    diff = records["no-fusion"].trace.kernel_diff
    assert (diff["a"], diff["b"], diff["kernels_a"], diff["kernels_b"]) == (
        "default",
        "no-fusion",
        1,
        8,
    )
    assert diff["time_a_s"] == records["default"].trace.kernel_times["time_s"]
    assert diff["time_b_s"] == records["no-fusion"].trace.kernel_times["time_s"]
    assert sum(g["time_a_s"] for g in diff["top"]) == pytest.approx(diff["time_a_s"], rel=1e-9)
    assert sum(g["time_b_s"] for g in diff["top"]) == pytest.approx(diff["time_b_s"], rel=1e-9)
    assert [g["n_b"] for g in diff["top"]] == [8]
    # each group's change has its interval; decided and `same` groups add up to the total
    assert sum(diff["changed_groups"].values()) == diff["groups"] == 1
    attributed = (diff["time_b_s"] - diff["unattributed_b_s"]) - (
        diff["time_a_s"] - diff["unattributed_a_s"]
    )
    assert sum(diff["changed_s"].values()) == pytest.approx(attributed, rel=1e-9)


def test_report_says_how_to_open_traces_and_shows_the_kernel_tables(kept):
    out, _ = kept
    text = (out / "report.md").read_text()
    assert "tensorboard --logdir traces/chain_tiny_forward_auto_ops_4_default_cpu" in text
    assert "https://ui.perfetto.dev" in text
    assert "### Kernel times (traced, each joined to its HLO kernel)" in text
    assert "#### Where no-fusion gains and loses against default" in text
    assert "On the CPU there are no device kernels" in text
    assert (out / "kernel_roofline.png").stat().st_size > 0


def test_roofline_cell_option_picks_a_cell_or_names_the_traced_ones(kept, capsys):
    out, _ = kept
    assert main(["report", str(out), "--roofline-cell", "chain[ops=4]/tiny/forward@no-fusion"]) == 0
    capsys.readouterr()
    assert main(["report", str(out), "--roofline-cell", "chain@nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "xlafuse report: error: --roofline-cell 'chain@nope' is no traced cell; traced cells: "
        "chain[ops=4]/tiny/forward@default, chain[ops=4]/tiny/forward@no-fusion"
    ]


def test_keep_traces_false_leaves_no_trace_but_still_records_kernel_times(tmp_path, monkeypatch):
    # The run's temporary folders in a folder of this test's own: another test run beside it
    # (pytest -n) keeps its traces in the shared one for a while.
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    out = tmp_path / "out"
    runner.run_experiment(_config(out, keep=False), progress=False)
    records = load_results(out / "results.jsonl")
    assert not (out / "traces").exists()
    assert [r.trace.path for r in records] == [None, None]
    assert all(r.trace.kernel_times["kernels_seen"] == r.fusion.kernels for r in records)
    assert list(temporary.glob("xlafuse-trace-*")) == []
    assert "## Traces" not in (out / "report.md").read_text()


def test_keep_traces_must_be_a_bool():
    with pytest.raises(Exception, match="keep_traces"):
        parse_config(
            {
                "experiment": {"name": "t", "variants": ["default"]},
                "workloads": CHAIN,
                "measure": {"keep_traces": "yes"},
            },
            backend="cpu",
        )


def test_diff_measure_times_every_group_on_the_cpu(tmp_path, capsys):
    code = main(
        ["diff", "--workload", "chain", "--measure", "--calls", "3", "--json",
         "--traces", str(tmp_path)]
    )  # fmt: skip
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    measured = data["measured"]
    assert measured["a"]["basis"] == "host thunks" and measured["a"]["calls"] == 3
    assert measured["a"]["kernels_seen"] == data["kernels"]["a"]
    assert measured["b"]["kernels_seen"] == data["kernels"]["b"]
    assert sum(len(g["kernels_b"]) for g in measured["groups"]) == data["kernels"]["b"]
    total_b = sum(g["time_b_s"] for g in measured["groups"])
    assert total_b == pytest.approx(measured["b"]["time_s"], rel=1e-9)
    assert measured["traces"] == {v: str(tmp_path / v) for v in ("default", "no-fusion")}
    assert list((tmp_path / "no-fusion").rglob("*.xplane.pb"))


def test_diff_measure_refuses_files(capsys):
    assert main(["diff", "a.txt", "b.txt", "--measure"]) == 2
    assert capsys.readouterr().err.strip() == (
        "xlafuse diff: error: --measure needs --workload NAME (HLO files cannot be traced)"
    )


def test_cpu_profile_without_a_folder_traces_nothing():
    from xlafuse.measurement.profile import profile_device_time

    assert profile_device_time(lambda x: x + 1, (jnp.ones(4),), calls=2) is None


def test_a_cpu_cell_records_no_cost_model(kept):
    # XLA:CPU writes no estimate and runs no priority fusion: no twin compile, no cost_model
    _, records = kept
    assert [r.trace.cost_model for r in records.values()] == [None, None]
