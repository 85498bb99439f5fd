"""Torch variants without torch: config validation, refusals, and the side-by-side report.

Nothing here imports torch, so these run in every environment; a missing torch is simulated.
"""

import importlib.machinery
import importlib.util

import pytest

from xlafuse import models
from xlafuse.cli import main
from xlafuse.compiler import variants
from xlafuse.compiler.jit import compile_workload
from xlafuse.errors import XlafuseError
from xlafuse.experiment.config import parse_config
from xlafuse.report.torch import frameworks_section
from xlafuse.results.records import CellResult

TORCH_VARIANTS = (
    "torch-eager",
    "torch-inductor",
    "torch-inductor-max-autotune",
    "torch-inductor-cudagraphs",
)


@pytest.fixture
def no_torch(monkeypatch):
    """`importlib.util.find_spec("torch")` answers None: torch is not installed."""
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name == "torch" else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def _config(variant_names, reference="default"):
    return {
        "experiment": {"name": "t", "variants": list(variant_names), "reference": reference},
        "workloads": [{"name": "chain"}],
    }


def _problems(data):
    with pytest.raises(XlafuseError) as info:
        parse_config(data, backend="cpu")
    return str(info.value).splitlines()[1:]


def test_presets_are_registered_as_torch_variants():
    for name in TORCH_VARIANTS:
        v = variants.get(name)
        assert v.framework == "torch"
        assert v.compiler_options(backend="gpu") == {}
    assert variants.get("torch-eager").torch_compile is None
    assert dict(variants.get("torch-inductor").torch_compile) == {}
    assert dict(variants.get("torch-inductor-cudagraphs").torch_compile) == {
        "mode": "reduce-overhead"
    }
    assert variants.get("torch-inductor-cudagraphs").backends == ("gpu",)
    assert variants.get("default").framework == "jax"


def test_torch_variant_without_torch_fails_validation_in_one_line(no_torch):
    problems = _problems(_config(["default", "torch-inductor"]))
    assert problems == [
        "  experiment.variants[1]: variant 'torch-inductor' runs PyTorch, which is not "
        'installed: pip install -e ".[torch]" (docs/torch.md: the CPU-only wheel)'
    ]


