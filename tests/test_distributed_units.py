"""The pieces of a jax.distributed run that need no second process (issue 31): the layout and
its place in a cell's identity and settings, the coordinator's checks, timing in lock-step with
a fake second process, each process's figures in the record, the launcher's supervision of
plain child processes, and the command line's one-line errors."""

from __future__ import annotations

import re
import socket
import sys
import time

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import REPO, run_cli

from xlafuse.distributed import arrays, launch, lockstep, messages, runtime, watch
from xlafuse.errors import XlafuseError
from xlafuse.experiment import fields
from xlafuse.measurement import timing
from xlafuse.models.names import Cell
from xlafuse.results.records import CellResult, append_result
from xlafuse.results.settings import check_resumable


class FakeClock:
    """Advances only when the fake function runs, by the same duration each call."""

    def __init__(self, seconds: float):
        self.now, self.seconds, self.calls = 0.0, seconds, 0

    def __call__(self) -> float:
        return self.now

    def fn(self, x):
        self.now += self.seconds
        self.calls += 1
        return x


class TwiceAsSlowPeer(lockstep.Lockstep):
    """Two processes, the other one taking twice as long as this one on every call."""

    processes = 2

    def __init__(self):
        self.barriers = 0
        self.asked: list[float] = []

    def barrier(self) -> None:
        self.barriers += 1

    def first(self, value: float) -> float:
        self.asked.append(float(value))
        return value

    def slowest(self, samples):
        return [2 * s for s in samples]

    def gather(self, values):
        return np.asarray([list(values), [2 * v for v in values]])


@pytest.fixture
def peer():
    fake = TwiceAsSlowPeer()
    lockstep.use(fake)
    yield fake
    lockstep.use(lockstep.SOLO)


def test_layout_of_one_process_adds_nothing_to_settings_or_ids():
    assert runtime.layout() == runtime.SINGLE
    assert runtime.SINGLE.settings() == {} and runtime.SINGLE.writer
    two = runtime.Layout(2, 2, 1)
    assert (two.label, two.writer, two.distributed) == ("2x2", False, True)
    assert two.settings() == {"processes": 2, "process_devices": 2}
    cell = Cell("mlp", "tiny", "train", None, {"batch": 4}, devices=4)
    old = cell.cell_id("default", "cpu")
    assert old == 'mlp/tiny/train/auto/{"batch":4}/default/cpu/data4'
    assert cell.cell_id("default", "cpu", processes=None) == old
    assert cell.cell_id("default", "cpu", processes="2x2") == old + "/processes2x2"


def test_resume_refuses_a_file_of_another_layout(tmp_path):
    path = tmp_path / "results.jsonl"
    settings = {"backend": "cpu", "processes": 2, "process_devices": 2}
    append_result(path, CellResult("mlp", "tiny", "train", None, "default", "cpu", "cpu",
                                   settings=settings))  # fmt: skip
    check_resumable(path, settings)
    with pytest.raises(XlafuseError) as err:
        check_resumable(path, {"backend": "cpu", "processes": 4, "process_devices": 1})
    assert "processes: 2 in the file, 4 now; process_devices: 2 in the file, 1 now" in str(
        err.value
    )
    with pytest.raises(XlafuseError, match="processes: 2 in the file, null now"):
        check_resumable(path, {"backend": "cpu"})


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (("localhost:1", None, None), "go together: give all three"),
        (("localhost", 2, 0), "'localhost' is not HOST:PORT"),
        (("localhost:70000", 2, 0), "a port from 1 to 65535"),
        (("localhost:1", 0, 0), "--num-processes must be at least 1, not 0"),
        (("localhost:1", 2, 2), "--process-id must be from 0 to 1 (--num-processes 2), not 2"),
    ],
)
def test_explicit_values_are_checked_with_one_line(given, message):
    with pytest.raises(XlafuseError) as err:
        runtime.check_explicit(*given)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert runtime.check_explicit(None, None, None) is False


def test_a_coordinator_port_in_use_or_unreachable_is_one_line():
    with socket.create_server(("", 0)) as busy:
        port = busy.getsockname()[1]
        with pytest.raises(runtime.CoordinatorError) as err:
            runtime.check_coordinator(f"localhost:{port}", 0, 1.0)
        assert str(err.value) == (
            f"coordinator port {port} is in use (Address already in use): pick another "
            "--coordinator port, or let `xlafuse launch` pick a free one"
        )
        runtime.check_coordinator(f"localhost:{port}", 1, 1.0)  # it answers: fine
    free = launch.free_port()
    with pytest.raises(runtime.CoordinatorError) as err:
        runtime.check_coordinator(f"localhost:{free}", 1, 0.3)
    assert str(err.value).startswith(f"coordinator localhost:{free} is unreachable (")
    assert "after 0.3 s: start process 0 with the same --coordinator" in str(err.value)


