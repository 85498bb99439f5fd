"""xlafuse under jax.distributed (issue 31): several local processes on this CPU, gloo between them.

`xlafuse launch --processes P --devices-per-process D -- run CONFIG` of the data-parallel mlp
train step and the model-parallel transformer_block forward, on 2 x 2 and 4 x 1 processes x
devices, against the same config on one process with 4 devices: one results file, each cell
written once by process 0, the same collectives and bytes, outputs within tolerance; the new
parameters of one step against one process's; a killed worker ends the run at once with one
line and no torn record. Each run starts fresh interpreters (a few seconds each).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO

from xlafuse.distributed.launch import launch

pytestmark = pytest.mark.slow

LAYOUTS = {"2x2": (2, 2), "4x1": (4, 1)}
TIMEOUT_S = 60
CONFIG = """
[experiment]
name = "distributed-test"
variants = ["default", "no-fusion"]
reference = "default"

[timing]
warmup = 1
min_time_s = 0
min_iters = 3
max_iters = 6
repeats = 1

[measure]
calibrate = false

[[workloads]]
name = "mlp"
mode = "train"
devices = 4
parallelism = "data"
overrides = {batch = 4}

[[workloads]]
name = "transformer_block"
mode = "forward"
devices = 4
parallelism = "model"
"""
# What a one-process run on 4 host devices counts (docs/sharding.md): the mlp step's gradients
# and loss in one all-reduce; the block's QKV all-gather and two all-reduces.
COLLECTIVE_BYTES = {"mlp": 132868, "transformer_block": 6144 + 2 * 8192}


def _env(devices: int | None = None) -> dict[str, str]:
    """This environment for a child on the CPU; with `devices`, that many host devices (no
    second interpreter to get them)."""
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    if devices is not None:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["PYTHONPATH"] = str(REPO) + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _xlafuse(*argv, devices: int | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "xlafuse", *map(str, argv)]
    return subprocess.run(
        command, env=_env(devices), capture_output=True, text=True, timeout=300, check=False
    )


def _records(folder: Path) -> list[dict]:
    text = (folder / "results.jsonl").read_text()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def _launch_run(folder: Path, processes: int, devices: int, *more) -> subprocess.CompletedProcess:
    config = folder / "distributed.toml"
    config.write_text(CONFIG)
    return _xlafuse(
        "launch", "--processes", processes, "--devices-per-process", devices,
        "--timeout", TIMEOUT_S, "--", "run", config, "--out", folder / "out", "--no-progress",
        *more,
    )  # fmt: skip


@pytest.fixture(scope="module")
def runs() -> dict:
    """The launched runs by layout, each made once for the module."""
    return {}


def _launched(runs: dict, tmp_path_factory, layout: str):
    if layout not in runs:
        folder = tmp_path_factory.mktemp(f"launch{layout}")
        done = _launch_run(folder, *LAYOUTS[layout])
        assert done.returncode == 0, done.stderr[-3000:]
        runs[layout] = (layout, folder / "out", done)
    return runs[layout]


@pytest.fixture(scope="module", params=list(LAYOUTS))
def launched(request, runs, tmp_path_factory):
    return _launched(runs, tmp_path_factory, request.param)


@pytest.fixture(scope="module")
def launched_2x2(runs, tmp_path_factory):
    return _launched(runs, tmp_path_factory, "2x2")


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    folder = tmp_path_factory.mktemp("one-process")
    config = folder / "distributed.toml"
    config.write_text(CONFIG)
    done = _xlafuse("run", config, "--out", folder / "out", "--no-progress", devices=4)
    assert done.returncode == 0, done.stderr[-3000:]
    return {(r["workload"], r["variant"]): r for r in _records(folder / "out")}


def test_one_results_file_each_cell_written_once_by_process_0(launched):
    layout, out, done = launched
    processes, devices = LAYOUTS[layout]
    records = _records(out)
    assert sorted(p.name for p in out.iterdir() if p.suffix == ".jsonl") == ["results.jsonl"]
    ids = [r["cell_id"] for r in records]
    assert len(ids) == len(set(ids)) == 4
    assert all(i.endswith(f"/processes{layout}") for i in ids)
    assert all(r["status"] == "ok" for r in records), [r.get("error") for r in records]
    assert {(r["processes"], r["process_devices"], r["devices"]) for r in records} == {
        (processes, devices, 4)
    }
    # One process speaks: each cell's line once on stdout, the report written.
    assert done.stdout.count("transformer_block/tiny/forward @model4  no-fusion") == 1
    report = (out / "report.md").read_text()
    assert "| transformer_block/tiny/forward | model x4 on " in report
    assert report.count(f" | {processes} x {devices} | pipelined | ") == 4


def test_each_process_sends_its_figures_and_the_cell_takes_the_slowest(launched):
    layout, out, _ = launched
    processes, _ = LAYOUTS[layout]
    for r in _records(out):
        times = r["process_times_s"]
        assert r["process_figure"] == "pipelined"
        assert len(times) == len(r["process_host_s_per_call"]) == processes
        assert r["process_slowest_s"] == max(times) and r["process_fastest_s"] == min(times)
        assert r["process_spread"] == pytest.approx(max(times) / min(times) - 1)
        # The cell's time is over each round's slowest process: at least the median of any
        # one process's own rounds.
        assert r["pipelined_s_per_call"] >= min(times)


def test_collectives_and_bytes_equal_one_process_with_four_devices(launched, one_process):
    _, out, _ = launched
    for r in _records(out):
        single = one_process[(r["workload"], r["variant"])]
        assert single["processes"] == 1 and single["devices"] == 4
        for key in ("collectives", "logical_collectives", "collective_operand_bytes",
                    "collective_ring_bytes", "collective_counts"):  # fmt: skip
            assert r[key] == single[key], key
        assert r["collective_operand_bytes"] == COLLECTIVE_BYTES[r["workload"]]


def test_outputs_are_gathered_and_judged_as_on_one_process(launched):
    _, out, _ = launched
    judged = [r for r in _records(out) if r["variant"] == "no-fusion"]
    assert len(judged) == 2
    for r in judged:
        assert r["within_tolerance"] is True
        assert r["max_abs_diff"] < 1e-5


def test_resume_refuses_a_folder_measured_with_another_layout(launched_2x2, tmp_path):
    _, out, _ = launched_2x2
    config = tmp_path / "distributed.toml"
    config.write_text(CONFIG)
    done = _xlafuse("run", config, "--out", out, "--no-progress", devices=4)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "holds results measured under other settings" in lines[0]
    assert "processes: " in lines[0]


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_one_step_updates_the_parameters_as_one_process_does(layout, tmp_path):
    """Judged by the train-step rule of `xlafuse.measurement.numerics`: Adam's first step moves a
    parameter by about lr whatever its gradient's size, so a gradient within rounding of zero
    may move it either way (an element-wise 1e-5 failed on one parameter of 16,384 here)."""
    import jax

    from xlafuse import models
    from xlafuse.measurement.numerics import host_outputs, judge_workload

    processes, devices = LAYOUTS[layout]
    env = _env(devices)
    script = REPO / "tests" / "scripts" / "distributed_step.py"
    argv = [sys.executable, str(script), str(tmp_path / "step.npz")]
    assert launch(argv, processes, TIMEOUT_S, env).returncode == 0
    got = np.load(tmp_path / "step.npz")
    one = models.build("mlp", mode="train", batch=4)
    new_state, loss = jax.jit(one.fn, **one.jit_kwargs())(*one.fresh_args())
    expected = host_outputs(one, (new_state, loss))
    leaves = [got[f"arr_{i}"] for i in range(len(new_state))]
    assert f"arr_{len(new_state)}" not in got
    assert [leaf.shape for leaf in leaves] == [leaf.shape for leaf in new_state]
    diff = judge_workload(one, expected, host_outputs(one, (leaves, got["loss"])))
    assert diff.within_tolerance, diff
    assert float(got["loss"]) == pytest.approx(float(loss), rel=1e-5)


def _pid_of(out: Path, index: int) -> int | None:
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [w.decode(errors="replace") for w in argv]
        found = str(out) in words and "--process-id" in words
        if found and words[words.index("--process-id") + 1] == str(index):
            return int(proc.name)
    return None


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="finds processes in /proc")
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_killed_worker_ends_the_run_with_one_line_and_no_torn_record(layout, tmp_path):
    processes, devices = LAYOUTS[layout]
    config = tmp_path / "distributed.toml"
    # The pair's rounds go on (at least MIN_ROUNDS of them, seconds here) past the first record.
    config.write_text(CONFIG.replace("max_iters = 6", "max_iters = 400"))
    out = tmp_path / "out"
    command = [
        sys.executable, "-m", "xlafuse", "launch", "--processes", str(processes),
        "--devices-per-process", str(devices), "--timeout", str(TIMEOUT_S), "--", "run",
        str(config), "--out", str(out), "--no-progress",
    ]  # fmt: skip
    proc = subprocess.Popen(command, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    results = out / "results.jsonl"
    deadline = time.monotonic() + 240
    while not (results.exists() and results.read_text().endswith("\n")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    victim = _pid_of(out, processes - 1)
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 1
    lines = [line for line in stderr.decode().splitlines() if line.startswith("xlafuse")]
    assert len(lines) == 1, stderr.decode()[-3000:]
    assert lines[0].startswith(
        f"xlafuse launch: process {processes - 1} was killed by signal 9 (SIGKILL) while "
    )
    assert "measuring mlp[batch=4]/tiny/train @data4 under " in lines[0]
    assert lines[0].endswith("; stopped the others")
    records = _records(out)  # every line a whole record: nothing half-written
    assert [r["variant"] for r in records] == ["default"]
    assert not list(out.glob("*.torn-*"))


def test_a_mesh_that_leaves_out_a_process_is_one_line_from_process_0():
    done = _xlafuse(
        "launch", "--processes", 2, "--timeout", TIMEOUT_S, "--",
        "compare", "mlp", "--devices", 1, "--variants", "default",
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "xlafuse compare: error: --devices 1 asks for 1 device, but the 2 processes have 2 "
        "together: under --distributed a mesh spans every process's devices; ask for 2"
    ]
