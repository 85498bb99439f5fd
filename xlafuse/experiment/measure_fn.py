"""`xlafuse.measure(fn, *args)`: the runner's cell measurement of any function, from Python.

`xlafuse.compare` compiles each variant and calls it once (kernels, modeled bytes, compile
seconds, numerics: quick). `measure` runs the cells a config's run would: one per variant,
through the same runner (`xlafuse.experiment.runner.run_experiment`), so each is compiled on
the one compile path, judged against the first variant by the one numerics rule, timed in
rounds paired with it (latency and pipelined, each speedup with its interval and verdict) and,
on a GPU, traced: device time, every kernel's time joined to its HLO kernel, and the kernel
groups of each variant timed against the first's. The records are `CellResult`s, the schema of
`results.jsonl`: `xlafuse report` and `write_report` read them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import inspect
import io
import numbers
import os
import sys
import tempfile
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from xlafuse.compiler import static
from xlafuse.compiler.variants import IMPLEMENTATION_PREFIX, compose
from xlafuse.errors import XlafuseError
from xlafuse.experiment.config import (
    ExperimentConfig,
    MeasureConfig,
    VariantConfig,
    WorkloadConfig,
    timing_problems,
    variant_problem,
)
from xlafuse.experiment.fields import ceilings_part
from xlafuse.experiment.runner import run_experiment
from xlafuse.kinds import Backend, Framework
from xlafuse.measurement.calibrate import calibrate as calibrate_ceilings
from xlafuse.measurement.timing import TimingSettings
from xlafuse.models import implementations, user
from xlafuse.models.workload import Items, Workload, built_implementation_problem
from xlafuse.report.cells import cell_tables
from xlafuse.report.lines import cell_label, cell_line
from xlafuse.results import records as records_lib
from xlafuse.results.parts import CeilingsRecord
from xlafuse.results.records import CellResult
from xlafuse.results.settings import check_resumable


@dataclasses.dataclass(frozen=True)
class Measurement:
    """What `measure` measured: one record per variant, the reference's first.

    Print it for the run's lines and the report's two tables (times, then work).

    Attributes:
      records: the cells' `CellResult`s, in variant order (the first is the reference).
      results_path: the results.jsonl they were written to (`out`), or None.
    """

    records: tuple[CellResult, ...]
    results_path: Path | None = None

    def record(self, variant: str) -> CellResult:
        """The record of one variant, by name.

        Raises:
          KeyError: no such variant here (the message lists them).
        """
        for r in self.records:
            if r.variant == variant:
                return r
        raise KeyError(f"no variant {variant!r} measured here: {[r.variant for r in self.records]}")

    def to_dict(self) -> list[dict[str, Any]]:
        """The records as results.jsonl holds them (flat JSON objects)."""
        return [r.to_dict() for r in self.records]

    def write(self, folder: str | Path) -> Path:
        """Appends the records to `folder`/results.jsonl and writes report.md, report.html and
        the plots there (`xlafuse.write_report`); returns report.md's path.

        Raises:
          XlafuseError: the folder's results were measured under other settings, or hold a
            program of this name with other code (as a run refuses to resume there).
        """
        from xlafuse.report.markdown import write_report  # matplotlib: on use

        folder = records_lib.prepare_output(folder)
        path = folder / records_lib.RESULTS_FILE
        if self.records:
            shared = {k: v for k, v in self.records[0].settings.items() if k != "variant"}
            sources = {r.workload: (r.entry, r.source_sha256) for r in self.records}
            check_resumable(path, shared, sources=sources)
        for record in self.records:
            records_lib.append_result(path, record)
        return write_report(path, out_dir=folder)

    def __str__(self) -> str:
        if not self.records:
            return "nothing measured"
        first = self.records[0]
        label = cell_label(first)
        reference = first if first.ok else None
        lines = [f"{label} on {first.backend} ({first.device_kind})"]
        lines += [cell_line(r, reference=None if r is first else reference) for r in self.records]
        return "\n".join([*lines, "", *cell_tables(self.records)])


def measure(
    fn: Callable[..., Any] | Workload | Mapping[str, Callable[..., Any]],
    *args: Any,
    variants: Sequence[str | Mapping[str, Any] | Any] | None = None,
    timing: TimingSettings | Mapping[str, Any] | None = None,
    profile: bool | None = None,
    donate_argnums: int | Sequence[int] = (),
    name: str | None = None,
    out: str | Path | None = None,
    fresh: bool = False,
    calibrate: bool = True,
    verbose: bool = False,
    items: Items | None = None,
) -> Measurement:
    """Measure `fn(*args)` under each variant as `xlafuse run` measures a cell.

    A function's cells are named by `name`, its arguments and its code: the size of its
    records is its arguments' types (`f32[256]`, `f32[8,8],~f32[]`; `args-<hash>` for a
    nested structure or a long list: `arguments_label`), so a call with arguments of another
    shape, dtype or structure measures new cells beside the earlier ones in `out`; its
    `source_sha256` hashes its code (the file that defines it, its code object, its closure's
    and defaults' values, the functions and constants of its module it names), and a folder
    whose records of `name` hash other code is refused rather than mixed.

    Args:
      fn: a jit-able function, or an `xlafuse.models.Workload` (then no `args`), or a dict of
        functions that compute the same thing from the same arguments, by implementation name
        (`{"xla": f, "mine": g}`, issue 46): the first is the reference implementation, each
        other is measured under every variant as `impl=NAME` (`no-fusion+impl=mine`; under
        "default" just `impl=mine`), its numerics judged against the first's. A function that
        runs a Pallas kernel in interpret mode is marked (`CellResult.interpreted`) and its
        times are not compared with a compiled one's. *args: the example arguments.
      variants: preset names ("a+b" composes), dicts of XLA options (named by a "name" key)
        or `Variant`s; the first is the reference every other is judged and timed against
        (None: "default" and "no-fusion" for a function or a Workload, "default" alone for a
        dict of functions).
      timing: `TimingSettings` (or a dict of its fields); a config's `[timing]` defaults.
      profile: trace each cell for device and per-kernel times (None: on a GPU only).
      donate_argnums: a step that consumes its state: argument 0 is the state, donated, and
        `fn` returns `(new_state, ...)`; each timed call then gets the previous new state.
      name: what the records call the program (default: `fn.__name__`; a lambda's is
        "function").
      out: a folder for results.jsonl, report.md, plots and traces; a later call with the same
        program and arguments resumes there unless `fresh`, one with other arguments adds its
        cells (None: nothing is written).
      fresh: with `out`, move earlier results aside. verbose: print each cell's line (stderr).
      calibrate: measure the copy ceiling once per process (a results folder keeps its own).
      items: what one call processes (`xlafuse.models.Items(51200, "env-steps")`), for its
        throughput in the tables and plots; None: a function is one item per call, in
        "calls", a Workload counts its own.

    Returns:
      A Measurement: print it; `.records` are CellResults.

    Raises:
      XlafuseError: no variant, a variant twice, a variant that does not apply here, that
        XLA rejects or whose option has the wrong type, a PyTorch variant (it runs a zoo
        workload's twin), bad timing settings, a parameter of the wrong type (`profile="yes"`,
        `timing=5`), a program that jax cannot trace with its arguments, an implementation
        the program does not have or the device cannot run, one whose outputs differ from the
        first's in structure, shape or dtype, or an `out` whose records of `name` are of other
        code (all checked before any compile).
    """
    _check_parameters(profile=profile, name=name, out=out, flags=(fresh, calibrate, verbose))
    _check_items(items)
    workload = _workload(fn, args, donate_argnums, name).with_items(items)
    sha256 = _source_sha256(fn) if isinstance(fn, Workload) else program_sha256(fn)
    variants = _variants_of(fn, variants, workload)
    config = _config(workload, sha256, variants, timing, profile, out, calibrate)
    if out is not None and not fresh:
        _check_same_program(Path(out) / records_lib.RESULTS_FILE, workload.name, sha256)
    return _run(config, workload, out, fresh=fresh, calibrate=calibrate, verbose=verbose)


def _check_items(items: Items | None) -> None:
    """Raises XlafuseError unless `items` is an `xlafuse.models.Items` or None."""
    if items is not None and not isinstance(items, Items):
        raise XlafuseError(
            f"measure: items={items!r} is not accepted; accepted: an xlafuse.models.Items "
            '(e.g. Items(51200, "env-steps")) or None'
        )


def _variants_of(fn, variants: Sequence | None, workload: Workload) -> Sequence:
    """The variants `measure` runs: those given (None: "default" and "no-fusion"; "default"
    alone for a dict of functions), each implementation of a dict under each (`crossed`)."""
    if variants is None:
        variants = ("default",) if isinstance(fn, Mapping) else ("default", "no-fusion")
    if isinstance(fn, Mapping):  # each implementation under each variant
        variants = crossed(variants, tuple(workload.implementations))
    return variants


def _run(
    config: ExperimentConfig,
    workload: Workload,
    out: str | Path | None,
    *,
    fresh: bool,
    calibrate: bool,
    verbose: bool,
) -> Measurement:
    """`measure`'s cells through the runner (`run_experiment`): into `out`, or into a
    temporary folder without a report when `out` is None."""
    ceilings = _process_ceilings(jax.default_backend()) if calibrate else None
    stream = sys.stderr if verbose else io.StringIO()
    kwargs = {"built": {workload.name: workload}, "ceilings": ceilings, "stream": stream}
    if out is not None:
        found = run_experiment(config, out=out, fresh=fresh, progress=False, **kwargs)
        return Measurement(tuple(found), Path(out) / records_lib.RESULTS_FILE)
    with tempfile.TemporaryDirectory(prefix="xlafuse-measure-") as folder:
        found = run_experiment(config, out=folder, progress=False, report=False, **kwargs)
    return Measurement(tuple(found))


def _check_parameters(*, profile: Any, name: Any, out: Any, flags: tuple[Any, Any, Any]) -> None:
    """Refuse a parameter of `measure` of the wrong type, in one line naming it, its value and
    what it accepts (before anything is traced)."""
    if profile is not None and not isinstance(profile, bool):
        raise XlafuseError(
            f"measure: profile={profile!r} is not accepted; accepted: True, False or None "
            "(None: trace on a GPU only)"
        )
    for flag, value in zip(("fresh", "calibrate", "verbose"), flags, strict=True):
        if not isinstance(value, bool):
            raise XlafuseError(
                f"measure: {flag}={value!r} is not accepted; accepted: True or False"
            )
    if name is not None and (not isinstance(name, str) or not _is_label(name)):
        raise XlafuseError(
            f"measure: name={name!r} is not accepted; accepted: a label of letters, digits and "
            "'_', '-', '.' (or None: the function's name)"
        )
    if out is not None and not isinstance(out, str | os.PathLike):
        raise XlafuseError(
            f"measure: out={out!r} is not accepted; accepted: a folder (str or Path) or None"
        )


def _is_label(name: str) -> bool:
    return bool(name) and all(c.isalnum() or c in "_-." for c in name)


def _check_same_program(path: Path, name: str, sha256: str | None) -> None:
    """Refuse to add cells of `name` to a results file whose cells of `name` were measured
    from other code (`program_sha256`): their records would be mixed under one name.

    Raises:
      XlafuseError: one line with the two hashes and the ways out.
    """
    if not path.is_file():
        return
    try:
        found = records_lib.parse_file(path)[0]
    except XlafuseError:
        return  # not a results file: the run refuses it in its own words
    other = next((r for r in found if r.workload == name and r.source_sha256 != sha256), None)
    if other is not None:
        raise XlafuseError(
            f"{path} holds {name!r} measured from other code (sha256 "
            f"{_short(other.source_sha256)} there, {_short(sha256)} now: another function "
            "under that name, or its code or file changed): its cells would be mixed with "
            "these; pass fresh=True to move that file aside, another name=, or another out="
        )


def _short(sha256: str | None) -> str:
    return sha256[:12] if sha256 else "none"


def _config(workload, source_sha256, variants, timing, profile, out, calibrate):
    """The one-workload ExperimentConfig a run of `measure`'s cells takes (validated here)."""
    backend = jax.default_backend()
    chosen = _variants(variants, backend, workload=workload)
    cell = WorkloadConfig(workload.name, workload.size, workload.mode, source_sha256=source_sha256)
    return ExperimentConfig(
        name="measure",
        output=Path(out) if out is not None else Path("."),
        workloads=(cell,),
        variants=tuple(chosen),
        reference=chosen[0].name,
        timing=_timing(timing),
        measure=MeasureConfig(
            profile=backend == Backend.GPU if profile is None else bool(profile),
            keep_traces=out is not None,
            calibrate=calibrate,
        ),
    )


@functools.cache
def _process_ceilings(backend: str) -> CeilingsRecord:
    """This process's calibration (`xlafuse.measurement.calibrate`), measured on first use."""
    return ceilings_part(calibrate_ceilings(backend=backend))


def _workload(fn, args, donate_argnums, name) -> Workload:
    """The Workload of `fn(*args)`, traced (nothing compiled); a function's is sized by its
    arguments' types (`arguments_label`). A dict's first function is the workload's own, the
    others its implementations (`user.workload_from`)."""
    if isinstance(fn, Workload):
        if args or donate_argnums:
            raise XlafuseError("measure(workload) takes no arguments: the workload has its own")
        return dataclasses.replace(fn, name=name) if name else fn
    own, others = _functions(fn)
    first = fn[own] if isinstance(fn, Mapping) else fn
    label = name or getattr(first, "__name__", None) or type(first).__name__
    if not _is_label(label):  # a lambda's "<lambda>" is no label
        label = "function"
    workload = user.workload_from(
        (first, args, donate_argnums), label, implementations=others, own=own
    )
    return dataclasses.replace(workload, size=arguments_label(args))


def _functions(fn: Any) -> tuple[str, dict[str, Callable[..., Any]]]:
    """(the own implementation's name, the others by name) of what `measure` was given.

    Raises:
      XlafuseError: not a function, a Workload or a non-empty dict of functions.
    """
    if not isinstance(fn, Mapping):
        if not callable(fn):
            raise XlafuseError(
                f"measure needs a function, a Workload or a dict of functions, not "
                f"{type(fn).__name__}"
            )
        return implementations.OWN, {}
    if not fn:
        raise XlafuseError(
            'measure: an empty dict of functions; give {"xla": f, "mine": g}: the first is '
            "the reference implementation"
        )
    own, *rest = fn
    if not isinstance(own, str) or not callable(fn[own]):
        raise XlafuseError(
            f"measure: {own!r}: {fn[own]!r} is not accepted; accepted: a dict of implementation "
            'names to functions, {"xla": f, "mine": g}'
        )
    return own, {name: fn[name] for name in rest}


def crossed(given: Any, names: Sequence[str]) -> Any:
    """The variants of `given` for the own implementation, then each of them again for each
    implementation of `names` (`impl=NAME`; composed with another variant: `no-fusion+impl=NAME`,
    named so, "default" dropped from the name). `given` as it is when `names` is empty (and
    when it is no list of variants: `_variants` says what is wrong with it).

    Raises:
      XlafuseError: a variant that names an implementation itself (the dict's names do).
    """
    if not names or isinstance(given, str | Mapping) or not isinstance(given, Sequence):
        return given
    try:
        resolved = [VariantConfig.of(spec).resolve() for spec in given]
    except (TypeError, ValueError) as err:
        raise XlafuseError(str(err)) from None
    named = [v.name for v in resolved if v.implementation]
    if named:
        raise XlafuseError(
            f"variant {named[0]!r} names an implementation; with a dict of functions the "
            "dict's names are the implementations: give XLA variants only"
        )
    out = list(given)
    for impl in names:
        part = f"{IMPLEMENTATION_PREFIX}{impl}"
        for spec, v in zip(given, resolved, strict=True):
            label = part if v.name == "default" else f"{v.name}+{part}"
            out.append(label if isinstance(spec, str) else compose(v, part, name=label))
    return out


def arguments_label(args: tuple) -> str:
    """The size of a function's cells: its arguments' types as jax writes them, e.g.
    `f32[256]` or `bf16[8,8],~f32[]` (`~`: a weak type, e.g. `jnp.asarray(2.0)`'s), a static
    leaf (not an array: `xlafuse.compiler.static`) by its value (`f32[8],3,'same'`); `no-args`;
    or `args-` and a hash of their tree structure, types and static values where that list
    would not say it all (a nested structure) or be long."""
    leaves, tree = jax.tree.flatten(args)
    if not leaves and tree == jax.tree.structure(()):
        return "no-args"
    shown = ",".join(_leaf_label(leaf) for leaf in leaves)
    if tree == jax.tree.structure(tuple(leaves)) and len(shown) <= _LABEL_CHARS:
        return shown
    statics = "|".join(_code_text(x, set(), 0) for x in leaves if not static.is_array(x))
    return f"args-{hashlib.sha256(f'{tree}|{shown}|{statics}'.encode()).hexdigest()[:10]}"


def _leaf_label(leaf: Any) -> str:
    """An array leaf's type (`f32[8]`), a static leaf's value (`static.describe`: `3`)."""
    if not static.is_array(leaf):
        return static.describe(leaf)
    typed = jax.typeof(leaf)
    return ("~" if typed.weak_type else "") + typed.str_short(short_dtypes=True)


_LABEL_CHARS = 48  # a longer list of argument types is named by its hash


def _variants(given: Sequence[Any], backend: str, *, workload: Workload) -> list[VariantConfig]:
    if isinstance(given, str | Mapping) or not given:
        raise XlafuseError(
            f"variants must be a non-empty list of presets, option dicts or Variants, not "
            f"{given!r}; e.g. variants=['default', 'no-fusion']"
        )
    try:
        chosen = [VariantConfig.of(spec) for spec in given]
    except (TypeError, ValueError) as err:  # a variant's own one line (UnknownNameError too)
        raise XlafuseError(str(err)) from None
    names = [v.name for v in chosen]
    for config in chosen:
        if names.count(config.name) > 1:
            raise XlafuseError(f"variant {config.name!r} is given twice (names: {names})")
        if config.resolve().framework != Framework.JAX:
            raise XlafuseError(
                f"variant {config.name!r} runs a zoo workload's PyTorch twin; a function has "
                "none (use xlafuse run or compare on a zoo workload)"
            )
        problem = variant_problem(config, backend)
        implementation = config.resolve().implementation
        if problem is None and implementation:
            problem = built_implementation_problem(workload, implementation)
            problem = problem and f"variant {config.name!r}: {problem}"
        if problem:
            raise XlafuseError(problem)
    return chosen


def _timing(timing: TimingSettings | Mapping[str, Any] | None) -> TimingSettings:
    """The timing settings `measure` was given, each field of its type and in its range.

    Raises:
      XlafuseError: not settings, an unknown field, a value of the wrong type or out of range.
    """
    if timing is None:
        return TimingSettings()
    names = [f.name for f in dataclasses.fields(TimingSettings)]
    if isinstance(timing, TimingSettings):
        timing = dataclasses.asdict(timing)
    if not isinstance(timing, Mapping):
        raise XlafuseError(
            f"measure: timing={timing!r} is not accepted; accepted: a TimingSettings, a dict of "
            f"its fields ({', '.join(names)}) or None (the defaults)"
        )
    unknown = sorted(set(timing) - set(names))
    if unknown:
        raise XlafuseError(f"timing: unknown {unknown}; accepted: {sorted(names)}")
    for key, value in timing.items():
        want = numbers.Real if key.endswith("_s") else numbers.Integral
        if isinstance(value, bool) or not isinstance(value, want):
            kind = "a number" if key.endswith("_s") else "an integer"
            raise XlafuseError(f"timing.{key} must be {kind}, not {value!r}")
    settings = TimingSettings(**timing)
    found = timing_problems(settings)
    if found:
        where, message = found[0]
        raise XlafuseError(f"{where} {message}")
    return settings


def _source_sha256(fn: Any) -> str | None:
    """The hash of the file that defines `fn` (None where it has none, e.g. a notebook's)."""
    try:
        path = inspect.getsourcefile(fn)
    except TypeError:
        return None
    if path is None or not Path(path).is_file():
        return None
    return user.file_sha256(path)


def program_sha256(fn: Callable[..., Any] | Mapping[str, Callable[..., Any]]) -> str:
    """SHA-256 (hex) of a function's code: the file that defines it (where it has one, as a
    config entry's), then its code as `_code_text` writes it. Another function, or a change
    to its code, closure values, defaults or the helpers it calls, is another hash. A dict of
    implementations: their names and hashes, in order."""
    if isinstance(fn, Mapping):  # implementations: each one's hash, in order (the first leads)
        text = "|".join(f"{name}={program_sha256(f)}" for name, f in fn.items())
        return hashlib.sha256(text.encode()).hexdigest()
    digest = hashlib.sha256()
    path = _source_file(fn)
    if path is not None:
        digest.update(user.file_sha256(path).encode())
    digest.update(_code_text(fn, set(), 0).encode())
    return digest.hexdigest()


def _source_file(fn: Any) -> str | None:
    try:
        path = inspect.getsourcefile(inspect.unwrap(fn))
    except (TypeError, ValueError):
        return None
    return path if path is not None and Path(path).is_file() else None


_PLAIN = (type(None), bool, int, float, complex, str, bytes)
_DEPTH = 4  # helpers of helpers of ... a function: deep enough for a program, cheap
_SMALL_ARRAY = 1024  # elements of a closed-over array whose values are hashed (else its type)


def _code_text(value: Any, seen: set[int], depth: int) -> str:
    """A deterministic text of what a callable computes (no addresses: the same code in
    another process gives the same text; sets are sorted, as their order is per process)."""
    if isinstance(value, _PLAIN):
        return repr(value)
    if id(value) in seen or depth > _DEPTH:
        return "..."
    seen = seen | {id(value)}
    parts = functools.partial(_code_text, seen=seen, depth=depth + 1)
    if isinstance(value, types.FunctionType):
        return _function_text(value, seen, depth)
    if isinstance(value, types.CodeType):
        consts = ",".join(parts(c) for c in value.co_consts)
        return f"code({value.co_code.hex()};{consts};{value.co_names})"
    if isinstance(value, functools.partial):
        return f"partial({parts(value.func)};{parts(value.args)};{parts(value.keywords)})"
    if isinstance(value, types.MethodType):
        return f"method({type(value.__self__).__qualname__};{parts(value.__func__)})"
    if getattr(value, "__wrapped__", None) is not None:  # jax.jit, functools.wraps
        return f"wrapped({parts(value.__wrapped__)})"
    if isinstance(value, tuple | list):
        return f"[{','.join(parts(v) for v in value)}]"
    if isinstance(value, set | frozenset):
        return f"{{{','.join(sorted(parts(v) for v in value))}}}"
    if isinstance(value, Mapping):
        return f"{{{','.join(sorted(f'{parts(k)}:{parts(v)}' for k, v in value.items()))}}}"
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return _array_text(value)
    if isinstance(value, types.ModuleType):
        return f"module({value.__name__})"
    if isinstance(value, type):
        return f"class({value.__module__}.{value.__qualname__})"
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    call = next((vars(k)["__call__"] for k in type(value).__mro__ if "__call__" in vars(k)), None)
    return f"{kind}({parts(call)})" if isinstance(call, types.FunctionType) else kind


def _function_text(fn: types.FunctionType, seen: set[int], depth: int) -> str:
    """Its code, defaults, closure values, and the functions and constants of its module that
    it names (a notebook's helpers have no file to hash)."""
    parts = functools.partial(_code_text, seen=seen, depth=depth + 1)
    cells = []
    for cell in fn.__closure__ or ():
        try:
            cells.append(parts(cell.cell_contents))
        except ValueError:  # a cell not yet filled
            cells.append("<empty>")
    named = [
        f"{n}={parts(fn.__globals__[n])}"
        for n in sorted(_names(fn.__code__))
        if n in fn.__globals__ and _own_global(fn.__globals__[n], fn)
    ]
    defaults = (fn.__defaults__, fn.__kwdefaults__)
    return f"function({parts(fn.__code__)};{parts(defaults)};{cells};{named})"


def _names(code: types.CodeType) -> set[str]:
    """The global and attribute names a code object and the code nested in it use."""
    nested = (c for c in code.co_consts if isinstance(c, types.CodeType))
    return set(code.co_names).union(*(_names(c) for c in nested))


def _own_global(value: Any, fn: types.FunctionType) -> bool:
    """A module-level name worth hashing with `fn`: a constant, or a function of its module."""
    if isinstance(value, _PLAIN):
        return True
    return isinstance(value, types.FunctionType) and value.__module__ == fn.__module__


def _array_text(array: Any) -> str:
    """A closed-over array: its type, and its values when it is small (a constant of the
    program: folded into it); a large one (weights) by its type alone."""
    text = f"array({array.dtype}{list(array.shape)})"
    size = getattr(array, "size", None)
    if isinstance(size, int) and size <= _SMALL_ARRAY:
        with contextlib.suppress(Exception):  # an abstract or deleted array: its type only
            text += hashlib.sha256(np.asarray(array).tobytes()).hexdigest()[:16]
    return text
