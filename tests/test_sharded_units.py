"""Sharding pieces that need no second device: variants, errors, configs, trace arithmetic."""

from __future__ import annotations

import json

import pytest

from xlafuse.cli import main
from xlafuse.compiler import variants
from xlafuse.errors import XlafuseError
from xlafuse.experiment.config import parse_config
from xlafuse.measurement.collectives import comm_profile, is_comm_kernel
from xlafuse.measurement.profile import summarize_device
from xlafuse.models import build
from xlafuse.models.names import Cell
from xlafuse.models.sharding import DeviceCountError, check_device_count, leaf_spec
from xlafuse.report.sharded import sharded_section
from xlafuse.results.parts import CollectivesRecord, CommRecord, DeviceRecord, TimingRecord
from xlafuse.results.records import CellResult
from xlafuse.results.scaling import scaling


def test_no_collective_combining_switches_off_the_cpu_combiner():
    options = variants.get("no-collective-combining").compiler_options(backend="cpu")
    assert options == {"xla_disable_hlo_passes": "cpu-all-reduce-combiner"}
    composed = variants.get("no-fusion+no-collective-combining").compiler_options(backend="cpu")
    assert composed["xla_disable_hlo_passes"] == (
        "fusion,dot-library-rewriter,cpu-all-reduce-combiner"
    )


def test_collective_variants_on_the_gpu_name_every_combiner_and_the_async_pass():
    combining = variants.get("no-collective-combining")
    assert combining.passes_for("gpu") == (
        "gpu-all-reduce-combiner",
        "gpu-all-gather-combiner",
        "gpu-reduce-scatter-combiner",
        "collective-permute-combiner",
    )
    asynchronous = variants.get("no-async-collectives")
    assert asynchronous.passes_for("gpu") == ("async-collective-creator",)
    assert asynchronous.applies_to("gpu") and not asynchronous.applies_to("cpu")
    with pytest.raises(ValueError, match="applies to gpu only, not to the 'cpu' backend"):
        asynchronous.compiler_options(backend="cpu")


def test_more_devices_than_exist_is_one_clear_error():
    with pytest.raises(DeviceCountError) as info:
        check_device_count(8)
    assert str(info.value).startswith("asked for 8 devices, but the cpu backend has 1 (cpu)")
    with pytest.raises(DeviceCountError, match="devices must be a positive integer, got 0"):
        check_device_count(0)


def test_cli_reports_missing_devices_in_one_line(monkeypatch, capsys):
    # XLA_FLAGS already asks for 4 host devices, yet this backend started with 1: no child is
    # started (it would have 4), the command fails in one line with exit 2.
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
    assert main(["inspect", "--workload", "mlp", "--devices", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "xlafuse inspect: error: asked for 4 devices, but the cpu backend has 1 (cpu); on a CPU "
        "set XLA_FLAGS=--xla_force_host_platform_device_count=N before JAX starts (the xlafuse "
        "CLI does it for you)"
    ]


def test_unknown_parallelism_and_workloads_without_a_model_rule():
    with pytest.raises(XlafuseError, match="unknown parallelism 'pipeline'; accepted: data, model"):
        build("mlp", devices=1, parallelism="pipeline")
    with pytest.raises(XlafuseError, match="'model' has no sharding rule for workload 'chain'"):
        build("chain", devices=1, parallelism="model")


@pytest.mark.parametrize(
    ("path", "ndim", "spec"),
    [
        (("params", "mlp", "up", "kernel", "value"), 2, "P(None, 'devices')"),
        (("params", "mlp", "up", "bias", "value"), 1, "P('devices',)"),
        (("params", "mlp", "down", "kernel", "value"), 2, "P('devices', None)"),
        (("params", "mlp", "down", "bias", "value"), 1, "P()"),
        (
            ("opt_state", "0", "mu", "attn", "qkv", "kernel", "value"),
            2,
            "P(None, 'devices')",
        ),
        (("params", "norm", "scale", "value"), 1, "P()"),
    ],
)
def test_megatron_rule(path, ndim, spec):
    assert str(leaf_spec(path, ndim, "model")) == spec
    assert str(leaf_spec(path, ndim, "data")) == "P()"


def test_config_devices_and_parallelism():
    base = {"experiment": {"name": "s", "variants": ["default"]}}
    config = parse_config(
        {**base, "workloads": [{"name": "mlp", "devices": 2, "parallelism": "model"}]},
        backend="cpu",
    )
    (w,) = config.workloads
    assert (w.devices, w.parallelism, w.cell.mesh, w.label) == (
        2,
        "model",
        "model2",
        "mlp/tiny/forward @model2",
    )
    assert w.cell.on_devices == "model-parallel on 2 devices"
    assert w.cell.cell_id("default", "cpu") == "mlp/tiny/forward/auto/{}/default/cpu/model2"
    with pytest.raises(XlafuseError) as info:
        parse_config(
            {**base, "workloads": [{"name": "chain", "devices": 0, "parallelism": "model"}]},
            backend="cpu",
        )
    text = str(info.value)
    assert "workloads[0].devices: must be from 1 to " in text and "devices: 4 per core" in text
    assert "workloads[0].parallelism: 'model' has no sharding rule for 'chain'" in text


def test_cell_id_keeps_one_device_keys_and_marks_the_mesh():
    one = Cell("mlp", "tiny", "train").cell_id("default", "gpu")
    assert one == "mlp/tiny/train/auto/{}/default/gpu"
    sharded = Cell("mlp", "tiny", "train", devices=2, parallelism="data")
    assert sharded.cell_id("default", "gpu") == one + "/data2"
    # One device has no layout: the parallelism asked for is not part of the name.
    assert Cell("mlp", "tiny", "train", devices=1, parallelism="model") == Cell(
        "mlp", "tiny", "train"
    )


def test_comm_profile_time_and_overlap_by_hand():
    events = [
        ("loop_add_fusion", 0, 100),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 50, 100),  # 50 ns under the fusion
        ("cutlass_gemm", 120, 10),  # 10 more ns under compute
        ("ncclDevKernel_SendRecv", 300, 40),  # nothing overlaps it
    ]
    profile = comm_profile(events * 2, calls=2)
    assert profile.comm_time_s == pytest.approx(140e-9)
    assert profile.overlap_s == pytest.approx(60e-9)
    assert profile.exposed_s == pytest.approx(80e-9)
    assert profile.overlap_fraction == pytest.approx(60 / 140)
    assert profile.comm_kernels_per_call == 2
    assert is_comm_kernel("all_reduce_one_shot") and not is_comm_kernel("broadcast_add_fusion")


