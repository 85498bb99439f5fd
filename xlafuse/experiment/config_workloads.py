"""A config's `imports` and `[[workloads]]` tables -> `WorkloadConfig`s, each checked: a zoo
workload against the registry (names, sizes, modes, dtypes, overrides, the mesh), a program of
the user's (`entry`) against its FUNCTION (its overrides, its mode, its implementations)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax

from xlafuse.compiler import variants
from xlafuse.compiler.devices import device_count_problem
from xlafuse.compiler.variants import BACKENDS
from xlafuse.errors import XlafuseError
from xlafuse.experiment.config_problems import (
    as_table,
    check_choice,
    check_keys,
    type_name,
    typed_field,
)
from xlafuse.experiment.config_types import WorkloadConfig
from xlafuse.kinds import Backend
from xlafuse.models import implementations, registry, user
from xlafuse.models.sharding import MODEL_PARALLEL_WORKLOADS, PARALLELISMS
from xlafuse.models.workload import ITEMS_UNIT, Items, Workload, items_problem

if TYPE_CHECKING:
    from xlafuse.experiment.config_problems import Problems

_WORKLOAD_KEYS = (
    "name", "entry", "size", "mode", "dtype", "overrides", "backends", "devices", "parallelism",
    "items", "items_unit", "implementations",
)  # fmt: skip
# What a user entry cannot be given: FUNCTION decides its size and dtype, on one device.
_NOT_FOR_ENTRIES = ("size", "dtype", "devices", "parallelism")


def parse_imports(problems: Problems, value: Any, base: Path | None) -> list[str]:
    """Imports the user's files and modules (relative files: to the config's folder) first, so
    that the workloads they register are names the rest of the config may use."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        problems.add("imports", 'must be an array of files or modules, e.g. ["my_models.py"]')
        return []
    for i, target in enumerate(value):
        try:
            user.import_target(target, base=base)
        except XlafuseError as err:
            problems.add(f"imports[{i}]", str(err))
    return list(value)


def parse_workloads(
    problems: Problems, value: Any, backend: str, base: Path | None
) -> list[WorkloadConfig]:
    if value is None:
        problems.add("workloads", "missing: add at least one [[workloads]] table")
        return []
    if not isinstance(value, list) or not value:
        problems.add("workloads", "must be a non-empty array of tables ([[workloads]])")
        return []
    out = []
    named: dict[str, tuple[str | None, str]] = {}  # label -> (its entry, where it was given)
    cells: dict[tuple[str, str], str] = {}  # (cell, backend) -> where it was given
    for i, item in enumerate(value):
        where = f"workloads[{i}]"
        workload = _with_items(
            problems, where, item, _parse_workload(problems, where, item, backend, base)
        )
        if workload is None:
            continue
        earlier = named.setdefault(workload.name, (workload.entry, where))
        if earlier[0] != workload.entry:  # two programs under one label would share cells
            shown = f"entry {earlier[0]!r}" if earlier[0] else "the zoo workload"
            problems.add(f"{where}.name", f"{workload.name!r} already names {shown} ({earlier[1]})")
            continue
        if not _check_listed_once(problems, where, workload, cells):
            continue
        out.append(workload)
    return out


# --- items per call (issue 44): a workload table's `items` and `items_unit` ---------------


def _with_items(problems, where, item, workload: WorkloadConfig | None) -> WorkloadConfig | None:
    """`workload` counting the table's `items = N` (`items_unit = "env-steps"`, "items" when
    left out) per call; unchanged without `items`; None with a problem (added to `problems`)."""
    if not isinstance(item, Mapping) or ("items" not in item and "items_unit" not in item):
        return workload
    count, unit = item.get("items"), item.get("items_unit", ITEMS_UNIT)
    if count is None:
        problems.add(f"{where}.items_unit", "goes with items = N (items one call processes)")
        return None
    problem = items_problem(count, unit)
    if problem:
        key = "items" if items_problem(count, ITEMS_UNIT) else "items_unit"
        problems.add(f"{where}.{key}", problem)
        return None
    return workload and dataclasses.replace(workload, items=Items(count, unit))


