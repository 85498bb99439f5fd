"""`xlafuse inspect` (and `variants`, `passes`) through `xlafuse.cli.main`: numbers and messages."""

import json
import re
import subprocess
import sys
from pathlib import Path

import jax
import pytest
from helpers import run_cli, usage_error

# These print the default backend's own figures and names (cpu on CI; gpu on the H200 machine).
cpu_only = pytest.mark.skipif(
    jax.default_backend() != "cpu", reason="asserts what the CPU backend prints"
)

ENTRY_COUNT_FILES = [
    "block_fwd.default.hlo.txt",
    "convnet.default.hlo.txt",
    "reductions.nofusion.hlo.txt",
    "sdpa_xla.default.hlo.txt",
    "softmax.nofusion.hlo.txt",
]
JSON_KEYS = {
    "schema", "target", "target_kind", "path", "module", "backend", "variant", "thunk_launches",
    "warnings", "kernels", "fusions", "real_fusions", "custom_calls", "custom_call_targets",
    "kinds", "entry_fusions", "modeled_bytes", "flops", "flops_unknown_kernels",
    "launches_per_call", "modeled_bytes_per_call", "flops_per_call", "per_call_basis",
    "kernels_detail", "modules", "devices", "parallelism", "collectives", "static_leaves",
}  # fmt: skip
KERNEL_KEYS = {
    "name", "computation", "opcode", "kind", "sub_kind", "num_ops", "ops", "is_real_fusion",
    "bytes_in", "bytes_out", "launches_per_call", "traffic_share", "flops", "op_names", "source_lines",
    "predicted_us", "predicted_model",
}  # fmt: skip


def run_json(capsys, *argv):
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_block_fwd_summary(capsys, samples):
    code, out, err = run_cli(capsys, "inspect", samples / "block_fwd.default.hlo.txt")
    assert code == 0 and err == ""
    assert "module: jit__lambda  backend: gpu" in out
    assert "kernels: 20\n" in out
    assert "fusions: 16  real fusions: 13  entry fusions: 16" in out
    assert "kinds: kCustom 4, kInput 5, kLoop 7" in out
    assert "custom-calls: 4 (__cublas$lt$matmul 4)" in out
    assert "modeled traffic: 327.25 MB per call\n" in out
    rows = out.split("\n\n", 1)[1].splitlines()
    assert rows[0].split() == [
        "kernel",
        "kind",
        "ops",
        "main",
        "ops",
        "in",
        "out",
        "launches",
        "traffic",
        "source",
    ]
    assert len(rows) == 1 + 20


@pytest.mark.parametrize("name", ENTRY_COUNT_FILES)
def test_json_matches_entry_counts(capsys, samples, name):
    expected = json.loads((samples / "entry_counts.json").read_text())[name]
    got = run_json(capsys, "inspect", samples / name)
    assert got["entry_fusions"] == expected["entry_fusion_instrs"]
    assert got["fusions"] == expected["all_fusion_instrs"]
    assert got["custom_calls"] == expected["entry_custom_calls"]
    assert got["kinds"] == {k: v for k, v in expected["kinds"].items() if v}


def test_json_schema(capsys, samples):
    got = run_json(capsys, "inspect", samples / "block_fwd.default.hlo.txt")
    assert set(got) == JSON_KEYS
    assert got["schema"] == "xlafuse.inspect/1"
    assert (got["target_kind"], got["backend"], got["kernels"]) == ("file", "gpu", 20)
    assert got["modeled_bytes"] == got["modeled_bytes_per_call"] == 327247872
    assert got["launches_per_call"] == 20 and got["per_call_basis"] == "per call"
    assert got["custom_call_targets"] == {"__cublas$lt$matmul": 4}
    detail = got["kernels_detail"]
    assert len(detail) == 20 and all(set(k) == KERNEL_KEYS for k in detail)
    assert sum(k["bytes_in"] + k["bytes_out"] for k in detail) == got["modeled_bytes"]
    assert sum(k["traffic_share"] for k in detail) == pytest.approx(1.0)
    assert got["flops_unknown_kernels"] == 0 and got["flops"] == sum(k["flops"] for k in detail)
    assert detail[0]["name"] == "input_reduce_fusion"
    assert detail[0]["kind"] == "kInput" and detail[0]["num_ops"] == 4
    assert got["modules"] == [] and got["thunk_launches"] is None