def test_cli_run_without_torch_exits_2(no_torch, tmp_path, capsys):
    path = tmp_path / "t.toml"
    path.write_text(
        '[experiment]\nname = "t"\nvariants = ["default", "torch-eager"]\n'
        '[[workloads]]\nname = "chain"\n'
    )
    code = main(["run", str(path), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert "variant 'torch-eager' runs PyTorch, which is not installed: pip install" in err
    assert "Traceback" not in err


def test_cli_compare_without_torch_exits_2(no_torch, capsys):
    code = main(["compare", "chain", "--variants", "default,torch-eager"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().endswith(
        'not installed: pip install -e ".[torch]" (docs/torch.md: the CPU-only wheel)'
    )


@pytest.fixture
def torch_found(monkeypatch):
    """`importlib.util.find_spec("torch")` answers a spec: torch looks installed (never imported
    here), so the check that follows the installed one is reached with or without torch."""
    real = importlib.util.find_spec
    spec = importlib.machinery.ModuleSpec("torch", None)

    def find_spec(name, *args, **kwargs):
        return spec if name == "torch" else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_reference_must_be_an_xla_variant(torch_found):
    problems = _problems(_config(["default", "torch-eager"], reference="torch-eager"))
    assert problems == [
        "  experiment.reference: 'torch-eager' runs PyTorch; the reference must be an XLA "
        "variant (e.g. 'default'): torch cells are judged and timed against it"
    ]


def test_a_torch_reference_without_torch_has_one_problem(no_torch):
    problems = _problems(_config(["default", "torch-eager"], reference="torch-eager"))
    assert problems == [
        "  experiment.variants[1]: variant 'torch-eager' runs PyTorch, which is not "
        'installed: pip install -e ".[torch]" (docs/torch.md: the CPU-only wheel)'
    ]


def test_torch_variants_do_not_compose():
    with pytest.raises(
        ValueError, match=r"variants torch-eager run PyTorch and cannot be composed"
    ):
        variants.compose("no-fusion", "torch-eager")


def test_xla_compile_path_refuses_a_torch_variant():
    workload = models.build("chain", size="tiny")
    with pytest.raises(ValueError, match=r"'torch-inductor' runs the workload's PyTorch twin"):
        compile_workload(workload, "torch-inductor")


def _record(variant, framework, **fields):
    """A GPU record from its flat keys, as a results file gives them."""
    return CellResult.from_dict(
        {
            "backend": "gpu",
            "device_kind": "NVIDIA H200",
            "workload": "chain",
            "size": "full",
            "mode": "forward",
            "dtype": "float32",
            "overrides": {"ops": 8},
            "variant": variant,
            "reference": "default",
            "framework": framework,
            "status": "ok",
            "framework_version": "0.11.2" if framework == "jax" else "2.11.0",
            **fields,
        }
    )


GPU_RECORDS = [
    _record(
        "default",
        "jax",
        kernels=1,
        device_kernels_per_call=1.0,
        modeled_bytes=2_147_483_648,
        time_median_s=0.74e-3,
        device_time_s=0.50e-3,
        compile_s=0.2,
        top_kernels=[["loop_multiply_fusion", 0.50e-3]],
    ),
    _record(
        "torch-eager",
        "torch",
        kernels=8,
        device_kernels_per_call=8.0,
        modeled_bytes=17_179_869_184,
        time_median_s=8.6e-3,
        device_time_s=8.4e-3,
        kernels_basis="device kernels per call, torch profiler",
        modeled_bytes_basis="input + output tensor bytes of each non-view aten op of one call",
        within_tolerance=True,
        max_abs_diff=4.8e-7,
    ),
    _record(
        "torch-inductor",
        "torch",
        kernels=1,
        device_kernels_per_call=1.0,
        modeled_bytes=2_147_483_648,
        time_median_s=0.51e-3,
        device_time_s=0.49e-3,
        compile_s=3.5,
        warm_compile_s=0.4,
        speedup_vs_reference=1.45,
        speedup_verdict="faster",
        device_speedup=1.02,
        device_speedup_verdict="same",
        kernels_basis="device kernels per call, torch profiler",
        within_tolerance=True,
        max_abs_diff=4.8e-7,
        top_kernels=[["triton_poi_fused_add_mul_0", 0.49e-3]],
    ),
]


def test_side_by_side_section_states_kernels_bytes_time_and_top_kernels():
    text = frameworks_section(GPU_RECORDS)
    assert "### chain[ops=8] / full / forward / float32" in text
    assert "\njax 0.11.2 beside torch 2.11.0.\n" in text
    assert (
        "| torch | torch-inductor | 1 | 2147 | 0.51 (ref 0.74) latency | 0.49 | 1.45x (faster) "
        "| 1.02x (same) "
        "| 3.5 / 0.4 | ok (max abs 4.8e-07) |"
    ) in text
    assert "| jax | default | 1 | 2147 | 0.74 latency | 0.5 | - | - | 0.2 | reference |" in text
    assert (
        "**default vs torch-inductor:** XLA launches 1 kernel(s) per call, as many as Inductor's 1; "
        "moves 2147 MB vs 2147 MB (1.00x); device time 0.5 ms vs 0.49 ms (Inductor/XLA 0.98x)."
    ) in text
    assert "Top kernels (default): `loop_multiply_fusion` 500.0 us." in text
    assert "Top kernels (torch-inductor): `triton_poi_fused_add_mul_0` 490.0 us." in text
    assert "Top kernels are summed by kernel name over a call" in text
    assert "Torch kernel counts: device kernels per call, torch profiler." in text


def test_no_section_without_torch_cells():
    assert frameworks_section(GPU_RECORDS[:1]) == ""
