"""Search for a program faster than XLA's default: the target's knobs x XLA option families,
by successive halving within a time budget; the fastest is re-measured against the default
program in a fresh process and reported as a winner only if that rerun says `faster` too.
Writes tune.jsonl (every trial) and best.toml (`xlafuse run best.toml` reruns the two)."""

from __future__ import annotations

from xlafuse.cli._devices import add_workload_arguments

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
        "while-loop-unrolling, command-buffers, multi-output-fusion (all on a GPU)",
    )
    p.add_argument("--budget-s", type=float, default=60.0, help="search time in seconds (60)")
    p.add_argument("--out", metavar="DIR", help="write tune.jsonl and best.toml here")
    p.add_argument(
        "--no-rerun", action="store_true", help="skip the fresh-process proof of the winner"
    )


def run(args) -> int:
    # on use, not at the top: `xlafuse --help` imports no JAX (see xlafuse.cli)
    import jax

    from xlafuse.cli._devices import rerun_if_needed, workload_options
    from xlafuse.errors import XlafuseError
    from xlafuse.experiment.tune.evaluate import Target
    from xlafuse.experiment.tune.space import families_for, parse_knob
    from xlafuse.experiment.tune.tuner import tune

    if not args.budget_s > 0:
        raise XlafuseError(f"--budget-s {args.budget_s:g}: need a number of seconds above 0")
    knobs = dict(parse_knob(k) for k in args.knob)
    if (status := rerun_if_needed(args)) is not None:  # N host devices: in a child
        return status
    options = workload_options(args)
    overrides = options.pop("overrides")
    clash = sorted(set(knobs) & set(overrides))
    if clash:
        raise XlafuseError(f"{', '.join(clash)} given both as --knob and --overrides: pick one")
    name = options.pop("workload")
    settings = {"size": options["size"], "mode": options["mode"], "dtype": args.dtype}
    if options["devices"] > 1:
        settings.update(devices=options["devices"], parallelism=options["parallelism"])
    settings = {k: v for k, v in settings.items() if v not in (None, "custom")}
    spaces = None if args.space is None else [s for s in args.space.split(",") if s.strip()]
    families = [] if spaces == ["none"] else families_for(jax.default_backend(), spaces)
    layout = getattr(args, "layout", None)  # --distributed: process 0 writes, none proves
    several = layout is not None and layout.distributed
    tune(
        Target(name, settings, overrides),
        knobs,
        families,
        args.budget_s,
        out=args.out if layout is None or layout.writer else None,
        prove=not args.no_rerun and not several,
        unproved=UNPROVED_DISTRIBUTED if several else "",
    )
    return 0
