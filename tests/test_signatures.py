"""The boundaries between layers take named values: options after `*`, annotated; the values
handed across (a compiled program, a reference, the runner's run context) built from named fields
and frozen; a cell's id made in one place (issue 45)."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
from pathlib import Path

import pytest

import xlafuse
from xlafuse.compiler import jit
from xlafuse.experiment import plan, runner
from xlafuse.measurement import cell_kernels, reference

PACKAGE = Path(xlafuse.__file__).resolve().parent

BOUNDARIES = [
    runner.run_experiment,
    cell_kernels.kernel_fields,
    jit.compile_workload,
    jit.compile_variant,
    reference.time_against,
    plan.scope_of,
    plan.take_folder,
]


@pytest.mark.parametrize("fn", BOUNDARIES, ids=lambda fn: fn.__name__)
def test_a_boundary_takes_its_options_after_the_star_and_annotates_them(fn):
    params = inspect.signature(inspect.unwrap(fn)).parameters.values()
    positional_options = [
        p.name
        for p in params
        if p.default is not p.empty and p.kind is not inspect.Parameter.KEYWORD_ONLY
    ]
    unannotated = [p.name for p in params if p.annotation is p.empty]
    assert (positional_options, unannotated) == ([], [])


NAMED_VALUES = [
    jit.CompiledVariant,
    jit.ChildMeasurement,
    reference.Reference,
    runner._Run,
    plan.Scope,
    plan.RunCell,
    plan.Taken,
    runner._Outcome,
    runner._Referenced,
]


@pytest.mark.parametrize("cls", NAMED_VALUES, ids=lambda cls: cls.__name__)
def test_a_value_handed_across_is_frozen_and_built_from_named_fields(cls):
    params = dataclasses.fields(cls)
    assert cls.__dataclass_params__.frozen
    assert [f.name for f in params if not f.kw_only] == []


def test_a_compiled_variant_is_called_through_its_runner_and_never_changed():
    calls = []
    compiled = jit.CompiledVariant(
        variant=None, backend="cpu", compiled=None, hlo_text="", lower_s=0.0, compile_s=0.0,
        runner=lambda *args: calls.append(args) or "ran",
    )  # fmt: skip
    wrapped = compiled.calling_through(lambda call: lambda x: call(x, "static"))
    assert (wrapped(1), compiled(2), calls) == ("ran", "ran", [(1, "static"), (2,)])
    with pytest.raises(dataclasses.FrozenInstanceError):
        compiled.runner = None


def test_a_run_makes_a_cells_id_in_one_place():
    made = []
    for path in (PACKAGE / "experiment" / "runner.py", PACKAGE / "experiment" / "plan.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "cell_id":
                made.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert len(made) == 1 and made[0].startswith("experiment/plan.py:"), made


def test_the_runner_patches_and_copies_no_run_context():
    """No `run.X = ...` and no `dataclasses.replace` of a run context in the runner."""
    found = []
    for name in ("runner.py", "plan.py"):
        tree = ast.parse((PACKAGE / "experiment" / name).read_text())
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                if isinstance(target, ast.Attribute) and getattr(target.value, "id", "") == "run":
                    found.append(f"{name}:{node.lineno}: run.{target.attr} =")
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "replace":
                first = node.args[0] if node.args else None
                if getattr(first, "id", "") in ("run", "scope"):
                    found.append(f"{name}:{node.lineno}: replace({first.id}, ...)")
    assert found == []


def _xlafuse_names(tree: ast.Module) -> dict[str, object]:
    """The names a module binds to xlafuse's modules and functions, aliases included."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("xlafuse"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                found = getattr(module, alias.name, None)
                if found is None:  # a submodule not yet imported by its package
                    found = importlib.import_module(f"{node.module}.{alias.name}")
                names[alias.asname or alias.name] = found
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("xlafuse"):
                    module = importlib.import_module(alias.name)
                    names[alias.asname or "xlafuse"] = module if alias.asname else xlafuse
    return names


def _calls_that_do_not_bind(source: str) -> list[str]:
    """Each call of an xlafuse function or class, reached through the module's imports (aliases
    included), whose arguments its signature refuses: a positional option, say. Found here, such
    a call on a path the CPU suite never runs (a GPU's) does not wait for the device to fail."""
    tree = ast.parse(source)
    names = _xlafuse_names(tree)
    refused = []
    for call in (node for node in ast.walk(tree) if isinstance(node, ast.Call)):
        attributes, head = [], call.func
        while isinstance(head, ast.Attribute):
            attributes.append(head.attr)
            head = head.value
        if not isinstance(head, ast.Name) or head.id not in names:
            continue
        target = names[head.id]
        for attribute in reversed(attributes):
            target = getattr(target, attribute, None)
        unpacked = any(isinstance(a, ast.Starred) for a in call.args) or any(
            k.arg is None for k in call.keywords
        )
        if not (inspect.isfunction(target) or inspect.isclass(target)) or unpacked:
            continue
        try:
            signature = inspect.signature(target)
        except ValueError:  # a builtin class's, which Python does not describe
            continue
        try:
            signature.bind(*call.args, **{k.arg: k for k in call.keywords})
        except TypeError as refusal:
            refused.append(f"{call.lineno}: {ast.unparse(call.func)}: {refusal}")
    return refused


OPTIONAL_EXTRAS = ("torch", "tokamax")


def _sources_importing_xlafuse() -> list[Path]:
    """The project's Python files whose xlafuse imports resolve in this venv (those of the
    optional extras' modules may not)."""
    roots = [PACKAGE, *(PACKAGE.parent / d for d in ("tests", "benchmarks", "experiments"))]
    sources = []
    for path in (p for root in roots for p in sorted(root.rglob("*.py"))):
        try:
            _xlafuse_names(ast.parse(path.read_text()))
        except ModuleNotFoundError as missing:
            if missing.name not in OPTIONAL_EXTRAS:
                raise
            continue
        sources.append(path)
    return sources


def test_every_call_of_an_xlafuse_function_binds_to_its_signature():
    refused = [
        f"{path.relative_to(PACKAGE.parent)}:{line}"
        for path in _sources_importing_xlafuse()
        for line in _calls_that_do_not_bind(path.read_text())
    ]
    assert refused == []


def test_the_binding_check_finds_a_positional_option_through_an_alias():
    source = (
        "from xlafuse.measurement.calibrate import calibrate as calibrate_ceilings\n"
        "from xlafuse.measurement import calibrate as calibrate_module\n"
        "calibrate_ceilings('gpu')\n"
        "calibrate_ceilings(backend='gpu')\n"
        "calibrate_module.calibrate('gpu', copy_bytes=1)\n"
    )
    assert [r.split(":")[0] for r in _calls_that_do_not_bind(source)] == ["3", "5"]
