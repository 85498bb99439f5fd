"""PyTorch twins (`xlafuse.torch`): the same models on the same weights, counted and timed.

Tiny sizes only: an Inductor compile on a 2-core CPU takes seconds, so Inductor runs in a few
tests (the chain's kernel count, one mixed XLA/torch experiment with a train step) and the
twins' agreement with Flax is checked eagerly for every workload.
"""

import json
import re
from pathlib import Path

import jax
import numpy as np
import pytest
from helpers import FAST_TIMING, copy_results, run_in_new_folder, small_calibration

torch = pytest.importorskip("torch")

from xlafuse import models  # noqa: E402
from xlafuse.cli import main  # noqa: E402
from xlafuse.compiler.jit import MeasureRequest  # noqa: E402
from xlafuse.compiler.variants import get as get_variant  # noqa: E402
from xlafuse.experiment import runner  # noqa: E402
from xlafuse.experiment.config import load_config, parse_config  # noqa: E402
from xlafuse.measurement import timing as TIMING  # noqa: E402
from xlafuse.measurement.numerics import host_outputs, judge_workload  # noqa: E402
from xlafuse.measurement.reference import Reference  # noqa: E402
from xlafuse.measurement.timing import TimingSettings  # noqa: E402
from xlafuse.report.torch import frameworks_section  # noqa: E402
from xlafuse.results.records import CellResult  # noqa: E402
from xlafuse.torch import convert, twins  # noqa: E402
from xlafuse.torch import measure as torch_measure  # noqa: E402
from xlafuse.torch.program import build_program, settle_vml_dispatch  # noqa: E402

pytestmark = pytest.mark.torch

WITH_PARAMS = [n for n in models.available(mode="train") if twins.has_twin(n)]


def _xla_outputs(workload):
    out = jax.jit(workload.fn, **workload.jit_kwargs())(*workload.fresh_args())
    return host_outputs(workload, out)


def _twin_outputs(workload, variant="torch-eager"):
    with torch_measure.fresh_inductor_cache():
        return torch_measure.run_twin(workload, get_variant(variant))


@pytest.mark.parametrize("name", twins.twin_names())
def test_twin_forward_agrees_with_flax(name):
    workload = models.build(name, size="tiny", mode="forward", dtype="float32")
    twin = _twin_outputs(workload)
    diff = judge_workload(workload, _xla_outputs(workload), twin.outputs)
    assert diff.within_tolerance, diff
    assert diff.max_abs_diff < 1e-5


def test_a_cpu_twin_settles_mkl_s_kernel_choice_before_its_first_call(monkeypatch):
    """oneMKL picks a VML function's kernel on its first call, badly when threads race
    (pytorch/pytorch#188792): the twin's judged call must not be the first."""
    calls = []
    real_cos = torch.cos

    def cos(x):
        calls.append((x.numel(), x.dtype))
        return real_cos(x)

    monkeypatch.setattr(torch, "cos", cos)
    settle_vml_dispatch.cache_clear()
    workload = models.build("cos_relu", size="tiny", mode="forward", dtype="float32")
    _twin_outputs(workload)  # the judged call, then one more that counts the aten ops
    settling, twin = calls[:2], calls[2:]
    assert settling == [(1, torch.float32), (1, torch.float64)]
    assert twin == [(64 * 128, torch.float32)] * 2
    _twin_outputs(workload)
    assert calls[4:] == twin  # settled once a process


@pytest.mark.parametrize("name", WITH_PARAMS)
def test_twin_train_step_agrees_with_flax(name):
    """Loss, gradient, batch statistics and AdamW-updated parameters after one step."""
    workload = models.build(name, size="tiny", mode="train", dtype="float32")
    twin = _twin_outputs(workload)
    reference = _xla_outputs(workload)
    diff = judge_workload(workload, reference, twin.outputs)
    assert diff.within_tolerance, diff
    loss = float(twin.outputs["loss"])
    assert loss == pytest.approx(float(reference["loss"]), rel=1e-5)


def test_every_workload_has_a_twin_or_says_why_not():
    assert sorted([*twins.twin_names(), *twins.NO_TWIN]) == models.available()
    with pytest.raises(ValueError, match=r"'cartpole' has no torch twin \(its actions are sampled"):
        build_program(models.build("cartpole", size="tiny"), get_variant("torch-eager"))


@pytest.mark.parametrize(
    ("name", "params"), [("gpt2", 124_439_808), ("resnet50", 25_557_032), ("mlp", None)]
)
def test_twin_has_the_flax_parameter_count(name, params):
    spec = models.registry.spec(name)
    config = spec.config("full")
    flax_count = models.registry.param_count(name, size="full")
    assert twins.count_params(name, config) == flax_count
    if params is not None:
        assert flax_count == params


