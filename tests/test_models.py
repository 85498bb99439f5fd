"""Tests of xlafuse.models: names, parameter counts, shapes, train steps, fusion on/off, errors."""

import functools
import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xlafuse import UnknownNameError, models
from xlafuse.compiler import variants
from xlafuse.measurement.numerics import host_outputs, judge_workload
from xlafuse.models import resnet, transformer

NO_FUSION = variants.get("no-fusion").compiler_options(backend=jax.default_backend())

# The zoo's programs, compiled by test_truth.py's compares too: each compiled once in the session,
# then read back from the cache (these tests check what the programs compute).
pytestmark = pytest.mark.usefixtures("shared_compile_cache")

# Output of the forward pass of every tiny workload.
TINY_OUTPUT_SHAPES = {
    "attention": (2, 16, 64),
    "cartpole": (64, 2),
    "chain": (64, 128),
    "cos_relu": (64, 128),
    "gelu": (64, 128),
    "gpt2": (2, 32, 256),
    "layernorm": (2, 16, 64),
    "lstm": (2, 16, 32),
    "matmul_bias_act": (32, 128),
    "mlp": (2, 16, 64),
    "mul_add_relu": (64, 128),
    "resnet50": (2, 10),
    "rmsnorm": (2, 16, 64),
    "softmax": (2, 2, 16, 16),
    "swiglu": (2, 16, 64),
    "transformer_block": (2, 16, 64),
}

TINY_PARAMS = {
    "attention": 16_640,
    "cartpole": 386,
    "gpt2": 120_576,
    "layernorm": 128,
    "lstm": 26_912,
    "matmul_bias_act": 8_320,
    "mlp": 33_216,
    "resnet50": 130_962,
    "rmsnorm": 64,
    "swiglu": 24_576,  # gate and up (64, 2, 128), down (128, 64), no biases
    "transformer_block": 49_984,
}

TRAINABLE = sorted(TINY_PARAMS)
PARAMETER_FREE = sorted(set(TINY_OUTPUT_SHAPES) - set(TINY_PARAMS))
POINTWISE = ["chain", "cos_relu", "gelu", "mul_add_relu"]
ALWAYS_FLOAT32 = [*POINTWISE, "cartpole"]  # cart-pole physics in bfloat16 would be another game


def _slow_if_resnet(names) -> list:
    """The names, ResNet-50 marked slow: its compiles take ~10 s on 2 cores (.ci/run's second
    command runs it, as it runs tests/test_truth.py's ResNet-50 cells)."""
    return [pytest.param(n, marks=pytest.mark.slow) if n == "resnet50" else n for n in names]


def _default_dtype(name: str) -> str:
    """bfloat16 on GPU, float32 elsewhere; pointwise workloads and cartpole are always float32."""
    return (
        "bfloat16" if jax.default_backend() == "gpu" and name not in ALWAYS_FLOAT32 else "float32"
    )


def _tolerance(dtype: str) -> dict[str, float]:
    """Fused and unfused results differ by a few ULP (FMA contraction, reassociation)."""
    return {"bfloat16": {"rtol": 2e-2, "atol": 2e-2}}.get(dtype, {"rtol": 1e-4, "atol": 1e-5})


@functools.cache
def _built(name: str, mode: str) -> models.Workload:
    return models.build(name, size="tiny", mode=mode)


@functools.cache
def _run(name: str, mode: str):
    w = _built(name, mode)
    return jax.block_until_ready(jax.jit(w.fn)(*w.args))


def _run_unfused(w: models.Workload):
    compiled = jax.jit(w.fn).lower(*w.args).compile(compiler_options=NO_FUSION)
    return compiled(*w.args)


def _shapes(tree):
    return jax.tree.map(lambda a: (a.shape, a.dtype), tree)


def test_available_lists_every_workload():
    assert models.available() == sorted(TINY_OUTPUT_SHAPES)
    assert models.available(mode="train") == TRAINABLE


@pytest.mark.parametrize(("name", "expected"), [("gpt2", 124_439_808), ("resnet50", 25_557_032)])
def test_reference_parameter_counts(name, expected):
    assert models.param_count(name, size="small") == expected
    assert models.param_count(name, size="full") == expected


