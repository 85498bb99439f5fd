"""Numerics judged at the precision the program computed in (issue 44 item 7).

A float32 program whose dots ran in TF32 (an NVIDIA GPU at JAX's default precision) is judged
at TF32's tolerance; HIGHEST precision and the CPU keep float32's. A user's train step with an
optax Adam state is judged by the train rule: a near-zero gradient's Adam step either way is
no disagreement. Synthetic arrays and HLO text: no GPU needed.
"""

from __future__ import annotations

import dataclasses
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from xlafuse.compiler.jit import compile_variant
from xlafuse.experiment.fields import numerics_part
from xlafuse.measurement import numerics
from xlafuse.measurement.numerics import (
    computed_precision,
    dot_precision,
    host_outputs,
    judge_workload,
    judging_precision,
)
from xlafuse.measurement.reference import Reference, judge_against
from xlafuse.models.user import workload_from
from xlafuse.report.cells import _numerics
from xlafuse.results.records import CellResult

MATMUL = (
    "ROOT %dot.1 = f32[64,64]{{1,0}} dot(%a, %b), lhs_contracting_dims={{1}}, "
    'rhs_contracting_dims={{0}}{attrs}, metadata={{op_name="jit(matmul)/dot_general"}}'
)


def _hlo(line: str) -> str:
    return (
        "HloModule jit_matmul\n\nENTRY %main (a: f32[64,256], b: f32[256,64]) -> f32[64,64] {\n"
        "  %a = f32[64,256]{1,0} parameter(0)\n  %b = f32[256,64]{1,0} parameter(1)\n"
        f"  {line}\n}}\n"
    )


DEFAULT = _hlo(MATMUL.format(attrs=""))
HIGHEST = _hlo(MATMUL.format(attrs=", operand_precision={highest,highest}"))
GEMM = (
    "%custom-call.0 = (f32[64,64]{{1,0}}, s8[4194304]{{0}}) custom-call(%a, %b), "
    'custom_call_target="__cublas$lt$matmul", backend_config={{"gemm_backend_config":{{'
    '"epilogue":"DEFAULT","precision_config":{{"algorithm":"ALG_UNSET",'
    '"operand_precision":["{p}","{p}"]}},"selected_algorithm":"4"}}}}'
)
CONV = (
    "%cudnn-conv.7 = (f32[32,32,32,64]{{3,2,1,0}}, u8[0]{{0}}) custom-call(%x, %w), "
    "window={{size=3x3 pad=1_1x1_1}}, dim_labels=b01f_o01i->b01f, {attrs}"
    'custom_call_target="__cudnn$convForward", backend_config={{"cudnn_conv_backend_config":'
    '{{"algorithm":{{"algo_id":"11","is_cudnn_frontend":false,"math_type":"{math}"}}}}}}'
)
H100 = "9.0"


def _tf32(x: np.ndarray) -> np.ndarray:
    """x rounded to TF32 (float32 with a 10-bit mantissa), as a tensor core reads it."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def _matmuls() -> tuple[np.ndarray, np.ndarray]:
    """A float32 matmul in float32, and the same in TF32 (its inputs rounded to 10 bits)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 256)).astype(np.float32)
    b = rng.standard_normal((256, 64)).astype(np.float32)
    exact = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    tf32 = (_tf32(a).astype(np.float64) @ _tf32(b).astype(np.float64)).astype(np.float32)
    return exact, tf32


FORWARD = types.SimpleNamespace(dtype="float32", mode="forward", state_tree=None)


def test_a_tf32_difference_is_flagged_at_float32_and_agrees_at_tf32():
    exact, tf32 = _matmuls()
    assert dot_precision(DEFAULT, backend="gpu", compute_capability=H100) == "tf32"
    flagged = judge_workload(FORWARD, exact, tf32)
    assert (flagged.within_tolerance, flagged.precision) == (False, "float32")
    agrees = judge_workload(FORWARD, exact, tf32, precision="tf32")
    assert (agrees.within_tolerance, agrees.precision) == (True, "tf32")
    assert agrees.max_abs_diff == flagged.max_abs_diff == pytest.approx(0.0173, rel=1e-2)
    # TF32's tolerance still catches a wrong element.
    wrong = tf32.copy()
    wrong[3, 5] += 1.0
    assert not judge_workload(FORWARD, exact, wrong, precision="tf32").within_tolerance


