"""The proof of a tuning winner: the default program and the winner timed again in a fresh
process, in paired rounds (`timing.measure_pair`), on the figure the search ranked by.

The search's own timings are short and ran beside every other candidate; a winner is reported
as faster only if this rerun's verdict is `faster` too. The parent writes a spec (the target,
both candidates, the imports of the user's code) and runs
`python -m xlafuse.experiment.tune.rerun SPEC`, which prints one JSON line.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from xlafuse.errors import XlafuseError
from xlafuse.experiment.tune.space import Candidate

RERUN_TIMEOUT_S = 900
CHILD = "xlafuse.experiment.tune.rerun"


@dataclasses.dataclass(frozen=True)
class Rerun:
    """The winner against the default program, in a fresh process.

    Attributes:
      figure: "latency" or "pipelined": what `speedup` divides.
      speedup: the default's median over the winner's (above 1: the winner is faster).
      ci: its 95% interval over the paired rounds.
      verdict: "faster", "slower" or "same" (the one rule of speedups).
      default_s: the default program's seconds per call over the same rounds.
      winner_s: the winner's.
      compile_s: (default, winner) seconds XLA took to compile each, in that process.
    """

    figure: str
    speedup: float
    ci: tuple[float, float]
    verdict: str
    default_s: float
    winner_s: float
    compile_s: tuple[float, float]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def rerun(spec: dict[str, Any], timeout_s: float = RERUN_TIMEOUT_S) -> Rerun:
    """Runs the proof in a fresh process.

    Args:
      spec: {"target": name, "settings": {...}, "overrides": {...}, "imports": [...],
        "default": Candidate.to_dict(), "winner": ..., "timing": TimingSettings fields}.

    Raises:
      XlafuseError: the child failed or timed out (its last line of error).
    """
    with tempfile.TemporaryDirectory(prefix="xlafuse-tune-") as tmp:
        path = Path(tmp) / "spec.json"
        path.write_text(json.dumps(spec))
        try:
            done = subprocess.run(
                [sys.executable, "-m", CHILD, str(path)],
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired as err:
            raise XlafuseError(f"the rerun did not finish within {timeout_s:.0f} s") from err
    if done.returncode != 0:
        lines = (done.stderr or done.stdout or "no output").strip().splitlines()
        raise XlafuseError(f"the rerun failed: {lines[-1] if lines else 'no output'}")
    got = json.loads(done.stdout.strip().splitlines()[-1])
    return Rerun(**{**got, "ci": tuple(got["ci"]), "compile_s": tuple(got["compile_s"])})


def candidate_from(data: dict[str, Any]) -> Candidate:
    """The Candidate a spec names (`Candidate.to_dict`'s form)."""
    return Candidate(tuple(data["knobs"].items()), tuple(data["choices"].items()))


def _child(spec_path: str) -> None:
    import jax

    from xlafuse.compile.jit import compile_workload
    from xlafuse.experiment.tune.evaluate import Target
    from xlafuse.measure import timing
    from xlafuse.models import user

    spec = json.loads(Path(spec_path).read_text())
    for path in spec.get("imports", ()):
        user.import_target(path)
    target = Target(spec["target"], spec.get("settings", {}), spec.get("overrides", {}))
    programs = []
    for key in ("default", "winner"):
        work = target.build(candidate_from(spec[key]))
        programs.append((work, compile_workload(work, candidate_from(spec[key]).variant())))
    (work, default), (_, winner) = programs
    train = work.mode == "train"
    lead = timing.leading_figure(train, jax.default_backend())
    advance = timing.thread_state if train else timing.same_args
    settings = timing.TimingSettings(**spec.get("timing", {}))
    own, comparison = timing.measure_pair(
        default, work.fresh_args(), winner, programs[1][0].fresh_args(), settings, advance,
        lead=lead,
    )  # fmt: skip
    lead = comparison.lead(lead)
    speedup = comparison.speedup(lead)
    figure = "pipelined_s_per_call" if lead == timing.PIPELINED else "time_median_s"
    out = Rerun(
        lead,
        speedup.speedup,
        tuple(speedup.ci),
        speedup.verdict,
        getattr(comparison.reference, figure),
        getattr(own, figure),
        (default.compile_s, winner.compile_s),
    )
    print(json.dumps(out.to_dict()))


if __name__ == "__main__":
    _child(sys.argv[1])
