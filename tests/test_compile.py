"""xlafuse.compile and xlafuse.compare on the CPU: what fusion changes, in numbers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import xlafuse
from xlafuse.compiler.jit import _signature
from xlafuse.measurement.numerics import compare_outputs, tolerance


def mul_add_relu(x, a, b):
    return jax.nn.relu(x * a + b)


def chain8(x):
    y = x * 1.5
    y = y + 0.25
    y = jnp.sin(y)
    y = y * y
    y = y - 0.5
    y = jnp.exp(y)
    y = jnp.tanh(y)
    return jnp.maximum(y, 0.1)


def _mlp():
    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.norm = nnx.LayerNorm(64, rngs=rngs)
            self.up = nnx.Linear(64, 256, rngs=rngs)
            self.down = nnx.Linear(256, 64, rngs=rngs)

        def __call__(self, x):
            return x + self.down(jax.nn.gelu(self.up(self.norm(x))))

    graphdef, params = nnx.split(MLP(nnx.Rngs(0)))

    def forward(params, x):
        return nnx.merge(graphdef, params)(x)

    x = jax.random.normal(jax.random.key(1), (32, 64))
    return forward, (params, x)


def _inputs(n=3, size=8192):
    keys = jax.random.split(jax.random.key(0), n)
    return tuple(jax.random.normal(k, (size,)) for k in keys)


CASES = {
    "mul_add_relu": lambda: (mul_add_relu, _inputs(3)),
    "chain8": lambda: (chain8, _inputs(1)),
    "mlp": _mlp,
}


@pytest.mark.parametrize("case", CASES)
def test_no_fusion_launches_more_and_moves_more(case):
    fn, args = CASES[case]()
    table = xlafuse.compare(fn, *args, variants=["default", "no-fusion"])
    fused, unfused = table.row("default"), table.row("no-fusion")
    assert unfused.kernels > fused.kernels
    assert unfused.modeled_bytes > fused.modeled_bytes
    assert unfused.real_fusions == 0
    assert fused.real_fusions >= 1
    assert unfused.within_tolerance and fused.max_abs_diff == 0.0


def test_pointwise_figures_are_exact():
    fn, args = CASES["mul_add_relu"]()
    table = xlafuse.compare(fn, *args, variants=["default", "no-fusion"])
    fused, unfused = table.row("default"), table.row("no-fusion")
    # Fused: one kernel reads x, a, b and writes one output, 4 x 8192 x 4 bytes.
    assert (fused.kernels, fused.real_fusions, fused.modeled_bytes) == (1, 1, 4 * 8192 * 4)
    assert unfused.real_fusions == 0
    assert unfused.kernels >= 3
    text = str(table)
    assert text.splitlines()[0] == "mul_add_relu on cpu"
    assert "no-fusion" in text and "yes" in text


def test_compile_caches_per_signature_and_times_honestly():
    f = xlafuse.compile(chain8, variant="no-fusion")
    (x,) = _inputs(1)
    c1 = f.compile(x)
    assert f.compile(x) is c1
    c2 = f.compile(x[:100])
    assert c2 is not c1
    assert c1.compile_s > 0 and c1.lower_s > 0
    assert "HloModule" in c1.hlo_text
    np.testing.assert_allclose(f(x), chain8(x), rtol=1e-5, atol=1e-6)
    assert c1.cost_analysis()["flops"] > 0
    assert c1.memory_analysis().argument_size_in_bytes == 8192 * 4


def test_static_args_are_passed_through():
    f = xlafuse.compile(lambda x, n: x * n, static_argnums=1)
    x = jnp.arange(4.0)
    np.testing.assert_array_equal(f(x, 3), [0.0, 3.0, 6.0, 9.0])
    np.testing.assert_array_equal(f(x, 2), [0.0, 2.0, 4.0, 6.0])
    assert len(f._compiled) == 2


def test_signature_distinguishes_dtype_and_static_values():
    x = jnp.ones(3)
    assert _signature((x,), {}) == _signature((jnp.zeros(3),), {})
    assert _signature((x,), {}) != _signature((x.astype(jnp.bfloat16),), {})
    assert _signature((x, 1), {}) != _signature((x, 2), {})


def test_report_of_fused_code_names_this_file():
    (x,) = _inputs(1)
    report = xlafuse.compile(chain8).compile(x).report
    sources = {line for k in report.kernel_details for line in k.source_lines}
    assert any("test_compile.py" in s for s in sources)


def test_tolerances_follow_precision():
    assert tolerance(jnp.float32) < tolerance(jnp.bfloat16)
    assert tolerance(jnp.int32) == (0.0, 0.0)
    a = np.array([1.0, 2.0, 3.0], np.float32)
    assert compare_outputs(a, a * (1 + 1e-6)).within_tolerance
    diff = compare_outputs(a, a + np.array([0, 0, 0.1], np.float32))
    assert not diff.within_tolerance
    assert diff.max_abs_diff == pytest.approx(0.1, rel=1e-5)
    assert diff.worst_dtype == "float32"
    nan = np.array([np.nan, 1.0], np.float32)
    assert compare_outputs(nan, nan).within_tolerance
    assert not compare_outputs(nan, np.array([0.0, 1.0], np.float32)).within_tolerance


def test_compare_outputs_rejects_mismatched_shapes():
    with pytest.raises(
        ValueError, match=r"output float32\[2\] does not match reference float32\[3\]"
    ):
        compare_outputs(np.zeros(3, np.float32), np.zeros(2, np.float32))


def test_compute_dtype_loosens_the_tolerance_of_upcast_outputs():
    loss = np.array(10.8, np.float32)
    off_by_bf16_rounding = loss * np.float32(1 + 2e-4)
    assert not compare_outputs(loss, off_by_bf16_rounding).within_tolerance
    assert compare_outputs(loss, off_by_bf16_rounding, compute_dtype="bfloat16").within_tolerance
    # A compute dtype never tightens: a bf16 output computed in float32 keeps bf16's tolerance.
    out = np.array([10.8, 1.0], jnp.bfloat16)
    off_by_1_pct = (out.astype(np.float32) * np.float32(1.01)).astype(jnp.bfloat16)
    assert not compare_outputs(
        out.astype(np.float32), off_by_1_pct.astype(np.float32)
    ).within_tolerance
    assert compare_outputs(out, off_by_1_pct, compute_dtype="float32").within_tolerance