def test_schema_is_documented():
    doc = (Path(__file__).parent.parent / "docs" / "inspect-json.md").read_text()
    assert all(f"`{key}`" in doc for key in JSON_KEYS | KERNEL_KEYS - {"bytes_in", "bytes_out"})
    assert "`bytes_in`, `bytes_out`" in doc


@pytest.mark.parametrize(
    ("sort", "first"),
    [
        ("bytes", "loop_multiply_fusion"),
        ("ops", "loop_multiply_fusion.1"),
        ("name", "cublas-lt-matmul.0"),
    ],
)
def test_table_top_and_sort(capsys, samples, sort, first):
    code, out, _ = run_cli(
        capsys, "inspect", samples / "block_fwd.default.hlo.txt", "--top", 3, "--sort", sort
    )
    rows = out.split("\n\n", 1)[1].splitlines()
    assert code == 0 and len(rows) == 1 + 3 + 1
    assert rows[1].split()[0] == first
    assert rows[-1] == "... 17 more kernels (--top 20 shows all)"


def test_dump_folder_listing(capsys, dump_folder):
    code, out, _ = run_cli(capsys, "inspect", dump_folder)
    lines = out.splitlines()
    assert code == 0
    # the title is prose, wrapped at 100 columns: a long checkout path moves it onto 2 lines
    title = [lines[0]]
    while lines[len(title)].startswith("    "):
        title.append(lines[len(title)].strip())
    assert " ".join(title) == f"102 optimized modules in {dump_folder} (largest first)"
    rows = lines[len(title) + 1 : len(title) + 103]
    assert rows[0].split() == ["module_217060.jit__lambda", "20", "16", "13", "327", "MB", "20"]
    kernels = [int(r.split()[1]) for r in rows]
    assert kernels == sorted(kernels, reverse=True)
    got = run_json(capsys, "inspect", dump_folder)
    assert got["target_kind"] == "folder" and got["kernels"] is None
    assert len(got["modules"]) == 102 and got["kernels_detail"] == []
    first = got["modules"][0]
    assert (first["module"], first["kernels"], first["thunk_launches"]) == ("jit__lambda", 20, 20)
    assert sum(m["thunk_launches"] is not None for m in got["modules"]) == 1


def test_dump_folder_module_with_thunk_count(capsys, dump_folder):
    code, out, _ = run_cli(capsys, "inspect", dump_folder, "--module", "217060")
    assert code == 0
    assert "kernels: 20  (thunk sequence: 20 launches)" in out
    assert "warning" not in out
    got = run_json(capsys, "inspect", dump_folder, "--module", "jit__lambda")
    assert (got["kernels"], got["thunk_launches"], got["warnings"]) == (20, 20, [])


def test_thunk_count_mismatch_warns(capsys, dump_folder, tmp_path):
    hlo = "module_217060.jit__lambda.sm_9.0a_gpu_after_optimizations.txt"
    thunks = "module_217060.jit__lambda.thunk_sequence.txt"
    (tmp_path / hlo).write_text((dump_folder / hlo).read_text())
    lines = (dump_folder / thunks).read_text().splitlines()
    (tmp_path / thunks).write_text("\n".join(lines[:-1]) + "\n")
    code, out, _ = run_cli(capsys, "inspect", tmp_path / hlo)
    assert code == 0
    assert "warning: the thunk sequence lists 19 launches but the model counts 20 kernels" in out


