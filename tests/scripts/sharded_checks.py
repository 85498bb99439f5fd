"""Sharded-program checks on 4 host devices, run in a child process by tests/test_sharded.py.

XLA_FLAGS=--xla_force_host_platform_device_count=4 must be set before JAX starts, which a pytest
process that already imported JAX cannot do: the test runs this script with the flag and asserts
on the JSON it prints.
"""

from __future__ import annotations

import json
import sys

import jax

from xlafuse import models
from xlafuse.compile import compile_workload
from xlafuse.numerics import host_outputs, judge_workload


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


def main() -> int:
    result = {
        "devices": len(jax.devices()),
        "data_parallel_mlp": data_parallel_mlp(),
        "model_parallel_block": model_parallel_block(),
    }
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