def test_kernel_layouts_round_trip():
    dense = np.arange(15.0).reshape(3, 5)  # Flax (in, out)
    conv = np.arange(2 * 3 * 4 * 5.0).reshape(2, 3, 4, 5)  # Flax HWIO
    assert convert.to_torch_layout(dense).shape == (5, 3)
    assert convert.to_torch_layout(conv).shape == (5, 4, 2, 3)  # OIHW
    for array in (dense, conv):
        back = convert.to_flax_layout(convert.to_torch_layout(array))
        np.testing.assert_array_equal(back, array)
    assert convert.to_torch_layout(dense, key="embedding") is dense
    assert convert.torch_name(("blocks", 0, "attn", "qkv", "kernel")) == "blocks.0.attn.qkv.weight"
    assert convert.torch_name(("stem", "bn", "var")) == "stem.bn.running_var"


def test_bfloat16_travels_bit_exact():
    x = jax.random.normal(jax.random.key(0), (7,), dtype=jax.numpy.bfloat16)
    t = convert.to_tensor(x)
    assert t.dtype == torch.bfloat16
    np.testing.assert_array_equal(convert.to_numpy(t), np.asarray(x))


def test_a_workload_without_twin_support_says_what_to_use():
    config = {**models.registry.spec("attention").config("tiny"), "implementation": "cudnn"}
    with pytest.raises(ValueError, match=r"torch's SDPA, not implementation='cudnn'; use "):
        twins.make_model("attention", config, torch.float32, torch.float32)


def test_inductor_launches_fewer_kernels_than_eager_on_a_chain():
    """8 elementwise ops: eager dispatches 8 aten ops; Inductor fuses them into one loop."""
    workload = models.build("chain", size="tiny", mode="forward", dtype="float32", ops=8)
    eager = _twin_outputs(workload, "torch-eager").counts
    inductor = _twin_outputs(workload, "torch-inductor").counts
    array_bytes = 64 * 128 * 4
    assert eager["kernels"] == 8
    assert eager["modeled_bytes"] == 8 * 2 * array_bytes  # each op reads and writes the array
    assert eager["kernels_basis"] == torch_measure.KERNELS_EAGER_CPU
    assert inductor["kernels"] == 1
    assert inductor["generated_kernels"] == 1
    assert inductor["modeled_bytes"] == 2 * array_bytes  # one read, one write
    assert inductor["kernels_basis"] == torch_measure.KERNELS_INDUCTOR_CPU
    assert inductor["compile_s"] > 0


WRAPPER = """
def call(args):
    arg0_1, = args
    buf0 = empty_strided_cpu((64, 128), (128, 1), torch.float32)
    cpp_fused_add_mul_0(arg0_1, buf0)
    buf1 = empty_strided_cpu((64, 64), (64, 1), torch.float32)
    extern_kernels.mm(buf0, reinterpret_tensor(buf0, (128, 64), (1, 128), 0), out=buf1)
    buf2 = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(buf1, buf1, buf1)
    return (buf1, )
"""


def test_wrapper_kernel_calls_counts_loops_library_calls_and_fallbacks():
    assert torch_measure.wrapper_kernel_calls([WRAPPER]) == 3
    assert torch_measure.wrapper_kernel_calls([WRAPPER, WRAPPER]) == 6


def test_warm_compile_reads_inductor_s_cache():
    workload = models.build("chain", size="tiny", mode="forward", dtype="float32", ops=4)
    request = MeasureRequest(TimingSettings(**FAST_TIMING))
    fields = torch_measure.measure_cell(
        workload, get_variant("torch-inductor"), request, Reference(), cold_start=True
    )
    assert fields["cache_hit"] is True
    assert fields["cold_compile_s"] == fields["compile_s"] > 0
    assert fields["warm_compile_s"] > 0
    assert fields["iters"] == 3
    assert "speedup_vs_reference" not in fields  # no reference to compare with


MIXED_WORKLOADS = [
    {"name": "chain", "overrides": {"ops": 8}},
    {"name": "layernorm", "mode": "train"},
]


def _mixed_config(out):
    return parse_config(
        {
            "experiment": {
                "name": "mixed",
                "output": str(out),
                "variants": ["default", "torch-eager", "torch-inductor"],
            },
            "workloads": MIXED_WORKLOADS,
            "timing": FAST_TIMING,
        },
        backend="cpu",
    )


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory):
    return run_in_new_folder(tmp_path_factory, "mixed", _mixed_config)


