"""Sharded programs on 4 host devices: collectives, combining, agreement with one device.

JAX reads the host device count once, when its CPU backend starts, and this pytest process has
started it already (with one device; the other tests rely on that). So the checks run in one
child process with XLA_FLAGS=--xla_force_host_platform_device_count=4 (tests/scripts/
sharded_checks.py) and the tests here assert on what it reports.
"""

from __future__ import annotations

import pytest
from helpers import run_on_host_devices

from xlafuse.compiler.devices import forced_host_devices, with_host_devices
from xlafuse.hlo.collectives import collectives_of_text, group_size, ring_bytes

F32 = 4


@pytest.fixture(scope="module")
def checks(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("sharded")
    return run_on_host_devices("sharded_checks.py", folder, 4, "checks.json")


def test_child_has_four_host_devices(checks):
    assert checks["devices"] == 4


def test_data_parallel_mlp_combines_the_gradient_all_reduces(checks):
    dp = checks["data_parallel_mlp"]
    default = dp["default"]["collectives"]
    separate = dp["no-collective-combining"]["collectives"]
    # 6 parameters (LayerNorm scale and bias, two Dense kernels and biases) + the loss.
    assert len(dp["param_shapes"]) == 6
    assert default["by_kind"]["all-reduce"]["count"] == 1
    assert default["collectives"][0]["logical"] == 7
    assert separate["by_kind"]["all-reduce"]["count"] == 7
    assert [c["logical"] for c in separate["collectives"]] == [1] * 7
    assert default["count"] < separate["count"]
    # One all-reduce per parameter (its gradient) plus the scalar loss.
    shapes = sorted(tuple(c["operand_shapes"]) for c in separate["collectives"])
    assert sorted(s[0].split("{")[0] for s in shapes) == sorted(
        ["f32[64]", "f32[64]", "f32[64]", "f32[256]", "f32[64,256]", "f32[256,64]", "f32[]"]
    )
    # Combining changes the count, not the bytes: 6 gradients + the loss, f32.
    expected = F32 * (3 * 64 + 256 + 2 * 64 * 256) + F32
    assert default["operand_bytes"] == separate["operand_bytes"] == expected == 132868


@pytest.mark.parametrize("variant", ["default", "no-collective-combining"])
def test_data_parallel_step_agrees_with_one_device(checks, variant):
    result = checks["data_parallel_mlp"][variant]
    assert result["within_tolerance"] is True
    assert result["max_abs_diff"] < 1e-5
    # The new state keeps the replicated layout on all 4 devices (out_shardings).
    assert result["state_sharding"] == "P()"
    assert result["state_devices"] == 4


def test_model_parallel_block_agrees_with_one_device(checks):
    block = checks["model_parallel_block"]
    assert block["within_tolerance"] is True
    assert block["max_abs_diff"] < 1e-5
    assert block["plan"] == {"devices": 4, "parallelism": "model"}
    # Column-parallel up/qkv (kernel split on outputs, bias split), row-parallel down/out.
    assert block["specs"].count("P(None, 'devices')") == 2
    assert block["specs"].count("P('devices',)") == 2
    assert block["specs"].count("P('devices', None)") == 2


def test_model_parallel_block_collectives_and_bytes_by_hand(checks):
    report = checks["model_parallel_block"]["collectives"]
    batch, seq, d_model, devices = 2, 16, 64, 4
    # The fused QKV output (3 * d_model columns) is split over 4 devices off head boundaries:
    # XLA gathers it (each device contributes 3 * 64 / 4 = 48 columns) ...
    gather = batch * seq * (3 * d_model // devices) * F32
    # ... and each row-parallel layer (attention out, MLP down) all-reduces a full activation.
    activation = batch * seq * d_model * F32
    listed = [(c["kind"], c["operand_bytes"], c["group_size"]) for c in report["collectives"]]
    assert listed == [
        ("all-gather", gather, 4),
        ("all-reduce", activation, 4),
        ("all-reduce", activation, 4),
    ]
    assert (gather, activation) == (6144, 8192)
    assert report["operand_bytes"] == 6144 + 2 * 8192
    # Ring model: all-gather (n-1) x shard; all-reduce 2 (n-1)/n x operand.
    assert report["ring_bytes"] == 3 * 6144 + 2 * (2 * 3 * 8192 // 4) == 43008


ASYNC_HLO = """HloModule sharded

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%rs_body (p: f32[8,4]) -> f32[4,4] {
  %p = f32[8,4]{1,0} parameter(0)
  ROOT %rs = f32[4,4]{1,0} reduce-scatter(%p), replica_groups=[1,2]<=[2], dimensions={0}, to_apply=%add
}

ENTRY %main (x: f32[8,4], y: bf16[16]) -> f32[4,4] {
  %x = f32[8,4]{1,0} parameter(0)
  %y = bf16[16]{0} parameter(1)
  %ars = (f32[8,4]{1,0}, bf16[16]{0}) all-reduce-start(%x, %y), replica_groups={{0,1}}, to_apply=%add
  %ard = (f32[8,4]{1,0}, bf16[16]{0}) all-reduce-done(%ars)
  %g = f32[8,4]{1,0} get-tuple-element(%ard), index=0
  %ag = f32[16,4]{1,0} all-gather(%g), replica_groups=[1,2]<=[2], dimensions={0}
  %cp = f32[8,4]{1,0} collective-permute(%x), source_target_pairs={{0,1},{1,0}}
  %ags = (f32[8,4]{1,0}, f32[16,4]{1,0}) all-gather-start(%cp), replica_groups={{0,1}}, dimensions={0}, backend_config={"collective_backend_config":{"is_sync":true}}
  %agd = f32[16,4]{1,0} all-gather-done(%ags)
  %start = ((f32[8,4]{1,0}), f32[4,4]{1,0}) async-start(%cp), calls=%rs_body
  ROOT %done = f32[4,4]{1,0} async-done(%start)
}
"""


def test_collectives_of_async_pairs_and_wrapped_reduce_scatter():
    report = collectives_of_text(ASYNC_HLO)
    rows = [
        (c.kind, c.is_async, c.logical, c.operand_bytes, c.group_size) for c in report.collectives
    ]
    assert rows == [
        ("all-reduce", True, 2, 8 * 4 * 4 + 16 * 2, 2),
        ("all-gather", False, 1, 128, 2),
        ("collective-permute", False, 1, 128, None),
        ("all-gather", False, 1, 128, 2),  # a start/done pair marked is_sync: synchronous
        ("reduce-scatter", True, 1, 128, 2),
    ]
    assert report.count == 5 and report.logical == 6 and report.async_pairs == 2
    by_kind = report.by_kind()
    assert by_kind["all-reduce"].async_pairs == 1 and by_kind["all-gather"].sync == 2
    # all-reduce 2(n-1)/n x 160 = 160; all-gathers 128 each; permute 128; reduce-scatter 64.
    assert report.ring_bytes == 160 + 128 + 128 + 128 + 64


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("{{0,1,2,3}}", 4),
        ("{{0,1},{2,3}}", 2),
        ("[2,4]<=[8]", 4),
        ("[4,2]<=[2,4]T(1,0)", 2),
        ("mesh['axis_0'=1,'axis_1'=1,'axis_2'=4] {'axis_2'}", 4),
        ("mesh['x'=2,'y'=4] {'x','y'}", 8),
        ("{}", None),
    ],
)
def test_group_size_reads_every_printed_form(text, size):
    assert group_size({"replica_groups": text}) == size


def test_ring_bytes_model():
    assert ring_bytes("all-reduce", 1000, 2) == 1000
    assert ring_bytes("all-gather", 1000, 4) == 3000
    assert ring_bytes("reduce-scatter", 1000, 4) == 750
    assert ring_bytes("all-reduce", 1000, None) is None
    assert ring_bytes("collective-permute", 1000, None) == 1000


def test_host_device_flags():
    flags = with_host_devices(
        4, xla_flags="--xla_cpu_foo=1 --xla_force_host_platform_device_count=2"
    )
    assert flags == "--xla_cpu_foo=1 --xla_force_host_platform_device_count=4"
    assert forced_host_devices(xla_flags=flags) == 4
    assert forced_host_devices(xla_flags="") is None


def test_runner_records_collectives_per_cell(checks):
    cells = {c["cell_id"].split("/", 1)[1]: c for c in checks["runner"]["cells"]}
    one = 'tiny/train/auto/{"batch":4}/default/cpu'
    assert set(cells) == {
        one,
        'tiny/train/auto/{"batch":4}/no-collective-combining/cpu',
        one + "/data4",
        'tiny/train/auto/{"batch":4}/no-collective-combining/cpu/data4',
    }
    assert all(c["status"] == "ok" for c in cells.values())
    assert cells[one]["devices"] == 1 and cells[one]["collectives"] is None
    sharded = cells[one + "/data4"]
    assert (sharded["devices"], sharded["parallelism"]) == (4, "data")
    assert (sharded["collectives"], sharded["logical_collectives"]) == (1, 7)
    assert sharded["collective_counts"] == {"all-reduce": 1}
    assert sharded["collective_operand_bytes"] == 132868
    separate = cells['tiny/train/auto/{"batch":4}/no-collective-combining/cpu/data4']
    assert (separate["collectives"], separate["within_tolerance"]) == (7, True)
    section = checks["runner"]["section"]
    assert "| mlp[batch=4]/tiny/train | data x4 | default | 1 | 7 | 0 | 0.133 |" in section
    assert "| mlp[batch=4]/tiny/train | data x4 | no-collective-combining | 7 | 7 | 0 |" in section