@pytest.mark.parametrize("name", _slow_if_resnet(sorted(TINY_OUTPUT_SHAPES)))
def test_tiny_forward_runs(name):
    w = _built(name, "forward")
    out = _run(name, "forward")
    assert out.shape == TINY_OUTPUT_SHAPES[name]
    assert w.dtype == _default_dtype(name) and out.dtype == jnp.dtype(w.dtype)
    assert bool(jnp.all(jnp.isfinite(out)))
    assert w.num_params == TINY_PARAMS.get(name, 0) == models.param_count(name)
    assert w.items_per_call > 0


@pytest.mark.parametrize("name", _slow_if_resnet(TRAINABLE))
def test_tiny_train_step_runs(name):
    w = _built(name, "train")
    state, batch = w.args
    new_state, loss = _run(name, "train")
    assert isinstance(state, list) and len(state) == len(jax.tree.leaves(w.structured_state()))
    assert set(w.structured_state()) == {"params", "opt_state", "batch_stats"}
    assert set(batch) == {"inputs", "targets"}
    assert _shapes(new_state) == _shapes(state)
    assert loss.shape == () and bool(jnp.isfinite(loss))
    assert w.donate_argnums == (0,)
    assert w.num_params == TINY_PARAMS[name]


@pytest.mark.parametrize("name", _slow_if_resnet(sorted(TINY_OUTPUT_SHAPES)))
def test_forward_agrees_without_fusion(name):
    w = _built(name, "forward")
    np.testing.assert_allclose(_run_unfused(w), _run(name, "forward"), **_tolerance(w.dtype))


# ResNet-50's unfused train step is judged in tests/test_truth.py (the same compile and judge
# through `compare`); compiling it twice more here would cost the suite ~20 s.
@pytest.mark.parametrize("name", [n for n in TRAINABLE if n != "resnet50"])
def test_train_step_agrees_without_fusion(name):
    w = _built(name, "train")
    reference = host_outputs(w, _run(name, "train"))
    unfused = host_outputs(w, _run_unfused(w))
    diff = judge_workload(w, reference, unfused)
    assert diff.within_tolerance, diff
    assert diff.worst_part in ("loss", "gradient", "batch_stats", "params")


@pytest.mark.parametrize("name", _slow_if_resnet(["mlp", "gpt2", "resnet50"]))
def test_train_steps_lower_the_loss(name):
    w = _built(name, "train")
    step = jax.jit(w.fn)
    state, batch = w.args
    losses = []
    for _ in range(4):
        state, loss = step(state, batch)
        losses.append(float(loss))
    assert losses[-1] < losses[0], losses


@pytest.mark.slow  # ResNet-50's train step compiled (`_slow_if_resnet`)
def test_resnet_batch_statistics_update_only_in_train_mode():
    state, _ = _run("resnet50", "train")
    w = _built("resnet50", "train")
    before = w.structured_state()["batch_stats"]
    after = w.structured_state(leaves=state)["batch_stats"]
    moved = jax.tree.leaves(jax.tree.map(lambda a, b: bool(jnp.any(a != b)), after, before))
    assert moved and all(moved)


def test_flops_formulas():
    assert _built("matmul_bias_act", "forward").flops == 2 * 32 * 64 * 128
    assert _built("matmul_bias_act", "train").flops == 3 * 2 * 32 * 64 * 128
    assert _built("mlp", "forward").flops == 4 * (2 * 16) * 64 * 256
    tokens, d = 2 * 16, 64
    assert _built("attention", "forward").flops == 8 * tokens * d**2 + 4 * 2 * 16**2 * d
    assert _built("softmax", "forward").flops is None
    # ResNet-50 is the usual "4.1 GMACs" per 224x224 image.
    per_image = resnet.resnet_flops({**resnet.SIZES["small"], "batch": 1})
    assert per_image == pytest.approx(8.18e9, rel=0.01)
    # GPT-2 small forward: about 2 * (non-embedding params + LM head) per token, plus attention.
    gpt = transformer.gpt2_flops({**transformer.GPT2_SIZES["small"], "batch": 1, "seq_len": 1})
    assert gpt == pytest.approx(2 * (85_054_464 + 38_597_376), rel=0.01)


def test_to_dict_is_json():
    record = _built("gpt2", "train").to_dict()
    assert json.loads(json.dumps(record)) == record
    assert record["name"] == "gpt2" and record["mode"] == "train"
    assert record["num_params"] == TINY_PARAMS["gpt2"]
    assert record["items_unit"] == "tokens" and record["items_per_call"] == 64
    assert record["config"]["vocab"] == 256


