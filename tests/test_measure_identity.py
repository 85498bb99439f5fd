"""`xlafuse.measure(out=...)` keys a function's cells by its arguments and its code (issue 42,
item 1): other shapes, dtypes or structure are new cells beside the earlier ones, other code
under one name is refused, and the same call resumes."""

import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from helpers import FAST_TIMING

import xlafuse
from xlafuse.errors import XlafuseError
from xlafuse.experiment.measure_fn import arguments_label, program_sha256
from xlafuse.results.records import read_results

ONE = {"variants": ["default"], "timing": FAST_TIMING, "calibrate": False}
SCALE = 3.0


def double(x):
    return x * 2.0


def tree_sum(tree):
    return sum(jnp.sum(leaf) for leaf in jax.tree.leaves(tree))


def uses_a_set(x):
    return x * len({"alpha", "beta", "gamma"}) * SCALE


def test_other_shapes_dtypes_and_structure_are_new_cells(tmp_path):
    first = xlafuse.measure(double, jnp.ones(256), out=tmp_path, **ONE).record("default")
    assert (first.size, first.dtype, first.model.num_params) == ("f32[256]", "float32", 0)
    calls = [
        (double, (jnp.ones(4096),), "f32[4096]", "float32"),
        (double, (jnp.ones(256, jnp.bfloat16),), "bf16[256]", "bfloat16"),
        (tree_sum, ({"a": jnp.ones(4), "b": jnp.ones(4)},), None, "float32"),
        (tree_sum, ([jnp.ones(4), jnp.ones(4)],), None, "float32"),
    ]
    for fn, args, size, dtype in calls:
        got = xlafuse.measure(fn, *args, out=tmp_path, **ONE).record("default")
        assert (got.size, got.dtype) == (size or arguments_label(args), dtype)
        assert got.cell_id == f"{fn.__name__}/{got.size}/forward/auto/{{}}/default/cpu"
    ids = [r.cell_id for r in read_results(tmp_path / "results.jsonl").records]
    assert len(ids) == len(set(ids)) == 5  # each cell once, none of them another's
    # the same call again resumes: the record written by the first call, nothing measured
    again = xlafuse.measure(double, jnp.ones(256), out=tmp_path, **ONE).record("default")
    assert again == first
    assert len(read_results(tmp_path / "results.jsonl").records) == 5


def test_other_code_under_one_name_is_refused(tmp_path):
    def triple(x):
        return x * 3.0

    xlafuse.measure(double, jnp.ones(8), name="scale", out=tmp_path, **ONE)
    with pytest.raises(XlafuseError) as err:
        xlafuse.measure(triple, jnp.ones(8), name="scale", out=tmp_path, **ONE)
    assert str(err.value) == (
        f"{tmp_path / 'results.jsonl'} holds 'scale' measured from other code (sha256 "
        f"{program_sha256(double)[:12]} there, {program_sha256(triple)[:12]} now: another "
        "function under that name, or its code or file changed): its cells would be mixed with "
        "these; pass fresh=True to move that file aside, another name=, or another out="
    )
    # two lambdas are both "function": the second is refused as well
    xlafuse.measure(lambda x: x + 1, jnp.ones(8), out=tmp_path, **ONE)
    with pytest.raises(XlafuseError, match=r"holds 'function' measured from other code"):
        xlafuse.measure(lambda x: x - 1, jnp.ones(8), out=tmp_path, **ONE)
    fresh = xlafuse.measure(triple, jnp.ones(8), name="scale", out=tmp_path, fresh=True, **ONE)
    assert fresh.record("default").source_sha256 == program_sha256(triple)
    assert [r.workload for r in read_results(tmp_path / "results.jsonl").records] == ["scale"]


def _closing_over(value, default=1.0):
    def step(x, k=default):
        return x * value * k

    return step


def test_program_hash_follows_code_closures_defaults_and_helpers():
    assert program_sha256(_closing_over(2.0)) == program_sha256(_closing_over(2.0))
    assert program_sha256(_closing_over(2.0)) != program_sha256(_closing_over(3.0))
    assert program_sha256(_closing_over(2.0)) != program_sha256(_closing_over(2.0, 5.0))
    small = (jnp.arange(4.0), jnp.arange(4.0) + 1)
    assert program_sha256(_closing_over(small[0])) != program_sha256(_closing_over(small[1]))
    assert program_sha256(jax.jit(double)) != program_sha256(jax.jit(tree_sum))
    before = program_sha256(uses_a_set)
    global SCALE
    SCALE, old = 4.0, SCALE  # a module constant the function names
    try:
        assert program_sha256(uses_a_set) != before
    finally:
        SCALE = old


def test_program_hash_is_the_same_in_another_process():
    # a set's order changes with PYTHONHASHSEED: the hash must not (a rerun resumes)
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import test_measure_identity as t; "
        "from xlafuse.experiment.measure_fn import program_sha256 as h; print(h(t.uses_a_set))"
    )
    seed = "1" if os.environ.get("PYTHONHASHSEED") != "1" else "2"
    env = {**os.environ, "PYTHONHASHSEED": seed, "JAX_PLATFORMS": "cpu"}
    here = str(Path(__file__).parent)
    out = subprocess.run(
        [sys.executable, "-c", code, here], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == program_sha256(uses_a_set)


def test_arguments_label_says_shapes_dtypes_weak_types_or_a_hash():
    assert arguments_label((jnp.ones((8, 8), jnp.bfloat16), jnp.int32(3))) == "bf16[8,8],i32[]"
    assert arguments_label((jnp.ones(3), 2.0)) == "f32[3],2.0"  # a Python number is static
    assert arguments_label(()) == "no-args"
    nested = arguments_label(({"w": jnp.ones(3)},))
    assert nested.startswith("args-") and len(nested) == 15
    assert nested != arguments_label(([jnp.ones(3)],))
    assert arguments_label((jnp.ones((1024, 1024)),) * 4).startswith("args-")
