"""Is a speedup real? A 95% bootstrap interval for a speedup, and a verdict.

A speedup is `reference time / variant time`. Two estimates:

- paired (`paired_speedup`): the two programs were timed in alternating rounds, under the same
  machine conditions; the speedup is the ratio of their medians over all their calls, and its
  interval the percentile bootstrap over rounds (the same rounds resampled on both sides). A
  machine whose speed drifts (other processes, clocks) moves whole rounds, which the interval
  then shows, instead of hiding it as independent per-call samples would.
- unpaired (`speedup_interval`): two separate sets of per-call samples; the ratio of their
  medians, the bootstrap resampling each set.

Either way the point is the ratio of two medians that a table shows, never a statistic of its
own, so a shown time and a shown speedup cannot disagree.

The interval is within one run: it says how much the rounds of this run scatter, not how much
another run on the same machine would differ (a busy machine can move a ratio between runs by
more than its interval; `benchmarks/bench_interval_coverage.py` measures how often it holds).

The interval keeps the 2.5th and 97.5th percentiles of the resampled speedups. The verdict:

- `same` when the interval contains 1.0, or the speedup is within 3% of 1.0 (a change too small
  to matter even when it is real);
- `faster` when the whole interval is above 1.0, `slower` when it is below.

`decided` says whether more samples could still change the verdict: the interval lies entirely
on one side of every decision boundary (1.0, and 1 +- 3%). The timing code keeps sampling until
the verdict is decided or its time budget runs out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from xlafuse.kinds import Verdict

SAME_WITHIN = 0.03
CONFIDENCE = 0.95
RESAMPLES = 2000
VERDICTS = tuple(Verdict)  # faster, slower, same: the order reports list them in


@dataclasses.dataclass(frozen=True)
class Speedup:
    """A speedup with its interval.

    Attributes:
      speedup: reference median / variant median (> 1: the variant is faster).
      ci: (low, high) 95% bootstrap interval of the speedup.
      verdict: "faster", "slower" or "same".
      decided: whether more samples could no longer change the verdict.
      samples: (reference samples, variant samples) it was computed from.
    """

    speedup: float
    ci: tuple[float, float]
    verdict: Verdict
    decided: bool
    samples: tuple[int, int] = (0, 0)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "speedup": self.speedup,
            "ci": list(self.ci),
            "verdict": self.verdict,
            "decided": self.decided,
            "samples": list(self.samples),
        }

    def __str__(self) -> str:
        return f"{self.speedup:.2f}x ({self.verdict})"


def verdict(speedup: float, ci: tuple[float, float]) -> Verdict:
    """`same`, `faster` or `slower` for a speedup and its interval (rule in the module doc)."""
    low, high = ci
    if low <= 1.0 <= high or abs(speedup - 1.0) < SAME_WITHIN:
        return Verdict.SAME
    return Verdict.FASTER if low > 1.0 else Verdict.SLOWER


def is_decided(ci: tuple[float, float]) -> bool:
    """True when no decision boundary (1.0, 1 +- 3%) lies inside the interval."""
    low, high = ci
    boundaries = (1.0 - SAME_WITHIN, 1.0, 1.0 + SAME_WITHIN)
    return not any(low < b < high for b in boundaries)


def speedup_interval(
    reference_s: Sequence[float],
    variant_s: Sequence[float],
    *,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Speedup:
    """The speedup of `variant_s` over `reference_s` (per-call seconds) with its interval.

    Args:
      reference_s: per-call seconds of the reference.
      variant_s: per-call seconds of the variant.
      resamples: bootstrap resamples.
      seed: the resampling seed (fixed: the same samples give the same interval).

    Raises:
      ValueError: an empty sample set or a non-positive time.
    """
    ref = np.asarray(reference_s, dtype=np.float64)
    var = np.asarray(variant_s, dtype=np.float64)
    if ref.size == 0 or var.size == 0:
        raise ValueError("a speedup interval needs at least one sample on each side")
    if (ref <= 0).any() or (var <= 0).any():
        raise ValueError("per-call times must be positive")
    point = float(np.median(ref) / np.median(var))
    rng = np.random.default_rng(seed)
    ref_medians = np.median(rng.choice(ref, size=(resamples, ref.size)), axis=1)
    var_medians = np.median(rng.choice(var, size=(resamples, var.size)), axis=1)
    tail = (1.0 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(ref_medians / var_medians, [tail, 100 - tail])
    ci = (float(min(low, point)), float(max(high, point)))
    return Speedup(point, ci, verdict(point, ci), is_decided(ci), (ref.size, var.size))


def paired_speedup(
    reference_rounds: np.ndarray,
    variant_rounds: np.ndarray,
    *,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Speedup:
    """The speedup of two programs timed in the same rounds, with its interval over rounds.

    The point is the ratio of the two programs' medians over all their calls (so it is exactly
    the ratio of the times a table shows); the interval resamples whole rounds, the same rounds
    on both sides, so a drift of the machine that moves a round moves both of its figures.

    Args:
      reference_rounds: seconds, one row per round (the reference's calls in that round).
      variant_rounds: seconds in the same rounds, the same shape.
      resamples: bootstrap resamples.
      seed: the resampling seed (fixed: the same rounds give the same interval).

    Raises:
      ValueError: no round, shapes that differ, or a non-positive time.
    """
    ref = np.asarray(reference_rounds, dtype=np.float64)
    var = np.asarray(variant_rounds, dtype=np.float64)
    if ref.ndim != 2 or ref.shape[0] == 0 or ref.size == 0:
        raise ValueError("a paired speedup needs at least one round of calls")
    if ref.shape != var.shape:
        raise ValueError(f"rounds of different shapes: {ref.shape} and {var.shape}")
    if (ref <= 0).any() or (var <= 0).any():
        raise ValueError("per-call times must be positive")
    point = float(np.median(ref) / np.median(var))
    rounds = ref.shape[0]
    rng = np.random.default_rng(seed)
    ratios = []
    for chunk in np.array_split(np.arange(resamples), max(1, ref.size * resamples // 2_000_000)):
        picks = rng.integers(0, rounds, size=(chunk.size, rounds))
        pooled_ref = np.median(ref[picks].reshape(chunk.size, -1), axis=1)
        pooled_var = np.median(var[picks].reshape(chunk.size, -1), axis=1)
        ratios.append(pooled_ref / pooled_var)
    tail = (1.0 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(np.concatenate(ratios), [tail, 100 - tail])
    ci = (float(min(low, point)), float(max(high, point)))
    return Speedup(point, ci, verdict(point, ci), is_decided(ci), (ref.size, var.size))


@dataclasses.dataclass(frozen=True)
class Difference:
    """A difference of mean times, B - A, with its interval: what a kernel group gains or loses.

    Means, not medians, so that the groups' differences add up to the total difference.

    Attributes:
      delta_s: mean(B) - mean(A) in seconds (< 0: B takes less time).
      ci: (low, high) 95% bootstrap interval of the difference, each side resampled apart (the
        two were traced in separate calls).
      verdict: "faster" when B takes less time (the whole interval below 0 and the change at
        least 3% of the larger side's time), "slower" when it takes more, else "same".
    """

    delta_s: float
    ci: tuple[float, float]
    verdict: Verdict

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"delta_s": self.delta_s, "ci": list(self.ci), "verdict": self.verdict}


def difference_interval(
    a_s: Sequence[float], b_s: Sequence[float], *, resamples: int = RESAMPLES, seed: int = 0
) -> Difference:
    """B's mean time minus A's, per call, with its interval and verdict (see `Difference`).

    Args:
      a_s: per-call seconds of A (zeros where A has none of the work).
      b_s: per-call seconds of B.
      resamples: bootstrap resamples.
      seed: the resampling seed (fixed: the same samples give the same interval).

    Raises:
      ValueError: an empty sample set or a negative time.
    """
    a = np.asarray(a_s, dtype=np.float64)
    b = np.asarray(b_s, dtype=np.float64)
    if a.size == 0 or b.size == 0:
        raise ValueError("a difference interval needs at least one sample on each side")
    if (a < 0).any() or (b < 0).any():
        raise ValueError("per-call times cannot be negative")
    point = float(b.mean() - a.mean())
    rng = np.random.default_rng(seed)
    a_means = rng.choice(a, size=(resamples, a.size)).mean(axis=1)
    b_means = rng.choice(b, size=(resamples, b.size)).mean(axis=1)
    tail = (1.0 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(b_means - a_means, [tail, 100 - tail])
    ci = (float(min(low, point)), float(max(high, point)))
    small = abs(point) < SAME_WITHIN * max(float(a.mean()), float(b.mean()))
    if small or ci[0] <= 0.0 <= ci[1]:
        return Difference(point, ci, Verdict.SAME)
    return Difference(point, ci, Verdict.FASTER if point < 0 else Verdict.SLOWER)
