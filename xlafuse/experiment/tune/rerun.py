"""The proof of a tuning winner: the default program and the winner timed again in a fresh
process, in paired rounds (`timing.measure_pair`), on the figure the search ranked by.

The search's own timings are short and ran beside every other candidate; a winner is reported
as faster only if this rerun's verdict is `faster` too. The parent writes the request (the
target, both candidates, the imports of the user's code) and runs
`python -m xlafuse.experiment.tune.rerun FOLDER`, which writes its result there
(`compiler/protocol.py`, as every child of xlafuse).
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from pathlib import Path
from typing import Any

from xlafuse.compiler.protocol import ChildError, read_request, run_child, write_result
from xlafuse.errors import XlafuseError
from xlafuse.experiment.tune.evidence import Evidence, as_tuples, gather
from xlafuse.experiment.tune.space import Candidate
from xlafuse.kinds import Backend, Mode

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
      evidence: on a GPU, device time, kernels and the groups where the time went
        (`evidence.gather`); None elsewhere.
    """

    figure: str
    speedup: float
    ci: tuple[float, float]
    verdict: str
    default_s: float
    winner_s: float
    compile_s: tuple[float, float]
    evidence: Evidence | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Rerun:
        """From `to_dict()` output (JSON turns tuples into lists)."""
        fields = as_tuples(data)
        evidence = fields.get("evidence")
        return cls(**{**fields, "evidence": Evidence.from_dict(evidence) if evidence else None})


def rerun(spec: dict[str, Any], *, timeout_s: float = RERUN_TIMEOUT_S) -> Rerun:
    """Runs the proof in a fresh process (`compiler/protocol.py`: request.json in, result.json
    out).

    Args:
      spec: {"target": name, "settings": {...}, "overrides": {...}, "imports": [...],
        "default": Candidate.to_dict(), "winner": ..., "timing": TimingSettings fields}.

    Raises:
      XlafuseError: the child failed or timed out (its last line of error).
    """
    with tempfile.TemporaryDirectory(prefix="xlafuse-tune-") as tmp:
        command = [sys.executable, "-m", CHILD, tmp]
        try:
            got, _ = run_child(command, Path(tmp), spec, "the rerun", timeout_s=timeout_s)
        except ChildError as err:
            raise XlafuseError(str(err)) from err
    return Rerun.from_dict(got)


def candidate_from(data: dict[str, Any]) -> Candidate:
    """The Candidate a spec names (`Candidate.to_dict`'s form)."""
    return Candidate(tuple(data["knobs"].items()), tuple(data["choices"].items()))


def _child(folder: str) -> None:
    import jax

    from xlafuse.compiler.jit import compile_workload
    from xlafuse.experiment.tune.evaluate import Target, ranked_figure
    from xlafuse.measurement import timing
    from xlafuse.models import user

    spec = read_request(folder)
    for path in spec.get("imports", ()):
        user.import_target(path)
    target = Target(
        spec["target"], spec.get("settings", {}), spec.get("overrides", {}), spec.get("figure")
    )
    programs = []
    for key in ("default", "winner"):
        work = target.build(candidate_from(spec[key]))
        programs.append((work, compile_workload(work, candidate_from(spec[key]).variant())))
    (work, default), (_, winner) = programs
    train = work.mode == Mode.TRAIN
    lead = ranked_figure(target.figure, train, jax.default_backend())
    advance = timing.thread_state if train else timing.same_args
    settings = timing.TimingSettings(**spec.get("timing", {}))
    own, comparison = timing.measure_pair(
        default, work.fresh_args(), winner, programs[1][0].fresh_args(), settings=settings, advance=advance,
        lead=lead,
    )  # fmt: skip
    lead = comparison.lead(lead)
    speedup = comparison.speedup(lead)
    figure = "pipelined_s_per_call" if lead == timing.PIPELINED else "time_median_s"
    same_program = spec["default"]["knobs"] == spec["winner"]["knobs"]
    out = Rerun(
        lead,
        speedup.speedup,
        tuple(speedup.ci),
        speedup.verdict,
        getattr(comparison.reference, figure),
        getattr(own, figure),
        (default.compile_s, winner.compile_s),
        gather(programs, same_program) if jax.default_backend() == Backend.GPU else None,
    )
    write_result(folder, out.to_dict())


if __name__ == "__main__":
    _child(sys.argv[1])
