"""`xlafuse validate`: ncu's CSV read back, joined to the HLO's kernels and judged.

The CSVs in tests/data/ncu were recorded on the H200 (jax 0.11.2): one call of the 8-op `chain`
on a 1 GiB float32 array (`ops=8`, size full), default and no-fusion, under
`ncu --profile-from-start off --clock-control none --target-processes all --metrics
dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum --csv`. Before the CSV, the
recording child printed its HLO kernels as `K name modeled_bytes` lines (the reader skips them).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import jax
import pytest

from xlafuse.cli import main
from xlafuse.compiler.protocol import error_line
from xlafuse.errors import XlafuseError
from xlafuse.measurement import validate, validate_child, validate_run
from xlafuse.measurement.ncu import ncu_command, ncu_flags, parse_ncu_csv, to_bytes, to_seconds
from xlafuse.measurement.validate import (
    ModeledKernel,
    base_name,
    compare_kernels,
    join_kernels,
    mangle,
    modeled_kernels,
)
from xlafuse.measurement.validate_run import file_stem
from xlafuse.report.validation import (
    format_text,
    render_markdown,
    summary_lines,
    write_validation,
)

NCU_DATA = Path(__file__).parent / "data" / "ncu"
GIB = 1 << 30
CHAIN = {"name": "chain", "size": "full", "mode": "forward", "overrides": {"ops": 8}}

# The HLO kernels of the recorded programs (what the recording child printed), program order.
DEFAULT_KERNELS = [("loop_add_fusion", 2 * GIB)]
BROADCAST, ELEMENTWISE = GIB + 4, 3 * GIB  # a scalar in, 1 GiB out; two 1 GiB in, one out
NO_FUSION_KERNELS = [
    *((f"wrapped_broadcast{s}", BROADCAST) for s in ("", ".1", ".2", ".3")),
    *(
        (name, ELEMENTWISE)
        for name in (
            "wrapped_multiply", "wrapped_add", "wrapped_maximum", "wrapped_add.1",
            "wrapped_multiply.1", "wrapped_add.2", "wrapped_maximum.1", "wrapped_add.3",
        )
    ),
]  # fmt: skip


def _csv(variant: str) -> str:
    return (NCU_DATA / f"ncu-chain-{variant}.csv").read_text()


def _printed_kernels(text: str) -> list[tuple[str, int]]:
    return [(m[1], int(m[2])) for m in re.finditer(r"^K (\S+) (\d+)$", text, re.MULTILINE)]


@pytest.mark.parametrize(
    ("variant", "kernels"), [("default", DEFAULT_KERNELS), ("no-fusion", NO_FUSION_KERNELS)]
)
def test_recorded_csv_prints_the_kernels_the_tests_use(variant, kernels):
    assert _printed_kernels(_csv(variant)) == kernels


def test_parse_fused_chain_csv_exact_figures():
    (kernel,) = parse_ncu_csv(_csv("default"))
    assert (kernel.launch_id, kernel.process_id, kernel.name) == (0, 5129, "loop_add_fusion")
    assert kernel.dram_read_bytes == 1_073_828_864
    assert kernel.dram_write_bytes == 1_050_040_576
    assert kernel.dram_bytes == 2_123_869_440
    assert kernel.time_s == pytest.approx(501_088e-9, rel=1e-12)


def test_parse_unfused_chain_csv_keeps_launch_order_and_names():
    kernels = parse_ncu_csv(_csv("no-fusion"))
    assert [k.launch_id for k in kernels] == list(range(12))
    assert [k.name for k in kernels] == [
        *["wrapped_broadcast"] * 4, "wrapped_multiply", "wrapped_add", "wrapped_maximum",
        "wrapped_add", "wrapped_multiply_1", "wrapped_add", "wrapped_maximum", "wrapped_add",
    ]  # fmt: skip
    assert (kernels[0].dram_read_bytes, kernels[0].dram_write_bytes) == (14_336, 1_046_580_736)
    assert kernels[11].time_s == pytest.approx(733_984e-9, rel=1e-12)
    assert sum(k.time_s for k in kernels) == pytest.approx(7_120_672e-9, rel=1e-12)


def test_fused_chain_bytes_within_ten_percent_and_judged():
    result = compare_kernels(
        DEFAULT_KERNELS, parse_ncu_csv(_csv("default")), workload=CHAIN, variant="default"
    )
    (row,) = result.rows
    assert (row.name, row.ncu_names, row.match) == ("loop_add_fusion", ("loop_add_fusion",), "name")
    assert row.judged
    # (1,073,828,864 + 1,050,040,576) / 2,147,483,648 - 1 = -1.0996%: the writes L2 still held.
    assert row.bytes_error == pytest.approx(2_123_869_440 / 2_147_483_648 - 1, rel=1e-12)
    assert round(row.bytes_error * 100, 2) == -1.10
    assert row.ncu_time_s == pytest.approx(501_088e-9, rel=1e-12)
    assert (row.verdict, result.verdict, result.ok) == ("ok", "ok", True)
    assert (result.hlo_kernels, result.ncu_kernels, result.kernels_equal) == (1, 1, True)
    assert (result.judged, result.judged_ok) == (1, 1)
    assert result.label == "chain[ops=8]/full/forward"


def test_unfused_chain_joins_reused_and_mangled_kernel_names():
    result = compare_kernels(NO_FUSION_KERNELS, parse_ncu_csv(_csv("no-fusion")))
    assert [r.name for r in result.rows] == [name for name, _ in NO_FUSION_KERNELS]
    assert [r.match for r in result.rows] == [
        "name", *["reused kernel"] * 3, "name", "name", "name", "reused kernel",
        "name", "reused kernel", "reused kernel", "reused kernel",
    ]  # fmt: skip
    assert result.rows[8].ncu_names == ("wrapped_multiply_1",)
    # e.g. the first broadcast: (14,336 + 1,046,580,736) / 1,073,741,828 - 1 = -2.53%.
    errors = [round(r.bytes_error * 100, 2) for r in result.rows]
    assert errors == [-2.53, -2.80, -2.80, -2.78, -0.56, -0.75, -0.75, -0.74, -0.74, -0.73,
                      -0.74, -0.75]  # fmt: skip
    assert (result.kernels_equal, result.judged, result.judged_ok, result.ok) == (
        True, 12, 12, True,
    )  # fmt: skip
    assert result.ncu_time_s == pytest.approx(7_120_672e-9, rel=1e-12)


def test_kernel_below_four_times_l2_is_listed_not_judged():
    small = [("loop_add_fusion", 200_000_000)]  # < 4 x 60 MB
    result = compare_kernels(small, parse_ncu_csv(_csv("default")))
    (row,) = result.rows
    assert (row.judged, row.verdict, result.ok, result.judged) == (False, "L2, not judged", True, 0)
    assert result.judged_min_bytes == 240_000_000
    # The device's L2 decides: with a 30 MB L2 the same kernel is judged (and far off).
    result = compare_kernels(small, parse_ncu_csv(_csv("default")), l2_bytes=30_000_000)
    assert (result.rows[0].judged, result.rows[0].verdict) == (True, "bytes off")
    assert result.verdict == "1 bytes off"


def test_model_off_by_more_than_ten_percent_fails():
    result = compare_kernels([("loop_add_fusion", 3 * GIB)], parse_ncu_csv(_csv("default")))
    assert result.rows[0].bytes_error == pytest.approx(2_123_869_440 / (3 * GIB) - 1)
    assert (result.rows[0].verdict, result.ok) == ("bytes off", False)


def test_count_mismatch_and_unmatched_launch_are_reported():
    result = compare_kernels(NO_FUSION_KERNELS[:-1], parse_ncu_csv(_csv("no-fusion")))
    assert (result.hlo_kernels, result.ncu_kernels, result.kernels_equal) == (11, 12, False)
    assert result.unmatched_ncu == ("wrapped_add",)
    assert result.rows[-1].verdict == "not in the HLO"
    assert result.verdict == "kernels 11 in HLO vs 12 in ncu; 1 unmatched"
    assert not result.ok


def test_time_against_profiler_per_call_and_per_kernel():
    measured = parse_ncu_csv(_csv("default"))
    result = compare_kernels(
        DEFAULT_KERNELS, measured, profiler_kernel_s={"loop_add_fusion": 500e-6}
    )
    assert result.time_error == pytest.approx(501_088e-9 / 500e-6 - 1, rel=1e-9)
    assert result.rows[0].time_error == pytest.approx(0.002176, abs=1e-6)
    assert result.ok
    slow = compare_kernels(DEFAULT_KERNELS, measured, profiler_kernel_s={"loop_add_fusion": 450e-6})
    # ncu slower than the profiler: not the direction a cache flush explains.
    assert (slow.rows[0].verdict, slow.rows[0].explanation) == ("time off", None)
    assert slow.verdict == "1 time off"
    assert slow.judged_time_error == pytest.approx(501_088e-9 / 450e-6 - 1, rel=1e-9)


def test_a_miss_within_one_l2_in_the_flush_direction_is_explained():
    # Measured on the H200 (ResNet-50 forward, no-fusion, `wrapped_maximum`): modeled 308.3 MB,
    # ncu 285.0 MB and 69.4 us, profiler 74.3 us. One 60 MB L2 at 285 MB / 69.4 us is 14.6 us.
    from xlafuse.measurement.ncu import NcuKernel

    def judged(modeled, dram, ncu_us, profiler_us):
        launch = NcuKernel(0, 1, "wrapped_maximum", dram - 100, 100, ncu_us * 1e-6)
        return compare_kernels(
            [("wrapped_maximum", modeled)],
            [launch],
            profiler_kernel_s={"wrapped_maximum": profiler_us * 1e-6},
        )

    result = judged(308_300_000, 285_000_000, 69.4, 74.3)
    (row,) = result.rows
    assert (row.verdict, row.explanation) == ("time off", validate.L2_CARRY_OVER)
    assert result.ok and result.verdict == "ok"
    assert result.judged_time_error == pytest.approx(69.4 / 74.3 - 1)  # judged, but explained
    # More than one L2 short of the model: bytes off, not explained.
    far = judged(308_300_000, 240_000_000, 69.4, 70.0)
    assert (far.rows[0].verdict, far.rows[0].explanation, far.ok) == ("bytes off", None, False)
    # A time gap longer than one L2 takes at the kernel's rate: not explained.
    slow_run = judged(308_300_000, 285_000_000, 69.4, 69.4 + 15.0)
    assert (slow_run.rows[0].explanation, slow_run.ok) == (None, False)


def test_copies_run_as_memcpy_and_library_launches_are_taken_out_of_the_count():
    kernels = [("loop_add_fusion", 1000), ("copy.9", 1000), ("custom-call.0", 1000, True)]
    launches = _fake_launches(["loop_add_fusion", "nvjet_gemm", "splitKreduce_kernel"])
    modeled = [
        ModeledKernel(n, b, bool(lib), "copy" if n == "copy.9" else "kLoop")
        for n, b, *lib in kernels
    ]
    result = compare_kernels(modeled, launches)
    rows = {r.name: r for r in result.rows}
    assert rows["copy.9"].verdict == validate.MEMCPY
    assert result.memcpy_copies == ("copy.9",)
    assert result.extra_library_launches == {"custom-call.0": 1}
    assert (result.kernels_equal, result.kernels_explained, result.unmatched_hlo) == (
        True,
        True,
        (),
    )
    assert result.ok
    # A missing fusion launch is not a memcpy: it stays unmatched and fails the count.
    result = compare_kernels(modeled, _fake_launches(["nvjet_gemm", "splitKreduce_kernel"]))
    assert result.unmatched_hlo == ("loop_add_fusion",)
    assert not result.kernels_explained and not result.ok


def test_whole_call_time_is_listed_not_judged_when_its_kernels_fit_in_l2():
    # GPT-2 small forward on the H200: every kernel under 4 x L2; ncu +39% over the call.
    small = [("loop_add_fusion", 100_000_000)]
    launch = _fake_launches(["loop_add_fusion"])
    result = compare_kernels(small, launch, profiler_kernel_s={"loop_add_fusion": 0.72e-6})
    assert result.time_error == pytest.approx(1e-6 / 0.72e-6 - 1)
    assert (result.judged_time_error, result.ok) == (None, True)


def test_profiler_time_of_a_reused_kernel_is_shared_among_its_launches():
    measured = parse_ncu_csv(_csv("no-fusion"))
    profiler = {name: 0.0 for name in {k.name for k in measured}}
    profiler["wrapped_add"] = 4 * 730e-6  # four launches of one kernel, per call
    result = compare_kernels(NO_FUSION_KERNELS, measured, profiler_kernel_s=profiler)
    adds = [r for r in result.rows if r.ncu_names == ("wrapped_add",)]
    assert [r.profiler_time_s for r in adds] == pytest.approx([730e-6] * 4)
    assert adds[-1].time_error == pytest.approx(733_984e-9 / 730e-6 - 1)


def test_library_kernels_pair_with_custom_calls_in_launch_order(samples):
    # Real optimized HLO of a transformer block on the H200 (4 cuBLAS calls among 20 kernels);
    # the launches are constructed: XLA kernels by mangled name, library kernels by cuBLAS
    # names, and a second launch (a split-K reduction) after the last cuBLAS call.
    modeled = modeled_kernels(samples / "block_fwd.default.hlo.txt")
    library = [k.name for k in modeled if k.library]
    assert library == ["custom-call.0", "cublas-lt-matmul.0", "cublas-lt-matmul.1", "custom-call.1"]
    launches = []
    for k in modeled:
        launches.append(f"nvjet_hsh_{k.name[-1]}" if k.library else mangle(k.name))
        if k.name == "custom-call.1":
            launches.append("splitKreduce_kernel")
    result = compare_kernels(modeled, _fake_launches(launches))
    rows = {r.name: r for r in result.rows}
    assert [r.name for r in result.rows] == [k.name for k in modeled]
    assert rows["cublas-lt-matmul.0"].ncu_names == ("nvjet_hsh_0",)
    assert rows["custom-call.1"].ncu_names == ("nvjet_hsh_1", "splitKreduce_kernel")
    assert rows["custom-call.1"].match == "library"
    assert rows["gemm_fusion_dot.11"].ncu_names == ("gemm_fusion_dot_11",)
    assert (result.unmatched_hlo, result.unmatched_ncu) == ((), ())
    assert (result.hlo_kernels, result.ncu_kernels, result.kernels_equal) == (20, 21, False)
    assert result.extra_library_launches == {"custom-call.1": 1}
    assert result.kernels_explained


def test_unknown_xla_kernel_name_stays_unmatched(samples):
    modeled = modeled_kernels(samples / "block_fwd.default.hlo.txt")
    launches = [f"cutlass_{i}" if k.library else mangle(k.name) for i, k in enumerate(modeled)]
    launches[1] = "mystery_kernel"  # wrapped_concatenate's launch, renamed
    result = compare_kernels(modeled, _fake_launches(launches))
    assert result.unmatched_hlo == ("wrapped_concatenate",)
    assert result.unmatched_ncu == ("mystery_kernel",)
    assert result.kernels_equal and not result.ok


def test_suffixed_kernel_names_pair_with_their_own_fusion():
    # Program order differs from launch order here: a base-name pairing would swap them.
    modeled = [("gemm_fusion_dot.12", 8), ("gemm_fusion_dot.11", 8), ("gemm_fusion_dot.1", 8)]
    launches = _fake_launches(["gemm_fusion_dot_11_0", "gemm_fusion_dot_1_0", "gemm_fusion_dot_12"])
    assert join_kernels(modeled, launches) == [
        (1, [0], "name + suffix"), (2, [1], "name + suffix"), (0, [2], "name"),
    ]  # fmt: skip


def test_join_accepts_name_bytes_tuples_and_rejects_others():
    pairs = join_kernels([("a.1", 8), ("gemm", 8, True)], _fake_launches(["a_1", "sm90_gemm"]))
    assert pairs == [(0, [0], "name"), (1, [1], "library")]
    with pytest.raises(TypeError, match=r"\(name, modeled_bytes\[, library\]\), not 'a'"):
        join_kernels(["a"], [])


def test_names_mangle_and_lose_numeric_suffixes():
    assert mangle("wrapped_multiply.1") == "wrapped_multiply_1"
    assert base_name("wrapped_add.2") == base_name("wrapped_add_2") == "wrapped_add"
    assert base_name("loop_add_fusion") == "loop_add_fusion"


def test_modeled_kernel_marks_cudnn_and_cublas_as_library(samples):
    kernels = {k.name: k for k in modeled_kernels(samples / "convnet.default.hlo.txt")}
    assert kernels["cudnn-conv-bias-activation.7"].library
    assert not kernels["wrapped_transpose"].library  # a Triton kCustom fusion: XLA's own kernel
    assert kernels["loop_pad_fusion"].modeled_bytes == 17_310_720


@pytest.mark.parametrize(
    ("value", "unit", "expected"),
    [("1,073,828,864", "byte", 1_073_828_864), ("1.5", "Kbyte", 1_500), ("2", "Mbyte", 2e6),
     ("1", "Gibyte", GIB)],
)  # fmt: skip
def test_byte_units(value, unit, expected):
    assert to_bytes(value, unit) == expected


@pytest.mark.parametrize(
    ("value", "unit", "expected"),
    [("501,088", "ns", 501_088e-9), ("2.5", "usecond", 2.5e-6), ("1.25", "msecond", 1.25e-3),
     ("3", "nsecond", 3e-9)],
)  # fmt: skip
def test_time_units(value, unit, expected):
    assert to_seconds(value, unit) == pytest.approx(expected, rel=1e-12)


def test_unknown_unit_and_non_number_say_what_is_accepted():
    with pytest.raises(XlafuseError, match=r"unit 'cycle' is not one of ns, nsecond, us"):
        to_seconds("12", "cycle")
    with pytest.raises(XlafuseError, match=r"value 'n/a' \(byte\) is not a number"):
        to_bytes("n/a", "byte")


def test_csv_without_header_or_with_a_missing_metric_is_an_error():
    with pytest.raises(XlafuseError, match=r"no ncu CSV in the output: no header line"):
        parse_ncu_csv("==PROF== Disconnected from process 1\n")
    text = "\n".join(line for line in _csv("default").splitlines() if "gpu__time" not in line)
    with pytest.raises(XlafuseError, match=r"launch 0 \(loop_add_fusion\) has no gpu__time"):
        parse_ncu_csv(text)


def test_ncu_command_profiles_only_the_marked_range():
    argv = ncu_command("/opt/ncu", ["python", "-m", "child"])
    assert argv[:3] == ["/opt/ncu", "--profile-from-start", "off"]
    assert argv[-3:] == ["python", "-m", "child"]
    assert "dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum" in ncu_flags()


def test_markdown_and_json_carry_the_figures(tmp_path):
    fused = compare_kernels(
        DEFAULT_KERNELS, parse_ncu_csv(_csv("default")), workload=CHAIN, variant="default"
    )
    md_path, json_path = write_validation(
        [fused], tmp_path, command="xlafuse validate --workload chain"
    )
    md = md_path.read_text()
    assert "| chain[ops=8]/full/forward | default | 1 / 1 | 1 of 1 | -1.1% | - | ok |" in md
    assert (
        "| 1 | loop_add_fusion | - | loop_add_fusion | name | 2,147.5 | 1,073.8 | 1,050.0 | "
        "-1.1% | 501.1 | - | - | ok |"
    ) in md
    cell = json.loads(json_path.read_text())["cells"][0]
    assert (cell["kernels_equal"], cell["judged_ok"], cell["rows"][0]["dram_bytes"]) == (
        True, 1, 2_123_869_440,
    )  # fmt: skip
    text = format_text([fused])
    assert text.splitlines()[0] == "chain[ops=8]/full/forward  variant default: ok"
    assert render_markdown([fused]).count("## ") == 1


def test_rejudge_reads_recorded_measurements_and_judges_them_again(tmp_path, capsys):
    # A validation.json as an older version wrote it: its verdict strings are not read back.
    measured = parse_ncu_csv(_csv("default"))
    cell = compare_kernels(
        DEFAULT_KERNELS,
        measured,
        profiler_kernel_s={"loop_add_fusion": 520e-6},
        workload=CHAIN,
        variant="default",
    ).to_dict()
    cell.update(ok=False, verdict="call time off", judged_ok=0)
    for row in cell["rows"]:
        row.pop("l2_bytes")
        row["verdict"] = "time off"
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"command": "xlafuse validate --workload chain", "cells": [cell]}))
    assert main(["validate", "--rejudge", str(old), "--out", str(tmp_path / "new")]) == 0
    assert (
        capsys.readouterr().out.splitlines()[0] == "chain[ops=8]/full/forward  variant default: ok"
    )
    again = json.loads((tmp_path / "new" / "validation.json").read_text())
    assert (again["cells"][0]["verdict"], again["cells"][0]["judged_ok"]) == ("ok", 1)
    assert again["cells"][0]["rows"][0]["time_error"] == pytest.approx(501_088e-9 / 520e-6 - 1)
    md = (tmp_path / "new" / "validation.md").read_text()
    assert (
        "xlafuse validate --workload chain\n# verdicts judged again from those measurements:" in md
    )
    (tmp_path / "bad.json").write_text('{"cells": [{"rows": []}]}')
    assert main(["validate", "--rejudge", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("xlafuse validate: error: --rejudge: ") and "not a validation.json" in err
    assert main(["validate", "--rejudge", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["validate", "configs/validation.toml", "--rejudge", str(old)]) == 2
    assert "give no CONFIG or --workload" in capsys.readouterr().err


def test_summary_names_at_most_eight_unmatched_kernels():
    result = compare_kernels(NO_FUSION_KERNELS, _fake_launches(["mystery"]))
    line = format_text([result]).splitlines()[1]
    assert line.endswith(
        "unmatched: wrapped_broadcast, wrapped_broadcast.1, wrapped_broadcast.2, "
        "wrapped_broadcast.3, wrapped_multiply, wrapped_add, wrapped_maximum, wrapped_add.1, "
        "... 5 more (see the table)"
    )


def test_file_stem_names_the_cell():
    assert file_stem(CHAIN, "no-fusion") == "chain-ops=8-full-forward.no-fusion"


def test_cli_without_ncu_or_driver_exits_2_with_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("XLAFUSE_NCU", raising=False)
    monkeypatch.setattr(validate_run.ctypes, "CDLL", _no_library)
    assert main(["validate", "--workload", "chain", "--overrides", "ops=8"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "xlafuse validate: error: Nsight Compute is missing: 'ncu' is not an executable on PATH "
        "(install Nsight Compute, put `ncu` on PATH or set XLAFUSE_NCU); no NVIDIA driver: "
        "libcuda.so.1 cannot be loaded (a GPU is needed)\n"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "give either a CONFIG or --workload NAME (one of them, not both)"),
        (["--workload", "chain", "--overrides", "ops"], "override 'ops' is not KEY=VALUE"),
        (["--workload", "chain", "--overrides", "opz=8"], "unknown override 'opz'"),
        (["--workload", "chain", "--variants", "no-fusoin"], "no-fusoin"),
        (["configs/pointwise.toml", "--overrides", "ops=8"], "--overrides and --dtype go with"),
        (["--workload", "chain", "--only", "gelu"], "--only selects workloads of a CONFIG"),
    ],
)
def test_cli_usage_errors_exit_2(argv, message, capsys):
    assert main(["validate", *argv]) == 2
    assert message in capsys.readouterr().err


def test_config_selection_names_what_the_config_has():
    from xlafuse.experiment.config import load_config

    config = load_config(Path(__file__).parents[1] / "configs" / "validation.toml", backend="gpu")
    assert [w.label for w in config.workloads] == [
        "chain[ops=8]/full/forward", "mul_add_relu/full/forward", "cos_relu/full/forward",
        "gelu/full/forward", "transformer_block/full/forward", "gpt2/small/forward",
        "resnet50/full/forward",
    ]  # fmt: skip
    assert [v.name for v in config.variants] == ["default", "no-fusion"]
    with pytest.raises(XlafuseError, match=r"no workload 'gelo' .*\(did you mean 'gelu'\?\)"):
        validate_run.validate_config(config, only=["gelo"])
    with pytest.raises(XlafuseError, match=r"no variant 'no-fusoin' .*did you mean 'no-fusion'"):
        validate_run.validate_config(config, variants=["no-fusoin"])


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="checks the answer of a GPU-less child")
def test_child_without_gpu_says_so(monkeypatch, tmp_path):
    monkeypatch.setattr(validate_run, "require_tools", lambda ncu=None: "/bin/true")
    with pytest.raises(XlafuseError, match=r"^no GPU: JAX in a child process has only the 'cpu'"):
        validate_run.validate_cell(CHAIN, variant="default", cache_dir=tmp_path)
    request = {"phase": "warm", "workload": CHAIN, "variant": {"name": "default"}}
    (tmp_path / "request.json").write_text(json.dumps(request))
    validate_child.main(str(tmp_path))
    assert json.loads((tmp_path / "result.json").read_text()) == {"backend": jax.default_backend()}


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("ncu") is None, reason="needs Nsight Compute (ncu) on PATH")
@pytest.mark.parametrize(("variant", "kernels"), [("default", 1), ("no-fusion", 12)])
def test_validate_one_gib_chain_on_the_gpu(variant, kernels, tmp_path):
    result = validate_run.validate_cell(CHAIN, variant=variant, cache_dir=tmp_path / "cache")
    assert (result.hlo_kernels, result.ncu_kernels) == (kernels, kernels)
    assert result.judged == kernels
    assert all(abs(r.bytes_error) <= 0.10 for r in result.rows), format_text([result])
    assert result.compiled_under_ncu is False  # the warm-up filled the cache: no compile under ncu
    assert result.ok, format_text([result])


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("ncu") is None, reason="needs Nsight Compute (ncu) on PATH")
def test_validate_detail_says_the_fused_chain_is_memory_bound_on_the_gpu(tmp_path):
    from xlafuse.measurement.ncu import DETAIL_METRICS

    result = validate_run.validate_cell(
        CHAIN, variant="default", cache_dir=tmp_path / "cache", detail=True
    )
    (row,) = result.rows
    assert set(row.detail) == set(DETAIL_METRICS), format_text([result])
    assert 50 < row.detail["memory_pct"] <= 100 and row.detail["sm_pct"] < row.detail["memory_pct"]
    assert all(0 <= row.detail[f] <= 100 for f in ("sm_pct", "occupancy_pct", "l2_hit_pct"))
    assert row.detail["grid_size"] >= 1 and result.ok


def test_child_errors_name_the_exception_not_jax_notes():
    stderr = (
        "Traceback (most recent call last):\n  File x\nValueError: cols must be positive\n"
        "--------------------\nFor simplicity, JAX has removed its internal frames.\n"
    )
    assert error_line(stderr) == "ValueError: cols must be positive"
    assert error_line("x\n", stdout="==ERROR== ERR_NVGPUCTRPERM\n") == "==ERROR== ERR_NVGPUCTRPERM"
    assert error_line("") == "no output"


def test_nothing_profiled_is_a_failed_cell_with_ncus_words():
    text = "==PROF== Connected to process 1\n==WARNING== No kernels were profiled.\n"
    with pytest.raises(
        RuntimeError, match=r"chain, default: no ncu CSV .*ncu said: ==WARNING== No"
    ):
        validate_run._measured(text, CHAIN, "default")


def test_failed_cell_is_not_ok_and_says_why():
    failed = validate.ValidationResult(
        (),
        0,
        0,
        workload=CHAIN,
        variant="no-fusion",
        error="warm child failed (exit 1): ValueError: x",
    )
    assert (failed.ok, failed.verdict) == (
        False,
        "failed: warm child failed (exit 1): ValueError: x",
    )
    md = render_markdown([failed])
    assert "| chain[ops=8]/full/forward | no-fusion | 0 / 0 | - | - | - | failed: warm" in md
    assert "- failed: warm child failed (exit 1): ValueError: x" in md


def test_a_failed_cell_does_not_stop_the_others(monkeypatch):
    stopped = "validate ncu child (chain, no-fusion) ran past 600 s and was stopped"

    def fake_cell(spec, variant, **kwargs):
        if variant.name == "no-fusion":
            raise RuntimeError(stopped)
        measured = parse_ncu_csv(_csv("default"))
        return compare_kernels(DEFAULT_KERNELS, measured, workload=spec, variant=variant.name)

    monkeypatch.setattr(validate_run, "require_tools", lambda ncu=None: "/bin/true")
    monkeypatch.setattr(validate_run, "validate_cell", fake_cell)
    said = []
    results = validate_run.validate_cells(
        [(CHAIN, "no-fusion"), (CHAIN, "default")], say=said.append
    )
    assert [r.verdict for r in results] == [f"failed: {stopped}", "ok"]
    assert said == [
        "validate chain[ops=8]/full/forward no-fusion",
        "validate chain[ops=8]/full/forward default",
    ]


def test_child_past_its_timeout_is_stopped(tmp_path):
    request = {"phase": "warm", "workload": CHAIN, "variant": {"name": "default"}}
    with pytest.raises(
        RuntimeError, match=r"^validate warm child \(chain, default\) ran past 0.01 s"
    ):
        validate_run._run_child(request, tmp_path, (), 0.01)


def _fake_launches(names):
    from xlafuse.measurement.ncu import NcuKernel

    return [NcuKernel(i, 1, name, 1, 1, 1e-6) for i, name in enumerate(names)]


def _no_library(name, *args, **kwargs):
    raise OSError(f"{name}: cannot open shared object file")


def test_modeled_kernel_from_tuple_defaults():
    assert ModeledKernel("x", 4) == validate._modeled(("x", 4))


def test_an_l2_size_the_device_did_not_report_is_said_to_be_assumed():
    measured = parse_ncu_csv(_csv("default"))
    assumed = compare_kernels(DEFAULT_KERNELS, measured, workload=CHAIN, variant="default")
    reported = compare_kernels(
        DEFAULT_KERNELS, measured, l2_bytes=62_914_560, workload=CHAIN, variant="default"
    )
    bytes_line = next(line for line in summary_lines(assumed) if line.startswith("- bytes:"))
    assert bytes_line == (
        "- bytes: 1 of 1 judged kernels within 10% (judged: modeled bytes >= 4 x 60.0 MB L2 = "
        "240.0 MB; L2 size assumed: 60 MB (the H200's, rounded down; the device did not report one))"
    )
    bytes_line = next(line for line in summary_lines(reported) if line.startswith("- bytes:"))
    assert "assumed" not in bytes_line and "4 x 62.9 MB L2" in bytes_line
    written = assumed.to_dict()
    assert (written["l2_bytes"], written["l2_assumed"], written["judged_min_bytes"]) == (
        None,
        True,
        240_000_000,
    )
    assert validate.result_from_dict(written).l2_assumed
    assert not validate.result_from_dict(reported.to_dict()).l2_assumed
