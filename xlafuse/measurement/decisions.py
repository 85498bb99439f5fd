"""XLA's fusion decisions scored: the gain its cost model predicted against the gain measured.

Priority fusion (GPU) fuses a producer into its consumers when its cost model expects a gain:
`us_unfused - us_fused` of the producer's last `update_priority` step before the `fusion` step
that fused it (`xlafuse.hlo.priority_dump`). Each `fusion` step is one decision taken.

The measured gain comes from the kernel groups of `xlafuse diff` between the fused program (A,
the default) and the unfused one (B, no-fusion), timed (`xlafuse.measurement.kernel_diff`): a
decision belongs to the group of the default kernel that holds its producer's and consumer's
instructions (names resolved to the unoptimized program, `xlafuse.hlo.explain.resolve_steps`);
the group's `saved_s` (B's time - A's) is the gain of fusing what it holds, and its interval's
verdict says whether that is beyond the noise (B `slower`: the fusion gains; `faster`: it
loses; `same`: within the noise).

What it can and cannot say: a group is often made of several decisions (a kernel built in
several steps), and all of them share its one measured gain: a decision is judged with its
kernel. Decisions XLA did not take (a negative predicted gain, never fused) are alike in both
programs and get no measurement. The sign agreement counts decisions with a predicted gain
whose group's verdict is not `same`.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xlafuse.hlo.diff import FusionDiff
from xlafuse.hlo.explain import ResolvedStep, resolve_steps
from xlafuse.hlo.ir import HloModule
from xlafuse.hlo.priority_dump import PriorityDump
from xlafuse.kinds import Verdict
from xlafuse.measurement.kernel_diff import TimedGroup

SCHEMA = "xlafuse.fusion_decisions/1"
TOP = 10
GAIN, LOSS, NOISE = "gain", "loss", "noise"
_OUTCOME = {Verdict.SLOWER: GAIN, Verdict.FASTER: LOSS, Verdict.SAME: NOISE}


@dataclasses.dataclass(frozen=True)
class Decision:
    """One fusion XLA made, with its predicted and measured gains.

    Attributes:
      step: the `fusion` step's index in the dump.
      producer: the dump's name of the producer fused.
      consumer: the consumer it was fused into.
      fusion: the fusion the step made.
      predicted_gain_s: us_unfused - us_fused of the producer's last estimate before the step
        (seconds; None: the dump gave none).
      kernel: the default program's kernel holding what was fused (None: not resolved).
      measured_gain_s: its group's no-fusion time minus default time per call (None: no group).
      outcome: "gain", "loss" or "noise" from the group's verdict (None: no interval).
      ci_s: the interval of the group's change (no-fusion - default), when known.
      sources: the Python lines of the instructions fused.
    """

    step: int
    producer: str
    consumer: str
    fusion: str | None
    predicted_gain_s: float | None
    kernel: str | None = None
    measured_gain_s: float | None = None
    outcome: str | None = None
    ci_s: tuple[float, float] | None = None
    sources: tuple[str, ...] = ()

    @property
    def decided(self) -> bool:
        """Whether its sign can be judged: a predicted gain, a measured one beyond the noise."""
        return bool(self.predicted_gain_s) and self.outcome in (GAIN, LOSS)

    @property
    def agrees(self) -> bool:
        """Whether predicted and measured gain have one sign (only meaningful when decided)."""
        return self.decided and (self.predicted_gain_s > 0) == (self.outcome == GAIN)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        out = dataclasses.asdict(self)
        out["ci_s"] = list(self.ci_s) if self.ci_s else None
        out["sources"] = list(self.sources)
        return out


def fusion_decisions(
    steps: Sequence[ResolvedStep],
    kernel_of: Mapping[str, str | None],
    groups: Sequence[TimedGroup],
    *,
    sources: Mapping[str, str] | None = None,
) -> tuple[Decision, ...]:
    """Every `fusion` step of the dump with its predicted gain and its group's measured gain.

    Args:
      steps: the dump's steps resolved to the unoptimized program (`resolve_steps`).
      kernel_of: unoptimized instruction -> the default program's kernel holding it
        (`Lineage.by_name[...].kernel` of the diff's A side).
      groups: the timed groups of default (A) vs no-fusion (B) (`time_groups`).
      sources: unoptimized instruction -> "file:line".
    """
    group_of = {k: g for g in groups for k in g.group.kernels_a}
    last_estimate: dict[tuple[str, str], float] = {}
    out = []
    for resolved in steps:
        step = resolved.step
        if step.kind == "update_priority" and step.us_fused is not None:
            gain_s = (step.us_unfused - step.us_fused) * 1e-6
            last_estimate.update({(step.producer, c): gain_s for c in step.consumers})
        elif step.kind == "fusion" and step.consumers:
            consumer = step.consumers[0]
            held = resolved.producer_holds.union(*resolved.consumer_holds)
            kernel = _kernel(held, kernel_of)
            decision = Decision(
                step.index, step.producer, consumer, step.fusion_name,
                last_estimate.get((step.producer, consumer)), kernel,
                sources=_sources(held, sources or {}),
            )  # fmt: skip
            out.append(_measured(decision, group_of.get(kernel)))
    return tuple(out)


def _kernel(held: frozenset[str], kernel_of: Mapping[str, str | None]) -> str | None:
    """The kernel holding most of the instructions (ties: the first name)."""
    counts = Counter(k for k in map(kernel_of.get, held) if k is not None)
    return min(counts, key=lambda k: (-counts[k], k)) if counts else None


def _sources(held: frozenset[str], sources: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(sorted({sources[i] for i in held if sources.get(i)}))[:4]


def _measured(decision: Decision, group: TimedGroup | None) -> Decision:
    if group is None:
        return decision
    change = group.change
    return dataclasses.replace(
        decision,
        measured_gain_s=group.saved_s,
        outcome=_OUTCOME.get(change.verdict) if change is not None else None,
        ci_s=tuple(change.ci) if change is not None else None,
    )


def decisions_record(decisions: Sequence[Decision], *, top: int = TOP) -> dict[str, Any]:
    """How often the predicted gain's sign agrees with the measured one, and the decisions
    where it does not: predicted a gain, measured a loss (the candidates to un-fuse), and the
    reverse; each list the largest measured difference first."""
    decided = [d for d in decisions if d.decided]
    agree = sum(d.agrees for d in decided)
    wrong_gain = [d for d in decided if d.predicted_gain_s > 0 and d.outcome == LOSS]
    wrong_loss = [d for d in decided if d.predicted_gain_s < 0 and d.outcome == GAIN]
    by_size = lambda d: (-abs(d.measured_gain_s), d.step)  # noqa: E731
    return {
        "schema": SCHEMA,
        "decisions": len(decisions),
        "with_estimate": sum(d.predicted_gain_s is not None for d in decisions),
        "with_kernel": sum(d.kernel is not None for d in decisions),
        "measured": sum(d.outcome is not None for d in decisions),
        "noise": sum(d.outcome == NOISE for d in decisions),
        "decided": len(decided),
        "agree": agree,
        "agreement": agree / len(decided) if decided else None,
        "predicted_gain_measured_loss": [
            d.to_dict() for d in sorted(wrong_gain, key=by_size)[:top]
        ],
        "predicted_loss_measured_gain": [
            d.to_dict() for d in sorted(wrong_loss, key=by_size)[:top]
        ],
    }


def decisions_of_diff(
    dump: PriorityDump,
    reference: HloModule,
    reference_text: str | None,
    diff: FusionDiff,
    timed: Sequence[TimedGroup],
) -> dict[str, Any]:
    """`decisions_record` of A's priority-fusion dump against the timed groups of A vs B.

    Args:
      dump: the dump of A's compile (its twin: `xlafuse.measurement.predicted`).
      reference: the unoptimized module both sides of `diff` were traced to.
      reference_text: its text (better tracing, as for the diff).
      diff: the FusionDiff from A (fused) to B.
      timed: its groups with their times and intervals (`time_groups`).
    """
    steps = resolve_steps(reference, reference_text, dump)
    kernel_of = {t.instruction: t.kernel for t in diff.lineage_a.traces}
    sources = {
        i.name: f"{Path(i.source_file).name}:{i.source_line}"
        for c in reference.computations
        for i in c.instructions
        if i.source_file
    }
    record = decisions_record(fusion_decisions(steps, kernel_of, timed, sources=sources))
    return {"a": diff.label_a, "b": diff.label_b, **record}
