"""Start fresh processes that import, build, compile and call one workload: with an empty and a warm
compilation cache, and loading a jax.export artifact."""

from __future__ import annotations

import argparse
import json

from xlafuse.cli import _progress
from xlafuse.cli._devices import add_workload_arguments, cell_of
from xlafuse.report.format import fit

HELP = "time a workload's cold start in fresh processes"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `xlafuse coldstart`."""
    add_workload_arguments(p, required=True, dtype=True)
    p.add_argument("--variant", default="default", help="a variant name or a+b (default: default)")
    p.add_argument(
        "--cache",
        default=None,
        metavar="DIR",
        help="cache folder to fill and keep; if it already holds entries (xlafuse warmup), "
        "only warm starts are measured",
    )
    p.add_argument("--calls", type=int, default=10, help="steady-state calls (default: 10)")
    p.add_argument("--no-aot", action="store_true", help="skip the jax.export round trip")
    p.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    # on use, not at the top: `xlafuse --help` imports no JAX (see xlafuse.cli)
    from xlafuse.measurement import coldstart
    from xlafuse.report.coldstart import coldstart_text

    _check(args)
    cell = cell_of(args)
    label = f"{cell.label} @ {args.variant}"
    warm = args.cache is not None and coldstart.cache_entry_count(args.cache) > 0
    with _progress.steps("coldstart", total=(1 if warm else 2) if args.no_aot else 3) as step:
        result = coldstart.measure_cold_start(
            cell,
            variant=args.variant,
            cache_dir=args.cache,
            steady_calls=args.calls,
            aot=not args.no_aot,
            on_step=lambda line: step(f"{label}: {line}"),
        )
    print(json.dumps(result.to_dict(), indent=1) if args.json else fit(coldstart_text(result)))
    return 0


def _check(args: argparse.Namespace) -> None:
    """Fail fast, with the accepted names and ranges, before any child process starts."""
    from xlafuse.cli._checks import at_least_one, check_implementations
    from xlafuse.cli._devices import check_workload
    from xlafuse.compiler import variants  # on use, as in `run`

    at_least_one("--calls", args.calls)
    variant = variants.get(args.variant)
    check_workload(args)
    check_implementations(cell_of(args), [variant])  # impl=NAME: here, not in the child