def test_rounds_wait_at_a_barrier_and_take_the_slowest_process(peer):
    clock = FakeClock(0.001)
    settings = timing.TimingSettings(warmup=1, min_time_s=0, min_iters=9, max_iters=9, repeats=3)
    result = timing.measure(clock.fn, (1,), settings=settings, clock=clock)
    assert peer.barriers == 3  # one per round
    assert peer.asked[0] == pytest.approx(0.001)  # the calls per round: process 0's estimate
    assert len(peer.asked) == 1 + 3  # ...and each round's decision to stop
    assert result.time_median_s == pytest.approx(0.002)  # the slower process's calls
    assert result.pipelined_s_per_call == pytest.approx(0.002)
    # (latency, pipelined, host) of each: the fake call spends its time issuing.
    assert np.allclose(result.per_process, [(0.001, 0.001, 0.001), (0.002, 0.002, 0.002)])
    part = fields.processes_part(result, timing.PIPELINED)
    assert part.times_s == pytest.approx([0.001, 0.002])
    assert (part.slowest_s, part.fastest_s) == pytest.approx((0.002, 0.001))
    assert part.spread == pytest.approx(1.0)


def test_a_pair_decides_on_process_0_and_on_the_slowest_rounds(peer):
    ref, own = FakeClock(0.002), FakeClock(0.001)

    def clock():
        return ref.now + own.now

    settings = timing.TimingSettings(warmup=1, min_time_s=0, min_iters=3, max_iters=60)
    measured, comparison = timing.measure_pair(
        ref.fn, (1,), own.fn, (1,), settings=settings, clock=clock, lead=timing.PIPELINED
    )
    rounds = len(measured.pipelined_samples_s)
    assert peer.barriers == 2 * rounds  # each side's round waits for the other process
    assert comparison.pipelined.speedup == pytest.approx(2.0)
    assert measured.pipelined_s_per_call == pytest.approx(0.002)


def test_one_process_times_as_before():
    assert lockstep.current() is lockstep.SOLO
    clock = FakeClock(0.001)
    settings = timing.TimingSettings(warmup=1, min_time_s=0, min_iters=3, max_iters=3, repeats=1)
    result = timing.measure(clock.fn, (1,), settings=settings, clock=clock)
    assert result.per_process == () and result.time_median_s == pytest.approx(0.001)
    assert fields.processes_part(result, timing.PIPELINED).times_s is None
    assert messages.share({"todo": [[0, ["default"]]]}, 1) == {"todo": [[0, ["default"]]]}
    assert arrays.to_host([jnp.ones(2)])[0].tolist() == [1.0, 1.0]


def test_a_collective_that_lost_its_peer_is_told_from_a_cell_error():
    lost = RuntimeError("UNKNOWN: Gloo AllGather failed: [pair.cc:547] Connection closed by peer")
    assert watch.looks_like_lost_peer(lost)
    assert not watch.looks_like_lost_peer(ValueError("batch 3 does not divide by 4"))
    watch.on_failure(lost)  # not watching (one process): returns at once


def test_the_launcher_adds_the_distributed_options():
    argv = launch.process_argv(["xlafuse", "run", "c.toml"], 12355, 2, 1, 30.0)
    assert argv == [
        "xlafuse", "run", "c.toml", "--distributed", "--coordinator", "localhost:12355",
        "--num-processes", "2", "--process-id", "1", "--timeout", "30",
    ]  # fmt: skip


KILLS_ITSELF = """
import os, sys, time
from pathlib import Path
from xlafuse.distributed import watch
index = int(sys.argv[sys.argv.index("--process-id") + 1])
watch.write_status(Path(os.environ[watch.STATUS_ENV]), index, f"step {index}")
if index == 1:
    os.kill(os.getpid(), 9)
time.sleep(60)
"""


def test_the_launcher_names_a_killed_process_and_stops_the_others():
    env = {"PYTHONPATH": ":".join(sys.path)}
    outcome = launch.launch([sys.executable, "-c", KILLS_ITSELF], 3, 30.0, env)
    assert outcome == launch.Outcome(
        1, "process 1 was killed by signal 9 (SIGKILL) while step 1; stopped the others"
    )
    ends = launch.launch([sys.executable, "-c", "import sys; sys.exit(3)"], 2, 30.0, env)
    assert ends == launch.Outcome(3)  # its own error: its own line, none of the launcher's
    assert launch.launch([sys.executable, "-c", "pass"], 2, 30.0, env) == launch.Outcome(0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["launch", "--processes", "2", "--", "workloads"], "launch runs one of run, compare, "),
        (["launch", "--processes", "0", "--", "run", "c.toml"], "--processes must be at least 1"),
        (["launch", "--processes", "2", "--devices-per-process", "0", "--", "run", "c.toml"],
         "--devices-per-process must be from 1 to"),
        (["run", "c.toml", "--coordinator", "localhost:1"], "--coordinator goes with --distributed"),
        (["compare", "mlp", "--process-id", "1", "--num-processes", "2"],
         "--num-processes, --process-id go with --distributed"),
        (["launch", "--processes", "2", "--timeout", "0", "--", "run", "c.toml"],
         "--timeout 0: need a number of seconds above 0"),
    ],
)  # fmt: skip
def test_bad_distributed_options_are_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err


