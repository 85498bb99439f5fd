"""Implementations of a workload as variants (issue 46), on the CPU and without tokamax.

The grammar (`impl=NAME`, composed with XLA options) and its errors; what a zoo workload has and
what keeps it from running one (each refusal one line saying what is accepted); a program of
the user's with its implementations (`xlafuse.measure` with a dict of functions, a config
entry's `implementations` table), judged against its first and never timed against an
interpreted Pallas kernel; a hand-written kernel's custom-call counted, modeled and timed as
one kernel. tokamax's own implementations are in tests/test_tokamax.py.
"""

import dataclasses
import json
import textwrap
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import pytest
from helpers import run_cli
from jax.experimental import pallas as pl

import xlafuse
from xlafuse.compiler import jit, variants
from xlafuse.errors import XlafuseError
from xlafuse.experiment.config import load_config
from xlafuse.experiment.runner import run_experiment
from xlafuse.hlo import analyze_hlo
from xlafuse.measurement.kernels import join_trace
from xlafuse.measurement.reference import INTERPRETED_BASIS
from xlafuse.measurement.validate import ModeledKernel
from xlafuse.models import implementations, registry
from xlafuse.report.lines import cell_line
from xlafuse.results.records import CellResult

FAST = {"warmup": 1, "min_time_s": 0.01, "min_iters": 3, "max_iters": 10, "repeats": 1}
FAST_TOML = """
[timing]
warmup = 1
min_time_s = 0.01
min_iters = 3
max_iters = 10
repeats = 1

[measure]
calibrate = false
"""
ZOO = {
    "attention": ("xla", "tokamax_xla", "xla_chunked", "cudnn", "mosaic", "triton"),
    "layernorm": ("xla", "tokamax_xla", "triton"),
    "swiglu": ("xla", "tokamax_xla", "mosaic", "triton"),
    "gpt2": ("xla", "tokamax_xla", "xla_chunked"),
    "mlp": ("xla",),
}


# --- the grammar: impl=NAME, composed with XLA options ---------------------------------------


def test_an_implementation_is_a_variant_part_that_composes_with_xla_options():
    alone = variants.get("impl=cudnn")
    assert (alone.name, alone.implementation, alone.backend_passes) == ("impl=cudnn", "cudnn", {})
    composed = variants.get("no-fusion+impl=xla_chunked")
    assert composed.name == "no-fusion+impl=xla_chunked"
    assert composed.implementation == "xla_chunked"
    assert composed.passes_for("cpu") == variants.get("no-fusion").passes_for("cpu")
    assert variants.Variant.from_dict(composed.to_dict()) == composed
    assert variants.get("no-fusion").to_dict().get("implementation") is None  # unchanged form


@pytest.mark.parametrize(
    "spec, message",
    [
        (
            "impl=",
            "variant 'impl=': implementation '' is not a name; accepted: letters, digits, "
            "'_', '-', '.' (e.g. impl=cudnn)",
        ),
        (
            "impl=a b",
            "variant 'impl=a b': implementation 'a b' is not a name; accepted: letters, "
            "digits, '_', '-', '.' (e.g. impl=cudnn)",
        ),
        (
            "impl=cudnn+no-fusion+impl=triton",
            "variant 'impl=cudnn+no-fusion+impl=triton' names 2 implementations (cudnn, "
            "triton); a cell runs one: compose XLA options with one impl=NAME",
        ),
        (
            "impl=cudnn+torch-eager",
            "variants torch-eager run PyTorch and cannot be composed with others; list them "
            "as variants of their own",
        ),
    ],
)
def test_a_bad_implementation_part_is_one_line_saying_what_is_accepted(spec, message):
    with pytest.raises(ValueError) as info:
        variants.get(spec)
    assert str(info.value) == message


# --- the zoo: what each workload has, and what keeps one from running --------------------------


@pytest.mark.parametrize("name", sorted(ZOO))
def test_each_zoo_workload_declares_its_implementations(name):
    assert registry.implementation_names(name) == ZOO[name]


