"""Every producer-consumer edge of the unoptimized program that stayed a kernel boundary: XLA's
reason (GPU priority-fusion dump), the cost model's estimate, the modeled bytes and the source
lines. A target is a dump folder (before/after HLO and *.priority_fusion_dump.txt) or --workload;
with --measure, the workload is traced and each boundary's two kernels get their measured time
beside XLA's estimate of them."""

from __future__ import annotations

import argparse
import json

from xlafuse.cli import _progress
from xlafuse.cli._checks import add_measure_arguments
from xlafuse.cli._devices import add_workload_arguments, cell_of
from xlafuse.report.format import fit

HELP = "why ops were not fused, and the bytes each boundary costs"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `xlafuse explain`."""
    p.add_argument("folder", nargs="?", help="an --xla_dump_to folder with a priority-fusion dump")
    p.add_argument("--module", help="in the folder, the module whose file name contains this")
    add_workload_arguments(p, what="compile this instead: ")
    p.add_argument("--variant", default="default", help="variant explained (default)")
    p.add_argument(
        "--against", default="no-fusion", help="also list what --variant fused of this (no-fusion)"
    )
    p.add_argument("--kernel", help="show the fusion steps that built this kernel")
    p.add_argument("--top", type=int, default=10, help="boundaries shown (10)")
    p.add_argument("--json", action="store_true", help="print JSON with every boundary")
    add_measure_arguments(
        p,
        "trace the variant and show each boundary's kernels' measured time beside XLA's estimate",
        "with --measure",
    )


def run(args: argparse.Namespace) -> int:
    """Explains the target and prints the text or JSON."""
    # on use, not at the top: `xlafuse --help` imports no library code (see xlafuse.cli)
    from xlafuse.inspect.explain import explain_target, explained_variants
    from xlafuse.report.explain_text import check_top, render_explain

    check_top(args.top)
    if args.workload:
        from xlafuse.cli._devices import check_workload  # on use: it imports JAX

        check_workload(args)
    if args.measure:
        return _measured(args)
    total = len(explained_variants(args.variant, args.against))
    with _progress.steps("explain", total=total) as step:
        report = explain_target(
            folder=args.folder,
            module=args.module,
            variant=args.variant,
            against=args.against,
            on_step=step,
            cell=cell_of(args),
        )
    if args.json:
        out = report.explanation.to_dict()
        out["removed"] = [b.to_dict() for b in report.removed]
        if args.kernel:
            out["history"] = [s.step.to_dict() for s in report.explanation.history(args.kernel)]
        print(json.dumps(out, indent=1))
    else:
        print(fit(render_explain(report, top=args.top, kernel=args.kernel)))
    return 0


def _measured(args: argparse.Namespace) -> int:
    """`--measure`: the workload explained, traced, each boundary with its kernels' times."""
    from xlafuse.cli._checks import at_least_one
    from xlafuse.errors import XlafuseError
    from xlafuse.experiment.explain_measure import explain_measured  # JAX: only --measure
    from xlafuse.inspect.explain import explained_variants
    from xlafuse.report.explain_text import render_explain

    if not args.workload or args.folder:
        raise XlafuseError(
            "--measure needs --workload NAME (a dump folder holds no program to run)"
        )
    at_least_one("--calls", args.calls)
    total = len(explained_variants(args.variant, args.against)) + 1
    with _progress.steps("explain", total=total) as step:
        measured = explain_measured(
            cell_of(args),
            variant=args.variant,
            against=args.against,
            calls=args.calls,
            on_step=step,
        )
    if args.json:
        print(json.dumps(measured.to_dict(), indent=1))
        return 0
    report, basis = measured.report, measured.times.basis
    print(
        fit(
            render_explain(
                report, top=args.top, kernel=args.kernel, costs=measured.costs, basis=basis
            )
        )
    )
    return 0