def test_dot_parses_back(capsys, samples, tmp_path):
    dot_file = tmp_path / "g.dot"
    code, _, _ = run_cli(
        capsys, "inspect", samples / "block_fwd.default.hlo.txt", "--dot", dot_file
    )
    text = dot_file.read_text()
    assert code == 0 and text.startswith('digraph "jit__lambda" {')
    assert text.count("{") == text.count("}")
    nodes = re.findall(r'^\s*"([^"]+)" \[shape=(\w+)', text, re.MULTILINE)
    edges = re.findall(r'^\s*"([^"]+)" -> "([^"]+)" \[label="([^"]+)"\]', text, re.MULTILINE)
    shapes = [s for _, s in nodes]
    assert (shapes.count("box"), shapes.count("ellipse"), shapes.count("doubleoctagon")) == (
        20,
        17,
        1,
    )
    names = {n for n, _ in nodes}
    assert all(a in names and b in names for a, b, _ in edges)
    assert len(edges) == 45
    assert ("main.7/loop_add_fusion", "out:0", "4.19 MB") in edges


def test_dot_of_a_loop_has_clusters(capsys, samples, tmp_path):
    dot_file = tmp_path / "g.dot"
    run_cli(capsys, "inspect", samples / "scan_rnn.default.hlo.txt", "--dot", dot_file)
    text = dot_file.read_text()
    assert text.count("subgraph cluster_") == 2
    assert '"main.6/while.6" [shape=diamond' in text
    assert '"main.6/w.1" -> "main.6/while.6" [label="262 kB"]' in text


def test_svg_without_graphviz(capsys, samples, tmp_path, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    code, out, err = run_cli(
        capsys, "inspect", samples / "mul_add_relu.default.hlo.txt", "--svg", tmp_path / "g.svg"
    )
    assert code == 2 and out == ""
    assert "Graphviz's 'dot' program is not installed" in err
    assert "apt install graphviz" in err and "brew install graphviz" in err


@cpu_only
def test_workload_target(capsys):
    got = run_json(capsys, "inspect", "--workload", "mul_add_relu", "--variant", "no-fusion")
    assert (got["target_kind"], got["variant"], got["backend"]) == ("workload", "no-fusion", "cpu")
    assert got["kernels"] == 4 and got["real_fusions"] == 0
    assert sorted(k["ops"][0] for k in got["kernels_detail"]) == [
        "add",
        "broadcast",
        "maximum",
        "multiply",
    ]


def _truncated(tmp_path, samples):
    path = tmp_path / "cut.hlo.txt"
    lines = (samples / "mul_add_relu.default.hlo.txt").read_text().splitlines()
    path.write_text("\n".join(lines[:-3]) + "\n")  # cut inside the ENTRY computation
    return path


def _binary(tmp_path, samples):
    path = tmp_path / "blob.bin"
    path.write_bytes(b"\x7fELF\x00\x01\x02" * 20)
    return path


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["inspect", "/no/such/file.hlo"],
            "no such file or folder: '/no/such/file.hlo'; expected an optimized HLO text file",
        ),
        (["inspect", "{samples}"], "holds no optimized HLO modules (*after_optimizations.txt)"),
        (
            ["inspect", "{binary}"],
            "line 1: binary file (NUL byte), not HLO text; expected an optimized HLO text file",
        ),
        (["inspect", "{truncated}"], "is not closed; expected optimized HLO text"),
        (
            ["inspect", "{dump}", "--module", "zzz"],
            "no module file in '{dump}' contains 'zzz'; modules: module_0000.jit_stage",
        ),
        (
            ["inspect", "{dump}", "--module", "jit_add"],
            "12 module files in '{dump}' contain 'jit_add'",
        ),
        (["inspect", "--workload", "nosuch"], "unknown workload 'nosuch'"),
        (["inspect"], "give exactly one target: expected an optimized HLO text file"),
        (
            ["inspect", "{dump}", "--dot", "/tmp/never.dot"],
            "--dot/--svg draw one module: pick one with --module NAME",
        ),
        (
            ["inspect", "{samples}/softmax.default.hlo.txt", "--top", "0"],
            "--top must be 1 or more, got 0 (--all shows every kernel)",
        ),
    ],
)
def test_bad_input(capsys, samples, dump_folder, tmp_path, argv, message):
    paths = {
        "samples": samples,
        "dump": dump_folder,
        "binary": _binary(tmp_path, samples),
        "truncated": _truncated(tmp_path, samples),
    }
    assert message.format(**paths) in usage_error(capsys, *(a.format(**paths) for a in argv))