def test_a_built_zoo_workload_carries_its_implementations_over_the_same_arguments(monkeypatch):
    monkeypatch.setattr(implementations, "tokamax_installed", lambda: True)  # nothing is traced
    monkeypatch.setattr(implementations, "offered", lambda op: ("tokamax_xla",))
    workload = registry.build("layernorm", size="tiny")
    assert (workload.implementation, list(workload.implementations)) == (
        "xla",
        ["tokamax_xla", "triton"],
    )
    other = workload.with_implementation("tokamax_xla")
    assert other.args is workload.args and other.fn is not workload.fn
    assert other.implementation == "tokamax_xla" and "xla" in other.implementations
    assert other.with_implementation("xla").fn is workload.fn
    with pytest.raises(XlafuseError) as info:
        workload.with_implementation("cudnn")
    assert str(info.value) == (
        "workload 'layernorm' has no implementation 'cudnn'; accepted: impl=xla, "
        "impl=tokamax_xla, impl=triton"
    )
    with pytest.raises(XlafuseError) as info:  # refused before anything is traced
        workload.with_implementation("triton")
    assert str(info.value).startswith("implementation 'triton' of 'layernorm' is a GPU kernel")


def test_gpt2_has_its_lm_head_loss_implementations_in_train_mode_only():
    assert list(registry.build("gpt2", size="tiny", mode="forward").implementations) == []
    problem = registry.implementation_problem("gpt2", "xla_chunked", mode="forward")
    assert problem == (
        "implementation 'xla_chunked' of 'gpt2' replaces its LM head and loss (logits never "
        "materialized): it applies to mode train, not 'forward'"
    )


def _fake_gpu(monkeypatch, capability: str, kind: str) -> None:
    """JAX's device as a GPU of `capability`, tokamax installed and offering everything."""
    device = SimpleNamespace(platform="gpu", compute_capability=capability, device_kind=kind)
    monkeypatch.setattr(implementations.jax, "devices", lambda *a: [device])
    monkeypatch.setattr(implementations, "tokamax_installed", lambda: True)
    monkeypatch.setattr(
        implementations, "offered", lambda op: tuple(implementations.OPS[op].kernels)
    )


def test_each_implementation_the_device_cannot_run_is_refused_in_one_line(monkeypatch):
    def problem(name, implementation, **kw):
        return registry.implementation_problem(name, implementation, **kw)

    assert problem("layernorm", "cudnn") == (
        "workload 'layernorm' has no implementation 'cudnn'; accepted: impl=xla, "
        "impl=tokamax_xla, impl=triton"
    )
    assert problem("attention", "triton", devices=2) == (
        "implementation 'triton' of 'attention': an implementation runs on one device here "
        "(devices = 1), not devices=2"
    )
    monkeypatch.setattr(implementations, "tokamax_installed", lambda: False)
    assert problem("attention", "triton") == (
        "implementation 'triton' of 'attention' is tokamax's, which is not installed: "
        'pip install -e ".[tokamax]"'
    )
    monkeypatch.setattr(implementations, "tokamax_installed", lambda: True)
    assert problem("attention", "cudnn", dtype="float32") == (
        "implementation 'cudnn' of 'attention' needs dtype bfloat16 or float16, not float32"
    )
    assert problem("attention", "mosaic", dtype="bfloat16") == (
        "implementation 'mosaic' of 'attention' is a GPU kernel and JAX's backend is 'cpu' "
        "(tokamax's GPU kernels have no interpret mode there); here: impl=xla, "
        "impl=tokamax_xla, impl=xla_chunked"
    )
    _fake_gpu(monkeypatch, "8.0", "NVIDIA A100-SXM4-80GB")
    assert problem("attention", "mosaic", dtype="bfloat16") == (
        "implementation 'mosaic' of 'attention' needs an NVIDIA GPU of compute capability 9 or "
        "newer (sm_90); this NVIDIA A100-SXM4-80GB is sm_80"
    )
    assert problem("attention", "triton", dtype="bfloat16") is None
    _fake_gpu(monkeypatch, "9.0", "NVIDIA H100 80GB HBM3")
    assert problem("swiglu", "mosaic", dtype="bfloat16") is None


