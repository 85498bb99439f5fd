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

`xlafuse.compile` and `xlafuse.measure` are the functions. Their subpackages are
`xlafuse.compiler` and `xlafuse.measurement` (renamed in issue 45); the old module paths,
`xlafuse.compile.variants` or `xlafuse.measure.timing`, still import, as those same modules.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import TYPE_CHECKING

# name -> the module that defines it. Imported on first use (PEP 562): `import xlafuse` and the
# command line start without JAX, which reading HLO (`xlafuse inspect DUMP`) does not need.
_EXPORTS = {
    "Cell": "xlafuse.models.names",
    "CellResult": "xlafuse.results.records",
    "ColdStartResult": "xlafuse.measurement.coldstart",
    "CollectiveReport": "xlafuse.hlo.collectives",
    "Comparison": "xlafuse.experiment.compare",
    "CompiledVariant": "xlafuse.compiler.jit",
    "ExperimentConfig": "xlafuse.experiment.config",
    "FusedFunction": "xlafuse.compiler.jit",
    "FusionReport": "xlafuse.hlo",
    "HloParseError": "xlafuse.errors",
    "KernelInfo": "xlafuse.hlo",
    "Measurement": "xlafuse.experiment.measure_fn",
    "NumericDiff": "xlafuse.measurement.numerics",
    "UnknownNameError": "xlafuse.errors",
    "UnknownPassError": "xlafuse.errors",
    "Variant": "xlafuse.compiler.variants",
    "VariantRow": "xlafuse.experiment.compare",
    "WarmupSummary": "xlafuse.experiment.warmup",
    "XlafuseError": "xlafuse.errors",
    "analyze_hlo": "xlafuse.hlo",
    "collectives_of_text": "xlafuse.hlo.collectives",
    "compare": "xlafuse.experiment.compare",
    "compare_outputs": "xlafuse.measurement.numerics",
    "compile": "xlafuse.compiler.jit",
    "load_config": "xlafuse.experiment.config",
    "measure": "xlafuse.experiment.measure_fn",
    "measure_cold_start": "xlafuse.measurement.coldstart",
    "run_experiment": "xlafuse.experiment.runner",
    "warmup": "xlafuse.experiment.warmup",
    "write_report": "xlafuse.report.markdown",
}
_MODULES = {"models": "xlafuse.models", "variants": "xlafuse.compiler.variants"}

if TYPE_CHECKING:  # what the names are, for type checkers and editors
    from xlafuse import models
    from xlafuse.compiler import variants
    from xlafuse.compiler.jit import CompiledVariant, FusedFunction, compile
    from xlafuse.compiler.variants import Variant
    from xlafuse.errors import HloParseError, UnknownNameError, UnknownPassError, XlafuseError
    from xlafuse.experiment.compare import Comparison, VariantRow, compare
    from xlafuse.experiment.config import ExperimentConfig, load_config
    from xlafuse.experiment.measure_fn import Measurement, measure
    from xlafuse.experiment.runner import run_experiment
    from xlafuse.experiment.warmup import WarmupSummary, warmup
    from xlafuse.hlo import FusionReport, KernelInfo, analyze_hlo
    from xlafuse.hlo.collectives import CollectiveReport, collectives_of_text
    from xlafuse.measurement.coldstart import ColdStartResult, measure_cold_start
    from xlafuse.measurement.numerics import NumericDiff, compare_outputs
    from xlafuse.models.names import Cell
    from xlafuse.report.markdown import write_report
    from xlafuse.results.records import CellResult


class _Renamed(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """The old module paths of the renamed subpackages (`_RENAMED`), served by the new ones.

    `from xlafuse.compile.variants import Variant` and `import xlafuse.measure.timing as t` get
    the module of the new name itself (one module under two names, never a second copy). A
    submodule imported by its old name is also set on the function of that name, so that
    `xlafuse.measure.timing` finds it after `import xlafuse.measure.timing`.
    """

    def find_spec(self, name: str, path: object = None, target: object = None):
        package, _, _ = name.rpartition(".")
        if package not in _RENAMED:
            return None
        return importlib.util.spec_from_loader(name, self, is_package=False)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        package, _, child = spec.name.rpartition(".")
        module = importlib.import_module(f"{_RENAMED[package]}.{child}")
        spec.loader_state = module.__spec__  # the import system sets `__spec__`: put back
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        alias = module.__spec__
        module.__spec__ = alias.loader_state  # its own spec, of its new name; run already
        package, _, child = alias.name.rpartition(".")
        function = getattr(sys.modules[__name__], package.rpartition(".")[2])
        setattr(function, child, module)


def _old_package(name: str) -> types.ModuleType:
    """What stands in `sys.modules` for an old package name: a module with a package's
    `__path__` (the import system asks `_Renamed` for its submodules), whose attributes are the
    new package's (`from xlafuse.measure import timing`). Standing there, it is never imported,
    so the import system never binds it on `xlafuse`, where the function of that name is."""
    new = _RENAMED[name]
    module = types.ModuleType(name, f"Renamed to `{new}`; `{name}` is a function (issue 45).")
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    module.__path__ = module.__spec__.submodule_search_locations = []
    module.__getattr__ = lambda attr: getattr(importlib.import_module(new), attr)
    return module


# `xlafuse.compile` and `xlafuse.measure` are the functions; the subpackages of those names were
# renamed (issue 45), and the old module paths still import, as the new modules.
_RENAMED = {"xlafuse.compile": "xlafuse.compiler", "xlafuse.measure": "xlafuse.measurement"}
for _old in _RENAMED:
    sys.modules.setdefault(_old, _old_package(_old))
del _old
if not any(isinstance(finder, _Renamed) for finder in sys.meta_path):
    sys.meta_path.insert(0, _Renamed())


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
