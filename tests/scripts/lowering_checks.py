"""Every entry point lowers and compiles a workload the same way: run on 2 host devices by
tests/test_lowering.py.

For the mlp forward call and train step on one device and sharded over two (data and model
parallel), the program before and after XLA's optimizations as each entry point sees it: the
runner's compile (`compile_workload`), `unoptimized_hlo`, `inspect --workload`, `diff` and
`explain` (`compile_for_explain`), the warm-up's lowering and the cold-start child's
(`lower_workload`). Writes, per case, how many distinct texts there were (1: all the same).

The compiles go through a persistent compilation cache in the folder: an entry point that
compiles the same program with the same options reads the first one's executable back (seconds
saved per case); one that compiles another program, or with other options, is a key of its own
and compiles it, so a difference still shows.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import jax

from xlafuse import models
from xlafuse.compiler.cache import persistent_cache
from xlafuse.compiler.jit import (
    compile_lowered,
    compile_workload,
    hlo_before_optimization,
    lower_workload,
    unoptimized_hlo,
)
from xlafuse.compiler.variants import get as get_variant
from xlafuse.experiment.warmup import _targets
from xlafuse.hlo import analyze_module
from xlafuse.hlo.parse import parse_hlo
from xlafuse.inspect.explain import compile_for_explain
from xlafuse.inspect.targets import inspect_target
from xlafuse.models.names import Cell

# The text of a lowering names the Python frames it was traced under, callers included: two
# entry points that call the same lowering from different places differ there and only there.
_TABLES = re.compile(r"^(FileNames|FunctionNames|FileLocations|StackFrames)\n(?:.+\n)*\n?", re.M)
_METADATA = re.compile(r",? ?metadata=\{[^{}]*\}")


def program(text: str) -> str:
    """The HLO text without its source locations: the program itself."""
    return _METADATA.sub("", _TABLES.sub("", text))


CASES = [(mode, 1, "data") for mode in ("forward", "train")]
CASES += [
    (mode, 2, parallelism) for mode in ("forward", "train") for parallelism in ("data", "model")
]


def texts(mode: str, devices: int, parallelism: str) -> tuple[dict, dict, bool]:
    """(unoptimized, optimized) texts by entry point, and whether inspect's report is the run's."""
    build = {"mode": mode, "devices": devices, "parallelism": parallelism}
    work = models.build("mlp", **build)
    compiled = compile_workload(work, "default")
    explain = compile_for_explain(Cell("mlp", **build), ("default",))
    inspected = inspect_target(cell=Cell("mlp", **build), variant="default")
    [(_, lower)] = list(_targets(work, (), {}))
    warm = lower()
    options = get_variant("default").compiler_options(backend=jax.default_backend())
    child = compile_lowered(lower_workload(work), get_variant("default"), options)
    unoptimized = {
        "run": compiled.unoptimized_hlo(),
        "unoptimized_hlo": unoptimized_hlo(work),
        "diff/explain": explain.unoptimized,
        "warmup": hlo_before_optimization(warm),
        "cold start": hlo_before_optimization(lower_workload(work)),
    }
    optimized = {
        "run": compiled.hlo_text,
        "diff/explain": explain.optimized["default"],
        "warmup": compile_lowered(warm, get_variant("default"), options).as_text(),
        "cold start": child.as_text(),
    }
    # inspect keeps the parsed module, not its text: its report must be the run's
    same_report = inspected.report == analyze_module(
        parse_hlo(compiled.hlo_text, source="workload mlp")
    )
    return unoptimized, optimized, same_report


def main(folder: str) -> None:
    out = {"devices": jax.device_count(), "cases": {}}
    with persistent_cache(Path(folder) / "compile-cache", xla_caches=False):
        for case in CASES:
            unoptimized, optimized, same_report = texts(*case)
            out["cases"]["/".join(map(str, case))] = {
                "entry points": sorted(set(unoptimized) | set(optimized) | {"inspect"}),
                "inspect report is the run's": same_report,
                "distinct unoptimized": len({program(t) for t in unoptimized.values()}),
                "distinct optimized": len({program(t) for t in optimized.values()}),
                "donated": "input_output_alias" in unoptimized["run"]
                or "buffer_donor" in unoptimized["run"],
            }
    (Path(folder) / "lowering.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
