"""Every broad catch in xlafuse/ is kept on purpose (issue 45).

A broad catch is `except Exception`, `except BaseException`, a bare `except:` or the user's
code's `USER_CODE_ERRORS`. Each is either narrowed to what the call can raise (its reason in a
comment at the site) or kept at a boundary that turns whatever was raised into one line: for the
user (the command line's last handler), or in a record (a cell's error, which the sweep goes on
past). A handler whose last statement is a bare `raise` (it cleans up, or tells the other
processes, and raises the same) catches nothing, and is not one. `KEPT` lists the rest, by
module and function, with the reason: a new broad catch fails here until it is narrowed or
listed.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import jax.numpy as jnp
import pytest

import xlafuse
from xlafuse.compiler import jit

PACKAGE = Path(xlafuse.__file__).resolve().parent
BROAD = {"Exception", "BaseException", "USER_CODE_ERRORS"}

# (module, function) -> (broad catches there, why each is kept)
KEPT: dict[tuple[str, str], tuple[int, str]] = {
    ("cli/__init__.py", "main"): (
        1,
        "the command line's last handler: anything raised is one line, `xlafuse CMD: failed: "
        "TYPE: ...` (exit 1; --debug shows the traceback)",
    ),
    ("experiment/runner.py", "_run_workload"): (
        1,
        "a workload that cannot be built (the user's code, an out-of-memory): each of its "
        "cells is a record of status error holding the line; the sweep goes on",
    ),
    ("experiment/runner.py", "_measured_cell"): (
        1,
        "one cell's failure (a compile error, an out-of-memory, XLA rejecting an option) is "
        "its record's error line; the sweep goes on",
    ),
    ("experiment/runner.py", "_recompiled_reference"): (
        1,
        "a recorded reference that cannot be compiled again: the line is every other cell's "
        "`reference_error`, and they are timed apart",
    ),
    ("experiment/runner.py", "_missed_fusions"): (
        1,
        "the report's missed fusions of a measured cell: a failure is their record's error "
        "line, never the cell's",
    ),
    ("experiment/runner.py", "_twin"): (
        1,
        "XLA's cost model of a traced GPU cell (a second compile): a failure is the record's "
        "`cost_model` error line, never the cell's",
    ),
    ("experiment/runner.py", "_report_after_failure"): (
        1,
        "a run ending on its own error: a report that cannot be written is one line, `report "
        "not written: ...`, so that the run's error is the one raised",
    ),
    ("measurement/cell_kernels.py", "_diff"): (
        2,
        "the kernel diff and XLA's fusion decisions of a traced cell: a failure is the "
        "record's `kernel_diff` (or `decisions`) error line, never the cell's",
    ),
    ("models/user.py", "import_target"): (
        1,
        "the user's code, imported: anything it raises (sys.exit too) is one EntryError line",
    ),
    ("models/user.py", "build_entry"): (
        1,
        "the user's code, called: anything it raises is one EntryError line",
    ),
    ("models/implementations.py", "_traced"): (
        1,
        "the user's implementation of a workload, traced by jax.make_jaxpr: anything it raises "
        "is one XlafuseError line",
    ),
    ("models/user.py", "_trace"): (
        1,
        "the user's code, traced by jax.eval_shape: anything it raises is one EntryError line",
    ),
    ("folders.py", "write_atomically"): (
        1,
        "cleanup: the temporary file removed on any exit; an OSError is one XlafuseError line, "
        "anything else raised as it is",
    ),
    ("results/records.py", "_append_or_cut_back"): (
        1,
        "cleanup: a record written in part is cut off on any exit (a Ctrl-C included); an "
        "OSError is one line naming the file, anything else raised as it is",
    ),
    ("experiment/config_workloads.py", "_returned"): (
        1,
        "the user's code, called to read the mode it returns: when it raises, the config "
        "infers nothing and the run's build says what is wrong (one line)",
    ),
}


def _is_broad(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(
        (isinstance(n, ast.Name) and n.id in BROAD)
        or (isinstance(n, ast.Attribute) and n.attr in BROAD)
        for n in names
    )


def _reraises(handler: ast.ExceptHandler) -> bool:
    last = handler.body[-1]
    return isinstance(last, ast.Raise) and last.exc is None


def broad_catches(root: Path) -> Counter:
    """(module, innermost function) -> how many broad catches there that do not re-raise."""
    found: Counter = Counter()
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root).as_posix()

        def visit(node: ast.AST, function: str, module: str = module) -> None:
            for child in ast.iter_child_nodes(node):
                inner = function
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    inner = child.name
                broad = isinstance(child, ast.ExceptHandler) and _is_broad(child)
                if broad and not _reraises(child):
                    found[module, function] += 1
                visit(child, inner)

        visit(ast.parse(path.read_text()), "<module>")
    return found


def test_every_broad_catch_is_a_boundary_listed_with_its_reason():
    found = broad_catches(PACKAGE)
    assert dict(found) == {site: count for site, (count, _) in KEPT.items()}


def test_the_scan_sees_broad_catches_and_passes_a_re_raise(tmp_path):
    (tmp_path / "m.py").write_text(
        "def f():\n"
        "    try:\n        pass\n    except Exception:\n        return None\n"
        "    try:\n        pass\n    except (OSError, BaseException) as err:\n        raise\n"
        "    try:\n        pass\n    except:\n        pass\n"
        "    try:\n        pass\n    except ValueError:\n        pass\n"
        "class C:\n    def g(self):\n        try:\n            pass\n"
        "        except user.USER_CODE_ERRORS:\n            pass\n"
    )
    assert broad_catches(tmp_path) == {("m.py", "f"): 2, ("m.py", "g"): 1}


class _Analyses:
    """A `jax.stages.Compiled` whose analyses raise `error`."""

    def __init__(self, error: BaseException):
        self.error = error

    def cost_analysis(self):
        raise self.error

    def memory_analysis(self):
        raise self.error


def _compiled(error: BaseException) -> jit.CompiledVariant:
    return jit.CompiledVariant(
        variant=None, backend="cpu", compiled=_Analyses(error), hlo_text="", lower_s=0.0,
        compile_s=0.0,
    )  # fmt: skip


def test_an_analysis_xla_cannot_make_is_none_and_a_bug_is_raised():
    unavailable = _compiled(NotImplementedError("cost analysis unsupported"))
    assert (unavailable.cost_analysis(), unavailable.memory_analysis()) == (None, None)
    with pytest.raises(TypeError, match=r"^a bug$"):
        _compiled(TypeError("a bug")).cost_analysis()
    with pytest.raises(KeyError):
        _compiled(KeyError("a bug")).memory_analysis()


def test_xla_rejecting_an_options_value_is_one_value_error_with_xlas_message():
    with pytest.raises(ValueError) as raised:
        jit.compile_variant(
            lambda x: x + 1, (jnp.ones(()),), {}, {"xla_backend_optimization_level": "x"}
        )
    assert str(raised.value).endswith(
        "XLA rejected its options: INVALID_ARGUMENT: While setting option "
        "xla_backend_optimization_level, 'x' is not a valid int32 value."
    )
