"""The command line in a user's first hour (issue 26): quick help, the zoo, talkative progress."""

import argparse
import io
import json
import subprocess
import sys

import pytest
from helpers import FIRST_COLD_START_STEP, stop_cold_start_after_one_step

from xlafuse.cli import _COMMANDS, _progress, build_parser, main
from xlafuse.experiment.progress import Reporter
from xlafuse.models import registry

HEAVY = ("jax", "flax", "optax", "matplotlib")


@pytest.mark.parametrize(
    "argv",
    [[], ["--help"], *([name, "--help"] for name in _COMMANDS)],
    ids=lambda argv: " ".join(argv) or "bare",
)
def test_help_imports_no_jax(argv):
    """`xlafuse --help` builds every command's parser: in a fresh process, as a user's, none of
    JAX, Flax, optax or matplotlib is imported (JAX alone takes more than a second)."""
    script = (
        "import sys\nfrom xlafuse.cli import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit as done:\n    code = done.code\n"
        f"print('imported:', sorted(set({HEAVY!r}) & set(sys.modules)), code)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.stdout.splitlines()[-1] == f"imported: [] {2 if not argv else 0}"
    if argv[1:]:  # a command's help shows its description (argparse folds it)
        description = _commands().choices[argv[0]].description
        assert " ".join(description.split()) in " ".join(done.stdout.split())


def _commands() -> argparse._SubParsersAction:
    return next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))


