"""Honest wall-clock timing of a compiled function: warm-up first, device synchronized.

Two figures, as in gpt-fast's `generate.py` and JAX's benchmarking advice:
- per-call latency: every call is followed by `jax.block_until_ready` before the clock is read,
  so a call's time includes dispatch, execution and the sync (median, p10, p90);
- pipelined throughput: calls are issued back to back and the device is synchronized once at the
  end, so dispatch overlaps execution (what a training loop sees).

The first call (which may compile, or fill caches) is never timed. For train steps, `advance`
feeds each call's new state into the next call, so no donated or stale buffer is reused.

A speedup compares two programs timed in alternation (`measure_pair`): rounds of a few calls of
one, then of the other, the order swapped every round, so a drift of the machine (another
process, clocks, thermals) affects both alike; each round compares the fastest call of each. Rounds go on until the speedup's verdict is
decided (`xlafuse.measure.stats`) or the pair's budget, `PAIR_BUDGET` x `min_time_s`, is spent.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from xlafuse.measure.stats import Speedup, paired_speedup_interval

PAIR_BUDGET = 4  # a pair may take up to this many times min_time_s when its verdict is close
ROUND_SHARE = 0.01  # one side of a round takes about this share of min_time_s...
ROUND_CALLS = (3, 50)  # ...within these many calls
MIN_ROUNDS = 10  # rounds before a verdict may be taken

Clock = Callable[[], float]
Advance = Callable[[tuple, Any], tuple]


# The `speedup_basis` of a record: how its speedup over the reference was timed.
PAIRED = "paired wall clock (rounds alternating with the reference; fastest call per round)"
UNPAIRED = "unpaired wall clock (timed apart from the reference)"


@dataclasses.dataclass(frozen=True)
class TimingSettings:
    """How each call is timed: when to stop (also a config's `[timing]` table).

    Attributes:
      warmup: untimed calls before timing (at least 1: the first call may compile).
      min_time_s: keep timing synchronized calls until this many seconds have passed...
      min_iters: ...and at least this many calls were timed.
      max_iters: never time more calls than this.
      repeats: pipelined bursts (back-to-back calls, one sync) whose median is reported.
    """

    warmup: int = 2
    min_time_s: float = 0.5
    min_iters: int = 10
    max_iters: int = 1000
    repeats: int = 3


@dataclasses.dataclass(frozen=True)
class Timing:
    """Timing of one compiled function.

    Attributes:
      time_median_s: median seconds per synchronized call.
      time_p10_s: 10th percentile of the same.
      time_p90_s: 90th percentile of the same.
      time_min_s: fastest synchronized call.
      iters: synchronized calls timed.
      pipelined_s_per_call: median over bursts of (burst seconds / calls in the burst).
      pipelined_iters: calls per pipelined burst.
      warmup_iters: untimed calls made first.
      host_s_per_call: host seconds to issue one call of a pipelined burst (median over bursts):
        when it is close to `pipelined_s_per_call`, the host, not the device, sets the pace.
      samples_s: the per-call seconds behind the median (not written to records).
    """

    time_median_s: float
    time_p10_s: float
    time_p90_s: float
    time_min_s: float
    iters: int
    pipelined_s_per_call: float | None
    pipelined_iters: int
    warmup_iters: int
    host_s_per_call: float | None = None
    samples_s: tuple[float, ...] = dataclasses.field(default=(), repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, without the raw samples."""
        out = dataclasses.asdict(self)
        del out["samples_s"]
        return out


def same_args(args: tuple, out: Any) -> tuple:
    """`advance` for forward calls: every call gets the same arguments."""
    del out
    return args


def thread_state(args: tuple, out: Any) -> tuple:
    """`advance` for train steps `fn(state, *rest) -> (new_state, ...)`: the next call gets
    the new state, so a donated input buffer is never touched again."""
    return (out[0], *args[1:])


def warm_up(fn: Callable, args: tuple, count: int, advance: Advance = same_args) -> tuple:
    """Call `fn` `count` times, untimed, synchronizing each; returns the next call's args."""
    for _ in range(max(1, count)):
        out = jax.block_until_ready(fn(*args))
        args = advance(args, out)
    return args


def time_latency(
    fn: Callable,
    args: tuple,
    settings: TimingSettings,
    advance: Advance = same_args,
    clock: Clock = time.perf_counter,
) -> tuple[list[float], tuple]:
    """Time synchronized calls until `min_time_s` and `min_iters`, or `max_iters`.

    Returns:
      (seconds of each call, the args for the next call).
    """
    samples: list[float] = []
    start = clock()
    while len(samples) < settings.max_iters:
        if len(samples) >= settings.min_iters and clock() - start >= settings.min_time_s:
            break
        t0 = clock()
        out = jax.block_until_ready(fn(*args))
        samples.append(clock() - t0)
        args = advance(args, out)
    return samples, args


def time_pipelined(
    fn: Callable,
    args: tuple,
    calls: int,
    repeats: int,
    advance: Advance = same_args,
    clock: Clock = time.perf_counter,
) -> tuple[float, float, tuple]:
    """Issue `calls` calls back to back, sync once at the end; median over `repeats` bursts.

    Only the last output is waited for: one device stream runs calls in order, and holding every
    output alive would multiply memory use for large workloads.

    Returns:
      (median seconds per call, median host seconds to issue one call, the args for the next
      call).
    """
    per_call, host = [], []
    for _ in range(repeats):
        t0 = clock()
        out = None
        for _ in range(calls):
            out = fn(*args)
            args = advance(args, out)
        host.append((clock() - t0) / calls)
        jax.block_until_ready(out)
        per_call.append((clock() - t0) / calls)
    return statistics.median(per_call), statistics.median(host), args


def summarize(samples: Sequence[float]) -> tuple[float, float, float, float]:
    """(median, p10, p90, min) of per-call seconds."""
    values = np.asarray(samples, dtype=np.float64)
    p10, median, p90 = np.percentile(values, [10, 50, 90])
    return float(median), float(p10), float(p90), float(values.min())


def measure(
    fn: Callable,
    args: Sequence,
    settings: TimingSettings = TimingSettings(),
    advance: Advance = same_args,
    clock: Clock = time.perf_counter,
) -> Timing:
    """Warm up, then time per-call latency and pipelined throughput.

    Args:
      fn: the compiled function; `fn(*args)`.
      args: its arguments (a donating `fn` consumes them: pass copies).
      settings: when to stop.
      advance: `(args, out) -> next args`; `thread_state` for train steps.
      clock: seconds as a float (injectable for tests).

    Returns:
      The Timing.
    """
    args = warm_up(fn, tuple(args), settings.warmup, advance)
    samples, args = time_latency(fn, args, settings, advance, clock)
    return _with_pipelined(fn, args, samples, settings, advance, clock)


def _with_pipelined(fn, args, samples, settings, advance, clock) -> Timing:
    calls = max(settings.min_iters, min(len(samples), settings.max_iters))
    pipelined, host, _ = time_pipelined(fn, args, calls, settings.repeats, advance, clock)
    median, p10, p90, fastest = summarize(samples)
    return Timing(
        time_median_s=median,
        time_p10_s=p10,
        time_p90_s=p90,
        time_min_s=fastest,
        iters=len(samples),
        pipelined_s_per_call=pipelined,
        pipelined_iters=calls,
        warmup_iters=max(1, settings.warmup),
        host_s_per_call=host,
        samples_s=tuple(samples),
    )


def measure_pair(
    reference: Callable,
    reference_args: Sequence,
    fn: Callable,
    args: Sequence,
    settings: TimingSettings = TimingSettings(),
    advance: Advance = same_args,
    clock: Clock = time.perf_counter,
) -> tuple[Timing, Timing, Speedup]:
    """Time `fn` against `reference` in alternating rounds; return both Timings and the speedup.

    Each round times a few synchronized calls of one program, then of the other (the order
    swapped every round), and yields the ratio of the two rounds' fastest calls: both see the
    same machine, and the fastest call is the one least disturbed by other processes (they only
    ever add time: on a busy 2-core machine a 50 us CPU call was seen to take 8 us in one
    second and 45 us in the next). Rounds go on until `min_time_s`, `min_iters` calls of `fn` and MIN_ROUNDS rounds are
    reached and the speedup's verdict is decided, or until PAIR_BUDGET x `min_time_s` (or
    `max_iters` calls of `fn`).

    Args:
      reference: the reference's compiled function.
      reference_args: its arguments (copies, if it donates them).
      fn: the compiled function to judge.
      args: its arguments (copies, if it donates them).
      settings: the timing settings.
      advance: `(args, out) -> next args`, for both.
      clock: seconds as a float (injectable for tests).

    Returns:
      (fn's Timing with its pipelined figures, the reference's Timing over the same rounds
      (latency only), the paired speedup of fn over the reference).
    """
    reference_args = warm_up(reference, tuple(reference_args), settings.warmup, advance)
    args = warm_up(fn, tuple(args), settings.warmup, advance)
    t0 = clock()
    out = jax.block_until_ready(fn(*args))
    estimate = max(clock() - t0, 1e-7)
    args = advance(args, out)
    per_round = int(
        min(ROUND_CALLS[1], max(ROUND_CALLS[0], ROUND_SHARE * settings.min_time_s / estimate))
    )
    sides = {"reference": ([], reference, reference_args), "fn": ([], fn, args)}
    ratios: list[float] = []
    start, result = clock(), None
    while True:
        order = ("reference", "fn") if len(ratios) % 2 == 0 else ("fn", "reference")
        fastest = {}
        for side in order:
            samples, f, a = sides[side]
            this_round = []
            for _ in range(per_round):
                t = clock()
                out = jax.block_until_ready(f(*a))
                this_round.append(clock() - t)
                a = advance(a, out)
            samples.extend(this_round)
            sides[side] = (samples, f, a)
            fastest[side] = min(this_round)
        ratios.append(fastest["reference"] / max(fastest["fn"], 1e-12))
        ref_samples, fn_samples = sides["reference"][0], sides["fn"][0]
        elapsed = clock() - start
        if len(fn_samples) >= settings.max_iters:
            break
        enough = len(ratios) >= MIN_ROUNDS and len(fn_samples) >= settings.min_iters
        if not enough or elapsed < settings.min_time_s:
            continue
        result = paired_speedup_interval(ratios, (len(ref_samples), len(fn_samples)))
        if result.decided or elapsed >= PAIR_BUDGET * settings.min_time_s:
            break
    if result is None or result.samples != (len(ref_samples), len(fn_samples)):
        result = paired_speedup_interval(ratios, (len(ref_samples), len(fn_samples)))
    samples, f, a = sides["fn"]
    measured = _with_pipelined(f, a, samples, settings, advance, clock)
    median, p10, p90, fastest = summarize(ref_samples)
    reference_timing = Timing(median, p10, p90, fastest, len(ref_samples), None, 0, 0)
    return measured, dataclasses.replace(reference_timing, samples_s=tuple(ref_samples)), result