# ----------------------------------------------------------------------------------------


def _check_listed_once(problems, where, workload: WorkloadConfig, cells) -> bool:
    """A workload's cells on a backend are named by one table only (a second would measure
    them again, as a variant listed twice would)."""
    keys = [(workload.cell.cell_id("", ""), b) for b in workload.backends]
    earlier = next((cells[k] for k in keys if k in cells), None)
    if earlier is not None:
        problems.add(
            where,
            f"{workload.label} is listed twice (also {earlier}): each cell is measured once; "
            "remove one, or give it another size, mode, dtype or overrides",
        )
        return False
    cells.update(dict.fromkeys(keys, where))
    return True


def _parse_workload(problems, where, item, backend, base) -> WorkloadConfig | None:
    if isinstance(item, str):
        item = {"name": item}
    if not isinstance(item, Mapping):
        problems.add(where, f"must be a table or a workload name, not {type_name(item)}")
        return None
    check_keys(problems, f"{where}.", item, _WORKLOAD_KEYS)
    if "entry" in item:
        return _parse_entry(problems, where, item, base, backend)
    start = len(problems.items)
    if "implementations" in item:
        problems.add(
            f"{where}.implementations",
            "is for an entry (FILE.py:FUNCTION); a zoo workload's implementations come with it "
            "(`xlafuse workloads`): list them as variants, impl=NAME",
        )
    name = typed_field(problems, f"{where}.name", item.get("name"), str)
    size = typed_field(problems, f"{where}.size", item.get("size", "tiny"), str)
    mode = typed_field(problems, f"{where}.mode", item.get("mode", "forward"), str)
    dtype = typed_field(problems, f"{where}.dtype", item.get("dtype"), str, optional=True)
    overrides = dict(as_table(problems, f"{where}.overrides", item.get("overrides", {})))
    backends = _parse_backends(problems, f"{where}.backends", item.get("backends", list(BACKENDS)))
    devices = typed_field(problems, f"{where}.devices", item.get("devices", 1), int)
    parallelism = typed_field(
        problems, f"{where}.parallelism", item.get("parallelism", "data"), str
    )
    # A workload meant for other backends only is still checked, as it would be on the first;
    # every field that has a value is checked even when another has a problem (one pass).
    check_on = backend if backend in backends or not backends else backends[0]
    _check_mesh(problems, where, name, devices, parallelism, check_on)
    if name is not None:
        # A field of the wrong type (reported above) is checked as its default meanwhile.
        size_or_default = "tiny" if size is None else size
        mode_or_default = "forward" if mode is None else mode
        _check_workload(
            problems, where, name, size_or_default, mode_or_default, dtype, overrides, check_on
        )
    if len(problems.items) != start:
        return None
    source_sha256 = registry.source_sha256(name)
    return WorkloadConfig(
        name, size, mode, dtype, overrides, backends, devices, parallelism, None, source_sha256
    )


