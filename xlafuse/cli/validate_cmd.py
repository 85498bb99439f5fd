"""Run cells under Nsight Compute and judge xlafuse's kernel list and traffic model per kernel.
Cells come from a CONFIG or from --workload. Exit 0: every cell ok; 1: some cell is off; 2: bad
arguments, or no ncu or no GPU."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from xlafuse.cli._checks import comma_separated
from xlafuse.cli._devices import add_workload_arguments, cell_of, import_user_code
from xlafuse.errors import XlafuseError
from xlafuse.report.format import fit

SOME_CELLS_OFF = 1


HELP = "check kernels and modeled bytes against Nsight Compute (GPU)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `xlafuse validate`."""
    p.add_argument("config", nargs="?", help="an experiment config (.toml): its GPU cells")
    p.add_argument("--only", nargs="+", metavar="WORKLOAD", help="with CONFIG: these workloads")
    add_workload_arguments(p, dtype=True, what="one workload instead of a CONFIG: ")
    p.add_argument(
        "--variants", type=comma_separated, help="comma-separated variants (default: all)"
    )
    p.add_argument("--cache", metavar="DIR", help="compilation cache to warm and keep")
    p.add_argument("--ncu", metavar="PATH", help="the ncu executable (default: ncu on PATH)")
    p.add_argument("--profile-calls", type=int, default=5, help="calls traced for device time")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per child process")
    p.add_argument("--out", metavar="DIR", help="write validation.md, validation.json, ncu/")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument(
        "--detail",
        action="store_true",
        help="also ask ncu for compute and memory throughput (%% of peak), achieved occupancy, "
        "L2 hit rate and grid size per kernel (more replay passes: slower)",
    )
    p.add_argument(
        "--rejudge",
        metavar="JSON",
        help="judge the measurements of an earlier run's validation.json again, by this "
        "version's rules (no GPU or ncu needed)",
    )


def run(args: argparse.Namespace) -> int:
    """Validate the chosen cells; print the tables (or JSON); write files with --out."""
    # on use, not at the top: `xlafuse --help` imports no JAX (see xlafuse.cli)
    from xlafuse.experiment.config import load_config
    from xlafuse.measurement.validate_run import require_tools, validate_cells, validate_config
    from xlafuse.report.validation import write_validation

    _check_usage(args)
    if args.rejudge:
        return _rejudge(args)
    require_tools(ncu=args.ncu)
    kwargs = {
        "cache_dir": args.cache,
        "ncu": args.ncu,
        "profile_calls": args.profile_calls,
        "timeout_s": args.timeout,
        "keep": f"{args.out}/ncu" if args.out else None,
        "detail": args.detail,
    }
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    if args.config:
        import_user_code(args)
        config = load_config(args.config, backend="gpu")
        results = validate_config(config, only=args.only, variants=args.variants, say=say, **kwargs)
    else:
        cell = cell_of(args)
        cells = [(cell, v) for v in args.variants or ["default"]]
        results = validate_cells(cells, say=say, **kwargs)
    if args.out:
        write_validation(results, args.out, command=_command())
    return _print(results, args.json)


def _rejudge(args: argparse.Namespace) -> int:
    """Judge the measurements recorded in an earlier validation.json again."""
    from xlafuse.measurement.validate import result_from_dict  # on use, as in `run`
    from xlafuse.report.validation import write_validation

    try:
        payload = json.loads(Path(args.rejudge).read_text())
        results = [result_from_dict(cell) for cell in payload["cells"]]
    except OSError as err:
        raise XlafuseError(f"--rejudge: cannot read {args.rejudge}: {err.strerror}") from err
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        raise XlafuseError(
            f"--rejudge: {args.rejudge} is not a validation.json written by `xlafuse validate "
            f"--out` ({err})"
        ) from err
    if args.out:
        measured = payload.get("command") or "(not recorded)"
        command = f"{measured}\n# verdicts judged again from those measurements:\n{_command()}"
        write_validation(results, args.out, command=command)
    return _print(results, args.json)


def _command() -> str:
    return "xlafuse " + " ".join(shlex.quote(a) for a in sys.argv[1:] if a != "--debug")


def _print(results, as_json: bool) -> int:
    from xlafuse.report.validation import format_text  # on use, as in `run`

    print(
        json.dumps([r.to_dict() for r in results], indent=1)
        if as_json
        else fit(format_text(results))
    )
    return 0 if all(r.ok for r in results) else SOME_CELLS_OFF


def _check_usage(args: argparse.Namespace) -> None:
    from xlafuse.cli._devices import check_workload
    from xlafuse.compiler import variants  # on use, as in `run`

    if args.rejudge:
        if args.config or args.workload:
            raise XlafuseError(
                "--rejudge reads an earlier validation.json: give no CONFIG or --workload"
            )
        if args.detail:
            raise XlafuseError(
                "--detail asks ncu for more metrics, --rejudge measures nothing: "
                "leave out one of them"
            )
        return
    if bool(args.config) == bool(args.workload):
        raise XlafuseError(
            "give either a CONFIG or --workload NAME (one of them, not both), or --rejudge JSON"
        )
    _check_inputs(args)
    with_workload = ("overrides", "dtype")
    if args.config and any(getattr(args, k) for k in with_workload):
        raise XlafuseError("--overrides and --dtype go with --workload, not with a CONFIG")
    if args.workload and args.only:
        raise XlafuseError("--only selects workloads of a CONFIG; with --workload, leave it out")
    if args.workload:
        check_workload(args)
        for name in args.variants or ["default"]:
            variants.get(name)


def _check_inputs(args: argparse.Namespace) -> None:
    """The config file, --variants and --out, before ncu or the GPU is looked for."""
    from xlafuse.cli._checks import variant_names  # on use, as in `run`
    from xlafuse.experiment.config import check_config_file
    from xlafuse.folders import writable_folder

    if args.config:
        check_config_file(args.config)
    variant_names(args.variants)
    if args.out:
        writable_folder(args.out, "output folder")
