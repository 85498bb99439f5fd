"""Kernels, fusions, kinds, bytes and source lines: H200 golden samples and CPU compiles."""

import json
from collections import Counter
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from xlafuse.hlo import (
    analyze_hlo,
    analyze_module,
    find_optimized_modules,
    instruction_bytes,
    parse_hlo,
    thunk_launch_count,
)

SAMPLES = Path(__file__).parent / "data" / "h200-jax0.11.2"
GOLDEN = {
    k: v
    for k, v in json.loads((SAMPLES / "entry_counts.json").read_text()).items()
    if isinstance(v, dict)
}
BLOCK = "module_217060.jit__lambda.sm_9.0a_gpu_after_optimizations.txt"


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_counts_match_entry_counts_json(samples, name):
    expected = GOLDEN[name]
    module = parse_hlo((samples / name).read_text())
    report = analyze_module(module)
    entry = [k for k in report.kernel_details if k.computation == module.entry.name]
    entry_kinds = Counter(k.kind for k in entry if k.opcode == "fusion")
    assert report.entry_fusions == expected["entry_fusion_instrs"]
    # No sample has fusions outside executed computations, so all_fusion_instrs == fusions.
    assert report.fusions == expected["all_fusion_instrs"]
    assert entry_kinds == {k: v for k, v in expected["kinds"].items() if v}
    assert sum(k.opcode == "custom-call" for k in entry) == expected["entry_custom_calls"]
    assert sum(report.kinds.values()) == report.fusions
    assert report.backend == "gpu"


def test_scan_counts_loop_body_and_condition_once(samples):
    report = analyze_hlo(samples / "scan_rnn.default.hlo.txt")
    by_comp = Counter(k.computation for k in report.kernel_details)
    assert by_comp == {"main.6": 3, "region_0.4": 5, "region_2.5": 1}  # 2 copies + 1 fusion
    assert (report.fusions, report.entry_fusions, report.kernels) == (6, 1, 9)
    assert "fusion-start" in {k.opcode for k in report.kernel_details}


def test_dump_block_kernels_match_thunk_sequence(dump_folder):
    path = dump_folder / BLOCK
    report = analyze_hlo(path)
    assert report.kernels == 20 == thunk_launch_count(path)
    assert report.custom_call_targets == {"__cublas$lt$matmul": 4}
    assert report.kinds == {"kLoop": 7, "kInput": 4, "kCustom": 5}  # dump differs from block_fwd
    names = [k.name for k in report.kernel_details]
    assert names[:3] == ["input_reduce_fusion", "wrapped_concatenate", "loop_multiply_fusion.2"]
    details = {k.name: k for k in report.kernel_details}
    assert not details["wrapped_concatenate"].is_real_fusion
    assert details["gemm_fusion_dot.11"].sub_kind == "__triton_nested_gemm_fusion"
    assert details["gemm_fusion_dot.11"].ops == ("broadcast", "multiply", "dot")
    assert details["custom-call.0"].kind == "custom-call"
    assert "gen_samples.py:27" in details["loop_add_fusion"].source_lines
    assert json.loads(json.dumps(report.to_dict()))["kernels"] == 20


def test_dump_folder_listing(dump_folder):
    modules = find_optimized_modules(dump_folder)
    assert len(modules) == 102 and all(p.name.endswith("after_optimizations.txt") for p in modules)
    assert thunk_launch_count(modules[0]) is None


def test_bytes_count_distinct_operands_and_tuple_elements(samples):
    module = parse_hlo((samples / "dump_block_fwd" / BLOCK).read_text())
    entry = module.entry
    # loop_add_fusion(%custom-call.1#0 f32[2,2048,512], bias f32[512], %cublas-lt-matmul.0#0
    # f32[2048,512], x bf16[8,256,512]) -> f32[8,256,512]
    bytes_in, bytes_out = instruction_bytes(entry.by_name["loop_add_fusion"], entry)
    assert bytes_in == 4 * 2 * 2048 * 512 + 4 * 512 + 4 * 2048 * 512 + 2 * 8 * 256 * 512
    assert bytes_out == 4 * 8 * 256 * 512
    assert instruction_bytes(entry.by_name["bitcast.85"], entry) == (0, 0)
    # cuBLAS tuple output: the s8 workspace leaf is not modeled traffic.
    assert instruction_bytes(entry.by_name["custom-call.0"], entry)[1] == 4 * 2048 * 1536


