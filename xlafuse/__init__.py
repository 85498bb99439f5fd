"""xlafuse: see what XLA's kernel fusion does to real JAX/Flax models.

Public surface:
  compile(fn, variant=...)       jax.jit under a fusion variant; `.compile(*args)` -> CompiledVariant
  compare(fn, *args, variants=)  several variants of one function in one table
  analyze_hlo(text_or_path)      FusionReport of optimized HLO text or a file
  variants                       the presets, `variants.get`, `variants.compose`, `Variant`
  models                         the Flax workloads (`models.build`, `models.available`)
"""

from xlafuse import variants
from xlafuse.compare import Comparison, VariantRow, compare
from xlafuse.compile import CompiledVariant, FusedFunction, compile
from xlafuse.errors import HloParseError, UnknownNameError, UnknownPassError, XlafuseError
from xlafuse.hlo import FusionReport, KernelInfo, analyze_hlo
from xlafuse.numerics import NumericDiff, compare_outputs
from xlafuse.variants import Variant

__all__ = [
    "Comparison",
    "CompiledVariant",
    "FusedFunction",
    "FusionReport",
    "HloParseError",
    "KernelInfo",
    "NumericDiff",
    "UnknownNameError",
    "UnknownPassError",
    "Variant",
    "VariantRow",
    "XlafuseError",
    "analyze_hlo",
    "compare",
    "compare_outputs",
    "compile",
    "variants",
]
__version__ = "0.1.0"
