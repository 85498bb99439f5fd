"""The smaller items of issue 44: `compare --workload`, the compare table headed with the cell's
overrides, `inspect` showing 20 kernels unless told otherwise."""

import gzip
import json

import pytest
from helpers import REPO, run_cli, usage_error

PROGRAMS = REPO / "tests" / "data" / "user" / "programs.py"
GPT2_FWD = REPO / "tests" / "data" / "trace-gpt2-fwd" / "default.hlo.txt.gz"  # 235 kernels


@pytest.mark.parametrize(
    "argv",
    [
        ["--workload", f"{PROGRAMS}:step"],
        [f"{PROGRAMS}:step"],
        [f"{PROGRAMS}:step", "--workload", f"{PROGRAMS}:step"],
    ],
    ids=["--workload", "WORKLOAD", "both, the same"],
)
def test_compare_takes_the_workload_either_way_and_heads_the_table_with_its_overrides(capsys, argv):
    code, out, err = run_cli(capsys, "compare", *argv, "--overrides", "n=8")
    assert code == 0, err
    # the build line's cell, overrides included, in the mode FUNCTION returned (a step)
    assert "building step[n=8]/custom\n" in err
    assert out.splitlines()[0] == "step[n=8]/custom/train on cpu"


def test_compare_json_names_the_cell_with_its_overrides(capsys):
    code, out, _ = run_cli(
        capsys, "compare", "--workload", "chain", "--overrides", "ops=2", "--json"
    )
    assert code == 0
    assert json.loads(out)["function"] == "chain[ops=2]/tiny/forward"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            [],
            "no workload: give WORKLOAD or --workload W (a zoo workload, `xlafuse workloads`, "
            "or FILE.py:FUNCTION)",
        ),
        (
            ["mlp", "--workload", "chain"],
            "WORKLOAD 'mlp' and --workload 'chain' name two workloads; give one",
        ),
    ],
)
def test_compare_without_one_workload_is_one_line(capsys, argv, message):
    assert usage_error(capsys, "compare", *argv) == f"{message}\n"


@pytest.fixture
def gpt2_fwd(tmp_path):
    path = tmp_path / "gpt2_fwd.hlo.txt"
    path.write_bytes(gzip.decompress(GPT2_FWD.read_bytes()))
    return path


def _kernel_rows(out: str) -> list[str]:
    """The kernel table's lines after its header (the summary comes first)."""
    return out.split("\n\n", 1)[1].splitlines()[1:]


def test_inspect_shows_20_kernels_by_default_and_says_how_to_see_the_rest(capsys, gpt2_fwd):
    code, out, _ = run_cli(capsys, "inspect", gpt2_fwd)
    rows = _kernel_rows(out)
    assert code == 0 and len(rows) == 20 + 1
    assert rows[-1] == "... 215 more kernels (--top 235 shows all)"


def test_inspect_all_shows_every_kernel(capsys, gpt2_fwd):
    code, out, _ = run_cli(capsys, "inspect", gpt2_fwd, "--all")
    rows = _kernel_rows(out)
    assert code == 0 and len(rows) == 235
    assert not any(row.startswith("...") for row in rows)


def test_inspect_top_below_one_is_one_line(capsys, gpt2_fwd):
    assert usage_error(capsys, "inspect", gpt2_fwd, "--top", "0") == (
        "--top must be 1 or more, got 0 (--all shows every kernel)\n"
    )


def test_inspect_top_and_all_together_are_refused(capsys, gpt2_fwd):
    with pytest.raises(SystemExit) as exit_:
        run_cli(capsys, "inspect", gpt2_fwd, "--top", "5", "--all")
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "xlafuse inspect: error: argument --all: not allowed with argument --top"
    )
