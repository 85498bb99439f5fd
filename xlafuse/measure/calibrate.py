"""The device's ceilings, measured once per run: copy bandwidth and matmul throughput.

Achieved bandwidth only means something next to what the device can do: a jitted `x + 1` over a
large float32 array reads and writes every byte once (bytes = 2 x array size), which is as close
to a copy as XLA compiles. On a GPU the kernel's own time comes from a profiler trace, the same
basis the runner uses for a profiled cell's bandwidth; where no trace can be read (and on the CPU),
calls are issued back to back with one sync per burst and the median burst is used. A large square
matmul gives the FLOP/s ceiling of the roofline. The array is big enough (1 GiB on GPU, 64 MiB on
CPU) to overflow caches (the H200's L2 is 60 MB).

It is a copy ceiling: one byte written per byte read. HBM serves reads faster than writes, so a
read-heavy kernel (three inputs, one output) can pass 100% of it without any cache involved.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from xlafuse.measure.profile import profile_device_time
from xlafuse.measure.timing import time_pipelined

MIB = 1 << 20
COPY_BYTES = {"gpu": 1024 * MIB, "cpu": 64 * MIB}
MATMUL_SIZE = {"gpu": 8192, "cpu": 1024}
CALLS_PER_BURST = 10


@dataclasses.dataclass(frozen=True)
class Ceilings:
    """What the device can do, as measured.

    Attributes:
      copy_bytes_per_s: bytes read + written per second by an elementwise `x + 1`.
      matmul_flops_per_s: FLOP/s of a large square matmul, or None if not measured.
      device_kind: e.g. "NVIDIA H200" or "cpu".
      backend: "cpu" or "gpu".
      copy_array_bytes: size of the array the copy kernel read.
      copy_basis: "device_time_s" (profiled kernel time) or "pipelined_s_per_call" (wall).
      matmul_size: side of the square matmul (0 if not measured).
      matmul_dtype: its dtype name.
    """

    copy_bytes_per_s: float
    matmul_flops_per_s: float | None
    device_kind: str
    backend: str
    copy_array_bytes: int
    copy_basis: str = "pipelined_s_per_call"
    matmul_size: int = 0
    matmul_dtype: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return dataclasses.asdict(self)


def _seconds_per_call(fn, *args, repeats: int, calls: int = CALLS_PER_BURST) -> float:
    """Median over `repeats` bursts of back-to-back calls (one sync per burst), per call.

    A sync per call would add the dispatch and sync latency (tens of microseconds on a GPU) to a
    kernel that itself takes about 0.1 ms, and understate the bandwidth severalfold.
    """
    jax.block_until_ready(fn(*args))  # compile and warm up, untimed
    seconds, _, _ = time_pipelined(fn, args, calls, repeats)
    return seconds


def copy_bandwidth(array_bytes: int, repeats: int = 7) -> tuple[float, str]:
    """Bytes per second (read + write) of a jitted `x + 1` on a float32 array of `array_bytes`.

    Returns:
      (bytes per second, the time it divides by: "device_time_s" or "pipelined_s_per_call").
    """
    x = jnp.zeros((array_bytes // 4,), jnp.float32)
    add_one = jax.jit(lambda a: a + 1)
    seconds = _seconds_per_call(add_one, x, repeats=repeats)
    basis = "pipelined_s_per_call"
    try:
        profile = profile_device_time(add_one, (x,), calls=CALLS_PER_BURST)
    except Exception:  # a trace that cannot be taken or read leaves the wall-clock figure
        profile = None
    if profile is not None and profile.device_time_s > 0:
        seconds, basis = profile.device_time_s, "device_time_s"
    return 2 * x.size * 4 / seconds, basis


def matmul_throughput(size: int, dtype: Any, repeats: int = 5) -> float:
    """FLOP/s of a jitted `size x size` matmul (2 * size**3 FLOPs)."""
    key_a, key_b = jax.random.split(jax.random.key(0))
    a = jax.random.normal(key_a, (size, size), dtype)
    b = jax.random.normal(key_b, (size, size), dtype)
    seconds = _seconds_per_call(jax.jit(jnp.matmul), a, b, repeats=repeats)
    return 2.0 * size**3 / seconds


def calibrate(
    backend: str | None = None,
    copy_bytes: int | None = None,
    matmul: bool = True,
    matmul_size: int | None = None,
) -> Ceilings:
    """Measure the default device's copy bandwidth and (optionally) its matmul FLOP/s.

    Args:
      backend: "cpu" or "gpu"; JAX's default backend when None.
      copy_bytes: size of the copied array; 1 GiB on GPU, 64 MiB on CPU when None.
      matmul: also measure the matmul ceiling (bfloat16 on GPU, float32 on CPU).
      matmul_size: side of the square matmul; 8192 on GPU, 1024 on CPU when None.

    Returns:
      The Ceilings.
    """
    backend = backend or jax.default_backend()
    copy_bytes = copy_bytes or COPY_BYTES.get(backend, COPY_BYTES["cpu"])
    device = jax.devices()[0]
    size = (matmul_size or MATMUL_SIZE.get(backend, MATMUL_SIZE["cpu"])) if matmul else 0
    dtype = jnp.bfloat16 if backend == "gpu" else jnp.float32
    copy_bytes_per_s, copy_basis = copy_bandwidth(copy_bytes)
    return Ceilings(
        copy_bytes_per_s=copy_bytes_per_s,
        matmul_flops_per_s=matmul_throughput(size, dtype) if matmul else None,
        device_kind=device.device_kind,
        backend=backend,
        copy_array_bytes=copy_bytes,
        copy_basis=copy_basis,
        matmul_size=size,
        matmul_dtype=jnp.dtype(dtype).name if matmul else "",
    )
