"""How many devices a command needs, and N host devices on a CPU machine.

XLA's CPU backend has one device unless `--xla_force_host_platform_device_count=N` is in
XLA_FLAGS when the backend starts; setting it later does nothing (see docs/sharding.md). So a
command that asks for more devices than a started CPU backend has is run again in a child process
whose XLA_FLAGS carry the flag (`host_devices_env`; the command line starts that child itself:
`xlafuse.cli._devices.rerun_with_host_devices`). On a GPU the devices are real: asking for more
is an error (`xlafuse.models.sharding.DeviceCountError`).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping

import jax

from xlafuse.kinds import Backend

HOST_DEVICES_FLAG = "--xla_force_host_platform_device_count"


def forced_host_devices(*, xla_flags: str | None = None) -> int | None:
    """The host device count that XLA_FLAGS (or the given string) forces, or None."""
    flags = os.environ.get("XLA_FLAGS", "") if xla_flags is None else xla_flags
    count = None
    for token in shlex.split(flags):
        key, _, value = token.partition("=")
        if key == HOST_DEVICES_FLAG and value.isdigit():
            count = int(value)
    return count


def with_host_devices(devices: int, *, xla_flags: str = "") -> str:
    """XLA_FLAGS with the host device count set to `devices` (an earlier count replaced)."""
    kept = [t for t in shlex.split(xla_flags) if t.partition("=")[0] != HOST_DEVICES_FLAG]
    return " ".join([*kept, f"{HOST_DEVICES_FLAG}={devices}"])


def host_devices_env(devices: int, *, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of the environment whose XLA_FLAGS give the CPU backend `devices` devices."""
    out = dict(os.environ if env is None else env)
    out["XLA_FLAGS"] = with_host_devices(devices, xla_flags=out.get("XLA_FLAGS", ""))
    return out


def max_host_devices() -> int:
    """The most host devices a CPU run may ask for: 4 per core of this machine, at least 8.

    XLA makes as many host devices as XLA_FLAGS asks for, each with its own threads; past a few
    per core a sharded program only waits on its collectives, and 100000 of them never finish
    starting.
    """
    return max(8, 4 * (os.cpu_count() or 1))


def device_count_problem(devices: object, *, backend: str | None = None) -> str | None:
    """What is wrong with asking for `devices` devices of `backend`; None when nothing is.

    Accepted: an integer from 1 to `max_host_devices()` on a CPU, or to the number of devices
    JAX sees on another backend (unbounded for a backend other than the running one).

    Args:
      devices: the count asked for.
      backend: "cpu" or "gpu"; None: JAX's default backend.

    Returns:
      e.g. "must be from 1 to 8 (host devices: 4 per core of this machine, at least 8), not
      100000", for the caller to prefix with the option or key it came from.
    """
    running = jax.default_backend()
    backend = backend or running
    limit, what = None, ""
    if backend == Backend.CPU:
        limit, what = max_host_devices(), " (host devices: 4 per core of this machine, at least 8)"
    elif backend == running:
        limit, what = len(jax.devices()), f" (the {backend} devices JAX sees)"
    is_int = isinstance(devices, int) and not isinstance(devices, bool)
    if is_int and 1 <= devices <= (limit or devices):
        return None
    accepted = f"from 1 to {limit}{what}" if limit else "at least 1"
    return f"must be {accepted}, not {devices!r}"


def needs_host_devices(devices: int) -> bool:
    """Whether this process must be run again with `devices` host devices.

    True only on the CPU backend, when it has fewer than `devices` and XLA_FLAGS did not already
    ask for them (a child that still has too few must fail, not start another child).
    """
    if devices <= 1 or jax.default_backend() != Backend.CPU:
        return False
    return len(jax.devices()) < devices and (forced_host_devices() or 0) < devices
