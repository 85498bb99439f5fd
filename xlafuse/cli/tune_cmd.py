"""Search for a program faster than XLA's default: the target's knobs x XLA option families,
by coordinate descent (or successive halving) within a time budget; the fastest is re-measured
against the default program in a fresh process and reported as a winner only if that rerun
says `faster` too. With --out, writes tune.jsonl (each trial as it ends: a rerun into the
same folder resumes) and best.toml (`xlafuse run DIR/best.toml` reruns the two); Ctrl-C exits
130 keeping every trial."""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

from xlafuse.cli import _distributed
from xlafuse.cli._devices import add_workload_arguments
from xlafuse.errors import XlafuseError
from xlafuse.kinds import Figure

USAGE_ERROR = 2
INTERRUPTED = 130  # as `xlafuse.cli.main` exits on Ctrl-C
# `tuner.SEARCHES`, the default first (named here: `xlafuse --help` imports no JAX)
SEARCHES = ("descent", "halving", "grid")
# `tuner.FIGURES` (a test holds them equal): `kinds` imports no jax, the tuner would
FIGURES = tuple(Figure)

HELP = "search knobs and XLA options for a faster program, and prove it"
# The proof is a fresh process, which cannot join a jax.distributed run.
UNPROVED_DISTRIBUTED = "not rerun (--distributed: a fresh process cannot join the run)"
UNPROVED_ASKED = "not rerun (--no-rerun)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `xlafuse tune`."""
    add_workload_arguments(p, positional=True, dtype=True, mesh=True)
    p.add_argument(
        "--knob",
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="an override (a program of yours: a keyword) and the values to try, e.g. "
        "unroll=1,2,4,8; repeat for more",
    )
    p.add_argument(
        "--space",
        metavar="FAMILY[,FAMILY]",
        help="XLA option families to search (default: all that apply on this backend; "
        "'none' for the knobs alone): gemm-fusion, autotune, while-loop-double-buffering, "
        "while-loop-unrolling, command-buffers, multi-output-fusion (on a GPU); fusion (on a "
        "CPU)",
    )
    p.add_argument(
        "--budget-s", type=float, default=60.0, help="search time in seconds (60; finite)"
    )
    p.add_argument(
        "--search",
        default=SEARCHES[0],
        metavar="{" + ",".join(SEARCHES) + "}",
        help="descent (default): coordinate descent within the budget, one knob or family at a "
        "time, with the others at the best so far, then the fastest few measured longer: "
        "compiles a few candidates per knob and family, not the whole space; halving: "
        "successive halving within the budget (compiles every candidate); grid: every "
        "candidate measured alike, no budget (to judge a search against)",
    )
    p.add_argument(
        "--figure",
        choices=FIGURES,
        help="the time tuned for: latency (one synchronized call) or pipelined (calls back to "
        "back, as a loop of them runs); default: pipelined for a train step and on a CPU, "
        "latency for a forward call on a GPU",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="write tune.jsonl (each trial as it ends) and best.toml here; a tune of the same "
        "target and settings into it resumes",
    )
    p.add_argument(
        "--no-rerun", action="store_true", help="skip the fresh-process proof of the winner"
    )


def run(args: argparse.Namespace) -> int:
    """`xlafuse tune`: exit 0, 2 on bad input, 130 on an interrupt (`_interrupted`)."""
    try:
        if args.workload.endswith(".toml"):
            return run_config(args.workload, args.argv, args=args)
        return _run(args)
    except KeyboardInterrupt:
        _interrupted()


def _run(args: argparse.Namespace) -> int:
    # on use, not at the top: `xlafuse --help` imports no JAX (see xlafuse.cli)
    import jax

    from xlafuse.cli._devices import cell_of, rerun_if_needed
    from xlafuse.experiment.tune.evaluate import Target
    from xlafuse.experiment.tune.space import (
        IMPLEMENTATION,
        families_for,
        parse_knob,
        restricted,
        typed_knobs,
    )
    from xlafuse.experiment.tune.tuner import knob_defaults, tune

    check_budget(args.budget_s)
    check_search(args.search)
    check_out(args.out)
    texts = dict(parse_knob(k) for k in args.knob)
    if (status := rerun_if_needed(args)) is not None:  # N host devices: in a child
        return status
    cell = cell_of(args)
    clash = sorted(set(texts) & set(cell.overrides))
    if clash:
        raise XlafuseError(f"{', '.join(clash)} given both as --knob and --overrides: pick one")
    settings = {"size": cell.size, "mode": cell.mode, "dtype": cell.dtype}
    if cell.devices > 1:
        settings.update(devices=cell.devices, parallelism=cell.parallelism)
    settings = {k: v for k, v in settings.items() if v not in (None, "custom")}
    target = Target(cell.name, settings, dict(cell.overrides), args.figure)
    values = {name: tuple(map(override_value, given)) for name, given in texts.items()}
    knobs = typed_knobs(values, knob_defaults(target), texts=texts)
    spaces = None if args.space is None else [s for s in args.space.split(",") if s.strip()]
    families = [] if spaces == ["none"] else families_for(jax.default_backend(), names=spaces)
    if any(f.name == IMPLEMENTATION for f in families):  # the target's, that run here
        families = restricted(families, target.implementations())
    tune(
        target,
        knobs,
        families,
        args.budget_s,
        search=args.search,
        imports=_resolved(args.imports or ()),
        **_writes_and_proof(args, args.out, not args.no_rerun),
    )
    return 0


def override_value(text: str) -> Any:
    """A knob's value, read as an `--overrides` value is (`parse_overrides`: the one parser of
    them): an int, a float, true/false, else the string."""
    from xlafuse.cli._devices import parse_overrides

    return parse_overrides([f"knob={text}"])["knob"]