def test_judge_against_reads_the_precision_from_both_programs(monkeypatch):
    exact, tf32 = _matmuls()
    monkeypatch.setattr(numerics, "device_compute_capability", lambda backend: H100)
    on_gpu = types.SimpleNamespace(hlo_text=DEFAULT, backend="gpu")
    highest = types.SimpleNamespace(hlo_text=HIGHEST, backend="gpu")
    # The reference's program alone (a runner that passes no `compiled`), then the cell's.
    diff = judge_against(Reference(compiled=on_gpu, outputs=exact), FORWARD, tf32)
    assert (diff.within_tolerance, diff.precision) == (True, "tf32")
    reference = Reference(compiled=highest, outputs=exact)
    diff = judge_against(reference, FORWARD, tf32, compiled=on_gpu)
    assert (diff.within_tolerance, diff.precision) == (True, "tf32")
    diff = judge_against(reference, FORWARD, tf32, compiled=highest)
    assert (diff.within_tolerance, diff.precision) == (False, "float32")


def test_highest_precision_keeps_float32():
    assert dot_precision(HIGHEST, backend="gpu", compute_capability=H100) is None
    gemm = _hlo(GEMM.format(p="HIGHEST"))
    assert dot_precision(gemm, backend="gpu", compute_capability=H100) is None
    assert dot_precision(_hlo(GEMM.format(p="DEFAULT")), backend="gpu", compute_capability=H100)
    exact, tf32 = _matmuls()
    precision = computed_precision(types.SimpleNamespace(hlo_text=HIGHEST, backend="gpu"))
    assert precision is None
    assert not judge_workload(FORWARD, exact, tf32, precision=precision).within_tolerance


def test_the_cpu_and_older_gpus_keep_float32():
    assert dot_precision(DEFAULT, backend="cpu") is None
    assert dot_precision(DEFAULT, backend="gpu", compute_capability="7.0") is None  # V100
    assert dot_precision(DEFAULT, backend="gpu", compute_capability=None) is None
    # A float32 matmul compiled here (the CPU) ran in float32.
    compiled = compile_variant(jnp.matmul, (jnp.ones((8, 8)), jnp.ones((8, 8))), {}, "default")
    assert compiled.backend == "cpu" and " dot(" in compiled.hlo_text
    assert computed_precision(compiled) is None


@pytest.mark.parametrize(
    ("attrs", "math", "expected"),
    [
        ("", "DEFAULT_MATH", "tf32"),  # DEFAULT precision: TF32 allowed
        ("operand_precision={highest,highest}, ", "DEFAULT_MATH", None),
        ("operand_precision={highest,highest}, ", "TENSOR_OP_MATH", "tf32"),  # it ran on them
    ],
)
def test_a_cudnn_convolution_follows_its_precision_and_algorithm(attrs, math, expected):
    hlo = _hlo(CONV.format(attrs=attrs, math=math))
    assert dot_precision(hlo, backend="gpu", compute_capability=H100) == expected


@pytest.mark.parametrize(
    ("algorithm", "expected"),
    [
        ("dot_tf32_tf32_f32", "tf32"),
        ("dot_bf16_bf16_f32_x3", "tf32"),
        ("dot_bf16_bf16_f32_x6", None),
        ("dot_f32_f32_f32", None),
        ("dot_bf16_bf16_f32", "bfloat16"),
    ],
)
def test_an_explicit_dot_algorithm_names_its_precision(algorithm, expected):
    hlo = _hlo(MATMUL.format(attrs=f", algorithm={algorithm}"))
    assert dot_precision(hlo, backend="gpu", compute_capability=H100) == expected


def test_a_lower_dtype_stays_the_looser():
    assert judging_precision("float32", precision="tf32") == "tf32"
    assert judging_precision("bfloat16", precision="tf32") == "bfloat16"
    assert judging_precision(np.float32) == "float32"


