"""Inspect optimized HLO: a text file, an --xla_dump_to folder, or a workload."""

from __future__ import annotations

import json
from pathlib import Path

from xlafuse.cli import _progress
from xlafuse.cli._devices import add_workload_arguments, cell_of, rerun_if_needed
from xlafuse.errors import XlafuseError
from xlafuse.report.format import fit
from xlafuse.report.inspect_text import SORT_KEYS

HELP = "what XLA fused: kernels, fusions, modeled traffic"
DEFAULT_TOP = 20  # kernels in the table without --top or --all (the rest are counted below it)


def add_arguments(p) -> None:
    """The options of `xlafuse inspect`."""
    p.add_argument("target", nargs="?", help="HLO text file or --xla_dump_to folder")
    p.add_argument("--module", help="in a dump folder, the module whose file name contains NAME")
    add_workload_arguments(p, mesh=True, what="compile this instead of reading a TARGET: ")
    p.add_argument("--variant", default="default", help="fusion variant (default: default)")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument(
        "--top",
        type=int,
        help=f"show the first N kernels (default: {DEFAULT_TOP}; --all shows every kernel)",
    )
    shown.add_argument("--all", action="store_true", help="show every kernel")
    p.add_argument("--sort", default="bytes", choices=SORT_KEYS, help="kernel order")
    p.add_argument("--json", action="store_true", help="print JSON (docs/inspect-json.md)")
    p.add_argument("--dot", type=Path, metavar="FILE", help="write the kernel graph as DOT")
    p.add_argument("--svg", type=Path, metavar="FILE", help="render the kernel graph to SVG")


def run(args) -> int:
    """Inspects the target and prints the text report or JSON; writes DOT/SVG when asked."""
    # on use, not at the top: `xlafuse --help` imports no library code (see xlafuse.cli)
    from xlafuse.cli._checks import at_least_one
    from xlafuse.folders import writable_file
    from xlafuse.inspect.targets import inspect_target
    from xlafuse.report.inspect_text import render_text

    at_least_one("--top", args.top, hint="--all shows every kernel")
    for path, option in ((args.dot, "--dot"), (args.svg, "--svg")):
        if path is not None:
            writable_file(path, f"{option} file")
    if args.workload and (status := rerun_if_needed(args)) is not None:
        return status
    with _progress.steps("inspect", total=1) as step:
        result = inspect_target(
            args.target,
            args.module,
            variant=args.variant,
            on_step=step,
            cell=cell_of(args),
        )
    if args.dot or args.svg:
        _write_graph(result, args.dot, args.svg)
    if args.json:
        print(json.dumps(result.to_json(), indent=1))
    else:
        print(fit(render_text(result, top=_top(args), sort=args.sort)))
    return 0


def _top(args) -> int | None:
    """The kernels the table shows: --top N, all of them with --all (None), else DEFAULT_TOP."""
    if args.all:
        return None
    return DEFAULT_TOP if args.top is None else args.top


def _write_graph(result, dot_path: Path | None, svg_path: Path | None) -> None:
    from xlafuse.report.graph import render_svg, to_dot  # on use, as in `run`

    if result.hlo is None:
        raise XlafuseError("--dot/--svg draw one module: pick one with --module NAME")
    dot_text = to_dot(result.hlo, result.report)
    if dot_path:
        dot_path.write_text(dot_text)
    if svg_path:
        render_svg(dot_text, svg_path)
