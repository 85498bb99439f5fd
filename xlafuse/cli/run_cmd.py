"""Run every cell of a TOML experiment config, appending one JSON line per cell; a re-run skips
cells already done. Exit 0: all cells ok; 1: some cells errored; 2: the config is invalid."""

from __future__ import annotations

import argparse
import contextlib
import sys
import warnings
from collections.abc import Iterator

from xlafuse.cli import _distributed
from xlafuse.cli._checks import comma_separated
from xlafuse.cli._devices import add_import_argument
from xlafuse.errors import XlafuseError

SOME_CELLS_FAILED = 1
CONFIG_ERROR = 2


HELP = "run a config's workloads x variants; write the reports"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `xlafuse run`."""
    parser.add_argument("config", help="the experiment config (.toml)")
    parser.add_argument("--out", help="results folder (default: the config's experiment.output)")
    parser.add_argument(
        "--only", nargs="+", metavar="WORKLOAD", help="run only these workloads (names or labels)"
    )
    parser.add_argument(
        "--variants",
        type=comma_separated,
        help="comma-separated variants to run (the reference stays)",
    )
    parser.add_argument("--fresh", action="store_true", help="move old results aside, start over")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_import_argument(parser)
    _distributed.add_distributed_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run the config; exit status 0 all ok, 1 some cells errored, 2 invalid config."""
    # on use, not at the top: `xlafuse --help` imports no JAX (see xlafuse.cli)
    from xlafuse.cli._checks import variant_names
    from xlafuse.cli._devices import import_user_code, rerun_with_host_devices
    from xlafuse.compiler.devices import needs_host_devices
    from xlafuse.experiment.config import check_config_file, load_config
    from xlafuse.experiment.runner import run_experiment
    from xlafuse.experiment.tune.table import has_tune_table

    distributed = _distributed.start(args)  # first: before JAX starts its backend
    variant_names(args.variants)
    check_config_file(args.config)
    if has_tune_table(args.config):  # a tuning written down: `xlafuse tune CONFIG` runs it
        from xlafuse.cli.tune_cmd import run_config

        return run_config(args.config, args.argv, args=args)
    import_user_code(args)
    try:
        config = load_config(args.config)
    except XlafuseError as err:
        # Every problem on its own line (the dispatcher would keep only the first line).
        if not _distributed.quiet(args):
            print(f"xlafuse run: error: {err}", file=sys.stderr)
        return CONFIG_ERROR

    # Sharded cells on a CPU: the whole run goes to a child with enough host devices (XLA
    # reads the count once, at backend start); one-device cells run there on device 0.
    # Under --distributed the devices are those of every process, as the launcher gave them.
    devices = max((w.devices for w in config.workloads), default=1)
    if not distributed and needs_host_devices(devices):
        return rerun_with_host_devices(args.argv, devices)
    with skipped_lines_said():
        records = run_experiment(
            config,
            out=args.out,
            only=args.only,
            variants=args.variants,
            fresh=args.fresh,
            progress=not args.no_progress,
        )
    failed = [r for r in records if not r.ok]
    if failed:
        if not _distributed.quiet(args):
            print(f"{len(failed)} of {len(records)} cells errored", file=sys.stderr)
        return SOME_CELLS_FAILED
    return 0


@contextlib.contextmanager
def skipped_lines_said() -> Iterator[None]:
    """Each line of a results file that is skipped (`SkippedLineWarning`), said as one line on
    stderr, `xlafuse: FILE:LINE: skipping a record that is ...`, not as a Python warning; other
    warnings as Python shows them."""
    from xlafuse.results.records import SkippedLineWarning  # on use, as in `run`

    with warnings.catch_warnings():
        warnings.simplefilter("always", SkippedLineWarning)
        shown = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None) -> None:
            if not issubclass(category, SkippedLineWarning):
                shown(message, category, filename, lineno, file, line)
            else:
                print(f"xlafuse: {message}", file=sys.stderr)

        warnings.showwarning = show
        yield
