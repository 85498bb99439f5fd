"""The user's own programs: an entry `FILE.py:FUNCTION` or `MODULE:FUNCTION`, and `--import`.

An entry names a function of the user's. It is called with a cell's overrides as keyword
arguments (`FUNCTION(**overrides)`) and returns one of:

- an `xlafuse.models.Workload` (e.g. from `xlafuse.models.build`), measured as it is;
- `(fn, args)`: a forward program, `fn(*args)` jit-able, every call given the same arguments;
- `(fn, args, donate_argnums)`: a step that consumes its state. `args[0]` is the state, which
  must be donated (0 in `donate_argnums`), and `fn(*args)` returns `(new_state, ...)` with
  `new_state` shaped like `args[0]`: each timed call gets the previous call's new state.

Either tuple may end with `xlafuse.models.Items(count, unit)`: the work one call does, for
throughput in the user's unit (`(fn, args, Items(51200, "env-steps"))`); without it, one item
per call, in "calls".

The arguments' leaves that are not arrays (a module's functions, ints, strings) are static, as
`eqx.filter_jit` has them (`xlafuse.compiler.static`): the Workload's `fn` and `args` are then
the program jax.jit traces, and its `static` lists them.

What the user's code writes to stdout while it is imported, called or traced goes to stderr
(`stdout_to_stderr`: `print` and C libraries alike), so that a command's stdout is its own.

The workload built from a tuple is named after FUNCTION, has the size "custom" (a user program
has no zoo sizes: its overrides size it), the mode "forward" or "train" (a step), and the dtype
of its least precise floating-point input (the numerics tolerance follows it).

An import (`--import FILE_OR_MODULE`, a config's `imports`) runs a file or module of the
user's once per process, so that its `@xlafuse.models.register` workloads become zoo names with
sizes, modes and dtypes. Files are imported under a name of their own (`xlafuse_user_*`), once
per resolved path, with their folder on `sys.path` (as running the file would have it). Child
processes that rebuild a workload import the same (`imported`).
"""

from __future__ import annotations

import ast
import contextlib
import ctypes
import dataclasses
import functools
import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import site
import sys
import sysconfig
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from xlafuse.compiler import static
from xlafuse.errors import XlafuseError, did_you_mean, error_line
from xlafuse.models import implementations as implementations_lib
from xlafuse.models.labels import display_name, is_entry  # noqa: F401 - part of this module's API
from xlafuse.models.workload import Items, Workload

ENTRY_SIZE = "custom"  # the size of a workload built from (fn, args): it has no zoo sizes
ENTRY_FORMS = (
    "an xlafuse.models.Workload, (fn, args) with fn(*args) jit-able, or "
    "(fn, args, donate_argnums) for a step fn(state, ...) -> (new_state, ...)"
)

# What the user's code may raise that becomes one line naming it: a `sys.exit(3)` in FUNCTION
# or at a file's top level is its mistake, not xlafuse's exit status (Ctrl-C still interrupts).
USER_CODE_ERRORS = (Exception, SystemExit)

# Resolved import target -> module, in import order (what a child process imports again).
_IMPORTED: dict[str, ModuleType] = {}


class EntryError(XlafuseError):
    """An entry or import of the user's that cannot be loaded, called or traced."""


@dataclasses.dataclass(frozen=True)
class Entry:
    """A parsed entry spec.

    Attributes:
      spec: as given, e.g. "examples/cartpole.py:rollout" (what records show).
      target: the file, resolved to an absolute path, or the module's dotted name.
      function: FUNCTION's name.
    """

    spec: str
    target: str
    function: str

    @property
    def is_file(self) -> bool:
        """Whether the target is a file (else a module name)."""
        return is_file_target(self.target)

    @property
    def resolved(self) -> str:
        """`target:function`: the entry as a child process (another folder, maybe) names it."""
        return f"{self.target}:{self.function}"


def is_file_target(target: str) -> bool:
    """A file (`x.py`, `dir/x`) rather than a module's dotted name."""
    return target.endswith(".py") or "/" in target or "\\" in target


