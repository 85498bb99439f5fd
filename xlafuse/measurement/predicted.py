"""XLA's prediction of a traced GPU cell's program: a twin compile that writes it (issue 28).

The cell's program is compiled, timed and traced as it always is. Its prediction comes from a
second compile of the same lowering under the same variant, with two more per-compile options:
`xla_gpu_collect_cost_model_stats=True` (each fusion's estimate in its backend_config, see
`xlafuse.hlo.estimates`) and XLA's priority-fusion dump (the estimate behind each fusion
decision, `xlafuse.hlo.priority_dump`). Why a twin and not the timed compile: the option runs the
cost models over every fusion after optimization, which adds to the compile seconds the record
publishes, and its estimates change the optimized HLO's text (the backend_configs) that the
record's figures and diffs are read from; the twin leaves the measured program as it was. The
option is meant to change no kernel: `twin.same_kernels` says whether the twin's kernels are
the traced program's, name by name (the GPU test checks kernels and device time with and
without it), and the join pairs kernels by name only.

Variants with process flags are compiled in a child process: no twin is made for them.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

from xlafuse.compiler.jit import compile_lowered, lower_workload
from xlafuse.hlo.estimates import COST_MODEL_OPTION, Estimate, estimates
from xlafuse.hlo.fusion import FusionReport, analyze_module
from xlafuse.hlo.loops import runs_per_call
from xlafuse.hlo.parse import parse_hlo
from xlafuse.hlo.priority_dump import DUMP_OPTIONS, DUMP_SUFFIX, PriorityDump, read_priority_dump


@dataclasses.dataclass(frozen=True)
class Twin:
    """The twin compile's optimized HLO, its kernels with XLA's estimates, and its dump.

    Attributes:
      hlo_text: the optimized HLO, estimates in its backend_configs.
      report: its FusionReport (`KernelInfo.predicted_us` filled).
      runs: computation -> runs per call (`xlafuse.hlo.loops.runs_per_call`).
      dump: XLA's priority-fusion dump of the compile (None if it wrote none).
      same_kernels: whether its kernel names are those of the traced program.
      estimates: kernel -> every cost model's estimate of it, in XLA's order.
    """

    hlo_text: str
    report: FusionReport
    runs: dict[str, int | None]
    dump: PriorityDump | None = None
    same_kernels: bool = True
    estimates: dict[str, tuple[Estimate, ...]] = dataclasses.field(default_factory=dict)


def compile_twin(workload: Any, variant: Any, traced_report: FusionReport) -> Twin:
    """Compiles the workload again under `variant` with the cost model's stats and the dump.

    Args:
      workload: the built Workload (lowered afresh, as the cell was).
      variant: the resolved in-process variant the cell was compiled under.
      traced_report: the traced program's FusionReport (its kernel names are compared).

    Raises:
      ValueError: XLA rejected the options (as `compile_lowered`).
    """
    with tempfile.TemporaryDirectory(prefix="xlafuse-costmodel-") as folder:
        options = {
            **variant.compiler_options(backend="gpu"),
            COST_MODEL_OPTION: True,
            **DUMP_OPTIONS,
            "xla_dump_to": folder,
        }
        text = compile_lowered(lower_workload(workload), variant, options).as_text()
        found = sorted(Path(folder).glob(f"*{DUMP_SUFFIX}"))
        dump = read_priority_dump(found[-1]) if found else None
    return twin_of(text, traced_report=traced_report, dump=dump)


def twin_of(
    text: str, *, traced_report: FusionReport | None = None, dump: PriorityDump | None = None
) -> Twin:
    """A Twin from an optimized HLO text carrying estimates (a recording, or `compile_twin`)."""
    module = parse_hlo(text, source="cost model twin")
    report = analyze_module(module)
    names = [k.name for k in report.kernel_details]
    same = traced_report is None or names == [k.name for k in traced_report.kernel_details]
    estimated = {k.name for k in report.kernel_details if k.predicted_us is not None}
    every = {
        i.name: estimates(i.attributes.get("backend_config"))
        for c in module.computations
        for i in c.instructions
        if i.name in estimated
    }
    return Twin(text, report, runs_per_call(module), dump, same, every)