def test_the_record_and_the_report_name_the_precision():
    diff = judge_workload(FORWARD, *_matmuls(), precision="tf32")
    part = numerics_part(diff, None)
    assert part.precision == "tf32" and part.flat()["numerics_precision"] == "tf32"
    name = {"workload": "w", "size": "tiny", "mode": "forward", "dtype": "float32"}
    record = CellResult(
        **name, variant="no-fusion", backend="gpu", device_kind="H100", numerics=part
    )
    assert _numerics(record) == "ok at tf32"
    flagged = numerics_part(judge_workload(FORWARD, *_matmuls()), None)
    record = dataclasses.replace(record, numerics=flagged)
    assert _numerics(record) == "FLAGGED at float32 (0.017)"
    # A record written before precisions were: the verdict alone.
    old = dataclasses.replace(part, precision=None)
    assert _numerics(dataclasses.replace(record, numerics=old)) == "ok"


# A user's train step (as `eqx.filter_jit` users write one): (params, opt_state) -> new ones.
LR = 1e-3


def _step(state, x):
    params, opt_state = state
    loss, grads = jax.value_and_grad(lambda p: jnp.sum(p["w"] * x) + jnp.sum(p["b"]))(params)
    updates, opt_state = optax.adam(LR).update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), loss


def _user_step():
    params = {"w": jnp.full((4,), 0.5, jnp.float32), "b": jnp.zeros((2,), jnp.float32)}
    state = (params, optax.adam(LR).init(params))
    x = jnp.array([1.0, -2.0, 1e-6, 3.0], jnp.float32)  # the gradient of w: x
    return workload_from((_step, (state, x), 0), "adam_step"), x


def _run(workload, x):
    return host_outputs(workload, jax.jit(_step)(workload.args[0], x))


def test_a_user_step_is_judged_by_the_train_rule():
    workload, x = _user_step()
    assert workload.mode == "train" and workload.state_tree is None
    reference = _run(workload, x)
    # The third gradient is zero within rounding: its sign flips, and Adam's first step moves
    # its parameter by +-lr either way, 2 x lr apart.
    flipped = _run(workload, x.at[2].set(-1e-6))
    (params, _), _ = flipped
    assert abs(params["w"][2] - reference[0][0]["w"][2]) == pytest.approx(2 * LR, rel=2e-2)
    whole = numerics.compare_outputs(reference, flipped, compute_dtype="float32")
    assert not whole.within_tolerance  # compared whole, the step disagrees
    verdict = judge_workload(workload, reference, flipped)
    assert verdict.within_tolerance, verdict
    # A clear gradient's parameter gets no such allowance.
    (params, opt_state), loss = reference
    moved = ({**params, "w": params["w"] + np.float32([2 * LR, 0, 0, 0])}, opt_state), loss
    verdict = judge_workload(workload, reference, moved)
    assert (verdict.within_tolerance, verdict.worst_part) == (False, "params")
    # A wrong gradient is caught in the optimizer's moments, whatever the parameters do.
    wrong = (_run(workload, x.at[1].set(2.0))[0], loss)  # the same loss: the moments tell
    verdict = judge_workload(workload, reference, wrong)
    assert (verdict.within_tolerance, verdict.worst_part) == (False, "gradient")
    # The step's other outputs (its loss) are judged element by element.
    off = ((params, opt_state), loss * np.float32(1.001))
    verdict = judge_workload(workload, reference, off)
    assert (verdict.within_tolerance, verdict.worst_part) == (False, "outputs")


def test_a_user_step_past_its_first_step_is_compared_whole():
    workload, x = _user_step()
    reference = _run(workload, x)
    (params, opt_state), loss = reference
    later = (params, (opt_state[0]._replace(count=np.int32(2)), *opt_state[1:]))
    flipped = _run(workload, x.at[2].set(-1e-6))
    (fparams, fopt), floss = flipped
    flipped = (fparams, (fopt[0]._replace(count=np.int32(2)), *fopt[1:])), floss
    assert not judge_workload(workload, (later, loss), flipped).within_tolerance
