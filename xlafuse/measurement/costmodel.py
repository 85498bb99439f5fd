"""XLA's cost model scored against the measured kernels, kernel by kernel (issue 28).

Each kernel's prediction is XLA's own estimate of its time (`KernelInfo.predicted_us`, read from
the optimized HLO of a compile with `xla_gpu_collect_cost_model_stats`; see
`xlafuse.hlo.estimates`), times the runs of its computation per call (a loop body's kernel runs
once per iteration; `xlafuse.hlo.loops.runs_per_call`). Its measurement is the traced time per
call of the same HLO kernel (`KernelTimes`, joined by `xlafuse.measurement.kernels.join_trace`),
all its launches included (a fusion's memset too: the model does not see it, the GPU runs it).

Per kernel: the ratio predicted / measured and the error `100 x (predicted - measured) /
measured` (%). Over the kernels that have both: the median and 90th percentile of the absolute
error, Spearman's rank correlation (does the model order the kernels as the GPU does; ties get
their average rank), the median ratio, and the sums predicted and measured. Coverage says how
many kernels have both, and for each other kernel why not: a library call (cuBLAS, cuDNN) is no
fusion and gets no estimate, an op that runs on its own (a copy) neither, a fusion may carry
none (compiled without the option, or only a model's "cannot estimate" sentinel), a kernel in a
loop of unknown trip count has no per-call prediction, and a kernel the trace never showed has
no measurement.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from xlafuse.hlo.estimates import Estimate
from xlafuse.hlo.fusion import KernelInfo

if TYPE_CHECKING:  # a type only: the report reads this module without JAX
    from xlafuse.measurement.kernels import KernelTimes

SCHEMA = "xlafuse.cost_model/1"
TOP = 10
NO_LIBRARY = "library call without an estimate"
NO_OP = "runs as its own op (not a fusion or a library call): XLA estimates none"
NO_ESTIMATE = "fusion without an estimate (compiled without the option, or only a sentinel)"
NO_RUNS = "in a loop of unknown trip count: no prediction per call"
NOT_TRACED = "not seen in the trace: no measured time"


@dataclasses.dataclass(frozen=True)
class KernelCost:
    """One kernel's predicted and measured seconds per call.

    Attributes:
      name: the HLO kernel.
      kind: its kind (`kLoop`, `kInput`, `kCustom`, ...).
      model: the cost model the prediction is from (`xlafuse.hlo.estimates`).
      predicted_s: XLA's estimate per launch times its runs per call.
      measured_s: its traced seconds per call.
      source_lines: where in the Python it comes from.
      runs: how many times it runs per call (its computation's runs).
      flops: its FLOPs per launch from the HLO (`xlafuse.hlo.flops`; None: not countable).
    """

    name: str
    kind: str
    model: str
    predicted_s: float
    measured_s: float
    source_lines: tuple[str, ...] = ()
    runs: int = 1
    flops: int | None = None

    @property
    def ratio(self) -> float | None:
        """predicted / measured (None when nothing was measured)."""
        return self.predicted_s / self.measured_s if self.measured_s else None

    @property
    def error_pct(self) -> float | None:
        """100 x (predicted - measured) / measured: negative where XLA expects it faster."""
        return (
            100.0 * (self.predicted_s - self.measured_s) / self.measured_s
            if self.measured_s
            else None
        )

    @property
    def predicted_flops_per_s(self) -> float | None:
        """The FLOP rate the prediction implies: FLOPs per call over the predicted time (for a
        matmul, to hold against the matmul ceiling); None without a count or a prediction."""
        return implied_rate(self.flops, self.runs, self.predicted_s)

    def to_row(self) -> list[Any]:
        """The compact form a record keeps of every kernel: [name, kind, model, predicted_s,
        measured_s]."""
        return [self.name, self.kind, self.model, self.predicted_s, self.measured_s]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form with the ratio and the error."""
        out = dataclasses.asdict(self)
        out["source_lines"] = list(self.source_lines)
        return {
            **out,
            "ratio": self.ratio,
            "error_pct": self.error_pct,
            "predicted_flops_per_s": self.predicted_flops_per_s,
        }


def implied_rate(flops: int | None, runs: int | None, predicted_s: float) -> float | None:
    """FLOPs per launch x runs per call over the predicted seconds per call (None without a
    count or a prediction)."""
    if not flops or not predicted_s:
        return None
    return flops * (runs or 1) / predicted_s


@dataclasses.dataclass(frozen=True)
class CostModelJoin:
    """The kernels with a prediction and a measurement, and every other kernel with why not.

    Attributes:
      pairs: the kernels with both, in the traced program's order of time (longest first).
      uncovered: (kernel, reason) for every other kernel of the program.
    """

    pairs: tuple[KernelCost, ...]
    uncovered: tuple[tuple[str, str], ...] = ()

    @property
    def kernels(self) -> int:
        """Kernels of the program: paired and not."""
        return len(self.pairs) + len(self.uncovered)

    def reasons(self) -> dict[str, int]:
        """Why kernels have no pair: reason -> how many."""
        counts: dict[str, int] = {}
        for _, reason in self.uncovered:
            counts[reason] = counts.get(reason, 0) + 1
        return counts


def join_costs(
    kernels: Sequence[KernelInfo],
    times: KernelTimes,
    *,
    runs: Mapping[str, int | None] | None = None,
) -> CostModelJoin:
    """Pairs each kernel's prediction with its measured time, by kernel name.

    Args:
      kernels: the kernels of the program whose HLO carries XLA's estimates
        (`FusionReport.kernel_details`).
      times: the traced kernel times of the same program (same kernel names).
      runs: computation name -> runs per call (`xlafuse.hlo.loops.runs_per_call`); None: each
        computation runs once (a program without loops).
    """
    measured = {k.name: k for k in times.kernels}
    pairs, uncovered = [], []
    for kernel in kernels:
        runs_of = 1 if runs is None else runs.get(kernel.computation, 1)
        reason = _no_prediction(kernel, runs_of)
        traced = measured.get(kernel.name)
        if reason is None and (traced is None or not traced.launches_per_call):
            reason = NOT_TRACED
        if reason is not None:
            uncovered.append((kernel.name, reason))
            continue
        predicted_s = kernel.predicted_us * 1e-6 * runs_of
        pairs.append(
            KernelCost(kernel.name, str(kernel.kind), kernel.predicted_model or "", predicted_s,
                       traced.time_s, tuple(traced.source_lines), runs_of, kernel.flops)
        )  # fmt: skip
    pairs.sort(key=lambda p: (-p.measured_s, p.name))
    return CostModelJoin(tuple(pairs), tuple(uncovered))


def _no_prediction(kernel: KernelInfo, runs: int | None) -> str | None:
    """Why a kernel has no prediction per call (None: it has one)."""
    if kernel.opcode not in ("fusion", "fusion-start", "custom-call"):
        return NO_OP
    if kernel.predicted_us is None and kernel.opcode == "custom-call":
        return f"{NO_LIBRARY} ({kernel.sub_kind})" if kernel.sub_kind else NO_LIBRARY
    if kernel.predicted_us is None:
        return NO_ESTIMATE
    return NO_RUNS if runs is None else None


def ranks(values: Sequence[float]) -> np.ndarray:
    """1-based ranks of `values`, ties given the average of the ranks they span."""
    data = np.asarray(values, dtype=np.float64)
    order = np.argsort(data, kind="stable")
    ordered = data[order]
    out = np.empty(len(data), dtype=np.float64)
    start = 0
    while start < len(data):
        end = start
        while end + 1 < len(data) and ordered[end + 1] == ordered[start]:
            end += 1
        out[order[start : end + 1]] = (start + end) / 2 + 1
        start = end + 1
    return out


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rank correlation of two equal-length samples (ties averaged): the Pearson
    correlation of their ranks. None with fewer than two values or a side of one value.

    Raises:
      ValueError: samples of different lengths.
    """
    if len(x) != len(y):
        raise ValueError(f"spearman needs samples of one length, got {len(x)} and {len(y)}")
    if len(x) < 2:
        return None
    rx, ry = ranks(x) - (len(x) + 1) / 2, ranks(y) - (len(y) + 1) / 2
    norm = float(np.sqrt((rx * rx).sum() * (ry * ry).sum()))
    return float((rx * ry).sum() / norm) if norm else None


@dataclasses.dataclass(frozen=True)
class Accuracy:
    """How close the predictions come, over the kernels that have both.

    Attributes:
      kernels: kernels paired.
      median_abs_error_pct: the median of |error| (%).
      p90_abs_error_pct: its 90th percentile (linear interpolation).
      spearman: the rank correlation of predicted and measured (None: fewer than 2 kernels,
        or one side constant).
      median_ratio: the median of predicted / measured.
      predicted_s: the predictions summed (seconds per call).
      measured_s: the measurements summed.
    """

    kernels: int
    median_abs_error_pct: float | None
    p90_abs_error_pct: float | None
    spearman: float | None
    median_ratio: float | None
    predicted_s: float
    measured_s: float


def accuracy(pairs: Sequence[KernelCost]) -> Accuracy:
    """The summary figures of a set of predicted-measured pairs (kernels measured at 0 s are
    left out of the errors and ratios, which they would divide by zero)."""
    timed = [p for p in pairs if p.measured_s > 0]
    errors = np.abs([p.error_pct for p in timed])
    ratios = [p.ratio for p in timed]
    predicted = [p.predicted_s for p in pairs]
    measured = [p.measured_s for p in pairs]
    return Accuracy(
        kernels=len(pairs),
        median_abs_error_pct=float(np.median(errors)) if timed else None,
        p90_abs_error_pct=float(np.percentile(errors, 90)) if timed else None,
        spearman=spearman(predicted, measured),
        median_ratio=float(np.median(ratios)) if timed else None,
        predicted_s=float(sum(predicted)),
        measured_s=float(sum(measured)),
    )


def worst(pairs: Sequence[KernelCost], *, top: int = TOP) -> list[KernelCost]:
    """The largest mispredictions: the most seconds per call between predicted and measured."""
    return sorted(pairs, key=lambda p: (-abs(p.predicted_s - p.measured_s), p.name))[:top]


def by_model(
    pairs: Sequence[KernelCost], estimates: Mapping[str, Sequence[Estimate]]
) -> dict[str, list[KernelCost]]:
    """Every cost model's estimate of the paired kernels, each against the same measurement:
    model -> its pairs (a kernel counted under each model that estimated it; sentinels left
    out), the most kernels first."""
    models: dict[str, list[KernelCost]] = {}
    for p in pairs:
        for e in estimates.get(p.name, ()):
            if not e.is_sentinel:
                cost = dataclasses.replace(
                    p, model=e.model, predicted_s=e.exec_time_us * 1e-6 * p.runs
                )
                models.setdefault(e.model, []).append(cost)
    return dict(sorted(models.items(), key=lambda item: (-len(item[1]), item[0])))


def cost_model_record(
    join: CostModelJoin,
    times: KernelTimes,
    *,
    top: int = TOP,
    estimates: Mapping[str, Sequence[Estimate]] | None = None,
) -> dict[str, Any]:
    """The compact record of a cell (`CellResult.trace.cost_model`): coverage, the summary
    figures, the largest mispredictions and every pair as a row (for plots across cells);
    with every kernel's `estimates`, the figures of each cost model (`by_model`)."""
    figures = dataclasses.asdict(accuracy(join.pairs))
    models: dict[str, int] = {}
    for p in join.pairs:
        models[p.model] = models.get(p.model, 0) + 1
    return {
        "schema": SCHEMA,
        "basis": times.basis,
        "time_s": times.time_s,
        "kernels": join.kernels,
        "paired": len(join.pairs),
        **{k: v for k, v in figures.items() if k != "kernels"},
        "models": models,
        "uncovered": join.reasons(),
        "uncovered_top": [list(u) for u in join.uncovered[:top]],
        "worst": [p.to_dict() for p in worst(join.pairs, top=top)],
        "pairs": [p.to_row() for p in join.pairs],
        "by_model": {
            model: dataclasses.asdict(accuracy(rows))
            for model, rows in by_model(join.pairs, estimates or {}).items()
        },
    }


@dataclasses.dataclass(frozen=True)
class BoundaryCost:
    """A kernel boundary left (`xlafuse.hlo.explain.Boundary`), measured: its two kernels'
    traced seconds per call, and XLA's estimate of the same two kernels where it gave one.

    Attributes:
      producer_kernel_s: the producer kernel's measured seconds per call (None: not traced).
      consumer_kernel_s: the consumer kernel's.
      predicted_s: XLA's estimate of the two kernels (`KernelInfo.predicted_us`), summed;
        None unless both have one.
    """

    producer_kernel_s: float | None
    consumer_kernel_s: float | None
    predicted_s: float | None = None

    @property
    def measured_s(self) -> float | None:
        """The two kernels' measured seconds per call (None unless both were traced)."""
        if self.producer_kernel_s is None or self.consumer_kernel_s is None:
            return None
        return self.producer_kernel_s + self.consumer_kernel_s

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form with `measured_s`."""
        return {**dataclasses.asdict(self), "measured_s": self.measured_s}


def boundary_costs(
    boundaries: Sequence[Any], times: KernelTimes, *, kernels: Sequence[KernelInfo] = ()
) -> tuple[BoundaryCost, ...]:
    """Each boundary's two kernels measured (`times`) and, from `kernels` (the explained
    program's, compiled with the option), XLA's estimate of them; in the boundaries' order."""
    measured = {k.name: k.time_s for k in times.kernels if k.launches_per_call}
    predicted = {k.name: k.predicted_us for k in kernels if k.predicted_us is not None}
    out = []
    for b in boundaries:
        names = (b.producer_kernel, b.consumer_kernel)
        both = all(n in predicted for n in names)
        estimate = sum(predicted[n] for n in names) * 1e-6 if both else None
        out.append(BoundaryCost(measured.get(names[0]), measured.get(names[1]), estimate))
    return tuple(out)


def pairs_of_rows(rows: Sequence[Sequence[Any]]) -> list[KernelCost]:
    """KernelCosts from a record's `pairs` rows ([name, kind, model, predicted_s, measured_s])."""
    return [KernelCost(str(n), str(k), str(m), float(p), float(t)) for n, k, m, p, t in rows]


def accuracy_by(pairs: Sequence[KernelCost], *, field: str = "kind") -> dict[str, Accuracy]:
    """`accuracy` of all the pairs ("all") and of each kernel kind's (or of each value of
    another KernelCost `field`, e.g. "model"), the most kernels first."""
    kinds: dict[str, list[KernelCost]] = {}
    for p in pairs:
        kinds.setdefault(getattr(p, field), []).append(p)
    ordered = sorted(kinds.items(), key=lambda item: (-len(item[1]), item[0]))
    return {"all": accuracy(pairs), **{kind: accuracy(rows) for kind, rows in ordered}}
