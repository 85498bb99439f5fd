"""Compile one workload under several variants, call each once, and tabulate kernels, fusions,
modeled bytes, compile seconds and whether the outputs agree.

The workload is given as WORKLOAD or as --workload W, as the other commands take it."""

from __future__ import annotations

import argparse
import json

from xlafuse.cli import _progress
from xlafuse.cli._devices import WORKLOAD_HELP, add_workload_arguments, cell_of, rerun_if_needed
from xlafuse.errors import XlafuseError
from xlafuse.report.format import fit

HELP = "one workload under several variants, one table"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `xlafuse compare`."""
    p.add_argument("named", nargs="?", metavar="WORKLOAD", help=f"{WORKLOAD_HELP}; or --workload")
    add_workload_arguments(p, mesh=True)
    p.add_argument(
        "--variants",
        default="default,no-fusion",
        help="comma-separated variants; the first is the reference (default: default,no-fusion)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    # on use, not at the top: `xlafuse --help` imports no JAX (see xlafuse.cli)
    from xlafuse.cli._checks import check_implementations, variant_names
    from xlafuse.compiler.variants import get as get_variant
    from xlafuse.experiment.compare import compare_workload

    args.workload = _workload(args.named, args.workload)
    names = variant_names(args.variants)
    # an unknown variant, or implementation, is refused before the workload is built
    resolved = [get_variant(name) for name in names]
    if (status := rerun_if_needed(args)) is not None:
        return status
    cell = cell_of(args)
    check_implementations(cell, resolved)
    with _progress.steps("compare", total=1 + len(names)) as step:
        step(f"building {cell.label}")
        workload = cell.build()
        table = compare_workload(workload, variants=names, on_step=step, cell=cell)
    print(json.dumps(table.to_dict(), indent=1) if args.json else fit(str(table)))
    return 0


def _workload(named: str | None, option: str | None) -> str:
    """The workload, given as WORKLOAD or as --workload (once).

    Raises:
      XlafuseError: neither, or both naming different workloads.
    """
    if named and option and named != option:
        raise XlafuseError(
            f"WORKLOAD {named!r} and --workload {option!r} name two workloads; give one"
        )
    if not (named or option):
        raise XlafuseError(
            "no workload: give WORKLOAD or --workload W (a zoo workload, `xlafuse workloads`, "
            "or FILE.py:FUNCTION)"
        )
    return named or option
