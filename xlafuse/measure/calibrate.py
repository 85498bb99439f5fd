"""The device's ceilings, measured once per run: copy bandwidth and matmul throughput.

Achieved bandwidth only means something next to what the device can do: a jitted `x + 1` over a
large float32 array reads and writes every byte once (bytes = 2 x array size), which is as close
to a copy as XLA compiles. Calls are issued back to back with one sync per burst, so the figure is
the kernel's, not the dispatch's; the median burst gives the copy ceiling. A large square matmul gives the
FLOP/s ceiling of the roofline. The array is big enough (256 MiB on GPU, 64 MiB on CPU) to overflow
caches (the H200's L2 is 60 MB).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from xlafuse.measure.timing import time_pipelined

MIB = 1 << 20
COPY_BYTES = {"gpu": 256 * MIB, "cpu": 64 * MIB}
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
      matmul_size: side of the square matmul (0 if not measured).
      matmul_dtype: its dtype name.
    """

    copy_bytes_per_s: float
    matmul_flops_per_s: float | None
    device_kind: str
    backend: str
    copy_array_bytes: int
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
    seconds, _ = time_pipelined(fn, args, calls, repeats)
    return seconds


def copy_bandwidth(array_bytes: int, repeats: int = 7) -> float:
    """Bytes per second (read + write) of a jitted `x + 1` on a float32 array of `array_bytes`."""
    x = jnp.zeros((array_bytes // 4,), jnp.float32)
    seconds = _seconds_per_call(jax.jit(lambda a: a + 1), x, repeats=repeats)
    return 2 * x.size * 4 / seconds


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
      copy_bytes: size of the copied array; 256 MiB on GPU, 64 MiB on CPU when None.
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
    return Ceilings(
        copy_bytes_per_s=copy_bandwidth(copy_bytes),
        matmul_flops_per_s=matmul_throughput(size, dtype) if matmul else None,
        device_kind=device.device_kind,
        backend=backend,
        copy_array_bytes=copy_bytes,
        matmul_size=size,
        matmul_dtype=jnp.dtype(dtype).name if matmul else "",
    )
