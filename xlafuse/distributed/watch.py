"""What each process is doing, its heartbeat, and the watchdog that ends a stalled run.

A multi-process program advances only while every process does: when one dies or hangs, the
others wait in their next collective. JAX notices on its own only after its heartbeat timeout,
and then ends each process with a fatal log and a stack trace. So each process here:

- says what it is doing (`doing`: "timing mlp/tiny/train/data4 under default"), kept in
  `jax.distributed`'s key-value store and, under `xlafuse launch`, in a status file the
  launcher reads (`STATUS_ENV`);
- beats: a thread bumps its counter in the store every `BEAT_S` seconds (a stopped process's
  threads stop too; one waiting in a collective keeps beating);
- watches: a thread reads every process's counter; one unchanged for `timeout_s`, or a store
  that does not answer (process 0 holds it), ends this process with one line naming that
  process and what it was doing (`stop`), before JAX's own heartbeat would.

A collective that fails because a peer went away (gloo: "Connection closed by peer") is
handed to `on_failure`, which waits for the watchdog's verdict rather than reporting an
error of the cell. The store is JAX's private `global_state.client` (no public API holds a
key-value store); everything else here is public.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import sys
import threading
import time
from pathlib import Path

BEAT_S = 1.0
STATUS_ENV = "XLAFUSE_STATUS_DIR"  # set by `xlafuse launch`: a folder of one file per process
EXIT_PEER_LOST = 1
_PREFIX = "xlafuse/"
# What a failed collective says when a peer is gone (gloo over TCP; the coordination service).
_LOST_PEER_SIGNS = ("Connection closed by peer", "Connection reset", "Gloo", "UNAVAILABLE")


@dataclasses.dataclass
class _State:
    doing: str = "starting"
    index: int = 0
    processes: int = 1
    timeout_s: float | None = None
    client: object = None
    beats: int = 0
    finished: bool = False


_STATE = _State()
_LOCK = threading.Lock()


def doing(text: str) -> None:
    """Say what this process does now (where the others look when it stops answering)."""
    _STATE.doing = text
    folder = os.environ.get(STATUS_ENV)
    if folder:
        write_status(Path(folder), _STATE.index, text)
    if _STATE.client is not None:
        _try(_STATE.client.key_value_set, _key("doing", _STATE.index), text, True)


def current() -> str:
    """What this process said it is doing."""
    return _STATE.doing


def write_status(folder: Path, index: int, text: str) -> None:
    """The status file of process `index` (written whole: a reader never sees half of it)."""
    path = folder / f"process-{index}"
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    partial.replace(path)


def read_status(folder: Path, index: int) -> str | None:
    """What process `index` last said it was doing (`write_status`), or None."""
    try:
        return (folder / f"process-{index}").read_text() or None
    except OSError:
        return None


def start(index: int, processes: int, timeout_s: float, client: object) -> None:
    """Beat and watch, in two daemon threads, for a run of `processes` processes.

    Args:
      index: this process's index. processes: how many there are.
      timeout_s: how long a process may stay silent before this one stops.
      client: `jax.distributed`'s client (its key-value store), or any object with its
        `key_value_set` and `key_value_dir_get`.
    """
    state = _STATE
    state.index, state.processes, state.timeout_s, state.client = (
        index,
        processes,
        timeout_s,
        client,
    )
    doing(state.doing)
    threading.Thread(target=_beat, args=(state,), name="xlafuse-beat", daemon=True).start()
    threading.Thread(target=_watch, args=(state,), name="xlafuse-watch", daemon=True).start()
    # Registered after `jax.distributed.initialize`'s shutdown, so it runs before it: the
    # store goes away then, and this process's end is not another's silence.
    atexit.register(finish)


def finish() -> None:
    """Stop watching (the command ended); the heartbeat goes on until the process ends, so
    that the others, still finishing their own work, do not take this one for lost."""
    _STATE.finished = True


def _beat(state: _State) -> None:
    while True:
        state.beats += 1
        _try(state.client.key_value_set, _key("beat", state.index), str(state.beats), True)
        time.sleep(BEAT_S)


def _watch(state: _State) -> None:
    """Stop this process when another's counter stalls or the store stops answering."""
    seen: dict[int, tuple[str, float]] = {}
    answered = time.monotonic()
    while not state.finished:
        time.sleep(BEAT_S)
        beats = _read(state, "beat", state.timeout_s)
        now = time.monotonic()
        if state.finished:
            return
        if beats is None:  # a failed read: the store may be gone, or this read unlucky
            if now - answered > state.timeout_s:
                stop(_line(state, 0, "stopped answering (it holds the coordination service)"))
            continue
        answered = now
        for index in range(state.processes):
            value = beats.get(index, "")
            if index not in seen or seen[index][0] != value:
                seen[index] = (value, now)
            elif index != state.index and now - seen[index][1] > state.timeout_s:
                silent = f"stopped answering {now - seen[index][1]:.3g} s ago"
                stop(_line(state, index, silent, (_read(state, "doing", 5.0) or {}).get(index)))


def _read(state: _State, kind: str, timeout_s: float) -> dict[int, str] | None:
    """Every process's `kind` key, by index; None when the store did not answer in time."""
    box: list = []

    def read() -> None:
        box.append(_try(state.client.key_value_dir_get, _PREFIX + kind + "/"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout_s)
    if not box or box[0] is None:
        return None
    return {int(key.rsplit("/", 1)[1]): value for key, value in box[0]}


def _line(state: _State, index: int, what: str, their_doing: str | None = None) -> str:
    while_doing = f" while {their_doing}" if their_doing else ""
    return (
        f"process {index} {what}{while_doing}; process {state.index} stops "
        f"(it was {state.doing}, timeout {state.timeout_s:g} s)"
    )


def looks_like_lost_peer(err: BaseException) -> bool:
    """Whether an error of a collective says a peer went away (not an error of the cell)."""
    text = str(err)
    return any(sign in text for sign in _LOST_PEER_SIGNS)


def on_failure(err: BaseException) -> None:
    """In a watched run, a failure that a lost peer explains waits for the watchdog's line
    (it names the process) and never becomes the cell's error; else returns at once."""
    if _STATE.timeout_s is None or not looks_like_lost_peer(err):
        return
    time.sleep(_STATE.timeout_s + 2 * BEAT_S + 5.0)
    stop(f"process {_STATE.index} stops: a collective failed ({str(err).splitlines()[0]})")


def stop(line: str) -> None:
    """Print one line on stderr and end this process at once (`os._exit`: JAX's shutdown
    would wait for the lost process, then end this one with a fatal log)."""
    with _LOCK:
        if _STATE.finished:
            return
        sys.stdout.flush()
        print(f"xlafuse: {line}", file=sys.stderr, flush=True)
        os._exit(EXIT_PEER_LOST)


def _key(kind: str, index: int) -> str:
    return f"{_PREFIX}{kind}/{index}"


def _try(call, *args):
    """A store call; None when it fails (a beat or a status must never end the run)."""
    try:
        return call(*args)
    except RuntimeError:  # the store's JaxRuntimeError: a deadline, an unreachable store
        return None
