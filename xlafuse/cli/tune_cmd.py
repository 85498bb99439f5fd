"""Search for a program faster than XLA's default: the target's knobs x XLA option families,
by coordinate descent (or successive halving) within a time budget; the fastest is re-measured
against the default program in a fresh process and reported as a winner only if that rerun
says `faster` too. Writes tune.jsonl (every trial) and best.toml (`xlafuse run best.toml`
reruns the two)."""

from __future__ import annotations

import sys

from xlafuse.cli import _distributed
from xlafuse.cli._devices import add_workload_arguments

USAGE_ERROR = 2
# `tuner.SEARCHES`, the default first (named here: `xlafuse --help` imports no JAX)
SEARCHES = ("descent", "halving", "grid")
# `tuner.FIGURES` (a test holds them equal), written here: importing it would import jax to
# read the command line
FIGURES = ("latency", "pipelined")

HELP = "search knobs and XLA options for a faster program, and prove it"
# The proof is a fresh process, which cannot join a jax.distributed run.
UNPROVED_DISTRIBUTED = "not rerun (--distributed: a fresh process cannot join the run)"


def add_arguments(p) -> None:
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
    p.add_argument("--budget-s", type=float, default=60.0, help="search time in seconds (60)")
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
    p.add_argument("--out", metavar="DIR", help="write tune.jsonl and best.toml here")
    p.add_argument(
        "--no-rerun", action="store_true", help="skip the fresh-process proof of the winner"
    )


def run(args) -> int:
    if args.workload.endswith(".toml"):
        return run_config(args.workload, args.argv, args)
    # on use, not at the top: `xlafuse --help` imports no JAX (see xlafuse.cli)
    import jax

    from xlafuse.cli._devices import cell_of, rerun_if_needed
    from xlafuse.errors import XlafuseError
    from xlafuse.experiment.tune.evaluate import Target
    from xlafuse.experiment.tune.space import families_for, parse_knob
    from xlafuse.experiment.tune.tuner import tune

    if not args.budget_s > 0:
        raise XlafuseError(f"--budget-s {args.budget_s:g}: need a number of seconds above 0")
    check_search(args.search)
    knobs = dict(parse_knob(k) for k in args.knob)
    if (status := rerun_if_needed(args)) is not None:  # N host devices: in a child
        return status
    cell = cell_of(args)
    clash = sorted(set(knobs) & set(cell.overrides))
    if clash:
        raise XlafuseError(f"{', '.join(clash)} given both as --knob and --overrides: pick one")
    settings = {"size": cell.size, "mode": cell.mode, "dtype": cell.dtype}
    if cell.devices > 1:
        settings.update(devices=cell.devices, parallelism=cell.parallelism)
    settings = {k: v for k, v in settings.items() if v not in (None, "custom")}
    spaces = None if args.space is None else [s for s in args.space.split(",") if s.strip()]
    families = [] if spaces == ["none"] else families_for(jax.default_backend(), spaces)
    tune(
        Target(cell.name, settings, dict(cell.overrides), args.figure),
        knobs,
        families,
        args.budget_s,
        search=args.search,
        **_writes_and_proof(args, args.out, not args.no_rerun),
    )
    return 0


def run_config(path: str, argv, args=None) -> int:
    """`xlafuse tune CONFIG.toml` and `xlafuse run CONFIG.toml` of a config with a `[tune]`
    table (`xlafuse.experiment.tune.table`): the search it describes, into its output folder
    (`--out` replaces it). Options of the command line that the table also sets are refused."""
    import jax

    from xlafuse.cli._devices import rerun_with_host_devices
    from xlafuse.compile.devices import needs_host_devices
    from xlafuse.errors import XlafuseError
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
        **_writes_and_proof(args, getattr(args, "out", None) or table.output, table.rerun),
    )
    return 0


def check_search(name: str) -> None:
    """An unknown --search is one line, as a [tune] table's is.

    Raises:
      UnknownNameError: not one of `SEARCHES`.
    """
    from xlafuse.errors import UnknownNameError, did_you_mean

    if name not in SEARCHES:
        raise UnknownNameError(
            f"--search {name!r}{did_you_mean(name, SEARCHES)}; accepted: {', '.join(SEARCHES)}"
        )


def _writes_and_proof(args, out, prove: bool) -> dict:
    """`tune`'s out, prove and unproved: under --distributed process 0 alone writes, and no
    process proves (the proof is a fresh process, which cannot join the run)."""
    layout = getattr(args, "layout", None)
    several = layout is not None and layout.distributed
    return {
        "out": out if layout is None or layout.writer else None,
        "prove": prove and not several,
        "unproved": UNPROVED_DISTRIBUTED if several else "",
    }


# What a [tune] table decides (dest -> its default on the command line).
_TABLE_OPTIONS = {
    "knob": [], "space": None, "budget_s": 60.0, "search": SEARCHES[0], "no_rerun": False,
    "figure": None,
    "size": None, "mode": None, "dtype": None, "overrides": None, "devices": 1,
    "parallelism": "data", "only": None, "variants": None, "fresh": False,
}  # fmt: skip


def _given(args, dest: str) -> bool:
    return args is not None and getattr(args, dest, _TABLE_OPTIONS[dest]) != _TABLE_OPTIONS[dest]