def _resolved(imports, base: Path | None = None) -> tuple[str, ...]:
    """`--import`s (a table's `imports`, relative to its config's folder) as best.toml needs
    them: files absolute, modules as named."""
    from xlafuse.models import user

    return tuple(
        str((Path(base or ".") / i).resolve()) if user.is_file_target(i) else i for i in imports
    )


def check_budget(budget_s: float) -> None:
    """A budget is a finite number of seconds above 0 (`inf` would never end a search, and
    is not JSON).

    Raises:
      XlafuseError: anything else.
    """
    if not (math.isfinite(budget_s) and budget_s > 0):
        raise XlafuseError(f"--budget-s {budget_s:g}: need a finite number of seconds above 0")


def check_out(out: str | None) -> None:
    """The output folder, created and checked writable before anything compiles.

    Raises:
      XlafuseError: a file, a path through a file, a folder that cannot be written.
    """
    if out is not None:
        from xlafuse.folders import writable_folder

        writable_folder(out, "output folder")


def _interrupted() -> NoReturn:
    """Ends the process at once with 130, after "xlafuse: interrupted".

    What the tune measured is on disk already (each line of tune.jsonl fsynced as it was
    written, best.toml replaced whole) and the folder's lock goes with the process. The
    interpreter is not shut down: an interrupt can land while XLA compiles on a thread of its
    own, and tearing the interpreter down under that thread crashed it (SIGSEGV, exit 139,
    in jaxlib's module teardown or the compile thread itself).
    """
    print("xlafuse: interrupted", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(INTERRUPTED)


def run_config(path: str, argv: list[str], *, args: argparse.Namespace | None = None) -> int:
    """`xlafuse tune CONFIG.toml` and `xlafuse run CONFIG.toml` of a config with a `[tune]`
    table (`xlafuse.experiment.tune.table`): the search it describes, into its output folder
    (`--out` replaces it). Options of the command line that the table also sets are refused.
    An interrupt exits 130 (`_interrupted`)."""
    try:
        return _run_config(path, argv, args)
    except KeyboardInterrupt:
        _interrupted()


def _run_config(path: str, argv: list[str], args: argparse.Namespace | None = None) -> int:
    import jax

    from xlafuse.cli._devices import rerun_with_host_devices
    from xlafuse.compiler.devices import needs_host_devices
    from xlafuse.experiment.tune.table import load_tune_table
    from xlafuse.experiment.tune.tuner import tune

    given = [f"--{k.replace('_', '-')}" for k in _TABLE_OPTIONS if _given(args, k)]
    if given:
        raise XlafuseError(
            f"{', '.join(given)}: not for a config with a [tune] table ({path}): the table "
            "decides the target, its knobs, space and budget; --out may replace its output"
        )
    distributed = args is not None and _distributed.start(args)  # before JAX's backend
    try:
        table = load_tune_table(path, jax.default_backend())
    except XlafuseError as err:  # every problem on its own line (the CLI keeps only the first)
        command = getattr(args, "command", None) or "tune"
        print(f"xlafuse {command}: error: {err}", file=sys.stderr)
        return USAGE_ERROR
    out = getattr(args, "out", None) or table.output
    check_out(out)
    devices = table.target.settings.get("devices", 1)
    if distributed:
        from xlafuse.distributed.runtime import check_spans_processes

        check_spans_processes(devices, f"the [tune] table's devices = {devices}")
    elif needs_host_devices(devices):
        return rerun_with_host_devices(argv, devices)
    backend = jax.default_backend()
    families, skipped = table.option_families(backend)
    if skipped:
        print(f"tune: {', '.join(skipped)}: not on this {backend}, left out of the space")
    tune(
        table.target,
        table.knobs,
        families,
        table.budget_s,
        search=table.search,
        imports=_resolved(table.imports, Path(path).parent),
        **_writes_and_proof(
            args, out, table.rerun, why_not=f"not rerun ([tune] rerun = false in {path})"
        ),
    )
    return 0


def check_search(name: str) -> None:
    """An unknown --search is one line, as a [tune] table's is.

    Raises:
      UnknownNameError: not one of `SEARCHES`.
    """
    from xlafuse.errors import UnknownNameError, did_you_mean  # no JAX

    if name not in SEARCHES:
        raise UnknownNameError(
            f"--search {name!r}{did_you_mean(name, SEARCHES)}; accepted: {', '.join(SEARCHES)}"
        )


def _writes_and_proof(
    args: argparse.Namespace, out, prove: bool, *, why_not: str = UNPROVED_ASKED
) -> dict:
    """`tune`'s out, prove and unproved: under --distributed process 0 alone writes, and no
    process proves (the proof is a fresh process, which cannot join the run); `why_not`: what
    the conclusion says where the proof was not asked for (`--no-rerun`, a table's
    `rerun = false`)."""
    layout = getattr(args, "layout", None)
    several = layout is not None and layout.distributed
    return {
        "out": out if layout is None or layout.writer else None,
        "prove": prove and not several,
        "unproved": UNPROVED_DISTRIBUTED if several else ("" if prove else why_not),
    }


# What a [tune] table decides (dest -> its default on the command line).
_TABLE_OPTIONS = {
    "knob": [], "space": None, "budget_s": 60.0, "search": SEARCHES[0], "no_rerun": False,
    "figure": None,
    "size": None, "mode": None, "dtype": None, "overrides": None, "devices": 1,
    "parallelism": "data", "only": None, "variants": None, "fresh": False,
}  # fmt: skip


def _given(args: argparse.Namespace, dest: str) -> bool:
    return args is not None and getattr(args, dest, _TABLE_OPTIONS[dest]) != _TABLE_OPTIONS[dest]
