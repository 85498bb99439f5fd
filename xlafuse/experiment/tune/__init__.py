"""`xlafuse tune`: search a target's knobs and XLA's option families for a faster program, and
prove it in a fresh process.

`space` (what is searched) -> `search` (coordinate descent or successive halving in a budget,
or the grid) with `evaluate` (one candidate built, compiled, judged, timed) -> `rerun` (the
proof) -> `tuner` (the whole, and what it writes).
"""

from xlafuse.experiment.tune.tuner import TuneResult, tune

__all__ = ["TuneResult", "tune"]