def _parse_entry(problems, where, item, base, backend) -> WorkloadConfig | None:
    """A `[[workloads]]` table with `entry`: a program of the user's (`xlafuse.models.user`).

    Its function is found and its overrides checked against its parameters. Where it runs
    (`backend` is this process's and one of its `backends`), FUNCTION is called once to learn
    its mode (`_returned`): a `mode` left out is that mode, one given that differs is a
    problem. The call makes FUNCTION's arrays and drops them; nothing is traced or compiled,
    and what it returns is checked when the run builds it. A FUNCTION that raises here, or that
    does not run here, keeps the given mode ("forward" when none), and the run records its
    error.
    """
    start = len(problems.items)
    spec = typed_field(problems, f"{where}.entry", item.get("entry"), str)
    implementations = _parse_implementations(problems, where, item.get("implementations"), base)
    _check_not_for_entries(problems, where, item)
    given = typed_field(problems, f"{where}.mode", item.get("mode"), str, optional=True)
    check_choice(problems, f"{where}.mode", given, registry.MODES, "mode")
    overrides = dict(as_table(problems, f"{where}.overrides", item.get("overrides", {})))
    backends = _parse_backends(problems, f"{where}.backends", item.get("backends", list(BACKENDS)))
    entry, source_sha256 = _found_entry(problems, where, spec, base, overrides)
    function = entry.function if entry is not None else None
    name = typed_field(problems, f"{where}.name", item.get("name", function), str, optional=True)
    if name is not None:
        _check_entry_name(problems, f"{where}.name", name, function or name)
    if len(problems.items) != start or name is None:
        return None
    runs_here = backend in backends and backend == jax.default_backend()
    returned = _returned(entry, overrides) if runs_here else None
    if (
        runs_here
        and implementations
        and not _traced_implementations(problems, where, entry, overrides, implementations)
    ):
        return None
    if _mode_differs(problems, where, spec, given, returned):
        return None
    return WorkloadConfig(
        name,
        size=user.ENTRY_SIZE,
        mode=given or (returned[0] if returned else "forward"),
        overrides=overrides,
        backends=backends,
        entry=spec,
        source_sha256=_with_sources(source_sha256, entry, implementations),
        base=base,
        implementations={n: e.spec for n, e in implementations.items()},
    )


def _check_not_for_entries(problems, where, item) -> None:
    """An entry's table gives none of `_NOT_FOR_ENTRIES` (FUNCTION decides its size and dtype,
    on one device)."""
    for key in _NOT_FOR_ENTRIES:
        if key in item:
            problems.add(
                f"{where}.{key}",
                "not for an entry: FUNCTION's overrides decide a program of the user's "
                "(its size and dtype), on one device",
            )


def _found_entry(problems, where, spec, base, overrides) -> tuple[user.Entry | None, str | None]:
    """The entry `spec` names (its function found, `overrides` checked against its parameters)
    and its source hash; no hash with a problem (added to `problems`), and no entry either
    where it was not found."""
    entry = None
    if spec is None:
        return entry, None
    try:
        entry = user.parse_entry(spec, base=base)
        user.check_overrides(entry, overrides)
        return entry, user.source_sha256(entry)
    except XlafuseError as err:
        problems.add(f"{where}.entry", str(err))
        return entry, None


def _mode_differs(problems, where, spec, given, returned) -> bool:
    """Whether the `mode` given differs from the one FUNCTION returns (`_returned`); the
    problem added where it does."""
    if given is None or returned is None or given == returned[0]:
        return False
    mode, what = returned
    problems.add(
        f"{where}.mode",
        f"{given!r}, but entry {spec!r} returns {what}, measured as mode {mode!r}: leave "
        f'mode out (it is what FUNCTION returns) or set mode = "{mode}"',
    )
    return True


# --- an entry's implementations (issue 46) ------------------------------------------------


def _parse_implementations(problems, where, value, base) -> dict[str, user.Entry]:
    """An entry's `implementations` table, name -> `FILE.py:FUNCTION`: each name one an
    `impl=NAME` part can give (not "xla", the entry's own program), each function found
    (its file imported; it is not called)."""
    if value is None:
        return {}
    table = as_table(problems, f"{where}.implementations", value)
    found = {}
    for name, spec in table.items():
        at = f"{where}.implementations.{name}"
        problem = variants.implementation_problem(name)
        if problem is None and name == implementations.OWN:
            problem = f"{name!r} is the entry's own program; give its other implementations"
        if problem:
            problems.add(at, problem)
            continue
        spec = typed_field(problems, at, spec, str)
        try:
            entry = user.parse_entry(spec, base=base) if spec is not None else None
            if entry is not None:
                user.load_function(entry)
                found[name] = entry
        except XlafuseError as err:
            problems.add(at, str(err))
    return found


def _traced_implementations(problems, where, entry, overrides, found) -> bool:
    """Whether the entry's implementations trace with its arguments to its program's outputs
    (`user.build_entry`: FUNCTION called, nothing compiled); the problem added where not."""
    try:
        user.build_entry(entry, overrides=overrides, implementations=found)
    except XlafuseError as err:
        problems.add(f"{where}.implementations", str(err).splitlines()[0])
        return False
    return True


