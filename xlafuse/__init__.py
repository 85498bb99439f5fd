"""xlafuse: see what XLA's kernel fusion does to real JAX/Flax models.

Public surface:
  compile(fn, variant=...)       jax.jit under a fusion variant; `.compile(*args)` -> CompiledVariant
  compare(fn, *args, variants=)  several variants of one function in one table
  analyze_hlo(text_or_path)      FusionReport of optimized HLO text or a file
  collectives_of_text(text)      CollectiveReport: the collectives of a sharded program's HLO
  variants                       the presets, `variants.get`, `variants.compose`, `Variant`
  models                         the Flax workloads (`models.build`, `models.available`)
  run_experiment(config)         run a TOML experiment config; `write_report(results.jsonl)`
  warmup(...), measure_cold_start(workload)   persistent cache and cold-start figures
"""

from xlafuse import models
from xlafuse.compile import variants
from xlafuse.compile.jit import CompiledVariant, FusedFunction, compile
from xlafuse.compile.variants import Variant
from xlafuse.errors import HloParseError, UnknownNameError, UnknownPassError, XlafuseError
from xlafuse.experiment.compare import Comparison, VariantRow, compare
from xlafuse.experiment.config import ExperimentConfig, load_config
from xlafuse.experiment.runner import run_experiment
from xlafuse.experiment.warmup import WarmupSummary, warmup
from xlafuse.hlo import FusionReport, KernelInfo, analyze_hlo
from xlafuse.hlo.collectives import CollectiveReport, collectives_of_text
from xlafuse.measure.coldstart import ColdStartResult, measure_cold_start
from xlafuse.measure.numerics import NumericDiff, compare_outputs
from xlafuse.report.markdown import write_report
from xlafuse.results.records import CellResult

__all__ = [
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
    "measure_cold_start",
    "models",
    "run_experiment",
    "variants",
    "warmup",
    "write_report",
]
__version__ = "0.1.0"
