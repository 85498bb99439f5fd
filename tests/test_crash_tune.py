"""`xlafuse tune` interrupted at each phase, then resumed (issue 42): SIGINT (Ctrl-C: the whole
process group) and SIGKILL after a trial, inside the fresh-process proof, and as the files are
written; each run keeps what it measured, and the last one ends with the same trials, each once,
as a tune that was never interrupted. On the CPU, with a tiny program of two candidates whose
winner is not in doubt (`tests/data/user/tune_flag.py`: 10x apart)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Children started, interrupted and resumed: slow by nature, run by .ci/run's second command.
pytestmark = pytest.mark.slow

PROGRAM = Path(__file__).parent / "data" / "user" / "tune_flag.py"
TUNE = ["tune", f"{PROGRAM}:make", "--knob", "flag=false,true", "--space", "none"]
INTERRUPTED = 130
WAIT_S = 120
TRIALS = 4  # the descent's: both candidates at effort 1, then both at the finish's 4


def start(*argv):
    # compiled afresh (no persistent compilation cache): an interrupt meets XLA compiling
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "XLAFUSE_NO_CACHE": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "xlafuse", *map(str, argv)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,  # its own group: a signal to it is Ctrl-C at a terminal
    )


def records(folder):
    path = Path(folder) / "tune.jsonl"
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.endswith("}")]


def trials(folder):
    return [(r["candidate"]["name"], r["effort"]) for r in records(folder) if r["kind"] == "trial"]


def kinds(folder):
    return [r["kind"] for r in records(folder)]


def has_child(proc) -> bool:
    """Whether the tune has started a process (its proof: the search runs in-process)."""
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    return children.exists() and bool(children.read_text().split())


def interrupt_when(proc, ready, sig) -> tuple[int, str]:
    """Sends `sig` to the tune's process group once `ready()` holds; its exit status and
    output."""
    deadline = time.monotonic() + WAIT_S
    while not ready():
        assert proc.poll() is None, f"ended before the point (exit {proc.returncode})"
        assert time.monotonic() < deadline, "the point never came"
        time.sleep(0.01)
    os.killpg(proc.pid, sig)
    out, _ = proc.communicate(timeout=WAIT_S)
    return proc.returncode, out


def test_a_tune_interrupted_at_every_phase_ends_as_one_never_interrupted(tmp_path):
    out = tmp_path / "tune"

    # after the first trial: Ctrl-C keeps it
    code, text = interrupt_when(start(*TUNE, "--out", out), lambda: trials(out), signal.SIGINT)
    assert code == INTERRUPTED and text.rstrip().endswith("xlafuse: interrupted"), text
    kept = trials(out)
    assert kept and kinds(out)[0] == "tune"

    # after the next trial: kill -9 keeps both (unless the first run measured every one)
    if len(kept) < TRIALS:
        proc = start(*TUNE, "--out", out)
        code, text = interrupt_when(proc, lambda: len(trials(out)) > len(kept), signal.SIGKILL)
        assert code == -signal.SIGKILL and "resuming" in text
        assert trials(out)[: len(kept)] == kept
        kept = trials(out)

    # inside the proof: Ctrl-C, then kill -9; every trial kept, none measured again
    for sig, expected in ((signal.SIGINT, INTERRUPTED), (signal.SIGKILL, -signal.SIGKILL)):
        proc = start(*TUNE, "--out", out)
        code, text = interrupt_when(proc, lambda proc=proc: has_child(proc), sig)
        assert code == expected, text
        assert trials(out)[: len(kept)] == kept and "proof" not in kinds(out)
        kept = trials(out)

    # as the files are written: killed once the conclusion is in (best.toml may not be)
    proc = start(*TUNE, "--out", out)
    code, _ = interrupt_when(proc, lambda: "conclusion" in kinds(out), signal.SIGKILL)
    assert code == -signal.SIGKILL

    # the last run measures nothing, proves nothing again, and writes best.toml
    proc = start(*TUNE, "--out", out)
    text, _ = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 0, text
    assert "rerun: flag=True against the default: recorded, not run again" in text
    assert "(recorded)" in text and (out / "best.toml").exists()

    once = tmp_path / "once"
    proc = start(*TUNE, "--out", once)
    text, _ = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 0, text
    assert sorted(trials(out)) == sorted(trials(once))  # the same trials, each once
    assert len(set(trials(out))) == len(trials(out)) == TRIALS
    assert kinds(out).count("proof") == kinds(once).count("proof") == 1
    assert kinds(out).count("conclusion") == 1
    (mine,) = [r for r in records(out) if r["kind"] == "conclusion"]
    (theirs,) = [r for r in records(once) if r["kind"] == "conclusion"]
    assert mine["best"]["name"] == theirs["best"]["name"] == "flag=True"  # 10x apart


def test_ctrl_c_while_xla_compiles_exits_130_not_sigsegv():
    # issue 42 item 8: a Ctrl-C during `tune cartpole --knob unroll=1,2,4,8 --space none` died
    # with SIGSEGV (exit 139) after "xlafuse: interrupted": XLA was compiling on a thread of
    # its own while the interpreter shut down. Here the Ctrl-C comes half a second into the
    # compile of unroll=32 (seconds long), after the default program's trial.
    proc = start("tune", "cartpole", "--knob", "unroll=1,32", "--space", "none")
    seen = []

    def compiling():
        seen.append(proc.stdout.readline())
        if "effort 1] default" not in seen[-1]:
            return False
        time.sleep(0.5)
        return True

    code, text = interrupt_when(proc, compiling, signal.SIGINT)
    assert code == INTERRUPTED, "".join(seen) + text
    assert text.rstrip().endswith("xlafuse: interrupted")
