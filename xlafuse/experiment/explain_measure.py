"""`xlafuse explain --workload W --measure`: each kernel boundary left, with what it costs, measured,
beside XLA's estimate (issue 28).

The boundaries come from `xlafuse.inspect.explain.explain_target` (on the GPU its compile also
writes XLA's priority-fusion dump and, here, each fusion's estimate: the option
`xla_gpu_collect_cost_model_stats`). The variant's program is then compiled on the one compile
path and traced (`xlafuse.measurement.kernel_diff.trace_kernel_times`), and each boundary gets its
two kernels' traced seconds per call beside XLA's estimate of the same two kernels
(`xlafuse.measurement.costmodel.boundary_costs`), while the dump's `us_fused` / `us_unfused` say what
XLA expected of fusing them. Kernels are matched by name between the two compiles. On a CPU the
times are host thunks and XLA gives no estimate.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from xlafuse.compiler.jit import compile_workload
from xlafuse.compiler.variants import get as get_variant
from xlafuse.hlo import analyze_hlo
from xlafuse.inspect.explain import ExplainReport, explain_target
from xlafuse.measurement.costmodel import BoundaryCost, boundary_costs
from xlafuse.measurement.kernel_diff import trace_kernel_times
from xlafuse.measurement.kernels import KernelTimes
from xlafuse.models.names import Cell


@dataclasses.dataclass(frozen=True)
class MeasuredExplain:
    """An explanation with each boundary measured.

    Attributes:
      report: what `explain_target` found.
      times: the variant's traced kernel times.
      costs: one per boundary of `report.explanation.boundaries`, in their order.
    """

    report: ExplainReport
    times: KernelTimes
    costs: tuple[BoundaryCost, ...]

    def to_dict(self) -> dict[str, Any]:
        """The explanation's JSON with each boundary's `measured` and the traced totals."""
        out = self.report.explanation.to_dict()
        for boundary, cost in zip(out["boundaries"], self.costs, strict=True):
            boundary["measured"] = cost.to_dict()
        out["removed"] = [b.to_dict() for b in self.report.removed]
        out["kernel_times"] = self.times.summary()
        return out


def explain_measured(
    cell: Cell,
    *,
    variant: str = "default",
    against: str | None = "no-fusion",
    calls: int = 10,
    on_step: Callable[[str], None] | None = None,
) -> MeasuredExplain:
    """Explains a cell's workload under `variant` and measures each boundary's kernels.

    Args:
      cell: the workload cell.
      variant: the variant explained and traced.
      against: as for `explain_target`.
      calls: calls traced.
      on_step: called with a line before each compile and before the trace.

    Raises:
      UnknownNameError: an unknown workload, size, mode or variant.
      XlafuseError: a trace without events.
    """
    work = cell.build()
    report = explain_target(
        cell=cell, variant=variant, against=against, on_step=on_step, workload=work, estimates=True
    )
    if on_step is not None:
        on_step(f"tracing {cell.label} @ {variant}")
    compiled = compile_workload(work, get_variant(variant))
    with tempfile.TemporaryDirectory(prefix="xlafuse-explain-") as folder:
        times = trace_kernel_times(compiled, work, calls, Path(folder))
    kernels = analyze_hlo(report.optimized_text).kernel_details
    costs = boundary_costs(report.explanation.boundaries, times, kernels=kernels)
    return MeasuredExplain(report, times, costs)