def test_mixed_config_records_framework_counts_and_numerics(mixed_run):
    out, records = mixed_run
    by_cell = {(r.workload, r.variant): r for r in records}
    assert len(by_cell) == 6
    assert all(r.status == "ok" for r in records), [r.error for r in records]
    for (_, variant), r in by_cell.items():
        framework = "jax" if variant == "default" else "torch"
        assert r.framework == framework
        assert r.framework_version == (jax.__version__ if framework == "jax" else torch.__version__)
        if framework == "torch":
            assert r.numerics.within_tolerance is True
            lead = TIMING.leading_figure(r.mode == "train", r.backend)
            assert r.speedup.basis == TIMING.BASES[(lead, True)]
            assert r.speedup.verdict in ("faster", "slower", "same", "undecided")
            assert len(r.speedup.ci) == 2
            assert r.timing.iters == 3
    assert by_cell[("chain", "torch-eager")].fusion.kernels == 8
    assert by_cell[("chain", "torch-inductor")].fusion.kernels == 1
    assert by_cell[("chain", "default")].fusion.kernels == 1
    assert by_cell[("layernorm", "torch-inductor")].compile.compile_s > 0
    assert by_cell[("layernorm", "torch-eager")].compile.compile_s is None
    # Every XLA cell first, then the twins (torch's profiler would keep CUPTI from jax's).
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["framework"] for r in lines] == ["jax"] * 2 + ["torch"] * 4
    assert [r["workload"] for r in lines[2:]] == ["chain", "chain", "layernorm", "layernorm"]
    assert lines[2]["settings"]["variant"]["torch_compile"] is None  # eager


def test_mixed_config_resumes_without_running_again(mixed_run, tmp_path, monkeypatch):
    out, _ = mixed_run
    copy = copy_results(out, tmp_path / "resume")
    monkeypatch.setattr(runner, "calibrate", small_calibration)

    def refuse(*args, **kwargs):
        raise AssertionError("a finished torch cell was measured again")

    monkeypatch.setattr(torch_measure, "measure_cell", refuse)
    records = runner.run_experiment(_mixed_config(copy), progress=False)
    assert len(records) == 6
    assert len((copy / "results.jsonl").read_text().splitlines()) == 6


def test_mixed_config_reports_xla_beside_inductor(mixed_run):
    out, _ = mixed_run
    report = (out / "report.md").read_text()
    assert "## XLA beside PyTorch (same models, same weights)" in report
    assert (
        "**default vs torch-inductor:** XLA launches 1 kernel(s) per call, as many as Inductor's 1; "
        in report
    )
    assert "moves 0.06554 MB vs 0.06554 MB (1.00x)" in report
    assert re.search(r"XLA launches \d+ kernel\(s\) per call, more than Inductor.s \d+;", report)
    assert f"jax {jax.__version__} beside torch {torch.__version__}." in report
    assert torch_measure.KERNELS_INDUCTOR_CPU in report
    assert (out / "xla_vs_torch.png").stat().st_size > 1000