cpu_only = pytest.mark.skipif(
    jax.default_backend() != "cpu", reason="asserts what the CPU compiler emits"
)


def _relu_affine(x, a, b):
    return jax.nn.relu(x * a + b)  # source attribution points at this line


def _cpu_reports():
    x = jnp.ones((4096,), jnp.float32)
    lowered = jax.jit(_relu_affine).lower(x, x, x)
    fused = analyze_hlo(lowered.compile().as_text())
    off = {"xla_disable_hlo_passes": "fusion"}
    unfused = analyze_hlo(
        jax.jit(_relu_affine).lower(x, x, x).compile(compiler_options=off).as_text()
    )
    return fused, unfused


@cpu_only
def test_cpu_fusion_on_vs_off():
    fused, unfused = _cpu_reports()
    assert (fused.real_fusions, fused.fusions) == (1, 1)
    assert fused.kernel_details[0].ops == ("multiply", "add", "broadcast", "maximum")
    assert unfused.real_fusions == 0 and unfused.fusions >= 3
    assert all(k.name.startswith("wrapped_") for k in unfused.kernel_details)
    assert fused.kernels < unfused.kernels
    assert fused.modeled_bytes == 4 * 4096 * 4 < unfused.modeled_bytes


@cpu_only
def test_cpu_source_lines_name_this_file():
    fused, _ = _cpu_reports()
    (kernel,) = fused.kernel_details
    line = _relu_affine.__code__.co_firstlineno + 1
    assert f"{Path(__file__).name}:{line}" in {s.rsplit("/", 1)[-1] for s in kernel.source_lines}
    assert any("max" in name for name in kernel.op_names)


@cpu_only
def test_cpu_conditional_branches_and_unwrapped_sort():
    def pick(x):
        return jax.lax.cond(x.sum() > 0, lambda y: y * 2, jnp.sort, x)

    report = analyze_hlo(jax.jit(pick).lower(jnp.ones((8,))).compile().as_text())
    ops = Counter(k.opcode for k in report.kernel_details)
    assert ops["sort"] == 1  # a branch of the conditional, not the comparator (to_apply)
    assert ops["fusion"] == 2 and "conditional" not in ops


@cpu_only
def test_cpu_dot_becomes_ynnpack_custom_fusion_or_library_call():
    def mm(x, w):
        return jnp.tanh(x @ w)

    a, w = jnp.ones((64, 128)), jnp.ones((128, 32))
    report = analyze_hlo(jax.jit(mm).lower(a, w).compile().as_text())
    # jax 0.10 on x86 CPUs hands the dot to YNNPACK as a kCustom fusion; tanh stays separate.
    kinds = [(k.opcode, k.kind, k.sub_kind, k.ops) for k in report.kernel_details]
    assert kinds == [
        ("fusion", "kCustom", "__ynn_fusion", ("dot",)),
        ("fusion", "kLoop", None, ("tanh",)),
    ]
    assert report.backend == "cpu"


HINTED = {
    "on its line": ('  ROOT r = f32[8] custom-call(p), custom_call_target="__cublas$gemm"', "gpu"),
    "JSON over lines": (
        '  ROOT r = f32[8] fusion(p), kind=kCustom, calls=%f, backend_config={"a":1,\n'
        '    "fusion_backend_config":{"kind":"__triton_gemm"}}',
        "gpu",
    ),
    "value on the next line": (
        '  ROOT r = f32[8] custom-call(p), custom_call_target=\n    "__ynn_matmul"',
        "cpu",
    ),
    "after a comment": (
        '  ROOT r = f32[8] custom-call(p), custom_call_target= /* c */ "__onednn$x"',
        "cpu",
    ),
    "no hint in the value": ('  ROOT r = f32[8] custom-call(p), custom_call_target="my_op"', None),
    "a hint outside a value": ('  ROOT r = f32[8] negate(p), metadata={op_name="__cublas"}', None),
}


@pytest.mark.parametrize(("root", "backend"), HINTED.values(), ids=HINTED.keys())
def test_backend_hints_are_found_in_their_values_only(root, backend):
    text = (
        "HloModule m\n\n%f (a: f32[8]) -> f32[8] {\n  ROOT a = f32[8] parameter(0)\n}\n\n"
        f"ENTRY e {{\n  p = f32[8] parameter(0)\n{root}\n}}\n"
    )
    assert analyze_hlo(text).backend == backend
