"""`xlafuse launch` starts no more processes and host devices than the machine takes (issue 42,
item 12): `--processes 100000` once forked until the machine was killed.

The machine is made a 2-core one (`os.cpu_count`), so the bounds are known: 4 processes, 8 host
devices in all; a refused count is one line, exit 2, with no process started.
"""

import os

import pytest
from helpers import usage_error

from xlafuse.distributed import launch
from xlafuse.errors import XlafuseError

PROCESSES = "--processes must be at least 1 and at most 4 (2 per core of this machine, or 4), not"


@pytest.fixture(autouse=True)
def two_cores(monkeypatch):
    """A 2-core machine, on which starting a process fails the test."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(
        launch.subprocess, "Popen", lambda *a, **k: pytest.fail("started a process")
    )


@pytest.mark.parametrize(
    ("counts", "message"),
    [
        (["--processes", "100000"], f"{PROCESSES} 100000"),
        (["--processes", "5"], f"{PROCESSES} 5"),
        (["--processes", "0"], f"{PROCESSES} 0"),
        (["--processes", "2", "--devices-per-process", "100000"],
         "--devices-per-process must be from 1 to 8 (host devices: 4 per core of this machine, at "
         "least 8), not 100000"),
        (["--processes", "4", "--devices-per-process", "4"],
         "--processes 4 x --devices-per-process 4 is 16 host devices; at most 8 in all (host "
         "devices: 4 per core of this machine, at least 8)"),
        (["--processes", "3", "--devices-per-process", "3"],
         "--processes 3 x --devices-per-process 3 is 9 host devices; at most 8 in all (host "
         "devices: 4 per core of this machine, at least 8)"),
    ],
)  # fmt: skip
def test_counts_past_the_machine_are_refused_before_any_process(capsys, counts, message):
    argv = ["launch", *counts, "--", "run", "c.toml"]
    assert usage_error(capsys, *argv) == f"{message}\n"


@pytest.mark.parametrize(("processes", "devices"), [(4, 1), (4, 2), (2, 4), (1, 8)])
def test_counts_within_the_machine_are_launched(capsys, monkeypatch, processes, devices):
    from xlafuse.cli import main

    started = []
    monkeypatch.setattr(
        launch, "launch", lambda argv, n, timeout_s, env: started.append(n) or launch.Outcome(0)
    )
    argv = ["launch", "--processes", str(processes), "--devices-per-process", str(devices)]
    assert main([*argv, "--", "run", "c.toml"]) == 0
    assert started == [processes]


def test_the_library_launcher_has_the_same_bound():
    with pytest.raises(XlafuseError) as err:
        launch.launch(["true"], 100000, 30.0, {})
    assert str(err.value) == (
        "processes must be at least 1 and at most 4 (2 per core of this machine, or 4), not 100000"
    )
    assert launch.max_processes() == 4