def test_an_implementation_tokamax_does_not_offer_here_is_refused(monkeypatch):
    _fake_gpu(monkeypatch, "9.0", "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(implementations, "offered", lambda op: ("tokamax_xla",))
    monkeypatch.setattr(implementations, "tokamax_version", lambda: "0.0.17")
    assert registry.implementation_problem("layernorm", "triton", dtype="bfloat16") == (
        "implementation 'triton' of 'layernorm': tokamax 0.0.17 does not offer 'triton' for "
        "layer_norm here; it offers: impl=tokamax_xla"
    )


def test_compare_refuses_an_implementation_before_the_workload_is_built(capsys, monkeypatch):
    monkeypatch.setattr(registry, "build", lambda *a, **k: pytest.fail("built the workload"))
    code, _, err = run_cli(capsys, "compare", "layernorm", "--variants", "default,impl=cudnn")
    assert code == 2
    assert err.strip().splitlines() == [
        "xlafuse compare: error: variant 'impl=cudnn': workload 'layernorm' has no "
        "implementation 'cudnn'; accepted: impl=xla, impl=tokamax_xla, impl=triton"
    ]


def test_coldstart_refuses_an_implementation_before_any_child_starts(capsys, monkeypatch):
    from xlafuse.measurement import coldstart

    monkeypatch.setattr(coldstart, "run_child", lambda *a, **k: pytest.fail("started a child"))
    code, _, err = run_cli(capsys, "coldstart", "--workload", "mlp", "--variant", "impl=cudnn")
    assert code == 2
    assert err.strip().splitlines() == [
        "xlafuse coldstart: error: variant 'impl=cudnn': workload 'mlp' has no "
        "implementation 'cudnn'; accepted: impl=xla"
    ]


def test_a_config_refuses_an_implementation_a_workload_lacks(tmp_path):
    path = tmp_path / "impl.toml"
    path.write_text(
        textwrap.dedent("""
        [experiment]
        variants = ["default", "impl=cudnn", "no-fusion+impl=xla_chunked"]
        [[workloads]]
        name = "layernorm"
        [[workloads]]
        name = "attention"
        implementations = { mine = "x.py:f" }
        """)
    )
    with pytest.raises(XlafuseError) as info:
        load_config(path, backend="cpu")
    assert [line.strip() for line in str(info.value).splitlines()[1:]] == [
        "workloads[1].implementations: is for an entry (FILE.py:FUNCTION); a zoo workload's "
        "implementations come with it (`xlafuse workloads`): list them as variants, impl=NAME",
        "experiment.variants[1]: 'impl=cudnn': workload 'layernorm' has no implementation "
        "'cudnn'; accepted: impl=xla, impl=tokamax_xla, impl=triton",
        "experiment.variants[2]: 'no-fusion+impl=xla_chunked': workload 'layernorm' has no "
        "implementation 'xla_chunked'; accepted: impl=xla, impl=tokamax_xla, impl=triton",
    ]


# --- a program of the user's: xlafuse.measure with a dict of functions -----------------------


def _own(x):
    return jnp.sin(x) * 2.0


def _mine(x):
    return 2.0 * jnp.sin(x)


def _doubled_sin(x_ref, o_ref):
    o_ref[...] = jnp.sin(x_ref[...]) * 2.0


def _interpreted(x):
    shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
    return pl.pallas_call(_doubled_sin, out_shape=shape, interpret=True)(x)


def test_measure_compares_a_dict_of_functions_against_the_first():
    x = jnp.linspace(-3.0, 3.0, 256)
    m = xlafuse.measure({"xla": _own, "mine": _mine}, x, timing=FAST, calibrate=False)
    assert [(r.variant, r.implementation) for r in m.records] == [
        ("default", "xla"),
        ("impl=mine", "mine"),
    ]
    mine = m.record("impl=mine")
    assert mine.ok and mine.numerics.within_tolerance and mine.numerics.max_abs_diff == 0.0
    assert mine.speedup.basis.endswith("paired rounds") and mine.speedup.vs_reference > 0
    assert mine.settings["variant"]["implementation"] == "mine"
    assert CellResult.from_dict(mine.to_dict()).implementation == "mine"


def test_measure_crosses_the_implementations_with_the_variants():
    x = jnp.linspace(-3.0, 3.0, 64)
    m = xlafuse.measure(
        {"xla": _own, "mine": _mine},
        x,
        variants=["default", "no-fusion"],
        timing=FAST,
        calibrate=False,
    )
    assert [r.variant for r in m.records] == [
        "default",
        "no-fusion",
        "impl=mine",
        "no-fusion+impl=mine",
    ]
    crossed = m.record("no-fusion+impl=mine")
    assert crossed.implementation == "mine" and crossed.fusion.real_fusions == 0


def test_an_interpreted_pallas_kernel_is_marked_and_its_times_never_compared():
    assert implementations.interpreted(jax.make_jaxpr(jax.jit(_interpreted))(jnp.ones(8)))
    assert not implementations.interpreted(jax.make_jaxpr(_own)(jnp.ones(8)))
    x = jnp.linspace(-3.0, 3.0, 128)
    m = xlafuse.measure({"xla": _own, "pallas": _interpreted}, x, timing=FAST, calibrate=False)
    own, pallas = m.records
    assert (own.interpreted, pallas.interpreted) == (False, True)
    assert pallas.numerics.within_tolerance  # its numerics are judged all the same
    assert pallas.speedup.basis == INTERPRETED_BASIS and pallas.speedup.vs_reference is None
    assert pallas.timing.median_s > 0
    assert "INTERPRETED (Pallas in interpret mode: times not compared)" in cell_line(
        pallas, reference=own
    )


def test_an_implementation_of_other_outputs_is_refused_before_any_compile(monkeypatch):
    monkeypatch.setattr(jit, "compile_variant", lambda *a, **k: pytest.fail("compiled"))
    x = jnp.ones(16)
    with pytest.raises(XlafuseError) as info:
        xlafuse.measure({"xla": _own, "short": lambda x: _own(x)[:-1]}, x, calibrate=False)
    assert str(info.value) == (
        "'_own': implementation 'short' returns output 0 float32[15] where 'xla' returns "
        "float32[16]; an implementation returns what the program's own function does "
        "(structure, shapes, dtypes)"
    )
    with pytest.raises(XlafuseError) as info:
        xlafuse.measure({"xla": _own, "half": lambda x: _own(x).astype(jnp.float16)}, x)
    assert "returns output 0 float16[16] where 'xla' returns float32[16]" in str(info.value)


@pytest.mark.parametrize(
    "fn, kwargs, message",
    [
        (
            {},
            {},
            'measure: an empty dict of functions; give {"xla": f, "mine": g}: the first is the '
            "reference implementation",
        ),
        (
            {"xla": _own, "mine": _mine},
            {"variants": ["default", "impl=mine"]},
            "variant 'impl=mine' names an implementation; with a dict of functions the dict's "
            "names are the implementations: give XLA variants only",
        ),
        (
            {"xla": _own, "a b": _mine},
            {},
            "'_own': implementation 'a b': implementation 'a b' is not a name; accepted: "
            "letters, digits, '_', '-', '.' (e.g. impl=cudnn)",
        ),
        (
            _own,
            {"variants": ["default", "impl=mine"]},
            "variant 'impl=mine': workload '_own' has no implementation 'mine'; accepted: impl=xla",
        ),
    ],
)
def test_measure_refuses_bad_implementations_in_one_line(fn, kwargs, message):
    with pytest.raises(XlafuseError) as info:
        xlafuse.measure(fn, jnp.ones(4), calibrate=False, **kwargs)
    assert str(info.value) == message


def test_compare_of_a_function_refuses_an_implementation():
    with pytest.raises(XlafuseError) as info:
        xlafuse.compare(_own, jnp.ones(4), variants=["default", "impl=mine"])
    assert str(info.value).startswith("variant 'impl=mine' names an implementation, and a")


# --- a config entry's implementations table --------------------------------------------------

KERNELS = """
import jax
import jax.numpy as jnp


def program(n=64):
    return norm, (jnp.linspace(-1.0, 1.0, n),)


def norm(x):
    return (x - x.mean()) / jnp.sqrt(x.var() + 1e-6)


def fused(x):
    mean = jnp.mean(x)
    return (x - mean) * jax.lax.rsqrt(jnp.mean(jnp.square(x - mean)) + 1e-6)


def short(x):
    return norm(x)[:-1]
"""


def _entry_config(tmp_path, implementation: str, variants_line: str):
    (tmp_path / "kernels.py").write_text(KERNELS)
    path = tmp_path / "impl.toml"
    path.write_text(
        textwrap.dedent(f"""
        [experiment]
        name = "impls"
        variants = {variants_line}
        [[workloads]]
        entry = "kernels.py:program"
        name = "my_norm"
        implementations = {{ mine = "kernels.py:{implementation}" }}
        """)
        + FAST_TOML
    )
    return path


def test_a_config_entry_runs_its_implementations_judged_against_its_own(tmp_path):
    path = _entry_config(tmp_path, "fused", '["default", "impl=mine", "no-fusion+impl=mine"]')
    config = load_config(path)
    assert dict(config.workloads[0].implementations) == {"mine": "kernels.py:fused"}
    records = run_experiment(config, out=tmp_path / "out", progress=False, report=False)
    assert [(r.variant, r.implementation, r.ok) for r in records] == [
        ("default", "xla", True),
        ("impl=mine", "mine", True),
        ("no-fusion+impl=mine", "mine", True),
    ]
    assert all(r.numerics.within_tolerance for r in records[1:])


def test_a_config_entrys_implementations_reach_a_cold_start_child_in_another_folder(
    tmp_path, monkeypatch
):
    from xlafuse.measurement import coldstart

    path = _entry_config(tmp_path, "fused", '["default", "impl=mine"]')
    cell = load_config(path).workloads[0].cell
    spec = json.loads(json.dumps(coldstart.workload_spec(cell)))  # what the child reads
    assert spec["implementations"] == {"mine": f"{tmp_path / 'kernels.py'}:fused"}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the child's folder: the config's relative paths mean nothing
    workload = coldstart.build_workload(spec)
    assert list(workload.implementations) == ["mine"]
    mine = workload.with_implementation("mine")
    assert mine.implementation == "mine"
    assert float(mine.fn(*mine.args)[0]) == pytest.approx(-1.705193, abs=1e-6)


def test_a_config_entry_refuses_an_implementation_it_lacks_or_of_other_outputs(tmp_path):
    path = _entry_config(tmp_path, "fused", '["default", "impl=theirs"]')
    with pytest.raises(XlafuseError) as info:
        load_config(path)
    assert str(info.value).splitlines()[1].strip() == (
        "experiment.variants[1]: 'impl=theirs': entry 'kernels.py:program' has no "
        "implementation 'theirs'; accepted: impl=xla, impl=mine (its workload table's "
        'implementations = {NAME = "FILE.py:FUNCTION"})'
    )
    path = _entry_config(tmp_path, "short", '["default", "impl=mine"]')
    with pytest.raises(XlafuseError) as info:
        load_config(path)
    assert str(info.value).splitlines()[1].strip() == (
        "workloads[0].implementations: entry 'kernels.py:program': implementation 'mine' "
        "returns output 0 float32[63] where 'xla' returns float32[64]; an implementation "
        "returns what the program's own function does (structure, shapes, dtypes)"
    )


# --- a hand-written kernel's custom-call: one kernel, its operands' and results' bytes -------

PALLAS_HLO = """\
HloModule jit_attention, is_scheduled=true

%fused_scale (param_0: f32[2,16,4,16]) -> f32[2,16,4,16] {
  %param_0 = f32[2,16,4,16]{3,2,1,0} parameter(0)
  %constant_1 = f32[] constant(0.25)
  %broadcast.1 = f32[2,16,4,16]{3,2,1,0} broadcast(f32[] %constant_1), dimensions={}
  ROOT %multiply.1 = f32[2,16,4,16]{3,2,1,0} multiply(f32[2,16,4,16]{3,2,1,0} %param_0, f32[2,16,4,16]{3,2,1,0} %broadcast.1)
}

%fused_add (param_0.1: f32[2,16,4,16], param_1.1: f32[2,16,4,16]) -> f32[2,16,4,16] {
  %param_0.1 = f32[2,16,4,16]{3,2,1,0} parameter(0)
  %param_1.1 = f32[2,16,4,16]{3,2,1,0} parameter(1)
  ROOT %add.1 = f32[2,16,4,16]{3,2,1,0} add(f32[2,16,4,16]{3,2,1,0} %param_0.1, f32[2,16,4,16]{3,2,1,0} %param_1.1)
}

ENTRY %main.10 (q.1: f32[2,16,4,16], k.1: f32[2,16,4,16], v.1: f32[2,16,4,16]) -> f32[2,16,4,16] {
  %q.1 = f32[2,16,4,16]{3,2,1,0} parameter(0)
  %k.1 = f32[2,16,4,16]{3,2,1,0} parameter(1)
  %v.1 = f32[2,16,4,16]{3,2,1,0} parameter(2)
  %loop_multiply_fusion = f32[2,16,4,16]{3,2,1,0} fusion(f32[2,16,4,16]{3,2,1,0} %q.1), kind=kLoop, calls=%fused_scale
  %custom-call.2 = (f32[2,16,4,16]{3,2,1,0}, f32[2,4,16]{2,1,0}) custom-call(f32[2,16,4,16]{3,2,1,0} %loop_multiply_fusion, f32[2,16,4,16]{3,2,1,0} %k.1, f32[2,16,4,16]{3,2,1,0} %v.1), ATTRIBUTES
  %get-tuple-element.1 = f32[2,16,4,16]{3,2,1,0} get-tuple-element((f32[2,16,4,16]{3,2,1,0}, f32[2,4,16]{2,1,0}) %custom-call.2), index=0
  ROOT %loop_add_fusion = f32[2,16,4,16]{3,2,1,0} fusion(f32[2,16,4,16]{3,2,1,0} %get-tuple-element.1, f32[2,16,4,16]{3,2,1,0} %q.1), kind=kLoop, calls=%fused_add
}
"""  # modelled on a Pallas Triton flash attention's optimized HLO (jax 0.11)
# The custom-call's attributes of each kind of hand-written kernel (Pallas Triton, Pallas Mosaic
# GPU, jax-triton), as XLA prints them.
PALLAS_TRITON = (
    'custom_call_target="__gpu$xla.gpu.triton", api_version=API_VERSION_TYPED_FFI, '
    'metadata={op_name="jit(attention)/pallas_call"}, backend_config={debug = false, '
    'grid_x = 1 : i32, grid_y = 4 : i32, grid_z = 2 : i32, ir = "ml\\00ir", '
    'name = "mha_forward", num_stages = 2 : i32, num_warps = 4 : i32}'
)
MOSAIC = (
    'custom_call_target="mosaic_gpu_v2", api_version=API_VERSION_TYPED_FFI, '
    'backend_config={kernel_hash = "3f2a", module = "ml\\00ir"}'
)
JAX_TRITON = (
    'custom_call_target="triton_kernel_call", api_version=API_VERSION_STATUS_RETURNING, '
    'backend_config="x9c"'
)
ARRAY = 2 * 16 * 4 * 16 * 4  # bytes of one f32[2,16,4,16]


@pytest.mark.parametrize("attributes", [PALLAS_TRITON, MOSAIC, JAX_TRITON])
def test_a_hand_written_kernel_is_one_kernel_of_its_operands_and_results_bytes(attributes):
    report = analyze_hlo(PALLAS_HLO.replace("ATTRIBUTES", attributes))
    assert (report.kernels, report.custom_calls, report.backend) == (3, 1, "gpu")
    call = next(k for k in report.kernel_details if k.opcode == "custom-call")
    assert (call.bytes_in, call.bytes_out) == (3 * ARRAY, ARRAY + 2 * 4 * 16 * 4)
    assert call.flops is None and report.flops_unknown_kernels == 1  # never guessed
    assert ModeledKernel.from_kernel_info(call).library


def test_a_pallas_kernels_launch_is_attributed_to_its_custom_call():
    """Its launch carries the kernel's name (`mha_forward`), not the instruction's: it is
    aligned with the custom-call by program order, as a library call's is."""
    report = analyze_hlo(PALLAS_HLO.replace("ATTRIBUTES", PALLAS_TRITON))
    events = [
        ("loop_multiply_fusion", 0, 1000),
        ("mha_forward", 2000, 5000),
        ("loop_add_fusion", 8000, 1000),
    ]
    times = join_trace(report, events, calls=1)
    call = next(k for k in times.kernels if k.name == "custom-call.2")
    assert (call.time_s, call.launches_per_call, call.match) == (5e-6, 1, "library")
    assert times.unattributed == () and times.attributed_s == pytest.approx(7e-6)


def test_a_cudnn_attention_is_one_kernel_without_its_workspace(samples):
    report = analyze_hlo(samples / "sdpa_cudnn.default.hlo.txt")
    fmha = [k for k in report.kernel_details if k.sub_kind == "__cudnn$fmhaSoftmax"]
    assert len(fmha) == 1 and dict(report.custom_call_targets)["__cudnn$fmhaSoftmax"] == 1
    array = 4 * 1024 * 8 * 64 * 2  # bf16[4,1024,8,64]: the u8[256] workspace is not written
    assert (fmha[0].bytes_in, fmha[0].bytes_out) == (3 * array, array)


def test_a_record_keeps_its_implementation_and_interpreted():
    record = CellResult("f", "f32[8]", "forward", "float32", "impl=mine", "cpu", "cpu")
    record = dataclasses.replace(record, implementation="mine", interpreted=True)
    flat = record.to_dict()
    assert (flat["implementation"], flat["interpreted"]) == ("mine", True)
    assert CellResult.from_dict(flat) == record


def test_tunes_implementation_family_is_searched_only_when_named():
    from xlafuse.experiment.tune.space import Candidate, families_for, restricted

    assert "implementation" not in [f.name for f in families_for("cpu")]
    (family,) = restricted(families_for("cpu", names=["implementation"]), ("xla", "tokamax_xla"))
    assert list(family.choices) == ["xla", "tokamax_xla"]
    candidate = Candidate((), (("implementation", "tokamax_xla"),))
    assert (candidate.name, candidate.options(), candidate.implementation) == (
        "implementation=tokamax_xla",
        {},
        "tokamax_xla",
    )
    assert candidate.variant().implementation == "tokamax_xla"
    assert Candidate((), (("implementation", "xla"),)).variant().implementation is None


def test_the_commands_that_list_variants_and_workloads_name_the_implementations(capsys):
    code, out, _ = run_cli(capsys, "variants")
    assert code == 0 and "\nimpl=NAME  (composes: no-fusion+impl=NAME)\n" in out
    code, out, _ = run_cli(capsys, "workloads", "layernorm", "mlp")
    assert code == 0
    assert out.splitlines()[1] == "  implementations: impl=xla, impl=tokamax_xla, impl=triton"
    assert "implementations" not in out.split("\n\n")[1]  # mlp has its own only


def test_a_function_named_as_a_zoo_workload_keeps_its_own_implementations():
    def attention(x):  # the zoo's name: its implementations are still the dict's
        return _own(x)

    m = xlafuse.measure(
        {"xla": attention, "mine": _mine}, jnp.ones(8), calibrate=False, timing=FAST
    )
    assert [(r.workload, r.implementation, r.ok) for r in m.records] == [
        ("attention", "xla", True),
        ("attention", "mine", True),
    ]


def test_a_tokamax_that_cannot_be_imported_is_one_line(monkeypatch):
    def broken(op):
        raise ModuleNotFoundError("No module named 'xprof'")

    monkeypatch.setattr(implementations, "tokamax_installed", lambda: True)
    monkeypatch.setattr(implementations, "offered", broken)
    assert registry.implementation_problem("layernorm", "tokamax_xla") == (
        "implementation 'tokamax_xla' of 'layernorm' is tokamax's, which cannot be imported "
        "here: ModuleNotFoundError: No module named 'xprof'"
    )