def parse_entry(spec: str, *, base: str | Path | None = None) -> Entry:
    """Splits `FILE.py:FUNCTION` or `MODULE:FUNCTION`; a relative file is relative to `base`
    (a config's folder; the working directory when None).

    Raises:
      EntryError: not of that form (nothing is imported here).
    """
    target, sep, function = spec.rpartition(":")
    if not sep or not target or not function.isidentifier():
        raise EntryError(
            f"entry {spec!r} is not FILE.py:FUNCTION or MODULE:FUNCTION "
            "(e.g. examples/cartpole.py:rollout)"
        )
    if is_file_target(target):
        target = str((Path(base or ".") / target).resolve())
    return Entry(spec, target, function)


def import_target(target: str | Path, *, base: str | Path | None = None) -> ModuleType:
    """Imports a file or a module of the user's, once per process.

    Args:
      target: `FILE.py` (relative to `base`) or a module's dotted name.
      base: the folder a relative file is relative to; the working directory when None.

    Raises:
      EntryError: no such file or module, or importing it raised (its type and first line).
    """
    target = str(target)
    key = str((Path(base or ".") / target).resolve()) if is_file_target(target) else target
    if key in _IMPORTED:
        return _IMPORTED[key]
    try:
        with stdout_to_stderr():
            module = _import_file(key, target) if is_file_target(key) else _import_module(key)
    except EntryError:
        raise
    except USER_CODE_ERRORS as err:  # the user's code: anything it raises, sys.exit too
        raise EntryError(f"importing {target!r} raised {error_line(err)}") from err
    _IMPORTED[key] = module
    return module


def imported() -> tuple[str, ...]:
    """The resolved imports of this process, in order (a child process repeats them)."""
    return tuple(_IMPORTED)