def test_the_shipped_config_is_valid_on_a_cpu():
    from xlafuse.experiment.config import load_config

    config = load_config(REPO / "configs" / "distributed.toml", backend="cpu")
    assert [(w.name, w.devices, w.parallelism) for w in config.workloads] == [
        ("mlp", 4, "data"),
        ("transformer_block", 4, "model"),
    ]


def test_each_process_keeps_its_trace_in_its_own_folder(tmp_path):
    from xlafuse.measurement.cell_kernels import new_trace_dir

    cell = "mlp/tiny/train/auto/{}/default/cpu/data4/processes2x2"
    folders = [new_trace_dir(tmp_path, cell, True, process=i) for i in (0, 1)]
    name = "mlp_tiny_train_auto_default_cpu_data4_processes2x2"
    assert folders == [tmp_path / "traces" / name / f"process-{i}" for i in (0, 1)]
    assert all(f.is_dir() for f in folders)
    assert new_trace_dir(tmp_path, "chain/tiny/forward", True) == tmp_path / "traces" / (
        "chain_tiny_forward"
    )


class FakeStore:
    """The key-value store of `jax.distributed`'s client, in a dict; process 1 never beats."""

    def __init__(self):
        self.values = {"xlafuse/doing/1": "timing mlp round 3", "xlafuse/beat/1": "7"}

    def key_value_set(self, key, value, allow_overwrite=False):
        self.values[key] = value

    def key_value_dir_get(self, prefix):
        return [(k, v) for k, v in self.values.items() if k.startswith(prefix)]


def test_the_watchdog_names_a_silent_process_and_what_it_was_doing(monkeypatch):
    state = watch._State()
    monkeypatch.setattr(watch, "_STATE", state)
    lines: list[str] = []

    def stop(line):
        lines.append(line)
        state.finished = True  # the real one ends the process

    monkeypatch.setattr(watch, "stop", stop)
    monkeypatch.setattr(watch, "BEAT_S", 0.05)
    watch.doing("measuring mlp under no-fusion")
    store = FakeStore()
    watch.start(0, 2, 0.3, store)
    for _ in range(100):
        if lines:
            break
        time.sleep(0.05)
    assert len(lines) == 1
    assert re.match(
        r"process 1 stopped answering 0\.\d+ s ago while timing mlp round 3; ", lines[0]
    )
    assert lines[0].endswith(
        "process 0 stops (it was measuring mlp under no-fusion, timeout 0.3 s)"
    )
    assert store.values["xlafuse/doing/0"] == "measuring mlp under no-fusion"
    assert int(store.values["xlafuse/beat/0"]) >= 2  # this process beats all the while


def test_tune_reads_its_budget_from_process_0s_clock(peer, monkeypatch):
    from xlafuse.experiment.tune import tuner

    monkeypatch.setattr(tuner.time, "monotonic", lambda: 42.0)
    assert tuner._shared_clock() == 42.0 and peer.asked == [42.0]


def test_tune_under_distributed_writes_from_process_0_and_proves_nowhere():
    import argparse

    from xlafuse.cli import tune_cmd

    def options(layout, out="out", prove=True):
        return tune_cmd._writes_and_proof(argparse.Namespace(layout=layout), out, prove)

    assert options(None) == {"out": "out", "prove": True, "unproved": ""}
    assert options(runtime.SINGLE, prove=False)["prove"] is False
    first, other = runtime.Layout(2, 2, 0), runtime.Layout(2, 2, 1)
    assert options(first) == {
        "out": "out",
        "prove": False,
        "unproved": tune_cmd.UNPROVED_DISTRIBUTED,
    }
    assert options(other)["out"] is None and not options(other)["prove"]


def test_tune_search_of_either_kind_reads_the_shared_clock(peer, monkeypatch):
    from xlafuse.experiment.tune import search, tuner

    seen = []
    monkeypatch.setattr(search, "grid", lambda *a, clock, **k: seen.append(clock))
    monkeypatch.setattr(search, "successive_halving", lambda *a, clock, **k: seen.append(clock))
    tuner._search("grid", (), None, 1.0, tuner._Leaderboard(print))
    tuner._search("halving", (), None, 1.0, tuner._Leaderboard(print))
    assert seen == [tuner._shared_clock, tuner._shared_clock]