@pytest.mark.parametrize(
    ("dims", "message"),
    [
        (
            "99999999999999999999",
            "line 4: dimension 99999999999999999999 in shape 'f32[99999999999999999999]' does "
            "not fit in int64",
        ),
        (",".join(["100000000000000000000"] * 16), "line 4: dimension 100000000000000000000 in"),
        (",".join(["1000000000"] * 16), "has more elements than int64 holds"),
    ],
    ids=["a dimension of 1e20", "16 of them", "16 dimensions of 1e9"],
)
def test_a_shape_xla_rejects_is_one_error(capsys, tmp_path, dims, message):
    # once sized as Python ints: a module's modeled bytes, in MB, past what a float holds
    path = tmp_path / "big.hlo"
    path.write_text(
        "HloModule m\nENTRY e {\n  p = f32[8] parameter(0)\n"
        f"  ROOT b = f32[{dims}] broadcast(p), dimensions={{}}\n}}\n"
    )
    error = usage_error(capsys, "inspect", path)
    assert error.startswith(f"{path}: ") and message in error


def test_debug_shows_traceback(capsys):
    code, _, err = run_cli(capsys, "--debug", "inspect", "/no/such/file.hlo")
    assert code == 2 and "Traceback" in err


@cpu_only
def test_variants_command(capsys):
    code, out, _ = run_cli(capsys, "variants")
    assert code == 0 and out.startswith("backend: cpu\n")
    assert "default  (applies here)" in out
    assert "no-fusion  (applies here)" in out
    assert "xla_disable_hlo_passes='fusion,dot-library-rewriter'" in out
    assert "cannot be switched off: library calls stay library calls" in out
    assert "no-gemm-fusion  (gpu only)" in out and "xla_gpu_enable_triton_gemm=False" in out


@cpu_only
def test_passes_command(capsys):
    code, out, _ = run_cli(capsys, "passes")
    lines = out.splitlines()
    assert code == 0 and re.match(r"\d+ fusion-related HLO passes of XLA \(cpu, jax ", lines[0])
    names = [line.strip() for line in lines[1:]]
    assert "fusion" in names and all(
        any(
            m in n
            for m in ("fus", "ynn", "dot-library", "triton", "gemm", "softmax", "command-buffer")
        )
        for n in names
    )
    code, out_all, _ = run_cli(capsys, "passes", "--all")
    assert code == 0 and len(out_all.splitlines()) > len(lines)


@pytest.mark.parametrize(
    "argv",
    [
        ["inspect", "{data}/convnet.default.hlo.txt"],
        ["inspect", "{data}/dump_block_fwd"],
        ["diff", "{data}/convnet.default.hlo.txt", "{data}/convnet.nofusion.hlo.txt"],
        ["explain", "{data}/why/why_gelu_forward"],
        ["report", "{results}", "--out", "{out}"],
    ],
)
def test_commands_that_read_files_start_without_jax(samples, tmp_path, argv):
    """Reading HLO or results needs no compiler: JAX, Flax and optax stay unimported (a fresh
    process, as a user's; JAX alone takes more than a second to import)."""
    results = Path(__file__).parents[1] / "experiments" / "h200" / "pointwise" / "results.jsonl"
    fields = {"data": samples, "results": results, "out": tmp_path}
    argv = [word.format(**fields) for word in argv]
    script = (
        "import sys\nfrom xlafuse.cli import main\n"
        f"code = main({argv!r})\n"
        "print('imported:', sorted({'jax', 'flax', 'optax'} & set(sys.modules)))\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "imported: []"
