"""The record: one part per source in memory, one flat JSON object on disk (schema 1)."""

import dataclasses
import json
import pathlib

import pytest
from helpers import FAST_TIMING, small_calibration

from xlafuse.cli import main
from xlafuse.errors import XlafuseError
from xlafuse.experiment import runner
from xlafuse.experiment.config import parse_config
from xlafuse.report.markdown import write_report
from xlafuse.results import parts
from xlafuse.results.records import (
    FLAT_KEYS,
    PARTS,
    CellResult,
    append_result,
    read_results,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent
PUBLISHED = sorted((ROOT / "experiments").rglob("results.jsonl"))
QUICKSTART = ROOT / "experiments" / "cpu" / "quickstart" / "results.jsonl"
NAME = {
    "workload": "mlp", "size": "tiny", "mode": "forward", "dtype": "float32",
    "variant": "default", "backend": "cpu", "device_kind": "cpu",
}  # fmt: skip


def _published_id(path):
    return path.parent.relative_to(ROOT).as_posix()  # a study may be published for two machines


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _nested(record, key):
    """The value a flat key names, read through the record's parts."""
    part, name = FLAT_KEYS[key]
    return getattr(record if part is None else getattr(record, part), name)


def test_each_part_maps_its_fields_to_the_published_keys():
    assert set(PARTS) == {
        "model", "compile", "fusion", "timing", "speedup", "device", "trace", "rates",
        "ceilings", "numerics", "cold_start", "collectives", "comm", "per_process",
    }  # fmt: skip
    assert parts.TimingRecord.flat_keys()["median_s"] == "time_median_s"
    assert parts.TimingRecord.flat_keys()["iters"] == "iters"
    assert parts.DeviceRecord.flat_keys()["speedup_verdict"] == "device_speedup_verdict"
    assert parts.CollectivesRecord.flat_keys()["count"] == "collectives"
    assert parts.CeilingsRecord.flat_keys()["copy_bytes_per_s"] == "copy_ceiling_bytes_per_s"
    # The published files were written with every key of their day: the disk form only grows.
    # The quickstart has every key but a user program's (issue 25), XLA's cost model against
    # the kernels (issue 28) and the process layout of a jax.distributed run (issue 31). The
    # older H200 files (`cold_start/`) also predate the named figures of a speedup (issue 26),
    # the copy ceiling's array, range and cache, and cache residency. `source_files` (each file
    # hashed into `source_sha256`) is of issue 42; the per-call figures and the trace
    # perturbation of a loop program, of issue 43; the implementation of issue 46.
    assert parts.ProcessesRecord.flat_keys()["slowest_s"] == "process_slowest_s"
    since_distributed = {
        "processes",
        "process_devices",
        *parts.ProcessesRecord.flat_keys().values(),
    }
    since_loops = {
        "launches_per_call", "modeled_bytes_per_call", "flops_per_call", "per_call_basis",
        "trace_perturbed",
    }  # fmt: skip
    since_quickstart = {
        "entry", "source_sha256", "source_files", "cost_model", *since_distributed, *since_loops,
        "numerics_precision",  # issue 44: the precision that judged the numerics
        "compile_cached",  # issue 44: a compile that a cache served
        "hlo_kernel_table",  # issue 47: an untraced cell's every kernel, from its HLO
        "implementation", "interpreted",  # issue 46: what computed the cell, interpreted or not
    }  # fmt: skip
    assert since_quickstart <= set(FLAT_KEYS)
    assert all(set(line) == set(FLAT_KEYS) - since_quickstart for line in _lines(QUICKSTART))
    since_h200 = {
        "speedup_lead", "reference_pipelined_s_per_call", "speedup_latency", "speedup_latency_ci",
        "speedup_latency_verdict", "speedup_pipelined", "speedup_pipelined_ci",
        "speedup_pipelined_verdict", "copy_ceiling_array_bytes", "copy_ceiling_range",
        "last_level_cache_bytes", "cache_resident",
    }  # fmt: skip
    assert since_h200 <= set(FLAT_KEYS)
    cold_start = _lines(ROOT / "experiments" / "h200" / "cold_start" / "results.jsonl")
    assert all(set(line) == set(FLAT_KEYS) - since_h200 - since_quickstart for line in cold_start)


@pytest.mark.parametrize("path", PUBLISHED, ids=_published_id)
def test_a_schema_1_line_reads_into_its_parts_and_writes_back_the_same(path):
    for line, record in zip(_lines(path), read_results(path).records, strict=True):
        assert {key: _nested(record, key) for key in line} == line
        assert record.timing.median_s == line["time_median_s"]
        assert record.fusion.kernels == line["kernels"]
        assert CellResult.from_dict(json.loads(json.dumps(record.to_dict()))) == record


def test_parts_keep_json_forms_so_a_written_record_reads_back_equal(tmp_path):
    record = CellResult(
        **NAME,
        speedup=parts.SpeedupRecord(vs_reference=1.5, ci=(1.4, 1.6), verdict="faster"),
        device=parts.DeviceRecord(time_s=1e-3, top_kernels=(("fusion", 1e-3),)),
        collectives=parts.CollectivesRecord(count=2, counts={"all-reduce": 2}),
        overrides={"ops": 4},
    )
    assert record.speedup.ci == [1.4, 1.6] and record.device.top_kernels == [["fusion", 1e-3]]
    path = tmp_path / "results.jsonl"
    append_result(path, record)
    line = json.loads(path.read_text())
    assert (line["speedup_ci"], line["device_time_s"], line["collectives"]) == ([1.4, 1.6], 1e-3, 2)
    assert read_results(path).records == (record,)


def test_unknown_keys_are_kept_and_written_back(tmp_path):
    data = {**NAME, "kernels": 3, "torch_twin_s": 0.5, "time_p99_s": 1.0, "study": {"name": "x"}}
    record = CellResult.from_dict(data)
    assert record.fusion.kernels == 3
    assert record.extra == {"torch_twin_s": 0.5, "time_p99_s": 1.0, "study": {"name": "x"}}
    path = tmp_path / "results.jsonl"
    append_result(path, record)
    written = json.loads(path.read_text())
    assert written["torch_twin_s"] == 0.5 and written["study"] == {"name": "x"}
    assert written["time_p99_s"] == 1.0
    assert "extra" not in written and written["schema_version"] == 1
    assert read_results(path).records == (record,)


def test_a_newer_schema_version_is_skipped_with_a_clear_message(tmp_path):
    path = tmp_path / "results.jsonl"
    record = CellResult("mlp", "tiny", "forward", "float32", "default", "cpu", "cpu")
    append_result(path, record)
    newer = {**record.to_dict(), "schema_version": 2}
    with path.open("a") as f:
        f.write(json.dumps(newer) + "\n")
    read = read_results(path)
    assert len(read.records) == 1
    assert read.skipped == (
        (2, "written under schema_version 2, newer than the 1 this xlafuse reads: upgrade "
            "xlafuse to read it"),
    )  # fmt: skip
    path.write_text(json.dumps(newer) + "\n")
    with pytest.raises(XlafuseError, match=r"none of its 1 lines is a record \(line 1: written "):
        read_results(path)


@pytest.mark.parametrize("version", ["2", 0, True, None])
def test_a_schema_version_that_is_no_version_is_one_line_at_the_cli(tmp_path, capsys, version):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({**NAME, "schema_version": version}) + "\n")
    assert main(["report", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"xlafuse report: error: {path} is not a results file (JSON lines from `xlafuse run`): "
        f"none of its 1 lines is a record (line 1: schema_version {version!r} is not a version "
        "(a positive integer))\n"
    )


@pytest.mark.parametrize("path", PUBLISHED, ids=_published_id)
def test_published_schema_1_results_still_read(path):
    read = read_results(path)
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    assert len(read.records) == len(lines) and read.skipped == ()
    assert all(r.schema_version == 1 and r.extra == {} for r in read.records)
    for line, record in zip(lines, read.records, strict=True):
        original, written = json.loads(line), json.loads(json.dumps(record.to_dict()))
        assert {k: written[k] for k in original} == original  # fields added since get defaults


# Every published folder's report, plots and all: ~40 s on 2 cores, run by .ci/run's second
# command (the fresh runs' reports are written in the others).
@pytest.mark.slow
@pytest.mark.parametrize("path", PUBLISHED, ids=_published_id)
def test_published_schema_1_results_still_report(path, tmp_path):
    read = read_results(path)
    write_report(path, out_dir=tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert all(r.variant in report for r in read.records)


@pytest.fixture(scope="module")
def fresh_run(tmp_path_factory):
    """The quickstart's mul_add_relu cells measured again: (records as built, as read back)."""
    out = tmp_path_factory.mktemp("fresh")
    config = parse_config(
        {
            "experiment": {
                "name": "quickstart",
                "output": str(out),
                "variants": ["default", "no-fusion"],
            },
            "workloads": [{"name": "mul_add_relu"}],
            "timing": FAST_TIMING,
        },
        backend="cpu",
    )
    built = []
    real_append = runner.append_result

    def keep(path, record):
        built.append(record)
        real_append(path, record)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runner, "calibrate", small_calibration)
        mp.setattr(runner, "append_result", keep)
        runner.run_experiment(config, progress=False)
    return built, read_results(out).records


def test_a_fresh_record_reads_back_equal_part_by_part(fresh_run):
    built, read = fresh_run
    assert len(built) == 2 and tuple(built) == read
    for fresh, back in zip(built, read, strict=True):
        for name in PARTS:
            assert getattr(fresh, name) == getattr(back, name), name


# Issue 43's figures, which the published quickstart predates: the per-call fields, and the
# TFLOP/s that a workload without its own FLOP count now gets from the HLO's per call.
PER_CALL_FIELDS = (
    "launches_per_call",
    "modeled_bytes_per_call",
    "flops_per_call",
    "per_call_basis",
)
# And issue 44's: the precision that judged the numerics, a compile that a cache served; and
# issue 47's: an untraced cell's every kernel from its HLO.
SINCE_LOOPS = {
    *PER_CALL_FIELDS, "tflops", "trace_perturbed", "precision", "compile_cached", "kernel_table",
}  # fmt: skip


def _measured(record):
    """The parts of a record that hold a value (not None, not an empty mapping)."""
    return {name for name in PARTS if getattr(record, name) != PARTS[name]()}


def test_a_published_record_has_the_parts_and_values_of_a_fresh_one(fresh_run):
    """The quickstart's published mul_add_relu records (schema 1, flat) read into the same
    parts as the same cells measured now, each field set or unset alike, and the same model
    (xlafuse's own count of parameters, items and FLOPs: the same on any jax)."""
    published = {r.cell_id: r for r in read_results(QUICKSTART).records}
    for fresh in fresh_run[0]:
        old = published[fresh.cell_id]
        assert _measured(fresh) == _measured(old) == {
            "model", "compile", "fusion", "timing", "speedup", "rates", "ceilings",
        } | ({"numerics"} if fresh.variant != "default" else set())  # fmt: skip
        for name in _measured(fresh):
            new_part, old_part = getattr(fresh, name), getattr(old, name)
            keys = set(new_part.flat_keys()) - SINCE_LOOPS  # issue 43's, after publishing
            shape = {f: getattr(new_part, f) is None for f in keys}
            assert shape == {f: getattr(old_part, f) is None for f in keys}, name
        assert fresh.model == old.model


def test_a_published_record_has_the_counts_of_a_fresh_one_under_its_jax(fresh_run):
    """XLA's own figures (kernels, fusions, modeled bytes, cost and memory analyses) of the
    published quickstart cells, measured again under the jax and backend that published them."""
    published = {r.cell_id: r for r in read_results(QUICKSTART).records}
    pairs = [(published[fresh.cell_id], fresh) for fresh in fresh_run[0]]
    then = {(old.env["jax"], old.backend) for old, _ in pairs}
    now = {(fresh.env["jax"], fresh.backend) for _, fresh in pairs}
    if then != now:
        pytest.skip(f"published under jax/backend {then}, measured now under {now}: XLA differs")
    for old, fresh in pairs:
        # missed fusions name source lines, which move; the per-call figures and the kernel
        # table came later
        no_missed = {
            "missed_fusions": None, "kernel_table": None, **dict.fromkeys(PER_CALL_FIELDS)
        }  # fmt: skip
        assert dataclasses.replace(fresh.fusion, **no_missed) == dataclasses.replace(
            old.fusion, **no_missed
        )
        assert fresh.compile.cost_flops == old.compile.cost_flops
        assert fresh.compile.peak_memory_bytes == old.compile.peak_memory_bytes
