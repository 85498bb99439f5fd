"""What several test files share: fast timing settings and a small calibration.

Imported as `from helpers import FAST_TIMING, small_calibration` (pytest puts tests/ on the path,
as it does for `mutations`).
"""

from xlafuse.measure.calibrate import calibrate

# A config's [timing]: one warm-up call, then one round of 3 timed calls (and its burst).
FAST_TIMING = {"warmup": 1, "min_time_s": 0, "min_iters": 3, "max_iters": 3, "repeats": 1}


def small_calibration(backend=None):
    """What the runner's `calibrate` gives, on a 1 MiB copy and a 64 x 64 matmul: fast."""
    return calibrate(backend, copy_bytes=1 << 20, matmul_size=64)