def test_overrides_and_seed():
    w = models.build("chain", ops=3, rows=8, cols=4, seed=1)
    assert w.config["ops"] == 3 and w.args[0].shape == (8, 4)
    same = models.build("chain", ops=3, rows=8, cols=4, seed=1)
    other = models.build("chain", ops=3, rows=8, cols=4, seed=2)
    np.testing.assert_array_equal(w.args[0], same.args[0])
    assert not np.array_equal(w.args[0], other.args[0])
    assert models.build("mlp", batch=3).args[1].shape == (3, 16, 64)


def test_bfloat16_build_agrees_without_fusion():
    w = models.build("mlp", dtype="bfloat16")
    out = jax.jit(w.fn)(*w.args)
    assert w.dtype == "bfloat16" and out.dtype == jnp.bfloat16
    np.testing.assert_allclose(
        _run_unfused(w).astype(np.float32), out.astype(np.float32), **_tolerance(w.dtype)
    )


def test_pointwise_default_dtype_is_float32():
    assert {_built(n, "forward").dtype for n in POINTWISE} == {"float32"}


@pytest.mark.parametrize(
    ("kwargs", "fragments"),
    [
        ({"name": "gtp2"}, ["unknown workload 'gtp2'", "did you mean 'gpt2'", "resnet50"]),
        ({"name": "mlp", "size": "smal"}, ["unknown size 'smal'", "did you mean 'small'", "full"]),
        ({"name": "mlp", "mode": "trian"}, ["unknown mode 'trian'", "did you mean 'train'"]),
        (
            {"name": "mlp", "bach": 2},
            ["unknown override 'bach'", "did you mean 'batch'", "d_hidden"],
        ),
        ({"name": "mlp", "dtype": "bf16"}, ["unknown dtype 'bf16'", "did you mean 'bfloat16'"]),
        ({"name": "softmax", "mode": "train"}, ["needs parameters", "accepted modes", "forward"]),
        (
            {"name": "attention", "implementation": "cudnnn"},
            ["unknown attention implementation", "did you mean 'cudnn'", "xla"],
        ),
    ],
)
def test_unknown_names_say_what_is_accepted(kwargs, fragments):
    with pytest.raises(UnknownNameError) as info:
        models.build(**kwargs)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message


def test_param_count_rejects_unknown_override():
    with pytest.raises(ValueError, match="did you mean 'layers'"):
        models.param_count("gpt2", size="small", layer=6)


def test_cudnn_attention_needs_a_gpu():
    if jax.default_backend() == "gpu":
        pytest.skip("this machine has a GPU")
    with pytest.raises(ValueError, match="needs an NVIDIA GPU"):
        models.build("attention", implementation="cudnn")


def test_bad_override_values():
    with pytest.raises(ValueError, match="ops=0"):
        models.build("chain", ops=0)
    with pytest.raises(ValueError, match="exceeds context"):
        models.build("gpt2", seq_len=65)
    with pytest.raises(ValueError, match="must divide"):
        models.build("transformer_block", heads=5)


@pytest.mark.gpu
def test_cudnn_attention_matches_xla():
    xla = models.build("attention", dtype="bfloat16")
    cudnn = models.build("attention", dtype="bfloat16", implementation="cudnn")
    np.testing.assert_allclose(
        jax.jit(cudnn.fn)(*cudnn.args).astype(np.float32),
        jax.jit(xla.fn)(*xla.args).astype(np.float32),
        **_tolerance("bfloat16"),
    )


def test_zoo_loads_on_first_use_and_keeps_its_names():
    """`xlafuse.models` imports no JAX until a workload is asked for; a user's workload named
    like one of the zoo's is refused at its own `register`, the zoo loaded first."""
    script = (
        "import sys\nfrom xlafuse import models\n"
        "print('jax' in sys.modules)\n"
        "try:\n"
        "    models.register('mlp', sizes=dict.fromkeys(models.SIZES, {}))(lambda c, ctx: None)\n"
        "except ValueError as err:\n"
        "    print(err)\n"
        "print(len(models.available()))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "False",
        "workload 'mlp' is already registered",
        str(len(TINY_OUTPUT_SHAPES)),
    ]
