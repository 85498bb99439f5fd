"""Inspect optimized HLO: a text file, an --xla_dump_to folder, or a workload.

A workload's compile is kept in the user's cache folder (`xlafuse.compiler.cache.results_folder`)
under a key of everything the program depends on; the second inspect of the same program reads
it and neither builds nor traces the program, saying so on stderr. `--no-cache` or
`XLAFUSE_NO_CACHE=1` compiles again."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import datetime
import json
import sys
from pathlib import Path

from xlafuse.cli import _progress
from xlafuse.cli._devices import add_workload_arguments, cell_of, rerun_if_needed
from xlafuse.errors import XlafuseError
from xlafuse.report.format import fit
from xlafuse.report.inspect_text import SORT_KEYS

HELP = "what XLA fused: kernels, fusions, modeled traffic"
DEFAULT_TOP = 20  # kernels in the table without --top or --all (the rest are counted below it)


def add_arguments(p: argparse.ArgumentParser) -> None:
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


def run(args: argparse.Namespace) -> int:
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
    key = _cache_key(args)
    result = _reused(key)
    if result is None:
        if args.workload and (status := rerun_if_needed(args)) is not None:
            return status
        with _progress.steps("inspect", total=1) as step:
            result = inspect_target(
                path=args.target,
                module=args.module,
                variant=args.variant,
                on_step=step,
                cell=cell_of(args),
                on_compiled=None if key is None else lambda done, text: _keep(key, done, text),
            )
    if args.dot or args.svg:
        _write_graph(result, args.dot, args.svg)
    if args.json:
        print(json.dumps(result.to_json(), indent=1))
    else:
        print(fit(render_text(result, top=_top(args), sort=args.sort)))
    return 0


def _top(args: argparse.Namespace) -> int | None:
    """The kernels the table shows: --top N, all of them with --all (None), else DEFAULT_TOP."""
    if args.all:
        return None
    return DEFAULT_TOP if args.top is None else args.top


def _write_graph(result, dot_path: Path | None, svg_path: Path | None) -> None:
    from xlafuse.report.graph import render_svg, to_dot  # on use, as in `run`

    if result.hlo is None:
        raise XlafuseError("--dot/--svg draw one module: pick one with --module NAME")
    dot_text = to_dot(result.hlo, report=result.report)
    if dot_path:
        dot_path.write_text(dot_text)
    if svg_path:
        render_svg(dot_text, svg_path)


@dataclasses.dataclass(frozen=True)
class _Kept:
    """Where a workload's inspect is kept: the results folder, the key, and the arguments as
    given (before the workload's checks settle them), which make the key again."""

    folder: Path
    key: str
    args: argparse.Namespace


def _cache_key(args: argparse.Namespace) -> _Kept | None:
    """Where this workload's inspect is kept (`xlafuse.compiler.cache.result_key`); None when
    nothing is kept: no workload, or a file or module asked for too, the cache off, a
    `jax.distributed` run, or a program whose identity cannot be hashed (then the command goes
    on as without the cache, its errors included)."""
    if not args.workload or args.target is not None or args.module is not None:
        return None
    from xlafuse.compiler import cache  # JAX: a workload is compiled next

    if getattr(args, "no_cache", False) or cache.disabled_by_env() or _distributed(args):
        return None
    given = copy.copy(args)
    try:
        key = cache.result_key(_identity(given))
    except (XlafuseError, ValueError, TypeError, OSError, RuntimeError):  # the command says it
        return None
    return None if key is None else _Kept(cache.results_folder(), key, given)


def _distributed(args: argparse.Namespace) -> bool:
    """Whether any `jax.distributed` option was given (a run of several processes)."""
    names = ("distributed", "coordinator", "num_processes", "process_id", "timeout")
    return any(getattr(args, name, None) not in (None, False) for name in names)


def _identity(args: argparse.Namespace) -> dict:
    """What names the program: the cell (its items left out: the program is the same), the
    variant's definition, and the hashes of the user's source files (the entry's, each
    --import's). Raises as the command would on a bad workload, import or variant."""
    from xlafuse.cli._devices import settle_workload_args
    from xlafuse.compiler.variants import get as get_variant
    from xlafuse.models.names import is_entry

    settled = copy.copy(args)  # settling twice refuses an entry's settled --size
    settle_workload_args(settled)
    cell = cell_of(settled)
    variant = get_variant(args.variant)
    sources = {}
    user_code = [
        *(getattr(args, "imports", None) or ()),
        *([args.workload] if is_entry(args.workload) else []),
    ]
    if user_code:
        from xlafuse.models import user  # JAX and Flax: only for a program of the user's

        for spec in user_code:
            entry = user.parse_entry(spec if is_entry(spec) else f"{spec}:_")
            sources[entry.resolved] = user.entry_sources(entry)
    return {
        "command": "inspect",
        "cell": cell.to_dict(),
        "variant": {f: getattr(variant, f) for f in variant.__dataclass_fields__},
        "imports": [str(x) for x in getattr(args, "imports", None) or ()],
        "sources": sources,
    }


def _reused(place: _Kept | None):
    """The result stored under the key, with a note on stderr; None when there is none or it
    cannot be used (then the program is compiled again)."""
    if place is None:
        return None
    from xlafuse.compiler import cache  # JAX: only a workload gets here
    from xlafuse.inspect.targets import inspect_stored

    stored = cache.read_stored(place.folder, place.key)
    if stored is None:
        return None
    name = place.args.workload
    result = inspect_stored(stored.hlo_path, stored.hlo_sha256, stored.fields, name=name)
    if result is not None:
        print(
            f"xlafuse inspect: reused the compile of {_when(stored.written)} from the cache "
            "(--no-cache compiles again)",
            file=sys.stderr,
        )
    return result


def _keep(place: _Kept, result, hlo_text: str) -> None:
    """Stores a workload's compile under its key, when the key is still the program's (its
    source files unchanged while it was built); a folder that cannot be written is a note."""
    from xlafuse.compiler import cache
    from xlafuse.folders import write_atomically
    from xlafuse.inspect.targets import stored_fields

    folder, key = place.folder, place.key
    cache.package_sources_sha256(again=True)
    again = _cache_key(place.args)
    if again is None or again.key != key:  # a source file changed while it compiled
        return
    meta_path, hlo_path = cache.stored_paths(folder, key)
    written = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    meta = cache.stored_meta(key, hlo_text, stored_fields(result), written)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_atomically(hlo_path, lambda p: p.write_bytes(hlo_text.encode()), noun="cached HLO")
        write_atomically(meta_path, lambda p: p.write_bytes(meta.encode()), noun="cache entry")
    except (XlafuseError, OSError) as err:
        print(f"xlafuse inspect: note: the compile was not kept: {err}", file=sys.stderr)


def _when(written: str) -> str:
    """`2025-06-01 14:03` of an ISO 8601 time; the text as it is when it is not one."""
    try:
        return datetime.datetime.fromisoformat(written).strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return written