def test_every_command_says_what_it_does_in_one_line(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    commands = _commands()
    helps = {choice.dest: choice.help for choice in commands._choices_actions}
    assert list(helps) == list(_COMMANDS)
    with pytest.raises(SystemExit):
        main(["--help"])
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    for name, text in helps.items():
        assert text and any(line.endswith(text) for line in lines), name  # not wrapped
        description = commands.choices[name].description
        assert description and description.endswith("."), name


def test_workloads_lists_the_zoo(capsys):
    assert main(["workloads"]) == 0
    out = capsys.readouterr().out
    blocks = {block.split()[0]: block for block in out.split("\n\n")}
    assert sorted(blocks) == registry.available()
    assert blocks["mlp"].startswith(
        "mlp  modes: forward, train  dtypes: float32, bfloat16, float16 (default: per backend)\n"
        "  override       type   tiny   small  full\n"
    )
    assert "  learning_rate  float  0.001  0.001  0.001" in blocks["mlp"]
    assert blocks["chain"].startswith("chain  modes: forward  dtypes: ")
    assert "(default: float32)" in blocks["chain"].splitlines()[0]
    assert "  ops       int   8     8      8" in blocks["chain"]
    assert '  implementation  str    "xla"' in blocks["gpt2"]


def test_workloads_json_reads_the_registry(capsys):
    assert main(["workloads", "--json", "gpt2", "chain"]) == 0
    got = {w["name"]: w for w in json.loads(capsys.readouterr().out)["workloads"]}
    assert list(got) == ["gpt2", "chain"]
    assert got["chain"]["modes"] == ["forward"] and got["gpt2"]["modes"] == ["forward", "train"]
    assert got["gpt2"]["sizes"] == ["tiny", "small", "full"]
    overrides = {o["name"]: o for o in got["gpt2"]["overrides"]}
    assert overrides["vocab"] == {
        "name": "vocab",
        "type": "int",
        "defaults": {size: registry.spec("gpt2").sizes[size]["vocab"] for size in registry.SIZES},
    }
    assert overrides["vocab"]["defaults"]["small"] == 50257
    assert overrides["implementation"]["defaults"]["full"] == "xla"
    assert {o["name"] for o in got["chain"]["overrides"]} == {"rows", "cols", "ops"}


def test_workloads_unknown_name_exits_2(capsys):
    assert main(["workloads", "mpl"]) == 2
    assert "unknown workload 'mpl'" in capsys.readouterr().err


def test_progress_off_a_terminal_is_one_plain_line_per_step():
    piped = io.StringIO()
    with _progress.steps("compare", total=2, stream=piped) as step:
        assert piped.getvalue() == ""  # nothing before the first step
        step("building mlp/tiny/forward")
        step("compiling mlp/tiny/forward under no-fusion")
    assert piped.getvalue() == (
        "xlafuse compare: [1/2] building mlp/tiny/forward\n"
        "xlafuse compare: [2/2] compiling mlp/tiny/forward under no-fusion\n"
    )
    unknown = io.StringIO()
    with _progress.steps("warmup", stream=unknown) as step:
        step("compiling chain/tiny/forward @ default")
    assert unknown.getvalue() == "xlafuse warmup: [1] compiling chain/tiny/forward @ default\n"


@pytest.mark.parametrize(
    "argv, lines",
    [
        (
            ["inspect", "--workload", "chain", "--overrides", "ops=2"],
            ["xlafuse inspect: [1/1] compiling chain[ops=2]/tiny/forward @ default"],
        ),
        (
            ["diff", "--workload", "chain", "--overrides", "ops=2"],
            [
                "xlafuse diff: [1/2] compiling chain[ops=2]/tiny/forward @ default",
                "xlafuse diff: [2/2] compiling chain[ops=2]/tiny/forward @ no-fusion",
            ],
        ),
        (
            ["explain", "--workload", "mul_add_relu"],
            [
                "xlafuse explain: [1/2] compiling mul_add_relu/tiny/forward @ default",
                "xlafuse explain: [2/2] compiling mul_add_relu/tiny/forward @ no-fusion",
            ],
        ),
    ],
    ids=["inspect", "diff", "explain"],
)
def test_compiling_commands_say_each_compile_on_a_pipe(capsys, argv, lines):
    assert main([*argv, "--json"]) == 0
    out, err = capsys.readouterr()  # stderr here is no terminal
    assert err.splitlines() == lines
    json.loads(out)  # stdout stays clean JSON


@pytest.mark.parametrize(
    "argv",
    [
        ["inspect", "--workload", "chain", "--variant", "nope"],
        ["diff", "--workload", "chain", "--variants", "default,nope"],
        ["explain", "--workload", "chain", "--against", "nope"],
    ],
    ids=["inspect", "diff", "explain"],
)
def test_a_bad_variant_fails_before_any_progress_line(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"xlafuse {argv[0]}: error: unknown variant 'nope'")


def test_compare_says_each_compile_on_a_pipe(capsys):
    assert main(["compare", "mul_add_relu", "--json"]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines() == [
        "xlafuse compare: [1/3] building mul_add_relu/tiny/forward",
        "xlafuse compare: [2/3] compiling mul_add_relu/tiny/forward under default",
        "xlafuse compare: [3/3] compiling mul_add_relu/tiny/forward under no-fusion",
    ]
    assert [row["variant"] for row in json.loads(out)["rows"]] == ["default", "no-fusion"]


def test_coldstart_says_each_child_on_a_pipe(capsys, monkeypatch):
    stop_cold_start_after_one_step(monkeypatch)
    assert main(["coldstart", "--workload", "mlp"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"xlafuse coldstart: [1/3] mlp/tiny/forward @ default: {FIRST_COLD_START_STEP}",
        "xlafuse coldstart: error: stopped after the first step",
    ]


LONG = "gpt2/tiny/train @ no-fusion  " + "x" * 150 + "  end of record"


def test_run_lines_off_a_terminal_are_plain_and_whole():
    piped = io.StringIO()
    with Reporter(True, 3, stream=piped) as reporter:
        reporter.say(LONG)
        reporter.advance()
    assert piped.getvalue() == LONG + "\n"  # no bar, no wrap at rich's 80 columns


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_run_lines_on_a_terminal_are_not_wrapped_by_rich():
    terminal = _Terminal()
    with Reporter(True, 3, stream=terminal) as reporter:
        reporter.say(LONG)
        reporter.advance()
    assert LONG in terminal.getvalue()  # one piece: the terminal folds it, not rich


def test_prose_lines_fit_100_columns_and_table_rows_stay_whole():
    from xlafuse.report.format import LINE_WIDTH, fit

    prose = "  " + " ".join(["word"] * 60)
    wrapped = fit(prose).splitlines()
    assert all(len(line) <= LINE_WIDTH for line in wrapped) and len(wrapped) == 4
    assert wrapped[1].startswith("      word")  # its indent, four more columns
    row = "kernel  " + "x" * 120
    assert fit(row) == row
    assert fit("short\n" + prose).splitlines()[0] == "short"


def test_variants_prints_no_line_over_100_columns(capsys):
    assert main(["variants"]) == 0
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) <= 100
