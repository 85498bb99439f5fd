"""`xlafuse validate --detail`: ncu's throughput, occupancy, L2 hit rate and grid size per launch,
read back, carried through the rows and validation.json, and shown in the tables."""

from __future__ import annotations

import json

import pytest

from xlafuse.cli import main
from xlafuse.errors import XlafuseError
from xlafuse.measurement.ncu import DETAIL_METRICS, NcuKernel, ncu_command, parse_ncu_csv
from xlafuse.measurement.validate import compare_kernels, result_from_dict
from xlafuse.report.validation import format_text, render_markdown

_HEADER = '"ID","Process ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'
_BASE = (
    ("dram__bytes_read.sum", "byte", "1,073,828,864"),
    ("dram__bytes_write.sum", "byte", "1,050,040,576"),
    ("gpu__time_duration.sum", "ns", "501,088"),
)
_DETAIL = (
    ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", "12.34"),
    ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "%", "91.76"),
    ("sm__warps_active.avg.pct_of_peak_sustained_active", "%", "85.02"),
    ("lts__t_sector_hit_rate.pct", "%", "3.21"),
    ("launch__grid_size", "", "524,288"),
)
CHAIN = {"name": "chain", "size": "full", "mode": "forward", "overrides": {"ops": 8}}
THREE = "dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum"


def _csv(*launches: tuple[int, str, tuple[tuple[str, str, str], ...]]) -> str:
    rows = [
        f'"{lid}","5129","{name}","{metric}","{unit}","{value}"'
        for lid, name, metrics in launches
        for metric, unit, value in metrics
    ]
    return "\n".join(["==PROF== Disconnected from process 5129", _HEADER, *rows]) + "\n"


def _launch(launch_id: int, time_s: float, **detail: float) -> NcuKernel:
    return NcuKernel(launch_id, 1, "nvjet_gemm", 10, 10, time_s, detail)


def test_detail_metrics_are_read_as_plain_numbers():
    (kernel,) = parse_ncu_csv(_csv((0, "loop_add_fusion", _BASE + _DETAIL)))
    assert kernel.detail == {
        "sm_pct": 12.34,
        "memory_pct": 91.76,
        "occupancy_pct": 85.02,
        "l2_hit_pct": 3.21,
        "grid_size": 524_288.0,
    }
    assert kernel.dram_bytes == 2_123_869_440  # the three metrics read as before
    assert kernel.to_dict()["detail"] == kernel.detail
    hash(kernel)  # the detail mapping stays out of the hash


def test_launch_without_detail_metrics_has_empty_or_partial_detail():
    first, second = parse_ncu_csv(_csv((0, "a", _BASE), (1, "b", _BASE + _DETAIL[3:4])))
    assert (first.detail, second.detail) == ({}, {"l2_hit_pct": 3.21})
    assert first.to_dict()["detail"] == {}


def test_unknown_unit_of_a_detail_metric_is_an_error():
    bad = (("lts__t_sector_hit_rate.pct", "Kbyte", "1,024"),)
    with pytest.raises(
        XlafuseError,
        match=r"^ncu CSV: launch 0 \(a\), lts__t_sector_hit_rate.pct: unit 'Kbyte' is not one of "
        r"%, '', block \(value '1,024'\)$",
    ):
        parse_ncu_csv(_csv((0, "a", _BASE + bad)))


def test_ncu_command_asks_for_the_detail_metrics_only_with_detail():
    program = ["python", "-m", "child"]
    plain = ncu_command("/opt/ncu", program)
    metrics = plain[plain.index("--metrics") + 1]
    assert metrics == THREE
    detailed = ncu_command("/opt/ncu", program, detail=True)
    metrics = detailed[detailed.index("--metrics") + 1].split(",")
    assert metrics == [*THREE.split(","), *DETAIL_METRICS.values()]
    assert len(metrics) == 8
    assert detailed[-3:] == program and detailed[:3] == ["/opt/ncu", "--profile-from-start", "off"]


