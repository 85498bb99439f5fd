"""Fusion variants: presets, composition, option merging and validation against the running XLA."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import jaxlib
import pytest

import xlafuse
from xlafuse.compiler import variants
from xlafuse.compiler.passes import fusion_passes, known_passes


def mul_add_relu(x, a, b):
    return jax.nn.relu(x * a + b)


@pytest.fixture
def xab():
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    shape = (4096,)
    return (
        jax.random.normal(k1, shape),
        jax.random.normal(k2, shape),
        jax.random.normal(k3, shape),
    )


@pytest.mark.parametrize("name", [n for n in variants.available() if n != "default"])
def test_every_preset_changes_something_on_each_backend_it_applies_to(name):
    preset = variants.get(name)
    assert preset.description
    default = variants.get("default")
    for backend in preset.backends:
        changed = (
            preset.passes_for(backend) != default.passes_for(backend)
            or preset.options_for(backend) != default.options_for(backend)
            or preset.process_flags
            or preset.framework != "jax"
        )
        assert changed, f"{name} changes nothing on {backend}"


def test_presets_of_the_design_exist_and_gpu_only_ones_stay_off_the_cpu():
    design = ("default", "no-fusion", "no-gemm-fusion", "no-norm-fusion", "no-cuda-graphs")
    assert set(design) <= set(variants.available())
    cpu = variants.available(backend="cpu")
    assert {"default", "no-fusion"} <= set(cpu)
    assert not {"no-gemm-fusion", "no-norm-fusion", "no-cuda-graphs"} & set(cpu)
    assert cpu == [n for n in variants.available() if variants.get(n).applies_to("cpu")]


def test_no_fusion_disables_every_fusion_making_pass():
    options = variants.get("no-fusion").compiler_options(backend="cpu")
    assert options == {"xla_disable_hlo_passes": "fusion,dot-library-rewriter"}
    assert "fusion-wrapper" not in options["xla_disable_hlo_passes"].split(",")
    gpu = variants.get("no-fusion")
    assert gpu.passes_for("gpu") == (
        "fusion",
        "triton-softmax-rewriter",
        "cudnn-fused-convolution-rewriter",
        "sort-iota-fusion",
        "dynamic-slice-fusion-rewriter-v2",
    )
    assert gpu.options_for("gpu") == {"xla_gpu_enable_triton_gemm": False}
    assert "cuBLAS" in gpu.remains


def test_variant_round_trips_through_a_dict():
    for name in variants.available():
        v = variants.get(name)
        assert variants.Variant.from_dict(v.to_dict()) == v
    with pytest.raises(ValueError, match=r"unknown Variant keys \['colour'\]"):
        variants.Variant.from_dict({"name": "x", "colour": "red"})


def test_gpu_presets_carry_their_options():
    assert variants.get("no-gemm-fusion").options == {"xla_gpu_enable_triton_gemm": False}
    assert variants.get("no-cuda-graphs").options == {"xla_gpu_enable_command_buffer": ""}
    both = variants.get("no-fusion-no-graphs")
    assert both.passes_for("gpu") == variants.get("no-fusion").passes_for("gpu")
    assert both.options_for("gpu") == {
        "xla_gpu_enable_command_buffer": "",
        "xla_gpu_enable_triton_gemm": False,
    }
    assert both.backends == ("gpu",)


def test_gpu_preset_on_cpu_is_refused_with_reason():
    with pytest.raises(ValueError, match="'no-cuda-graphs' applies to gpu only, not to the 'cpu'"):
        variants.get("no-cuda-graphs").compiler_options(backend="cpu")


def test_compose_unites_passes_and_options():
    v = variants.compose("no-fusion", {"xla_disable_hlo_passes": "fusion-wrapper,fusion"})
    assert v.name == "no-fusion+custom"
    assert v.passes_for("cpu") == ("fusion-wrapper", "fusion", "dot-library-rewriter")
    assert variants.get("no-fusion+no-cuda-graphs").backends == ("gpu",)


def test_dict_variant_splits_pass_list():
    v = variants.get({"xla_disable_hlo_passes": "fusion, dot-library-rewriter", "xla_cpu_foo": 1})
    assert v.disable_passes == ("fusion", "dot-library-rewriter")
    assert dict(v.options) == {"xla_cpu_foo": 1}


def test_unknown_preset_suggests_closest():
    with pytest.raises(
        xlafuse.UnknownNameError, match=r"unknown variant 'no-fuson' \(did you mean 'no-fusion'\?\)"
    ):
        variants.get("no-fuson")


def test_env_flags_are_parsed():
    flags = "--xla_dump_to=/x --xla_disable_hlo_passes=fusion,cse --xla_disable_hlo_passes=dce"
    assert variants.env_disabled_passes(xla_flags=flags) == ("fusion", "cse", "dce")
    assert variants.env_disabled_passes(xla_flags="") == ()


def test_env_disabled_passes_are_merged(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_disable_hlo_passes=dot-library-rewriter")
    options = variants.get("no-fusion").compiler_options(backend="cpu")
    assert options["xla_disable_hlo_passes"] == "dot-library-rewriter,fusion"  # merged once
    assert variants.get("default").compiler_options(backend="cpu") == {
        "xla_disable_hlo_passes": "dot-library-rewriter"
    }


def test_pass_discovery_knows_the_cpu_fusion_passes():
    assert {"fusion", "fusion-wrapper"} <= known_passes(backend="cpu")
    assert "fusion" in fusion_passes(backend="cpu")
    assert len(known_passes(backend="cpu")) > 30


def test_unknown_pass_is_an_error_naming_backend_and_version(xab):
    with pytest.raises(xlafuse.UnknownPassError) as info:
        xlafuse.compile(mul_add_relu, variant={"xla_disable_hlo_passes": "fusoin"}).compile(*xab)
    message = str(info.value)
    assert "unknown HLO pass 'fusoin' (did you mean 'fusion'?)" in message
    assert "for backend 'cpu'" in message
    assert f"jaxlib {jaxlib.__version__}" in message
    assert "Fusion passes here:" in message and "fusion-wrapper" in message
    assert isinstance(info.value, ValueError)


def test_unknown_option_key_keeps_xla_message(xab):
    with pytest.raises(
        ValueError, match=r"XLA rejected its options: .*No such compile option: 'xla_bogus'"
    ):
        xlafuse.compile(mul_add_relu, variant={"xla_bogus": True}).compile(*xab)


def test_bad_option_value_keeps_xla_message(xab):
    with pytest.raises(ValueError, match="'maybe' is not a valid bool value"):
        xlafuse.compile(mul_add_relu, variant={"xla_cpu_enable_fast_math": "maybe"}).compile(*xab)


_CHILD = textwrap.dedent(
    """
    import json, jax, jax.numpy as jnp, xlafuse
    f = lambda x: jnp.cos(jnp.sin(x) * 2.0) + 1.0
    x = jnp.ones(256)
    c = xlafuse.compile(f, variant="default").compile(x)
    opts = xlafuse.variants.get("no-fusion").compiler_options()
    print(json.dumps({"options": opts, "real_fusions": c.report.real_fusions,
                      "kernels": c.report.kernels}))
    """
)


def test_pass_disabled_in_xla_flags_stays_disabled_in_a_new_process():
    env = dict(os.environ, XLA_FLAGS="--xla_disable_hlo_passes=fusion", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["options"] == {"xla_disable_hlo_passes": "fusion,dot-library-rewriter"}
    # "default" under that environment must not re-enable fusion: no real fusions.
    assert result["real_fusions"] == 0
    assert result["kernels"] >= 3


def test_process_flag_variant_compiles_in_a_child(xab):
    v = variants.Variant("child-no-fusion", process_flags=("--xla_disable_hlo_passes=fusion",))
    c = xlafuse.compile(mul_add_relu, variant=v).compile(*xab)
    assert c.compiled is None
    assert c.report.real_fusions == 0
    assert c.report.kernels > xlafuse.compile(mul_add_relu).compile(*xab).report.kernels
    out = c(*xab)
    assert jnp.allclose(out, mul_add_relu(*xab), rtol=1e-5, atol=1e-6)
