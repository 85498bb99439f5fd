"""Diff two optimized HLO files, or one workload under two variants: every kernel of A and B in
exactly one group; the groups' byte differences add up to the total."""

from __future__ import annotations

import argparse
import json

from xlafuse.cli import _progress
from xlafuse.cli._checks import add_measure_arguments, comma_separated
from xlafuse.cli._devices import add_workload_arguments, cell_of, rerun_if_needed
from xlafuse.errors import XlafuseError
from xlafuse.report.format import fit

HELP = "what two compilations fused differently"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `xlafuse diff`."""
    p.add_argument("a", nargs="?", help="first HLO text file")
    p.add_argument("b", nargs="?", help="second HLO text file")
    p.add_argument(
        "--reference",
        help="the program's unoptimized HLO (default: the *.before_optimizations.txt beside A)",
    )
    add_workload_arguments(p, mesh=True, what="compile this under --variants instead: ")
    p.add_argument("--variants", default="default,no-fusion", help="V1,V2 (default,no-fusion)")
    p.add_argument("--top", type=int, default=10, help="groups shown (10)")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_measure_arguments(p, "trace both variants and time every kernel group", "per variant")
    p.add_argument("--traces", metavar="DIR", help="keep the traces in DIR/<variant>/")


def run(args: argparse.Namespace) -> int:
    """Diffs A and B and prints the text or JSON."""
    # on use, not at the top: `xlafuse --help` imports no library code (see xlafuse.cli)
    from xlafuse.inspect.explain import diff_targets
    from xlafuse.report.explain_text import check_top, render_diff

    check_top(args.top)
    if args.workload and (status := rerun_if_needed(args)) is not None:
        return status
    variants = tuple(comma_separated(args.variants))
    if args.measure:
        return _measured(args, variants)
    with _progress.steps("diff", total=2) as step:
        diff = diff_targets(
            a=args.a,
            b=args.b,
            variants=variants,
            reference=args.reference,
            on_step=step,
            cell=cell_of(args),
        )
    print(
        json.dumps(diff.to_dict(), indent=1) if args.json else fit(render_diff(diff, top=args.top))
    )
    return 0


def _measured(args: argparse.Namespace, variants: tuple[str, ...]) -> int:
    """`--measure`: both variants compiled, traced and joined; groups by measured time saved."""
    from xlafuse.cli._checks import at_least_one
    from xlafuse.folders import writable_folder
    from xlafuse.measurement.kernel_diff import (
        measure_workload_diff,  # JAX: only --measure needs it
    )
    from xlafuse.report.explain_text import render_diff
    from xlafuse.report.kernels import render_measured_diff

    if not args.workload or args.a or args.b:
        raise XlafuseError("--measure needs --workload NAME (HLO files cannot be traced)")
    if len(variants) != 2:
        raise XlafuseError(f"--variants needs two names like default,no-fusion; got {variants}")
    at_least_one("--calls", args.calls)
    if args.traces is not None:
        writable_folder(args.traces, "--traces folder")
    cell = cell_of(args)
    with _progress.steps("diff", total=1) as step:
        step(f"compiling and tracing {cell.label} @ {' and @ '.join(variants)}")
        measured = measure_workload_diff(cell, variants, calls=args.calls, trace_dir=args.traces)
    if args.json:
        print(json.dumps(measured.to_dict(), indent=1))
    else:
        print(fit(render_diff(measured.diff, top=args.top)))
        print()
        print(fit(render_measured_diff(measured, top=args.top)))
    return 0
