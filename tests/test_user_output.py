"""The user's program cannot corrupt a command's output (issue 44): what it prints at import,
while built, traced or run goes to stderr, `--json` is all of stdout, and its warnings are
shown once per kind at the end."""

import io
import json
import subprocess
import sys
import warnings

import pytest

from xlafuse.cli import _user_output
from xlafuse.models import user

# Prints as libraries do: Python's print and C (file descriptor 1) at import, print while built
# and traced, jax.debug.print while it runs; the same warning at import and while traced.
NOISY = """
import os
import warnings

import jax
import jax.numpy as jnp

print("Failed to import warp: at import")
os.write(1, b"a C library at import\\n")
warnings.warn("float64 truncated to float32", UserWarning)


def rollout(n: int = 8):
    print("building")

    def step(x):
        print("tracing")
        warnings.warn("float64 truncated to float32", UserWarning)
        jax.debug.print("running {}", x.sum())
        return jnp.tanh(x) * 2

    return step, (jnp.ones(n),)
"""

PRINTED = ("Failed to import warp: at import", "a C library at import", "building", "tracing")
WARNING = "UserWarning: float64 truncated to float32"


def _xlafuse(tmp_path, *argv) -> subprocess.CompletedProcess:
    (tmp_path / "noisy.py").write_text(NOISY)
    command = [sys.executable, "-m", "xlafuse", *argv]
    return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_inspect_json_is_all_of_stdout_and_a_warning_is_shown_once(tmp_path):
    done = _xlafuse(tmp_path, "inspect", "--workload", "noisy.py:rollout", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["kernels"] >= 1
    lines = done.stderr.splitlines()
    assert all(text in lines for text in PRINTED)
    assert [line for line in lines if WARNING in line] == [
        f"xlafuse inspect: warning: {WARNING} (noisy.py:10; 2 times, --debug shows each)"
    ]


def test_compare_json_is_all_of_stdout_and_debug_shows_each_warning(tmp_path):
    done = _xlafuse(tmp_path, "--debug", "compare", "noisy.py:rollout", "--json")
    assert done.returncode == 0, done.stderr
    assert [row["variant"] for row in json.loads(done.stdout)["rows"]] == ["default", "no-fusion"]
    lines = done.stderr.splitlines()
    assert all(text in lines for text in PRINTED)
    assert lines.count("running 8.0") == 2  # the program run once per variant
    assert [line for line in lines if WARNING in line] == [
        f"xlafuse compare: warning: {WARNING} (noisy.py:10)",
        f"xlafuse compare: warning: {WARNING} (noisy.py:18)",
    ]


def test_stdout_keeps_xlafuses_writes_and_sends_others_to_stderr(monkeypatch):
    own, other = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", own)
    monkeypatch.setattr(sys, "stderr", other)
    with _user_output.user_output("inspect", debug=False):
        exec("print('from the user')", {"__name__": "xlafuse_user_noisy_12345678"})
        exec("print('from xlafuse')", {"__name__": "xlafuse.cli.inspect_cmd"})
        assert sys.stdout.isatty() is False  # the rest is the command's stdout's
    assert sys.stdout is own
    assert (own.getvalue(), other.getvalue()) == ("from xlafuse\n", "from the user\n")


def test_warnings_are_counted_by_kind_and_filters_still_hold(monkeypatch):
    shown = io.StringIO()
    monkeypatch.setattr(sys, "stderr", shown)
    with warnings.catch_warnings():
        warnings.resetwarnings()  # Python's defaults: pytest's "error" left out here
        warnings.simplefilter("ignore", DeprecationWarning)
        with _user_output.user_output("run", debug=False):
            for _ in range(3):
                warnings.warn("the same", UserWarning, stacklevel=1)
            warnings.warn("another", RuntimeWarning, stacklevel=1)
            warnings.warn("ignored", DeprecationWarning, stacklevel=1)
    here = "tests/test_user_output.py"
    lines = shown.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines] == [
        "xlafuse run: warning: UserWarning: the same",
        "xlafuse run: warning: RuntimeWarning: another",
    ]
    assert lines[0].endswith("; 3 times, --debug shows each)") and here in lines[0]
    with pytest.raises(UserWarning), _user_output.user_output("run", debug=False):
        warnings.warn("an error here stays one", UserWarning, stacklevel=1)  # pytest: error


def test_the_users_stdout_goes_to_stderr_at_both_levels(capfd):
    with user.stdout_to_stderr(), user.stdout_to_stderr():  # nested: once
        print("python level")
        sys.stdout.flush()
        import os

        os.write(1, b"file descriptor 1\n")
    print("after")
    captured = capfd.readouterr()
    assert (captured.out, captured.err) == ("after\n", "python level\nfile descriptor 1\n")
