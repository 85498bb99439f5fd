"""The device's ceilings, measured once per run: copy bandwidth and matmul throughput.

Achieved bandwidth only means something next to what the device can do: a jitted `x + 1` over a
large float32 array reads and writes every byte once (bytes = 2 x array size), which is as close
to a copy as XLA compiles. On a GPU the kernel's own time comes from a profiler trace, the same
basis the runner uses for a profiled cell's bandwidth; where no trace can be read (and on the CPU),
calls are issued back to back with one sync per burst and the median burst is used, with the range
over bursts beside it. A large square matmul gives the FLOP/s ceiling of the roofline. The array
is far larger than the last-level cache (1 GiB on a GPU, whose L2 is tens of MB; on a CPU at
least 256 MiB and 8x the last-level cache), so the copy measures main memory, not the cache or
the dispatch of a short call. The last-level cache's size is read too (`last_level_cache_bytes`):
a cell whose memory fits in it is cache-resident, and main memory's ceiling does not bound it.

It is a copy ceiling: one byte written per byte read. HBM serves reads faster than writes, so a
read-heavy kernel (three inputs, one output) can pass 100% of it without any cache involved.
"""

from __future__ import annotations

import ctypes
import dataclasses
import statistics
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from xlafuse.kinds import Backend
from xlafuse.measurement.profile import profile_device_time
from xlafuse.measurement.timing import time_pipelined