def test_device_profile_carries_the_comm_summary():
    events = [("fusion", 0, 100), ("ncclDevKernel_AllGather", 0, 50)]
    profile = summarize_device(events, calls=1, devices=2)
    assert profile.devices == 2
    assert profile.device_time_s == pytest.approx(150e-9)
    assert profile.comm["overlap_fraction"] == 1.0
    assert summarize_device([("fusion", 0, 100)], calls=1).comm is None


def test_scaling_and_report_section():
    result = scaling(0.010, 0.006, 2, "device_time_s")
    assert (round(result.speedup, 4), round(result.efficiency, 4)) == (1.6667, 0.8333)
    assert scaling(None, 0.006, 2, "device_time_s") is None

    def cell(devices, device_time, **extra):
        return CellResult(
            workload="gpt2", size="full", mode="train", dtype="bfloat16", variant="default",
            backend="gpu", device_kind="NVIDIA H200", devices=devices,
            device=DeviceRecord(time_s=device_time), timing=TimingRecord(median_s=1.0),
            parallelism="data" if devices > 1 else None, **extra,
        )  # fmt: skip

    records = [
        cell(1, 0.010),
        cell(
            2, 0.006,
            collectives=CollectivesRecord(
                count=2, logical=150, async_pairs=2, operand_bytes=497_759_232
            ),
            comm=CommRecord(time_s=0.002, overlap_fraction=0.25),
        ),
    ]  # fmt: skip
    lines = sharded_section(records)
    assert lines[0] == "## Sharded programs: collectives and scaling"
    assert lines[-2] == (
        "| gpt2/full/train | data x2 | default | 2 | 150 | 2 | 498 | 6 (device) | 2 | 25% "
        "| 1.67x | 83% |"
    )
    assert sharded_section(records[:1]) == []


def test_cli_runs_itself_again_with_host_devices(monkeypatch, capfd):
    # This process has 1 CPU device: `inspect --devices 4` re-runs in a child with 4.
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    argv = ["inspect", "--workload", "mlp", "--devices", "4", "--parallelism", "model", "--json"]
    assert main(argv) == 0
    got = json.loads(capfd.readouterr().out)
    assert (got["devices"], got["parallelism"]) == (4, "model")
    assert got["target"] == "workload mlp (tiny, forward, model-parallel on 4 devices)"
    # Row-parallel `down` leaves partial sums: one all-reduce of the (2, 16, 64) f32 output.
    assert got["collectives"]["by_kind"] == {
        "all-reduce": {
            "count": 1, "sync": 1, "async_pairs": 0, "logical": 1,
            "operand_bytes": 2 * 16 * 64 * 4, "ring_bytes": 2 * 3 * 8192 // 4,
        }
    }  # fmt: skip
