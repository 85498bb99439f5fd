"""xlafuse: see what XLA's kernel fusion does to real JAX/Flax models.

Public surface:
  compile(fn, variant=...)       jax.jit under a fusion variant; `.compile(*args)` -> CompiledVariant
  compare(fn, *args, variants=)  several variants of one function in one table (compile + one call)
  measure(fn, *args, variants=)  a run's cells of one function: timed, judged, traced on a GPU
  analyze_hlo(text_or_path)      FusionReport of optimized HLO text or a file
  collectives_of_text(text)      CollectiveReport: the collectives of a sharded program's HLO
  variants                       the presets, `variants.get`, `variants.compose`, `Variant`
  models                         the Flax workloads (`models.build`, `models.available`)
  run_experiment(config)         run a TOML experiment config; `write_report(results.jsonl)`
  warmup(...), measure_cold_start(cell)   persistent cache and cold-start figures
  Cell(name, size, mode, ...)    a workload cell's one name: `.label`, `.cell_id()`, `.build()`
"""

from __future__ import annotations

import importlib
import types
from typing import TYPE_CHECKING

# name -> the module that defines it. Imported on first use (PEP 562): `import xlafuse` and the
# command line start without JAX, which reading HLO (`xlafuse inspect DUMP`) does not need.
_EXPORTS = {
    "Cell": "xlafuse.models.names",
    "CellResult": "xlafuse.results.records",
    "ColdStartResult": "xlafuse.measure.coldstart",
    "CollectiveReport": "xlafuse.hlo.collectives",
    "Comparison": "xlafuse.experiment.compare",
    "CompiledVariant": "xlafuse.compile.jit",
    "ExperimentConfig": "xlafuse.experiment.config",
    "FusedFunction": "xlafuse.compile.jit",
    "FusionReport": "xlafuse.hlo",
    "HloParseError": "xlafuse.errors",
    "KernelInfo": "xlafuse.hlo",
    "Measurement": "xlafuse.experiment.measure_fn",
    "NumericDiff": "xlafuse.measure.numerics",
    "UnknownNameError": "xlafuse.errors",
    "UnknownPassError": "xlafuse.errors",
    "Variant": "xlafuse.compile.variants",
    "VariantRow": "xlafuse.experiment.compare",
    "WarmupSummary": "xlafuse.experiment.warmup",
    "XlafuseError": "xlafuse.errors",
    "analyze_hlo": "xlafuse.hlo",
    "collectives_of_text": "xlafuse.hlo.collectives",
    "compare": "xlafuse.experiment.compare",
    "compare_outputs": "xlafuse.measure.numerics",
    "compile": "xlafuse.compile.jit",
    "load_config": "xlafuse.experiment.config",
    "measure_cold_start": "xlafuse.measure.coldstart",
    "run_experiment": "xlafuse.experiment.runner",
    "warmup": "xlafuse.experiment.warmup",
    "write_report": "xlafuse.report.markdown",
}
_MODULES = {"models": "xlafuse.models", "variants": "xlafuse.compile.variants"}

if TYPE_CHECKING:  # what the names are, for type checkers and editors
    from xlafuse import models
    from xlafuse.compile import variants
    from xlafuse.compile.jit import CompiledVariant, FusedFunction, compile
    from xlafuse.compile.variants import Variant
    from xlafuse.errors import HloParseError, UnknownNameError, UnknownPassError, XlafuseError
    from xlafuse.experiment.compare import Comparison, VariantRow, compare
    from xlafuse.experiment.config import ExperimentConfig, load_config
    from xlafuse.experiment.measure_fn import Measurement
    from xlafuse.experiment.runner import run_experiment
    from xlafuse.experiment.warmup import WarmupSummary, warmup
    from xlafuse.hlo import FusionReport, KernelInfo, analyze_hlo
    from xlafuse.hlo.collectives import CollectiveReport, collectives_of_text
    from xlafuse.measure.coldstart import ColdStartResult, measure_cold_start
    from xlafuse.measure.numerics import NumericDiff, compare_outputs
    from xlafuse.models.names import Cell
    from xlafuse.report.markdown import write_report
    from xlafuse.results.records import CellResult


# `xlafuse.compile` is the function, not the subpackage of that name. Importing a subpackage
# binds its name on the package; so the subpackage (no JAX) is loaded here, once, and its name
# taken off again: later imports of `xlafuse.compile.*` find it loaded and bind nothing here.
importlib.import_module("xlafuse.compile")
del globals()["compile"]


class _MeasurePackage(types.ModuleType):
    """`xlafuse.measure` is the subpackage (`import xlafuse.measure.timing as t` must keep
    working, and the import system binds the name to it) and, called, the function
    `xlafuse.experiment.measure_fn.measure`: `xlafuse.measure(fn, *args, variants=...)`."""

    def __call__(self, fn, *args, **kwargs):
        """`xlafuse.experiment.measure_fn.measure(fn, *args, **kwargs)`: see its docstring."""
        from xlafuse.experiment.measure_fn import measure as measure_function  # JAX: on use

        return measure_function(fn, *args, **kwargs)


importlib.import_module("xlafuse.measure").__class__ = _MeasurePackage


def __getattr__(name: str):
    if name in _MODULES:
        value = importlib.import_module(_MODULES[name])
    elif name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    else:
        raise AttributeError(f"module 'xlafuse' has no attribute {name!r}")
    globals()[name] = value  # found once; later reads skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "Cell",
    "CellResult",
    "ColdStartResult",
    "CollectiveReport",
    "Comparison",
    "CompiledVariant",
    "ExperimentConfig",
    "FusedFunction",
    "FusionReport",
    "HloParseError",
    "KernelInfo",
    "Measurement",
    "NumericDiff",
    "UnknownNameError",
    "UnknownPassError",
    "Variant",
    "VariantRow",
    "WarmupSummary",
    "XlafuseError",
    "analyze_hlo",
    "collectives_of_text",
    "compare",
    "compare_outputs",
    "compile",
    "load_config",
    "measure",
    "measure_cold_start",
    "models",
    "run_experiment",
    "variants",
    "warmup",
    "write_report",
]
__version__ = "0.1.0"
