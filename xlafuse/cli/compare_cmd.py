"""Compile one workload under several variants, call each once, and tabulate kernels, fusions,
modeled bytes, compile seconds and whether the outputs agree."""

from __future__ import annotations

import json

from xlafuse.cli import _progress
from xlafuse.cli._devices import add_workload_arguments, cell_of, rerun_if_needed
from xlafuse.report.format import fit

HELP = "one workload under several variants, one table"


def add_arguments(p) -> None:
    """The options of `xlafuse compare`."""
    add_workload_arguments(p, positional=True, mesh=True)
    p.add_argument(
        "--variants",
        default="default,no-fusion",
        help="comma-separated variants; the first is the reference (default: default,no-fusion)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args) -> int:
    # on use, not at the top: `xlafuse --help` imports no JAX (see xlafuse.cli)
    from xlafuse.cli._checks import variant_names
    from xlafuse.compile.variants import get as get_variant
    from xlafuse.experiment.compare import compare_workload

    names = variant_names(args.variants)
    for name in names:  # an unknown variant is refused before the workload is built
        get_variant(name)
    if (status := rerun_if_needed(args)) is not None:
        return status
    cell = cell_of(args)
    with _progress.steps("compare", total=1 + len(names)) as step:
        step(f"building {cell.label}")
        workload = cell.build()
        table = compare_workload(workload, variants=names, on_step=step)
    print(json.dumps(table.to_dict(), indent=1) if args.json else fit(str(table)))
    return 0