def test_row_of_several_launches_takes_the_longest_launchs_detail():
    launches = [
        _launch(0, 90e-6, sm_pct=70.0, grid_size=264.0),
        _launch(1, 5e-6, sm_pct=3.0, grid_size=8.0),  # a split-K reduction after its GEMM
    ]
    result = compare_kernels([("custom-call.0", 1000, True)], launches)
    (row,) = result.rows
    assert row.launch_ids == (0, 1)
    assert row.detail == {"sm_pct": 70.0, "grid_size": 264.0}


def _detailed_result():
    launch = NcuKernel(0, 1, "loop_add_fusion", 1_073_828_864, 1_050_040_576, 501_088e-9)
    measured = parse_ncu_csv(_csv((0, "loop_add_fusion", _BASE + _DETAIL)))
    plain = compare_kernels([("loop_add_fusion", 1 << 31)], [launch], workload=CHAIN)
    return compare_kernels([("loop_add_fusion", 1 << 31)], measured, workload=CHAIN), plain


def test_detail_round_trips_through_validation_json_and_old_cells_load():
    detailed, plain = _detailed_result()
    cell = json.loads(json.dumps(detailed.to_dict()))
    assert cell["rows"][0]["detail"]["grid_size"] == 524_288
    again = result_from_dict(cell)
    assert again.rows == detailed.rows
    old = json.loads(json.dumps(plain.to_dict()))
    for row in old["rows"]:
        del row["detail"]  # as a version before --detail wrote it
    assert result_from_dict(old).rows[0].detail == {}
    old["rows"][0]["detail"] = [1, 2]
    with pytest.raises(ValueError, match=r"^not a cell of validation.json"):
        result_from_dict(old)


def test_tables_gain_the_detail_columns_only_with_detail():
    detailed, plain = _detailed_result()
    md = render_markdown([detailed])
    assert (
        "| # | HLO kernel | kind | ncu kernel | match | modeled MB | DRAM read MB | "
        "DRAM write MB | DRAM vs model | ncu us | profiler us | ncu vs profiler | SM % | "
        "memory % | occupancy % | L2 hit % | grid | verdict |"
    ) in md
    assert "| ---: | --- | --- | --- | --- | " + "---: | " * 12 + "--- |" in md
    assert (
        "| 1 | loop_add_fusion | - | loop_add_fusion | name | 2,147.5 | 1,073.8 | 1,050.0 | "
        "-1.1% | 501.1 | - | - | 12.3 | 91.8 | 85.0 | 3.2 | 524,288 | ok |"
    ) in md
    assert "With `--detail`, ncu also measured per launch: SM %: compute throughput" in md
    assert "(`launch__grid_size`)" in md
    text = format_text([detailed]).splitlines()
    assert text[-2].split() == [
        "#", "HLO", "kernel", "kind", "ncu", "kernel", "match", "modeled", "MB", "DRAM", "read",
        "MB", "DRAM", "write", "MB", "DRAM", "vs", "model", "ncu", "us", "profiler", "us", "ncu",
        "vs", "profiler", "SM", "%", "memory", "%", "occupancy", "%", "L2", "hit", "%", "grid",
        "verdict",
    ]  # fmt: skip
    assert text[-1].split()[-6:] == ["12.3", "91.8", "85.0", "3.2", "524,288", "ok"]
    for shown in (render_markdown([plain]), format_text([plain])):
        assert "SM %" not in shown and "grid" not in shown and "--detail" not in shown


def test_partial_detail_shows_a_dash():
    result = compare_kernels([("nvjet_gemm", 100)], [_launch(0, 1e-6, l2_hit_pct=45.0)])
    assert result.rows[0].detail == {"l2_hit_pct": 45.0}
    last = format_text([result]).splitlines()[-1].split()
    assert last[-8:] == ["-", "-", "-", "45.0", "-", "L2,", "not", "judged"]


def test_detail_with_rejudge_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "validation.json"
    path.write_text(json.dumps({"cells": []}))
    assert main(["validate", "--rejudge", str(path), "--detail"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "xlafuse validate: error: --detail asks ncu for more metrics, --rejudge measures "
        "nothing: leave out one of them"
    ]
