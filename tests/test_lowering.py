"""One lowering: every entry point compiles and traces the same program (issue 30), on one
device and sharded over two, for a forward call and a train step.

The checks run in a child with two host devices (tests/scripts/lowering_checks.py), as the
sharded tests do: this process's CPU backend started with one.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import jax
import pytest
from helpers import run_on_host_devices

ENTRY_POINTS = ["cold start", "diff/explain", "inspect", "run", "unoptimized_hlo", "warmup"]


@pytest.fixture(scope="module")
def lowering(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("lowering")
    return run_on_host_devices("lowering_checks.py", folder, 2, "lowering.json")


@pytest.mark.parametrize(
    "case",
    ["forward/1/data", "train/1/data", "forward/2/data", "forward/2/model", "train/2/data",
     "train/2/model"],
)  # fmt: skip
def test_every_entry_point_sees_one_program(lowering, case):
    assert lowering["devices"] == 2
    found = lowering["cases"][case]
    assert found["entry points"] == ENTRY_POINTS
    assert found["distinct unoptimized"] == 1
    assert found["distinct optimized"] == 1
    assert found["inspect report is the run's"] is True
    assert found["donated"] is case.startswith("train")


CPU_ONLY = pytest.mark.skipif(
    jax.default_backend() != "cpu", reason="N host devices are a CPU's; one GPU has one device"
)


@CPU_ONLY
def test_a_sharded_cell_keeps_its_devices_in_the_cold_start_spec(monkeypatch):
    from xlafuse.experiment.config import WorkloadConfig
    from xlafuse.measurement import coldstart

    cell = WorkloadConfig(name="mlp", mode="train", devices=2, parallelism="model")
    spec = coldstart.workload_spec(cell.cell)
    assert (spec["devices"], spec["parallelism"]) == (2, "model")
    assert coldstart.workload_spec("mlp")["devices"] == 1
    started = []
    monkeypatch.setattr(
        coldstart, "run_child", lambda *a, **k: started.append(k["process_flags"]) or [{"ok": True}]
    )
    coldstart._run_child({"phase": "jit", "workload": spec, "variant": {}})
    # On a CPU the child gets the host devices the sharded program needs.
    assert started == [["--xla_force_host_platform_device_count=2"]]


@CPU_ONLY
def test_warmup_of_a_sharded_config_compiles_the_sharded_program(tmp_path, capfd):
    from xlafuse.cli import main

    config = tmp_path / "sharded.toml"
    config.write_text(
        '[experiment]\nname = "s"\nvariants = ["default"]\n'
        '[[workloads]]\nname = "mlp"\nmode = "train"\ndevices = 2\nparallelism = "data"\n'
    )
    assert main(["warmup", str(config), "--cache", str(tmp_path / "cache"), "--json"]) == 0
    summary = json.loads(capfd.readouterr().out)  # printed by the child with 2 host devices
    assert summary["compiled"] == ["mlp/tiny/train @data2 @ default"]
    assert summary["entries_written"] >= 1


@CPU_ONLY
def test_cold_start_of_a_sharded_cell_runs_the_sharded_program():
    from xlafuse.measurement import coldstart
    from xlafuse.models.names import Cell

    cell = Cell("mlp", mode="train", devices=2, parallelism="model")
    run = coldstart.run_start(cell, variant="default", steady_calls=1)
    # The child (2 host devices) rebuilt the cell sharded: its first call's outputs span both.
    assert run.devices == 2
    assert (
        coldstart.run_start(Cell("mlp", mode="train"), variant="default", steady_calls=1).devices
        == 1
    )


SHARDED = Path(__file__).resolve().parents[1] / "configs" / "sharded.toml"


def _on_a_cpu(config: dict) -> str:
    """configs/sharded.toml's workloads at size tiny on the CPU, under its reference only."""
    lines = ['[experiment]\nname = "sharded-cpu"\nvariants = ["default"]\n']
    for w in config["workloads"]:
        lines.append("[[workloads]]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in w.items() if k not in ("size", "backends")]
    return "\n".join(lines) + "\n"


@CPU_ONLY
def test_warmup_of_the_sharded_config_compiles_each_cell_on_its_mesh(tmp_path, capfd):
    from xlafuse.cli import main

    config = tmp_path / "sharded.toml"
    config.write_text(_on_a_cpu(tomllib.loads(SHARDED.read_text())))
    assert main(["warmup", str(config), "--cache", str(tmp_path / "cache"), "--json"]) == 0
    summary = json.loads(capfd.readouterr().out)  # printed by the child with 2 host devices
    assert summary["compiled"] == [
        "gpt2/tiny/train @ default",
        "gpt2/tiny/train @data2 @ default",
        "transformer_block/tiny/forward @ default",
        "transformer_block/tiny/forward @model2 @ default",
    ]
