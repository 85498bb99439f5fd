"""Honest wall-clock timing of a compiled function: warm-up first, device synchronized.

Calls are timed in rounds. In each round a program makes `k` synchronized calls (each followed
by `jax.block_until_ready` before the clock is read), then one pipelined burst of `k` calls (at
least BURST_MIN) issued back to back with one sync at the end. So every round yields, for each program:

- latency: the seconds of each synchronized call (dispatch, execution and the sync);
- pipelined time: the burst's seconds per call, where dispatch overlaps execution (what a
  training loop sees), and the host's share of it (the seconds to issue the calls).

A cell's figures are the medians of these over its rounds: `time_median_s` (latency, with p10,
p90 and the fastest call) and `pipelined_s_per_call`. The first call (which may compile, or fill
caches) is never timed. For train steps, `advance` feeds each call's new state into the next
call, so no donated or stale buffer is reused.

A speedup compares two programs timed in alternating rounds (`measure_pair`): a round of one,
then a round of the other, the order swapped every round, so a drift of the machine (another
process, clocks, thermals) affects both alike. The speedup is the ratio of the two programs'
figures over the same rounds (`xlafuse.measurement.stats.paired_speedup`): its point is exactly the
reference's shown time over the variant's, and its interval resamples whole rounds. Both the
latency and the pipelined speedup are computed; the one that leads (`leading_figure`: pipelined
for a train step and on a CPU, latency for a forward call on a GPU) decides when to stop: rounds go on until its verdict is decided or
the pair's budget, `PAIR_BUDGET` x `min_time_s`, is spent.

Under `jax.distributed` every call is collective, so every process runs the same rounds
(`xlafuse.distributed.lockstep`): a barrier before each round, process 0's clock for every
decision, and a round's time is the slowest process's (its samples, taken per round across
processes), so the verdict rule is unchanged. Each process's own figures are kept beside them
(`Timing.per_process`). On one process nothing of this communicates.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from xlafuse.distributed import lockstep as lockstep_lib
from xlafuse.kinds import Backend, Figure
from xlafuse.measurement.stats import RESAMPLES, Speedup, paired_speedup, speedup_interval

PAIR_BUDGET = 4  # a pair may take up to this many times min_time_s when its verdict is close
ROUND_SHARE = 0.01  # one side of a round takes about this share of min_time_s...
ROUND_CALLS = (3, 50)  # ...within these many synchronized calls
BURST_MIN = 10  # a burst's calls, at least: its first dispatch, never overlapped, is a small share
MIN_ROUNDS = 10  # rounds before a verdict may be taken
CHECK_RESAMPLES = 400  # bootstrap resamples of the checks while timing (the final one: RESAMPLES)

Clock = Callable[[], float]
Advance = Callable[[tuple, Any], tuple]

# What a speedup divides: the figure it is the ratio of (`Comparison.lead`; `kinds.Figure`).
LATENCY = Figure.LATENCY
PIPELINED = Figure.PIPELINED
# The `speedup_basis` of a record: the figure and how the two programs were timed.
BASES = {
    (LATENCY, True): "latency (median synchronized call), paired rounds",
    (PIPELINED, True): "pipelined (median seconds per call of back-to-back bursts), paired rounds",
    (LATENCY, False): "latency (median synchronized call), timed apart",
    (PIPELINED, False): "pipelined (median seconds per call of back-to-back bursts), timed apart",
}


@dataclasses.dataclass(frozen=True)
class TimingSettings:
    """How each call is timed: when to stop (also a config's `[timing]` table).

    Attributes:
      warmup: untimed calls before timing (at least 1: the first call may compile).
      min_time_s: keep timing until this many seconds have passed...
      min_iters: ...and at least this many synchronized calls were timed.
      max_iters: never time more synchronized calls than this.
      repeats: at least this many rounds (pipelined bursts) are timed.
    """

    warmup: int = 2
    min_time_s: float = 0.5
    min_iters: int = 10
    max_iters: int = 1000
    repeats: int = 3


@dataclasses.dataclass(frozen=True)
class Timing:
    """Timing of one compiled function over its rounds.

    Attributes:
      time_median_s: latency: median seconds per synchronized call.
      time_p10_s: 10th percentile of the same.
      time_p90_s: 90th percentile of the same.
      time_min_s: fastest synchronized call.
      iters: synchronized calls timed.
      pipelined_s_per_call: median over rounds of a burst's seconds per call.
      pipelined_iters: calls per pipelined burst.
      warmup_iters: untimed calls made first.
      host_s_per_call: host seconds to issue one call of a burst (median over rounds): when it
        is close to `pipelined_s_per_call`, the host, not the device, sets the pace.
      samples_s: the seconds of each synchronized call, round after round (not written).
      pipelined_samples_s: each round's burst seconds per call (not written).
      per_process: under `jax.distributed`, each process's own (median latency, pipelined
        seconds per call, host seconds per call), by process index; () on one process. The
        figures above are then over the slowest process's samples of each round.
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
    pipelined_samples_s: tuple[float, ...] = dataclasses.field(default=(), repr=False)
    per_process: tuple[tuple[float, ...], ...] = dataclasses.field(default=(), repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, without the raw samples and per-process figures."""
        out = dataclasses.asdict(self)
        del out["samples_s"], out["pipelined_samples_s"], out["per_process"]
        return out


@dataclasses.dataclass(frozen=True)
class Comparison:
    """A program's speedups over a reference, on both figures.

    Attributes:
      latency: the ratio of the two latency medians, with its interval.
      pipelined: the ratio of the two pipelined times per call (None: not measured).
      paired: whether the two were timed in alternating rounds (else apart).
      reference: the reference's Timing over the same rounds (paired) or its own (apart).
    """

    latency: Speedup
    pipelined: Speedup | None
    paired: bool
    reference: Timing

    def speedup(self, lead: str) -> Speedup:
        """The speedup on `lead`; latency's when no pipelined figure was measured."""
        return self.pipelined if lead == PIPELINED and self.pipelined else self.latency

    def lead(self, wanted: str) -> str:
        """`wanted` (`leading_figure`'s), or LATENCY when no pipelined figure was measured: the
        record names the figure its speedup really divides."""
        return wanted if wanted == LATENCY or self.pipelined is not None else LATENCY

    def basis(self, lead: str) -> str:
        return BASES[(lead, self.paired)]


def leading_figure(train: bool, backend: str) -> str:
    """The figure a cell's speedup is taken on: PIPELINED for a train step (what a training loop
    sees) and for any cell on a CPU, LATENCY for a forward call on a GPU.

    On a CPU a synchronized call's time is mostly the wake-up of the runtime's threads, which
    the machine's load sets, so it moves between runs far more than the program does (the
    quickstart's figures: experiments/README.md, "Figures behind the code"). On a GPU a forward
    call's latency (launches, the kernels, the sync) is what a request waits for.
    """
    return PIPELINED if train or backend == Backend.CPU else LATENCY


def same_args(args: tuple, out: Any) -> tuple:
    """`advance` for forward calls: every call gets the same arguments."""
    del out
    return args


def thread_state(args: tuple, out: Any) -> tuple:
    """`advance` for train steps `fn(state, *rest) -> (new_state, ...)`: the next call gets
    the new state, so a donated input buffer is never touched again."""
    return (out[0], *args[1:])


def warm_up(fn: Callable, args: tuple, count: int, *, advance: Advance = same_args) -> tuple:
    """Call `fn` `count` times, untimed, synchronizing each; returns the next call's args."""
    for _ in range(max(1, count)):
        out = jax.block_until_ready(fn(*args))
        args = advance(args, out)
    return args


def time_pipelined(
    fn: Callable,
    args: tuple,
    calls: int,
    repeats: int,
    *,
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
        seconds, issue, args = _burst(fn, args, calls, advance, clock)
        per_call.append(seconds)
        host.append(issue)
    return statistics.median(per_call), statistics.median(host), args


def _burst(fn, args, calls: int, advance, clock) -> tuple[float, float, tuple]:
    """One pipelined burst: (seconds per call, host seconds to issue one call, next args)."""
    t0 = clock()
    out = None
    for _ in range(calls):
        out = fn(*args)
        args = advance(args, out)
    issued = clock() - t0
    jax.block_until_ready(out)
    return (clock() - t0) / calls, issued / calls, args


@dataclasses.dataclass
class _Side:
    """One program being timed: its calls so far and the args of its next call."""

    fn: Callable
    args: tuple
    advance: Advance
    clock: Clock
    calls: int = 0  # synchronized calls per round (and calls per burst)
    lockstep: lockstep_lib.Lockstep = lockstep_lib.SOLO
    synced: list[float] = dataclasses.field(default_factory=list)
    pipelined: list[float] = dataclasses.field(default_factory=list)
    host: list[float] = dataclasses.field(default_factory=list)

    def round(self) -> None:
        """`calls` synchronized calls, then a pipelined burst of as many (at least BURST_MIN),
        once every process is ready for them."""
        self.lockstep.barrier()
        for _ in range(self.calls):
            t = self.clock()
            out = jax.block_until_ready(self.fn(*self.args))
            self.synced.append(self.clock() - t)
            self.args = self.advance(self.args, out)
        burst = max(self.calls, BURST_MIN)
        seconds, issue, self.args = _burst(self.fn, self.args, burst, self.advance, self.clock)
        self.pipelined.append(seconds)
        self.host.append(issue)

    def own_figures(self) -> tuple[float, float, float]:
        """This process's (median latency, pipelined s per call, host s per call)."""
        medians = (self.synced, self.pipelined, self.host)
        return tuple(float(np.median(v)) for v in medians)  # type: ignore[return-value]

    def timing(self, warmup: int) -> Timing:
        step = self.lockstep
        per_process = ()
        if step.processes > 1:
            per_process = tuple(tuple(row) for row in step.gather(self.own_figures()).tolist())
        synced, pipelined, host = (
            step.slowest(v) for v in (self.synced, self.pipelined, self.host)
        )
        values = np.asarray(synced, dtype=np.float64)
        p10, median, p90 = np.percentile(values, [10, 50, 90])
        return Timing(
            time_median_s=float(median),
            time_p10_s=float(p10),
            time_p90_s=float(p90),
            time_min_s=float(values.min()),
            iters=len(synced),
            pipelined_s_per_call=statistics.median(pipelined),
            pipelined_iters=max(self.calls, BURST_MIN),
            warmup_iters=max(1, warmup),
            host_s_per_call=statistics.median(host),
            samples_s=tuple(synced),
            pipelined_samples_s=tuple(pipelined),
            per_process=per_process,
        )


def _start(fn, args, settings: TimingSettings, advance, clock) -> _Side:
    """Warm `fn` up and choose its calls per round from one more (timed) call (process 0's,
    under `jax.distributed`: every process makes as many)."""
    step = lockstep_lib.current()
    args = warm_up(fn, tuple(args), settings.warmup, advance=advance)
    t0 = clock()
    out = jax.block_until_ready(fn(*args))
    estimate = step.first(max(clock() - t0, 1e-7))
    share = ROUND_SHARE * settings.min_time_s / estimate
    calls = int(min(ROUND_CALLS[1], max(ROUND_CALLS[0], share)))
    calls = max(1, min(calls, settings.max_iters))
    return _Side(fn, advance(args, out), advance, clock, calls, lockstep=step)


def measure(
    fn: Callable,
    args: Sequence,
    *,
    settings: TimingSettings = TimingSettings(),
    advance: Advance = same_args,
    clock: Clock = time.perf_counter,
) -> Timing:
    """Warm up, then time rounds of synchronized calls and pipelined bursts.

    Rounds go on until `min_time_s` has passed, `min_iters` synchronized calls and `repeats`
    rounds were timed, or while another round stays within `max_iters` synchronized calls.

    Args:
      fn: the compiled function; `fn(*args)`.
      args: its arguments (a donating `fn` consumes them: pass copies).
      settings: when to stop.
      advance: `(args, out) -> next args`; `thread_state` for train steps.
      clock: seconds as a float (injectable for tests).

    Returns:
      The Timing.
    """
    side = _start(fn, args, settings, advance, clock)
    start, rounds = clock(), 0
    while len(side.synced) + side.calls <= settings.max_iters:
        side.round()
        rounds += 1
        enough = len(side.synced) >= settings.min_iters and rounds >= settings.repeats
        if side.lockstep.first(enough and clock() - start >= settings.min_time_s):
            break
    return side.timing(settings.warmup)


def measure_pair(
    reference: Callable,
    reference_args: Sequence,
    fn: Callable,
    args: Sequence,
    *,
    settings: TimingSettings = TimingSettings(),
    advance: Advance = same_args,
    clock: Clock = time.perf_counter,
    lead: str = LATENCY,
) -> tuple[Timing, Comparison]:
    """Time `fn` against `reference` in alternating rounds; return its Timing and speedups.

    Each round times one program, then the other (the order swapped every round); both make
    the same number of calls per round. Rounds go on until `min_time_s`, `min_iters` calls of
    `fn` and MIN_ROUNDS rounds are reached and the `lead` speedup's verdict is decided, or until
    PAIR_BUDGET x `min_time_s` (or `max_iters` synchronized calls of `fn`).

    Args:
      reference: the reference's compiled function.
      reference_args: its arguments (copies, if it donates them).
      fn: the compiled function to judge.
      args: its arguments (copies, if it donates them).
      settings: the timing settings.
      advance: `(args, out) -> next args`, for both.
      clock: seconds as a float (injectable for tests).
      lead: the figure whose verdict decides when to stop (LATENCY or PIPELINED).

    Returns:
      (fn's Timing over the rounds, the Comparison: both speedups and the reference's Timing
      over the same rounds).
    """
    ref = _start(reference, reference_args, settings, advance, clock)
    own = _start(fn, args, settings, advance, clock)
    ref.calls = own.calls = min(ref.calls, own.calls)
    _alternate(ref, own, settings, lead, clock)
    comparison = Comparison(
        _speedup(ref, own, LATENCY), _speedup(ref, own, PIPELINED), True, ref.timing(0)
    )
    return own.timing(settings.warmup), comparison


def _alternate(ref: _Side, own: _Side, settings: TimingSettings, lead: str, clock: Clock) -> None:
    """Rounds of `ref` and `own`, the order swapped every round, until `measure_pair`'s rule."""
    start, rounds, next_check = clock(), 0, max(MIN_ROUNDS, settings.repeats)
    while True:
        for side in (ref, own) if rounds % 2 == 0 else (own, ref):
            side.round()
        rounds += 1
        if len(own.synced) + own.calls > settings.max_iters:
            return
        if rounds < next_check or len(own.synced) < settings.min_iters:
            continue
        elapsed = own.lockstep.first(clock() - start)
        if elapsed < settings.min_time_s:
            continue
        if elapsed >= PAIR_BUDGET * settings.min_time_s:
            return
        # The bootstrap costs more as rounds pile up: check a quarter more rounds later each time.
        next_check = rounds + max(1, rounds // 4)
        if own.lockstep.first(_speedup(ref, own, lead, CHECK_RESAMPLES).decided):
            return


def _speedup(ref: _Side, own: _Side, lead: str, resamples: int = RESAMPLES) -> Speedup:
    """The paired speedup of `own` over `ref` on one figure, resampling whole rounds (each
    round's slowest process's samples)."""
    slowest = own.lockstep.slowest
    if lead == LATENCY:
        shape = (len(own.pipelined), own.calls)
        rounds = np.reshape(slowest(ref.synced), shape), np.reshape(slowest(own.synced), shape)
    else:
        rounds = (
            np.reshape(slowest(ref.pipelined), (-1, 1)),
            np.reshape(slowest(own.pipelined), (-1, 1)),
        )
    return paired_speedup(*rounds, resamples=resamples)


def compare_apart(reference: Timing, measured: Timing) -> Comparison:
    """The speedups of `measured` over a `reference` timed apart (unpaired medians)."""
    latency = speedup_interval(reference.samples_s, measured.samples_s)
    pipelined = None
    if reference.pipelined_samples_s and measured.pipelined_samples_s:
        pipelined = speedup_interval(reference.pipelined_samples_s, measured.pipelined_samples_s)
    return Comparison(latency, pipelined, False, reference)