MIB = 1 << 20
COPY_BYTES = {"gpu": 1024 * MIB, "cpu": 256 * MIB}  # at least; a CPU's: also 8x its cache
CACHE_MULTIPLE = 8
MATMUL_SIZE = {"gpu": 8192, "cpu": 1024}
CALLS_PER_BURST = 10
COPY_BURSTS = {"gpu": (10, 7), "cpu": (2, 5)}  # (calls per burst, bursts): a CPU copy is slow
_L2_CACHE_SIZE = 38  # CUdevice_attribute CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE (cuda.h)


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
      copy_range: (slowest, fastest) copy bytes per second, on the same basis: over the bursts
        (wall clock) or over the profiled calls (device time).
      cache_bytes: the last-level cache's size (a CPU's largest cache level, a GPU's L2), or
        None where it cannot be read.
    """

    copy_bytes_per_s: float
    matmul_flops_per_s: float | None
    device_kind: str
    backend: str
    copy_array_bytes: int
    copy_basis: str = "pipelined_s_per_call"
    matmul_size: int = 0
    matmul_dtype: str = ""
    copy_range: tuple[float, float] | None = None
    cache_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return dataclasses.asdict(self)


def _seconds_per_call(fn, *args, repeats: int, calls: int = CALLS_PER_BURST) -> float:
    """Median over `repeats` bursts of back-to-back calls (one sync per burst), per call.

    A sync per call would add the dispatch and sync latency (tens of microseconds on a GPU) to a
    kernel that itself takes about 0.1 ms, and understate the bandwidth severalfold.
    """
    return _bursts(fn, args, calls, repeats)[0]


def _bursts(fn, args, calls: int, repeats: int) -> tuple[float, float, float]:
    """(median, fastest, slowest) seconds per call over `repeats` pipelined bursts."""
    jax.block_until_ready(fn(*args))  # compile and warm up, untimed
    per_call = [time_pipelined(fn, args, calls, 1)[0] for _ in range(repeats)]
    return statistics.median(per_call), min(per_call), max(per_call)


def copy_bandwidth(
    array_bytes: int, *, calls: int = CALLS_PER_BURST, repeats: int = 7
) -> tuple[float, str, tuple[float, float]]:
    """Bytes per second (read + write) of a jitted `x + 1` on a float32 array of `array_bytes`.

    Returns:
      (bytes per second, the time it divides by: "device_time_s" or "pipelined_s_per_call",
      (slowest, fastest) bytes per second: over the wall-clock bursts, or over the profiled
      calls where the kernel's time is the basis).
    """
    x = jnp.zeros((array_bytes // 4,), jnp.float32)
    add_one = jax.jit(lambda a: a + 1)
    seconds, fastest, slowest = _bursts(add_one, (x,), calls, repeats)
    moved = 2 * x.size * 4
    spread = (moved / slowest, moved / fastest)
    basis = "pipelined_s_per_call"
    try:
        profile = profile_device_time(add_one, (x,), calls=CALLS_PER_BURST)
    # A trace that cannot be taken (another one running: RuntimeError) or read (OSError, a
    # profile it cannot parse: ValueError) leaves the wall-clock figure
    except (RuntimeError, OSError, ValueError):
        profile = None
    if profile is not None and profile.device_time_s > 0:
        seconds, basis = profile.device_time_s, "device_time_s"
        calls = [t for t in profile.per_call_s if t > 0] or [seconds]
        spread = (moved / max(calls), moved / min(calls))
    return moved / seconds, basis, spread


def last_level_cache_bytes(backend: str) -> int | None:
    """The size of the default device's last-level cache, or None where it cannot be read.

    A CPU's: the largest cache of cpu0 in sysfs (Linux). A GPU's: its L2, from the CUDA
    driver (`cuDeviceGetAttribute`), which every NVIDIA machine has.
    """
    if backend == Backend.GPU:
        return _gpu_l2_bytes()
    sizes = []
    for size in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = size.read_text().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes) if sizes else None


def _gpu_l2_bytes() -> int | None:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    device, value = ctypes.c_int(), ctypes.c_int()
    if cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(device), 0):
        return None
    if cuda.cuDeviceGetAttribute(ctypes.byref(value), _L2_CACHE_SIZE, device):
        return None
    return value.value or None


def copy_array_bytes(backend: str, cache_bytes: int | None) -> int:
    """The copied array's size: COPY_BYTES, and on a CPU at least CACHE_MULTIPLE x its cache."""
    least = COPY_BYTES.get(backend, COPY_BYTES["cpu"])
    if backend != Backend.GPU and cache_bytes:
        least = max(least, CACHE_MULTIPLE * cache_bytes)
    return least


def matmul_throughput(size: int, dtype: Any, *, repeats: int = 5) -> float:
    """FLOP/s of a jitted `size x size` matmul (2 * size**3 FLOPs)."""
    key_a, key_b = jax.random.split(jax.random.key(0))
    a = jax.random.normal(key_a, (size, size), dtype)
    b = jax.random.normal(key_b, (size, size), dtype)
    seconds = _seconds_per_call(jax.jit(jnp.matmul), a, b, repeats=repeats)
    return 2.0 * size**3 / seconds


def calibrate(
    *,
    backend: str | None = None,
    copy_bytes: int | None = None,
    matmul: bool = True,
    matmul_size: int | None = None,
) -> Ceilings:
    """Measure the default device's copy bandwidth and (optionally) its matmul FLOP/s.

    Args:
      backend: "cpu" or "gpu"; JAX's default backend when None.
      copy_bytes: size of the copied array; `copy_array_bytes` when None.
      matmul: also measure the matmul ceiling (bfloat16 on GPU, float32 on CPU).
      matmul_size: side of the square matmul; 8192 on GPU, 1024 on CPU when None.

    Returns:
      The Ceilings.
    """
    backend = backend or jax.default_backend()
    cache = last_level_cache_bytes(backend)
    copy_bytes = copy_bytes or copy_array_bytes(backend, cache)
    device = jax.devices()[0]
    size = (matmul_size or MATMUL_SIZE.get(backend, MATMUL_SIZE["cpu"])) if matmul else 0
    dtype = jnp.bfloat16 if backend == Backend.GPU else jnp.float32
    calls, bursts = COPY_BURSTS.get(backend, COPY_BURSTS["cpu"])
    copy_bytes_per_s, copy_basis, copy_range = copy_bandwidth(
        copy_bytes, calls=calls, repeats=bursts
    )
    return Ceilings(
        copy_bytes_per_s=copy_bytes_per_s,
        matmul_flops_per_s=matmul_throughput(size, dtype) if matmul else None,
        device_kind=device.device_kind,
        backend=backend,
        copy_array_bytes=copy_bytes,
        copy_basis=copy_basis,
        matmul_size=size,
        matmul_dtype=jnp.dtype(dtype).name if matmul else "",
        copy_range=copy_range,
        cache_bytes=cache,
    )
