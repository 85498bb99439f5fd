"""The `xlafuse` command: parse arguments, call one library function per subcommand, print.

Each subcommand lives in its own module, whose docstring is the description its `--help` shows:
its `HELP` line, `add_arguments(parser)` for its options, and `run(args) -> int`. Errors a user
can fix (XlafuseError, ValueError, a missing file) print one line on stderr and exit 2; `--debug`
shows the traceback instead.

A command module imports its library code inside the functions that run the command, not at its
top: `xlafuse --help` builds every parser, and so imports every command module, without JAX
(tests/test_cli_first_hour.py starts a fresh interpreter to check it).

A command that compiles keeps its programs in JAX's persistent compilation cache, in the user's
cache folder (`xlafuse.compiler.cache`), so the second `inspect`, `diff` or `explain` of a program
reads the first one's compile from disk; `--no-cache` (before or after the command's name) or
`XLAFUSE_NO_CACHE=1` compiles afresh. `warmup` and `coldstart` keep their own folders.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import traceback
from collections.abc import Iterator

from xlafuse.cli._user_output import user_output  # stdlib only: no JAX for --help
from xlafuse.errors import XlafuseError
from xlafuse.experiment import interrupts  # stdlib only

# Subcommand modules, in the order `xlafuse --help` lists them.
_COMMANDS = (
    "run",
    "report",
    "compare",
    "inspect",
    "diff",
    "explain",
    "workloads",
    "variants",
    "passes",
    "warmup",
    "coldstart",
    "validate",
    "tune",
    "launch",
)

USAGE_ERROR = 2

# Commands that read HLO files run with the cyclic GC paused (`xlafuse.hlo.parse.gc_paused`:
# reading faster, benchmarks/README.md); not where they
# compile a workload instead (`--workload`: JAX makes cycles that the GC should free).
_READ_HLO = ("inspect", "diff", "explain")

# Commands that leave the compilation cache to their own folders (`--cache`, cold start's
# children): the commands' cache would only mix into what they measure or fill.
_OWN_CACHE = ("warmup", "coldstart")

NO_CACHE_HELP = (
    "compile afresh: no persistent compilation cache (also XLAFUSE_NO_CACHE=1; default: "
    "$XDG_CACHE_HOME/xlafuse/jax or ~/.cache/xlafuse/jax)"
)


def build_parser(*, command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser: with `command`, that subcommand only; else every one registered.

    One command's module is imported, not all of them; none imports JAX before it runs, so a
    command that reads HLO or results (`inspect DUMP`, `diff A B`, `explain DUMP`, `report`)
    starts without it.
    """
    parser = argparse.ArgumentParser(
        prog="xlafuse", description="See what XLA's kernel fusion does to JAX/Flax models."
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--no-cache", action="store_true", help=NO_CACHE_HELP)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    parser.commands = {}  # name -> its parser, which reports a word it does not take
    for name in (command,) if command in _COMMANDS else _COMMANDS:
        module = importlib.import_module(f"xlafuse.cli.{name}_cmd")
        sub = subparsers.add_parser(name, help=module.HELP, description=module.__doc__)
        module.add_arguments(sub)
        # also after the command's name; SUPPRESS keeps a --no-cache given before it
        sub.add_argument(
            "--no-cache", action="store_true", default=argparse.SUPPRESS, help=NO_CACHE_HELP
        )
        sub.set_defaults(func=module.run)
        parser.commands[name] = sub
    return parser


def console_main() -> None:
    """The `xlafuse` program (and `python -m xlafuse`): `main`, then exit with its status. An
    interrupted command (130) leaves at once, its output flushed: the interpreter's shutdown
    while XLA still compiles on a thread of its own crashes (SIGSEGV), and what a command
    measured is on disk before `main` returns."""
    code = main()
    if code == 130:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    sys.exit(code)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # The first word that is not an option names the command (`--debug` takes no value); an
    # unknown word or none: every command is registered, for argparse's list and --help.
    command = next((word for word in argv if not word.startswith("-")), None)
    parser = build_parser(command=command)
    args, extra = parser.parse_known_args(argv)
    if extra:  # as argparse says it, from the command's parser: `xlafuse variants: error: ...`
        parser.commands[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    args.argv = argv  # kept for a command that must run again in a child (N host devices)
    try:
        with (
            interrupts.sticky(),
            _gc_pause(args),
            _compile_cache(args),
            user_output(args.command, debug=args.debug),
        ):
            return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("xlafuse: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`xlafuse inspect ... | head`): not an error of ours.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - stays open until exit
        return 0
    except (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError) as err:
        if args.debug:
            traceback.print_exc()
        if not _quiet(args):  # process 0 of a distributed run prints the same line
            print(f"xlafuse {args.command}: error: {_one_line(err)}", file=sys.stderr)
        return USAGE_ERROR
    except Exception as err:
        if args.debug:
            raise
        print(
            f"xlafuse {args.command}: failed: {type(err).__name__}: {_one_line(err)} "
            "(run with --debug for the traceback)",
            file=sys.stderr,
        )
        return 1


def _gc_pause(args: argparse.Namespace) -> contextlib.AbstractContextManager:
    """`gc_paused` for a command that reads HLO files (see `_READ_HLO`), else nothing."""
    if args.command not in _READ_HLO or getattr(args, "workload", None):
        return contextlib.nullcontext()
    from xlafuse.hlo.parse import gc_paused  # on use: `xlafuse --help` imports no library code

    return gc_paused()


def _compile_cache(args: argparse.Namespace) -> contextlib.AbstractContextManager:
    """The persistent compilation cache for the command (`xlafuse.compiler.cache.use_cache`), or
    none with --no-cache or XLAFUSE_NO_CACHE=1 (then set for the xlafuse processes it starts:
    `launch`'s, or itself again with more host devices). Nothing for a command that reads files
    (no JAX) or keeps its own folder (`_OWN_CACHE`). A folder that cannot be written is one
    line on stderr, and the command compiles without it."""
    if _reads_files(args):
        return contextlib.nullcontext()
    from xlafuse.compiler import cache  # JAX: only a command that compiles gets here
    from xlafuse.folders import writable_folder

    stack = contextlib.ExitStack()
    off = args.no_cache or cache.disabled_by_env()
    if off:
        stack.enter_context(_environment(cache.NO_CACHE_ENV, "1"))
    if args.command in _OWN_CACHE:
        return stack
    if off:
        stack.enter_context(cache.no_persistent_cache())
        return stack
    try:
        folder = writable_folder(cache.default_folder(), "compilation cache folder")
    except XlafuseError as err:
        print(
            f"xlafuse {args.command}: note: {err}; compiling without the cache "
            f"(--no-cache or {cache.NO_CACHE_ENV}=1 skips it)",
            file=sys.stderr,
        )
        stack.enter_context(cache.no_persistent_cache())
        return stack
    stack.enter_context(cache.use_cache(cache_dir=folder))
    return stack


def _reads_files(args: argparse.Namespace) -> bool:
    """Whether the command only reads files (results, or HLO without --workload): no JAX."""
    if args.command == "report":
        return True
    return args.command in _READ_HLO and not getattr(args, "workload", None)


@contextlib.contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    """`os.environ[name] = value` for the block (restored after)."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def _quiet(args: argparse.Namespace) -> bool:
    layout = getattr(args, "layout", None)  # set by --distributed (`cli._distributed.start`)
    return layout is not None and not layout.writer


def _one_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0]