def _import_file(path: str, given: str) -> ModuleType:
    file = Path(path)
    if not file.is_file():
        raise EntryError(f"no file {given!r} ({'a folder' if file.is_dir() else 'not found'})")
    if file.suffix != ".py":
        raise EntryError(f"{given!r} is not a Python file (.py)")
    digest = hashlib.sha256(path.encode()).hexdigest()[:8]
    name = f"xlafuse_user_{_identifier(file.stem)}_{digest}"
    module_spec = importlib.util.spec_from_file_location(name, file)
    if module_spec is None or module_spec.loader is None:
        raise EntryError(f"{given!r} cannot be imported as a Python file")
    module = importlib.util.module_from_spec(module_spec)
    folder = str(file.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # its own imports of files beside it, as running it would
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _import_module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name is not None and (name == err.name or name.startswith(f"{err.name}.")):
            raise EntryError(
                f"no module {name!r} (not importable from here; a file is given as path/x.py)"
            ) from None
        raise


def _identifier(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text)


def load_function(entry: Entry) -> Callable[..., Any]:
    """FUNCTION of the entry's file or module.

    Raises:
      EntryError: the import fails, or the module has no such function (with "did you mean").
    """
    try:
        module = import_target(entry.target)
    except EntryError as err:
        raise EntryError(f"entry {entry.spec!r}: {err}") from err.__cause__
    function = getattr(module, entry.function, None)
    if function is None:
        defined = [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")]
        raise EntryError(
            f"entry {entry.spec!r}: {entry.target.rsplit('/', 1)[-1]!r} has no function "
            f"{entry.function!r}{did_you_mean(entry.function, defined)}"
        )
    if not callable(function):
        raise EntryError(f"entry {entry.spec!r}: {entry.function!r} is not a function")
    return function


def source_sha256(entry: Entry) -> str:
    """SHA-256 (hex) of the entry's source (`entry_sources`, one hash: `sources_sha256`): a
    changed file is a changed cell, an imported module of the user's included.

    Raises:
      EntryError: as `load_function` (a module without a source file hashes its name).
    """
    files = entry_sources(entry)
    if not files:
        return hashlib.sha256(entry.target.encode()).hexdigest()
    return sources_sha256(files)


def entry_sources(entry: Entry) -> dict[str, str]:
    """The source files of an entry (`source_files`): its file, or its module's; empty for a
    module without a source file.

    Raises:
      EntryError: as `load_function` (for a module), or its file cannot be read.
    """
    if entry.is_file:
        path = entry.target
    else:
        path = getattr(import_target(entry.target), "__file__", None)
        if path is None:
            return {}
    try:
        return source_files(path)
    except OSError as err:
        raise EntryError(f"entry {entry.spec!r}: cannot read {path!r}: {err.strerror}") from None


def source_files(path: str | Path) -> dict[str, str]:
    """The source of a program of the user's, file by file: `path` (the file that defines it)
    and each module of the user's that it imports, directly or through another such module;
    by path relative to `path`'s folder (`/`-separated) -> SHA-256 (hex).

    A file's imports are its `import` and `from ... import` statements, wherever they are (in
    a function too), found as Python would find them from there: `path`'s folder first (where
    `import_target` puts it), then `sys.path`; a relative import from the file's own package.
    Nothing is imported to find them. A module is the user's when its file lies outside
    Python's standard library, outside every site-packages and dist-packages folder and outside
    xlafuse: installed packages are versioned, and the versions that matter are in a run's
    settings. A module that is not found is left out (importing it would fail).

    Raises:
      OSError: `path` cannot be read.
    """
    start = Path(path).resolve()
    search = [str(start.parent), *sys.path]
    hashes = {start: file_sha256(start)}
    todo = [start]
    while todo:
        for found in _imported_files(todo.pop(), search):
            if found not in hashes:
                try:
                    hashes[found] = file_sha256(found)
                except OSError:  # unreadable: importing it fails, as the run will say
                    continue
                todo.append(found)
    return {Path(os.path.relpath(f, start.parent)).as_posix(): h for f, h in sorted(hashes.items())}


def sources_sha256(files: Mapping[str, str]) -> str:
    """The one hash of a program's source files (`source_files`): the file's own SHA-256 when it
    imports no module of the user's (as records made before imported modules were hashed),
    else the SHA-256 of its `SHA256  PATH` lines, sorted by path."""
    if len(files) == 1:
        return next(iter(files.values()))
    lines = "".join(f"{sha}  {name}\n" for name, sha in sorted(files.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def changed_sources(before: Mapping[str, str], now: Mapping[str, str]) -> str:
    """Which of a program's source files changed, in words: `physics.py (sha256 1a2b3c4d5e6f
    in the file, 6f5e4d3c2b1a now)`, `more.py (imported now, not then)`, `old.py (no longer
    imported)`; "" when none did."""
    said = []
    for name in sorted({*before, *now}):
        old, new = before.get(name), now.get(name)
        if old == new:
            continue
        if old is None:
            said.append(f"{name} (imported now, not then)")
        elif new is None:
            said.append(f"{name} (no longer imported)")
        else:
            said.append(f"{name} (sha256 {old[:12]} in the file, {new[:12]} now)")
    return ", ".join(said)


def _imported_files(file: Path, search: list[str]) -> list[Path]:
    """The files of the user's modules that `file`'s import statements name (`source_files`)."""
    if file.suffix != ".py":
        return []
    try:
        tree = ast.parse(file.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return []
    found: list[Path] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found += _module_files(alias.name, search)
        elif isinstance(node, ast.ImportFrom):
            where = search if not node.level else [str(file.parents[node.level - 1])]
            base = node.module or ""
            if base:
                found += _module_files(base, where)
            for alias in node.names:
                if alias.name != "*":
                    found += _module_files(f"{base}.{alias.name}".lstrip("."), where)
    return found


def _module_files(name: str, search: list[str]) -> list[Path]:
    """The files of the user's that `import name` runs from `search` (each package's
    `__init__.py` on the way, then the module's), found without importing; none once a part is
    not found or not the user's."""
    files, locations = [], search
    parts = name.split(".")
    for i in range(len(parts)):
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), locations)
        if spec is None:
            break
        if spec.has_location and spec.origin:
            origin = Path(spec.origin).resolve()
            if not _is_users(origin):
                break
            files.append(origin)
        locations = spec.submodule_search_locations
        if locations is None:
            break
    return files


def _is_users(file: Path) -> bool:
    """Whether a module's file is the user's own (`source_files`)."""
    if {"site-packages", "dist-packages"} & set(file.parts):
        return False
    return not any(file.is_relative_to(root) for root in _installed_roots())


@functools.cache
def _installed_roots() -> tuple[Path, ...]:
    """The folders of code that is not the user's: the standard library, installed packages,
    xlafuse."""
    paths = sysconfig.get_paths()
    roots = [paths.get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")]
    roots += site.getsitepackages() if hasattr(site, "getsitepackages") else []
    roots.append(Path(__file__).resolve().parents[1])  # xlafuse, wherever it is installed
    return tuple(dict.fromkeys(Path(r).resolve() for r in roots if r))


def file_sha256(path: str | Path) -> str:
    """SHA-256 (hex) of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def check_overrides(entry: Entry, overrides: Mapping[str, Any]) -> None:
    """Refuse overrides that FUNCTION does not take as keyword arguments, or of another type
    than their parameter's default (before calling it).

    A default that is a bool takes a bool; an int, an int; a float, a number; any other default
    (or none) takes any value.

    Raises:
      EntryError: as `load_function`, a keyword FUNCTION has no parameter for, or a value of
        another type than its default (`override envs='abc' of FILE.py:FUNCTION must be an
        int (its default is 256)`).
    """
    function = load_function(entry)
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return  # a builtin or C function: calling it will tell
    try:
        signature.bind(**overrides)
    except TypeError as err:
        names = [p for p in signature.parameters if p not in ("args", "kwargs")]
        raise EntryError(
            f"entry {entry.spec!r}: {err} (its parameters: {', '.join(names) or 'none'})"
        ) from None
    for key, value in overrides.items():
        parameter = signature.parameters.get(key)
        default = parameter.default if parameter is not None else inspect.Parameter.empty
        wanted = _default_kind(default)
        if wanted is not None and not _is_kind(value, wanted[0]):
            raise EntryError(
                f"override {key}={value!r} of {entry.spec} must be {wanted[1]} (its default is "
                f"{default!r})"
            )


# A default's type -> what an override of it must be, and that in words (`check_overrides`).
_OVERRIDE_KINDS = ((bool, "a bool (true or false)"), (int, "an int"), (float, "a number"))


def _default_kind(default: Any) -> tuple[type, str] | None:
    for kind in _OVERRIDE_KINDS:
        if type(default) is kind[0]:
            return kind
    return None


def _is_kind(value: Any, kind: type) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    return isinstance(value, int) if kind is int else isinstance(value, int | float)


_STDOUT_LOCK = threading.Lock()
_STDOUT_SAVED: list[int | None] = []  # fd 1 as it was, per `stdout_to_stderr` entered


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """While the user's code runs here (imported, called, traced), what it writes to stdout
    goes to stderr: `print` (`sys.stdout`) and C libraries (file descriptor 1) alike; both are
    restored after, C's buffered output flushed first. Nested uses redirect once."""
    with _STDOUT_LOCK:
        _STDOUT_SAVED.append(_fd1_to_stderr() if not _STDOUT_SAVED else None)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        with _STDOUT_LOCK:
            _restore_fd1(_STDOUT_SAVED.pop())


def _fd1_to_stderr() -> int | None:
    """Points file descriptor 1 at stderr's; returns a copy of what it was (None: no fd 1)."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError, AttributeError):  # closed or no descriptor: nothing to move
        return None
    try:
        os.dup2(2, 1)
    except OSError:
        os.close(saved)
        return None
    return saved


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None)


def _restore_fd1(saved: int | None) -> None:
    if saved is None:
        return
    with contextlib.suppress(Exception):  # no C library here to flush
        _libc().fflush(None)  # what C printed into its buffer goes to stderr too
    os.dup2(saved, 1)
    os.close(saved)


def build_entry(
    spec: str | Entry,
    *,
    overrides: Mapping[str, Any] | None = None,
    dtype: Any = None,
    implementations: Mapping[str, Entry] | None = None,
) -> Workload:
    """Calls the entry's FUNCTION with `overrides` and turns what it returns into a Workload.

    Args:
      spec: `FILE.py:FUNCTION` (relative to the working directory) or `MODULE:FUNCTION`, or an
        `Entry`.
      overrides: FUNCTION's keyword arguments.
      dtype: refused unless None: a user program's dtype is its inputs' (pass one to FUNCTION
        as an override of its own if it takes one).
      implementations: other implementations of the program FUNCTION returns, by name (a
        config's `implementations` table): each a function of the same arguments, loaded
        (not called) and checked by tracing (`workload_from`).

    Returns:
      The Workload (its `entry` names the resolved spec, so a child process can build it).

    Raises:
      EntryError: the entry cannot be imported or found, refuses the overrides, raises (its
        exception's type and message), returns something of another shape, or returns a
        function that jax cannot trace with its arguments (the trace error's first line).
    """
    entry = spec if isinstance(spec, Entry) else parse_entry(spec)
    overrides = dict(overrides or {})
    if dtype is not None:
        raise EntryError(
            f"entry {entry.spec!r}: dtype is set by the program's own inputs, not by "
            f"dtype={dtype!r} (give FUNCTION a keyword argument for it and override that)"
        )
    check_overrides(entry, overrides)
    function = load_function(entry)
    try:
        with stdout_to_stderr():
            result = function(**overrides)
    except USER_CODE_ERRORS as err:  # the user's code
        raise EntryError(f"entry {entry.spec!r} raised {error_line(err)}") from err
    functions = {n: load_function(e) for n, e in (implementations or {}).items()}
    return workload_from(
        result, entry.function, overrides=overrides, entry=entry, implementations=functions
    )


def workload_from(
    result: Any,
    name: str,
    *,
    overrides: Mapping[str, Any] | None = None,
    entry: Entry | None = None,
    implementations: Mapping[str, Callable[..., Any]] | None = None,
    own: str = implementations_lib.OWN,
) -> Workload:
    """A Workload from what an entry returned (see the module docstring), checked by tracing.

    Args:
      result: a Workload, `(fn, args)` or `(fn, args, donate_argnums)`, either tuple maybe
        ending with `Items`.
      name: the workload's name (FUNCTION's, or a function's given from Python).
      overrides: the keyword arguments it was made with (the workload's `config`).
      entry: the entry it came from, or None for a function given from Python.
      implementations: other implementations of `fn` (issue 46): name -> a function of the
        same arguments computing the same outputs (`implementations_lib.attach`).
      own: what `fn` is called among them ("xla").

    Raises:
      EntryError: another shape, or a function jax cannot trace (nothing is compiled);
        XlafuseError: an implementation that `implementations_lib.attach` refuses.
    """
    where = f"entry {entry.spec!r}" if entry is not None else f"{name!r}"
    resolved = entry.resolved if entry is not None else None
    if isinstance(result, Workload):
        return dataclasses.replace(result, entry=resolved)
    fn, args, donate, items = _returned_parts(where, result)
    donate_argnums = _donate_argnums(where, donate[0] if donate else (), len(args))
    program = static.split(_quiet(fn) if entry is not None else fn, tuple(args))
    out = _trace(where, program.fn, program.args)
    if donate_argnums:
        _check_step(where, out, program)
    workload = _entry_workload(name, program, donate_argnums, overrides, resolved)
    if implementations:
        wrap = _quiet if entry is not None else _same
        workload = implementations_lib.attach(
            workload, implementations, tuple(args), where=where, own=own, wrap=wrap
        )
    return workload.with_items(items)


def _returned_parts(where: str, result: Any) -> tuple[Any, Any, list, Any]:
    """`(fn, args, donate, items)` of what an entry returned as `(fn, args)` or `(fn, args,
    donate_argnums)`, maybe ending with `Items` (`donate`: [] or [donate_argnums]; `items`:
    None without one).

    Raises:
      EntryError: another shape, naming `where`.
    """
    result, items = without_items(result)
    if not isinstance(result, tuple | list) or len(result) not in (2, 3):
        raise EntryError(f"{where} returned {_shape_of(result)}; accepted: {ENTRY_FORMS}")
    fn, args, *donate = result
    if not callable(fn) or not isinstance(args, tuple | list):
        raise EntryError(
            f"{where} returned ({_shape_of(fn)}, {_shape_of(args)}"
            f"{', ...' if donate else ''}); accepted: {ENTRY_FORMS}"
        )
    return fn, args, donate, items


def _entry_workload(name, program, donate_argnums, overrides, resolved) -> Workload:
    """The Workload of an entry's traced program (`static.split`): "custom" size, mode "train"
    when it donates, one item per call in "calls", no FLOP count."""
    return Workload(
        name=name,
        size=ENTRY_SIZE,
        mode="train" if donate_argnums else "forward",
        dtype=_inputs_dtype(program.args),
        fn=program.fn,
        args=program.args,
        num_params=0,
        items_per_call=1,
        items_unit="calls",
        flops=None,
        config=MappingProxyType(dict(overrides or {})),
        donate_argnums=donate_argnums,
        entry=resolved,
        static=program.static,
    )


def _same(fn: Callable[..., Any]) -> Callable[..., Any]:
    return fn


def without_items(result: Any) -> tuple[Any, Items | None]:
    """What an entry returned, less an `Items` at its end, and that Items (None without)."""
    if isinstance(result, tuple | list) and result and isinstance(result[-1], Items):
        return tuple(result[:-1]), result[-1]
    return result, None


def _quiet(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, its stdout sent to stderr while it runs (`stdout_to_stderr`): when jax traces it."""

    @functools.wraps(fn)
    def traced(*args, **kwargs):
        with stdout_to_stderr():
            return fn(*args, **kwargs)

    return traced


def _donate_argnums(where: str, donate: Any, count: int) -> tuple[int, ...]:
    if isinstance(donate, int) and not isinstance(donate, bool):
        donate = (donate,)
    ok = isinstance(donate, tuple | list) and all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < count for i in donate
    )
    if not ok:
        raise EntryError(
            f"{where}: donate_argnums {donate!r} must be argument positions from 0 to {count - 1}"
        )
    donate = tuple(sorted(set(donate)))
    if donate and 0 not in donate:
        raise EntryError(
            f"{where}: a step donates its state, argument 0 (donate_argnums {donate!r} leaves it "
            "out); return (fn, args) for a program that consumes nothing"
        )
    return donate


def _trace(where: str, fn: Callable[..., Any], args: tuple) -> Any:
    """The output shapes of `fn(*args)` (`jax.eval_shape`: traced, nothing compiled or run)."""
    try:
        return jax.eval_shape(fn, *args)
    except USER_CODE_ERRORS as err:
        raise EntryError(
            f"{where}: fn(*args) cannot be traced by jax.jit: {error_line(err)}"
        ) from (err)


def _check_step(where: str, out: Any, program: static.Split) -> None:
    """A step returns (new_state, ...) with new_state shaped like its state, args[0], and
    with the same static leaves (the next call takes it in place of args[0])."""
    args = program.args
    shapes = jax.eval_shape(lambda state: state, args[0])
    if not isinstance(out, tuple | list) or not out:
        raise EntryError(
            f"{where}: a step must return (new_state, ...); fn(*args) returns {_shape_of(out)}"
        )
    if jax.tree.structure(out[0]) != jax.tree.structure(shapes) or any(
        (a.shape, a.dtype) != (b.shape, b.dtype)
        for a, b in zip(jax.tree.leaves(out[0]), jax.tree.leaves(shapes), strict=True)
    ):
        raise EntryError(
            f"{where}: a step's first output must be its new state, shaped like args[0] "
            "(the next call takes it in place of args[0])"
        )
    if not program.state_kept():
        raise EntryError(
            f"{where}: a step's new state must hold the static leaves (not arrays) of its "
            "state, args[0], unchanged (the next call is traced with those of args[0])"
        )


def _inputs_dtype(args: tuple) -> str:
    """The least precise floating-point dtype among the inputs (float32 when none is)."""
    floats = {
        jnp.dtype(leaf.dtype)
        for leaf in jax.tree.leaves(args)
        if hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jnp.floating)
    }
    if not floats:
        return "float32"
    return min(floats, key=lambda d: (np.finfo(d).bits, np.finfo(d).nmant)).name


def _shape_of(value: Any) -> str:
    if isinstance(value, tuple | list):
        return f"a {type(value).__name__} of {len(value)}"
    if callable(value):
        return "a function"
    if isinstance(value, jax.Array | np.ndarray):
        return f"an array {value.dtype}{list(value.shape)}"
    return f"a value of type {type(value).__name__}"