def _with_sources(sha256: str | None, entry, found: Mapping[str, user.Entry]) -> str | None:
    """The entry's source hash, with the files of its implementations where they are other
    files than the entry's (a changed kernel file is a changed cell)."""
    if sha256 is None or not found:
        return sha256
    files = user.entry_sources(entry)
    more = {k: v for e in found.values() for k, v in user.entry_sources(e).items()}
    if set(more) <= set(files):
        return sha256
    return user.sources_sha256({**files, **more})


def _returned(entry: user.Entry, overrides: Mapping[str, Any]) -> tuple[str, str] | None:
    """The mode of what `entry`'s FUNCTION returns with `overrides`, as the command line infers
    it (`xlafuse.models.user.workload_from`), and that return in words: a Workload's own mode,
    "train" for a step `(fn, args, donate_argnums)` that donates, else "forward". None when
    FUNCTION raises or returns another shape: the run's build says what is wrong.

    FUNCTION is called (it makes its arrays, which are dropped); nothing is traced.
    """
    try:
        result = user.load_function(entry)(**overrides)
    except user.USER_CODE_ERRORS:
        return None
    if isinstance(result, Workload):
        return result.mode, f"a Workload in mode {result.mode!r}"
    result, _ = user.without_items(result)  # an Items at the end says nothing of the mode
    if not isinstance(result, tuple | list) or len(result) not in (2, 3):
        return None
    donate = result[2] if len(result) == 3 else ()
    one = isinstance(donate, int) and not isinstance(donate, bool)
    if one or (isinstance(donate, tuple | list) and donate):
        return "train", "a step (fn, args, donate_argnums)"
    return "forward", "a forward program (fn, args)"


def _check_entry_name(problems, where, name, function) -> None:
    """An entry's label is neither a zoo workload's name nor a spec (`:` or `/`)."""
    if name in registry.available() or ":" in name or "/" in name:
        what = "a zoo workload's name" if name in registry.available() else "no label (: or /)"
        problems.add(
            where, f'{name!r} is {what}; give the entry another name (name = "my_{function}")'
        )


def _check_mesh(problems, where, name, devices, parallelism, backend) -> None:
    """The device count and the parallelism (each when it has a value of its type)."""
    problem = device_count_problem(devices, backend=backend) if devices is not None else None
    if problem:
        problems.add(f"{where}.devices", problem)
    check_choice(problems, f"{where}.parallelism", parallelism, PARALLELISMS, "parallelism")
    if parallelism == "model" and name is not None and name not in MODEL_PARALLEL_WORKLOADS:
        problems.add(
            f"{where}.parallelism",
            f"'model' has no sharding rule for {name!r} "
            f"(accepted: {', '.join(MODEL_PARALLEL_WORKLOADS)}; or 'data')",
        )


def _check_workload(problems, where, name, size, mode, dtype, overrides, backend) -> None:
    """The registry's problems with the workload and its override values, GPU-only options."""
    before = len(problems.items)
    found = registry.problems(name, size=size, mode=mode, dtype=dtype, overrides=overrides)
    for field, message in found:
        problems.add(f"{where}.{field}", message)
    if found and found[0][0] == "name":
        return
    if overrides.get("implementation") == "cudnn" and backend != Backend.GPU:
        problems.add(
            f"{where}.overrides.implementation",
            f"'cudnn' needs a GPU; the backend is {backend!r} (use 'xla')",
        )
    if len(problems.items) != before or backend != jax.default_backend():
        return
    # Builders may ask the running backend (cudnn needs a GPU): only build where it runs.
    for field, message in registry.problems(
        name, size=size, mode=mode, dtype=dtype, overrides=overrides, build=True
    ):
        problems.add(f"{where}.{field}", message)


def _parse_backends(problems, where, value) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(b, str) for b in value):
        problems.add(where, f"must be a non-empty array of backend names ({', '.join(BACKENDS)})")
        return ()
    for name in value:
        check_choice(problems, where, name, BACKENDS, "backend")
    return tuple(b for b in value if b in BACKENDS)
