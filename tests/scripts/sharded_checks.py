"""Sharded-program checks on 4 host devices, run in a child process by tests/test_sharded.py.

XLA_FLAGS=--xla_force_host_platform_device_count=4 must be set before JAX starts, which a pytest
process that already imported JAX cannot do: the test runs this script with the flag and asserts
on the JSON it writes into the folder given as its argument.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax

from xlafuse import models
from xlafuse.compiler.jit import compile_workload
from xlafuse.measurement.numerics import host_outputs, judge_workload


def _compiled(workload, variant):
    compiled = compile_workload(workload, variant)
    return compiled, compiled(*workload.fresh_args())


def data_parallel_mlp() -> dict:
    one = models.build("mlp", mode="train", batch=4)
    four = models.build("mlp", mode="train", batch=4, devices=4, parallelism="data")
    _, reference = _compiled(one, "default")
    out = {}
    for variant in ("default", "no-collective-combining"):
        compiled, outputs = _compiled(four, variant)
        report = compiled.collectives
        diff = judge_workload(four, host_outputs(one, reference), host_outputs(four, outputs))
        out[variant] = {
            "collectives": report.to_dict(),
            "within_tolerance": diff.within_tolerance,
            "max_abs_diff": diff.max_abs_diff,
            "state_sharding": str(outputs[0][0].sharding.spec),
            "state_devices": len(outputs[0][0].sharding.device_set),
        }
    params = jax.tree.leaves(one.structured_state()["params"])
    out["param_shapes"] = sorted(str(tuple(p.shape)) for p in params)
    return out


def model_parallel_block() -> dict:
    one = models.build("transformer_block")
    four = models.build("transformer_block", devices=4, parallelism="model")
    _, reference = _compiled(one, "default")
    compiled, outputs = _compiled(four, "default")
    diff = judge_workload(four, host_outputs(one, reference), host_outputs(four, outputs))
    return {
        "collectives": compiled.collectives.to_dict(),
        "within_tolerance": diff.within_tolerance,
        "max_abs_diff": diff.max_abs_diff,
        "plan": four.plan.to_dict(),
        "specs": list(four.plan.state_specs),
    }


def runner_cells(out: str) -> list[dict]:
    """A tiny experiment: the data-parallel mlp step on 1 and 4 devices, two variants."""
    from xlafuse.experiment.config import parse_config
    from xlafuse.experiment.runner import run_experiment

    workload = {"name": "mlp", "mode": "train", "overrides": {"batch": 4}}
    config = parse_config(
        {
            "experiment": {
                "name": "sharded-test",
                "output": out,
                "variants": ["default", "no-collective-combining"],
            },
            "workloads": [workload, {**workload, "devices": 4}],
            "timing": {"warmup": 1, "min_time_s": 0, "min_iters": 2, "max_iters": 2, "repeats": 1},
            "measure": {"calibrate": False},
        },
        backend="cpu",
    )
    records = run_experiment(config, progress=False)
    keys = ("cell_id", "status", "devices", "parallelism", "collectives", "logical_collectives")
    keys += ("collective_operand_bytes", "collective_counts", "within_tolerance")
    flat = [r.to_dict() for r in records]  # the records as the results file has them
    cells = [{k: line[k] for k in keys} for line in flat]
    report = (Path(out) / "report.md").read_text()
    start = report.index("## Sharded programs")
    return {"cells": cells, "section": report[start : report.index("\n## ", start + 3)]}


def main() -> int:
    result = {
        "devices": len(jax.devices()),
        "data_parallel_mlp": data_parallel_mlp(),
        "model_parallel_block": model_parallel_block(),
        "runner": runner_cells(str(Path(sys.argv[1]) / "run")),
    }
    # A file, not stdout: the runner prints its progress there.
    (Path(sys.argv[1]) / "checks.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
