"""How xlafuse talks to its child processes, written once.

A parent writes `request.json` (and any side files) into a folder, starts a child whose last
argument is that folder, and reads `result.json` back; the child reads the request, does one job
and writes the result. Children run with the parent's environment plus any process-wide XLA
flags, and never preallocate GPU memory the parent may hold. A child that exits non-zero, writes
no result or runs past its time limit raises `ChildError` naming its error line.

Users: `compiler.child` (process-flag variants), `measurement.coldstart` (fresh-process compiles)
and `measurement.validate_run` (Nsight Compute).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REQUEST_FILE = "request.json"
RESULT_FILE = "result.json"

# The exception line of a traceback: JAX appends a note after its filtered tracebacks, so the
# last stderr line is often not the error.
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)\b")


class ChildError(RuntimeError):
    """A child process failed, wrote no result, or ran past its time limit."""


def child_env(*, process_flags: Sequence[str] = ()) -> dict[str, str]:
    """This process's environment with `process_flags` appended to XLA_FLAGS.

    GPU children must not preallocate memory that the parent may already hold.
    """
    env = dict(os.environ)
    env["XLA_FLAGS"] = " ".join(filter(None, [env.get("XLA_FLAGS", ""), *process_flags]))
    env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    return env


def error_line(stderr: str, *, stdout: str = "") -> str:
    """ncu's own ==ERROR== line, else a traceback's exception line, else the last stderr line."""
    errors = [ln.strip() for ln in f"{stdout}\n{stderr}".splitlines() if ln.startswith("==ERROR==")]
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    raised = [ln for ln in lines if _EXCEPTION_LINE.match(ln)]
    return (errors or raised or lines or ["no output"])[-1]


def run_child(
    command: Sequence[str],
    folder: Path,
    request: dict[str, Any],
    what: str,
    *,
    process_flags: Sequence[str] = (),
    timeout_s: float | None = None,
) -> tuple[dict[str, Any], str]:
    """Write `request` into `folder`, run `command`, and read the child's result.

    Args:
      command: the child's command line (its last argument is usually `folder`).
      folder: an existing folder the child reads the request from and writes the result to.
      request: JSON-able request.
      what: how errors name the child ("cold-start child (jit, mlp)").
      process_flags: XLA_FLAGS the child starts with (see `child_env`).
      timeout_s: seconds before the child is stopped; None waits.

    Returns:
      (the result dict, the child's stdout).

    Raises:
      ChildError: the child failed, wrote no result, or ran past `timeout_s`.
    """
    (folder / REQUEST_FILE).write_text(json.dumps(request))
    try:
        proc = subprocess.run(
            list(command),
            env=child_env(process_flags=process_flags),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ChildError(f"{what} ran past {timeout_s:g} s and was stopped") from None
    result_path = folder / RESULT_FILE
    if proc.returncode != 0 or not result_path.exists():
        line = error_line(proc.stderr, stdout=proc.stdout)
        raise ChildError(f"{what} failed (exit {proc.returncode}): {line}")
    return json.loads(result_path.read_text()), proc.stdout


def read_request(folder: str | Path) -> dict[str, Any]:
    """The request a parent wrote into `folder` (in the child)."""
    return json.loads((Path(folder) / REQUEST_FILE).read_text())


def write_result(folder: str | Path, result: dict[str, Any]) -> None:
    """Hands `result` back to the parent (in the child)."""
    (Path(folder) / RESULT_FILE).write_text(json.dumps(result))
