"""Optimized HLO: parse it, find its kernels and fusions, model the bytes they move, count
their FLOPs."""

from xlafuse.hlo.dump import find_optimized_modules, thunk_launch_count
from xlafuse.hlo.flops import FlopCount, instruction_flops, module_flops
from xlafuse.hlo.fusion import (
    FusionReport,
    KernelInfo,
    analyze_hlo,
    analyze_module,
    executed_computations,
    infer_backend,
)
from xlafuse.hlo.ir import Computation, HloModule, Instruction, Shape
from xlafuse.hlo.parse import parse_hlo
from xlafuse.hlo.traffic import instruction_bytes

__all__ = [
    "Computation",
    "FlopCount",
    "FusionReport",
    "HloModule",
    "Instruction",
    "KernelInfo",
    "Shape",
    "analyze_hlo",
    "analyze_module",
    "executed_computations",
    "find_optimized_modules",
    "infer_backend",
    "instruction_bytes",
    "instruction_flops",
    "module_flops",
    "parse_hlo",
    "thunk_launch_count",
]
