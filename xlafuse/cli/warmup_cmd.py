"""Compile every cell (workload x variant) of an experiment config into a persistent
compilation-cache folder, for later processes to load instead of compiling."""

from __future__ import annotations

import argparse
import json

from xlafuse.cli import _progress
from xlafuse.cli._devices import add_import_argument

HELP = "compile a config's cells into a compilation-cache folder"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `xlafuse warmup`."""
    p.add_argument("config", help="an experiment config (.toml)")
    p.add_argument("--cache", required=True, metavar="DIR", help="the cache folder to fill")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_import_argument(p)


def run(args: argparse.Namespace) -> int:
    # on use, not at the top: `xlafuse --help` imports no JAX (see xlafuse.cli)
    from xlafuse.cli._devices import import_user_code, rerun_with_host_devices
    from xlafuse.compiler.devices import needs_host_devices
    from xlafuse.experiment.config import check_config_file, load_config
    from xlafuse.experiment.warmup import warmup_cells, warmup_config

    check_config_file(args.config)
    import_user_code(args)
    config = load_config(args.config)
    # Sharded cells on a CPU: warmed in a child with as many host devices as `run` gives them,
    # so the cache holds the sharded programs the run compiles.
    devices = max((w.devices for w in config.workloads), default=1)
    if needs_host_devices(devices):
        return rerun_with_host_devices(args.argv, devices)
    with _progress.steps("warmup", total=warmup_cells(config)) as step:
        summary = warmup_config(config, args.cache, on_step=step)
    if args.json:
        print(json.dumps(summary.to_dict(), indent=1))
        return 0
    for label in summary.compiled:
        print(f"{'cache hit' if label in summary.cache_hits else 'compiled '} {label}")
    print(
        f"{len(summary.cache_hits)} of {len(summary.compiled)} cells were cache hits; "
        f"{summary.entries_written} new cache entries in {summary.cache_dir} "
        f"({summary.entries_after} in all; {summary.compile_s:.2f} s compiling)"
    )
    return 0