def test_compare_lists_torch_rows_beside_xla(capsys):
    code = main(["compare", "chain", "--variants", "default,torch-eager,torch-inductor", "--json"])
    assert code == 0
    rows = {r["variant"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["default"]["kernels"] == 1
    assert rows["torch-eager"]["kernels"] == 8  # chain's default: 8 ops
    assert rows["torch-eager"]["compile_s"] is None
    assert rows["torch-inductor"]["kernels"] == 1
    assert rows["torch-inductor"]["fusions"] is None
    assert rows["torch-inductor"]["modeled_bytes"] == rows["default"]["modeled_bytes"]
    assert all(r["within_tolerance"] for r in rows.values())


def test_compare_wants_an_xla_reference_first(capsys):
    assert main(["compare", "chain", "--variants", "torch-eager,default"]) == 2
    assert "the first variant is the reference and must be an XLA one, not 'torch-eager'" in (
        capsys.readouterr().err
    )


def test_sharded_workload_has_no_twin():
    class Sharded:
        name, devices = "mlp", 2

    with pytest.raises(ValueError, match=r"sharded over 2 devices; the torch twins run on one"):
        build_program(Sharded(), None)


# torch's profiler and CUDA-graph trees may warn about their own internals (CUPTI, cudagraph
# warm-up); those are not xlafuse's to fix, and this file's warnings are otherwise errors.
TORCH_GPU_WARNINGS = "ignore::UserWarning:torch.*"


@pytest.mark.gpu
@pytest.mark.filterwarnings(TORCH_GPU_WARNINGS)
def test_gpu_inductor_fuses_the_chain_into_one_device_kernel():
    workload = models.build("chain", size="tiny", mode="forward", dtype="float32", ops=8)
    request = MeasureRequest(TimingSettings(**FAST_TIMING), profile_calls=5)
    cells = {}
    for name in ("torch-eager", "torch-inductor", "torch-inductor-cudagraphs"):
        cells[name] = torch_measure.measure_cell(workload, get_variant(name), request, Reference())
    assert cells["torch-eager"]["device_kernels_per_call"] == 8
    assert cells["torch-inductor"]["device_kernels_per_call"] == 1
    assert cells["torch-inductor"]["kernels_basis"] == torch_measure.KERNELS_PROFILED
    # The graph replays the one Triton kernel; its input is not a static address, so each call
    # first copies it into the graph's buffer (one _foreach_copy_ launch at this size).
    graphs = cells["torch-inductor-cudagraphs"]
    assert graphs["device_kernels_per_call"] == 2
    assert graphs["input_copy_kernels_per_call"] == 1
    assert 0 < graphs["input_copy_time_s"] < graphs["device_time_s"]
    assert cells["torch-inductor"]["input_copy_kernels_per_call"] == 0
    assert cells["torch-inductor"]["top_kernels"][0][0].startswith("triton_")


@pytest.mark.gpu
@pytest.mark.filterwarnings(TORCH_GPU_WARNINGS)
def test_gpu_twin_agrees_in_bfloat16():
    workload = models.build("transformer_block", size="tiny", mode="forward", dtype="bfloat16")
    twin = _twin_outputs(workload, "torch-inductor")
    diff = judge_workload(workload, _xla_outputs(workload), twin.outputs)
    assert diff.within_tolerance, diff


@pytest.mark.parametrize(
    ("name", "xla_variants"),
    [("xla_vs_inductor", ["default", "no-fusion"]), ("xla_vs_inductor_gpt2", ["default"])],
)
def test_study_config_is_valid_on_gpu(name, xla_variants):
    path = Path(__file__).parent.parent / "configs" / f"{name}.toml"
    config = load_config(path, backend="gpu")
    assert [v.name for v in config.variants] == [
        *xla_variants,
        "torch-eager",
        "torch-inductor",
        "torch-inductor-cudagraphs",
    ]
    assert config.measure.profile is True
    assert all(models.registry.spec(w.name) and twins.has_twin(w.name) for w in config.workloads)


def test_cuda_graph_input_copies_are_counted_apart_and_reported():
    copy = (
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
        "(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::"
        "UnaryOpFunctor<float, 2, 1, 1>, at::native::Copy<float, float> >(...)"
    )
    adam = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>"
    events = [(copy, 3e-4), ("triton_poi_fused_add_0", 5e-4), (copy, 2e-4), (adam, 1e-4)] * 2
    fields = torch_measure.input_copy_fields(events, calls=2)
    assert fields == {"input_copy_kernels_per_call": 2.0, "input_copy_time_s": pytest.approx(5e-4)}

    common = {"workload": "chain", "size": "full", "mode": "forward", "dtype": "float32"}
    common |= {"backend": "gpu", "device_kind": "NVIDIA H200"}
    flat = [
        {**common, "variant": "default", "reference": "default", "status": "ok", "kernels": 1},
        {
            **common,
            "variant": "torch-inductor-cudagraphs",
            "framework": "torch",
            "status": "ok",
            "device_kernels_per_call": 14.0,
            "input_copy_kernels_per_call": 13.0,
            "input_copy_time_s": 5.776e-4,
        },
    ]
    records = [CellResult.from_dict(r) for r in flat]
    assert records[1].device.input_copy_kernels_per_call == 13.0
    section = frameworks_section(records)
    assert "| torch | torch-inductor-cudagraphs | 14 (13 input copies, 0.578 ms) |" in section
    assert "| jax | default | 1 |" in section


def test_twins_get_the_reference_profile_from_the_xla_phase(tmp_path, monkeypatch):
    # On a GPU, jax's profiler cannot trace once torch's has run: the twins, measured after every
    # XLA cell, compare their device time with the profile the reference had in the XLA phase.
    from xlafuse.measurement.profile import DeviceProfile

    fake = DeviceProfile(
        device_time_s=1e-3, device_kernels_per_call=1, calls=3, per_call_s=(1e-3,) * 3
    )
    monkeypatch.setattr(runner, "_profile", lambda *args, **kwargs: fake)
    monkeypatch.setattr(runner, "calibrate", small_calibration)
    seen = []

    def measure_cell(workload, variant, request, reference, cold_start=False):
        seen.append((workload.name, reference.profile, reference.compiled is not None))
        return {"kernels": 1, "time_median_s": 1e-3}

    monkeypatch.setattr(torch_measure, "measure_cell", measure_cell)
    config = parse_config(
        {
            "experiment": {
                "name": "m",
                "output": str(tmp_path),
                "variants": ["default", "torch-eager"],
            },
            "workloads": MIXED_WORKLOADS,
            "timing": FAST_TIMING,
            "measure": {"profile": True},
        },
        backend="cpu",
    )
    runner.run_experiment(config, progress=False)
    assert seen == [("chain", fake, True), ("layernorm", fake, True)]
