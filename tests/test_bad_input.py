"""Every bad input: one line on stderr, exit 2, before any work (issue 26).

Each case asserts the message and the exit code; "before any work" is held by making the work
itself fail the test (no array made, no child started, no plot written).
"""

import json
import os

import jax
import pytest
from helpers import config_file

from xlafuse import models
from xlafuse.cli import _devices as cli_devices
from xlafuse.cli import main
from xlafuse.compiler import devices as devices_lib
from xlafuse.errors import XlafuseError
from xlafuse.experiment import plan
from xlafuse.experiment.config import parse_config
from xlafuse.models import registry
from xlafuse.models.memory import WorkloadTooLargeError
from xlafuse.report.html import NO_CELLS, REPORT_HTML
from xlafuse.results.records import CellResult, append_result, load_results

HLO = os.path.join(os.path.dirname(__file__), "data", "trace-chain4", "no-fusion.hlo.txt")
HUGE = 10**12  # a batch no machine holds: 3.6 PiB of mlp inputs
UNWRITABLE = "/proc/xlafuse-cannot-be-here"  # not even root can make a folder here
FAST = """
[timing]
warmup = 1
min_time_s = 0.01
min_iters = 2
max_iters = 5
repeats = 1

[measure]
calibrate = false
"""


def _error(capsys, argv: list[str]) -> str:
    """Runs the command, which must exit 2 with one line on stderr; returns that line."""
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    return err[0]


def _problems(data: dict) -> list[str]:
    with pytest.raises(XlafuseError) as info:
        parse_config(data, backend="cpu")
    return [line.strip() for line in str(info.value).splitlines()[1:]]


@pytest.fixture
def no_child(monkeypatch):
    """Fails the test if a command starts its child process with N host devices."""
    monkeypatch.setattr(
        cli_devices, "rerun_with_host_devices", lambda *a: pytest.fail("started a child")
    )


# 1. overrides: kind, sign and memory, checked where the workload declares them


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("batch=abc", "override batch='abc' for workload 'mlp': need an integer >= 1"),
        ("batch=2.5", "override batch=2.5 for workload 'mlp': need an integer >= 1"),
        ("batch=-8", "override batch=-8 for workload 'mlp': need an integer >= 1"),
        ("batch=0", "override batch=0 for workload 'mlp': need an integer >= 1"),
        ("learning_rate=0", "override learning_rate=0 for workload 'mlp': need a number > 0"),
    ],
)
def test_compare_refuses_bad_override_values(capsys, override, message):
    line = _error(capsys, ["compare", "mlp", "--overrides", override])
    assert line == f"xlafuse compare: error: {message}"


def test_compare_refuses_a_batch_that_cannot_fit(capsys, monkeypatch):
    monkeypatch.setattr(registry, "_run_once", lambda init: pytest.fail("made arrays"))
    line = _error(capsys, ["compare", "mlp", "--overrides", f"batch={HUGE}"])
    assert line.startswith(
        f"xlafuse compare: error: workload mlp[batch={HUGE}]/tiny/forward needs at least "
    )
    assert "GiB for its arrays (parameters 0.1 MiB, inputs " in line
    assert line.endswith("; choose a smaller size or smaller overrides")


def test_build_weighs_the_arrays_before_making_any(monkeypatch):
    monkeypatch.setattr(registry, "_run_once", lambda init: pytest.fail("made arrays"))
    with pytest.raises(WorkloadTooLargeError, match="state, optimizer state and gradients"):
        models.build("mlp", mode="train", d_model=10**9)


def test_config_reports_override_kind_and_sign_at_load_time():
    workloads = [
        {"name": "mlp", "overrides": {"batch": "abc"}},
        {"name": "mlp", "overrides": {"batch": 0}},
        {"name": "resnet50", "overrides": {"stages": [1, 0]}},
    ]
    assert _problems({"workloads": workloads}) == [
        "workloads[0].overrides.batch: override batch='abc' for workload 'mlp': need an "
        "integer >= 1",
        "workloads[1].overrides.batch: override batch=0 for workload 'mlp': need an integer >= 1",
        "workloads[2].overrides.stages: override stages=[1, 0] for workload 'resnet50': need a "
        "non-empty list of integers >= 1",
    ]


def test_a_cell_too_large_is_an_error_record_and_the_run_goes_on(tmp_path, capsys):
    out = tmp_path / "out"
    config = config_file(
        tmp_path,
        f'[experiment]\nname = "t"\noutput = "{out}"\nvariants = ["default"]\n'
        f'[[workloads]]\nname = "mlp"\noverrides = {{ batch = {HUGE} }}\n'
        '[[workloads]]\nname = "chain"\noverrides = { ops = 2 }\n' + FAST,
    )
    assert main(["run", str(config), "--no-progress"]) == 1
    first = load_results(out / "results.jsonl")
    assert [(r.workload, r.status) for r in first] == [("mlp", "error"), ("chain", "ok")]
    assert first[0].error_type == "WorkloadTooLargeError"
    assert first[0].error.startswith(f"workload mlp[batch={HUGE}]/tiny/forward needs at least")
    capsys.readouterr()
    # Resuming runs the cell that is not done (and fails it again), without aborting.
    assert main(["run", str(config), "--no-progress"]) == 1
    said = capsys.readouterr().out
    assert "1 cells to run on " in said and ", 1 already done" in said
    again = load_results(out / "results.jsonl")
    assert [(r.workload, r.status) for r in again[2:]] == [("mlp", "error")]


# 2. [timing]: every setting has a range


@pytest.mark.parametrize(
    ("key", "value", "accepted"),
    [
        ("warmup", 1_000_000_000, "from 1 to 1000"),
        ("min_time_s", 601.0, "from 0 to 600"),
        ("min_time_s", float("nan"), "from 0 to 600"),
        ("min_iters", 0, "from 1 to 1000000"),
        ("max_iters", 10**7, "from 1 to 1000000"),
        ("repeats", 101, "from 1 to 100"),
    ],
)
def test_timing_settings_have_ranges(key, value, accepted):
    problems = _problems({"workloads": ["chain"], "timing": {key: value}})
    assert f"timing.{key}: must be {accepted}, not {value!r}" in problems


# 3. --devices: refused before a child starts


@pytest.mark.parametrize("command", [["compare", "chain"], ["inspect", "--workload", "chain"]])
def test_too_many_devices_are_refused_before_a_child(capsys, no_child, command):
    line = _error(capsys, [*command, "--devices", "100000"])
    problem = devices_lib.device_count_problem(100000)
    assert line == f"xlafuse {command[0]}: error: --devices {problem}"


def test_the_accepted_device_counts():
    limit = devices_lib.max_host_devices()
    assert limit == max(8, 4 * os.cpu_count())
    assert devices_lib.device_count_problem(100000, backend="cpu") == (
        f"must be from 1 to {limit} (host devices: 4 per core of this machine, at least 8), "
        "not 100000"
    )
    assert devices_lib.device_count_problem(0, backend="cpu").endswith(", not 0")
    assert devices_lib.device_count_problem(limit, backend="cpu") is None
    if jax.default_backend() == "gpu":
        assert devices_lib.device_count_problem(len(jax.devices()) + 1).endswith(
            "(the gpu devices JAX sees), not " + str(len(jax.devices()) + 1)
        )


def test_config_devices_have_the_same_range():
    problems = _problems({"workloads": [{"name": "mlp", "devices": 100000}]})
    assert problems[0].startswith("workloads[0].devices: must be from 1 to ")


# 4. files and folders, counts, selections


def _results(folder) -> str:
    """A results file of one ok cell (written by hand: nothing is measured)."""
    folder.mkdir(exist_ok=True)
    path = folder / "results.jsonl"
    cell = {"workload": "chain", "size": "tiny", "mode": "forward", "dtype": "float32"}
    append_result(path, CellResult(**cell, variant="default", backend="cpu", device_kind="cpu"))
    return str(path)


def test_report_out_is_an_existing_file(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    line = _error(capsys, ["report", _results(tmp_path / "r"), "--out", str(tmp_path / "afile")])
    assert (
        line
        == f"xlafuse report: error: output folder '{tmp_path / 'afile'}' is a file, not a folder"
    )


def test_report_out_cannot_be_written(tmp_path, capsys):
    line = _error(capsys, ["report", _results(tmp_path / "r"), "--out", UNWRITABLE])
    assert line.startswith(f"xlafuse report: error: cannot write to output folder '{UNWRITABLE}'")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_report_out_is_read_only(tmp_path, capsys):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    line = _error(capsys, ["report", _results(tmp_path / "r"), "--out", str(folder)])
    assert (
        line
        == f"xlafuse report: error: cannot write to output folder '{folder}': Permission denied"
    )


def test_report_roofline_cell_is_checked_before_any_plot(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["report", _results(tmp_path / "r"), "--out", str(out), "--roofline-cell", "no@default"]
    line = _error(capsys, argv)
    assert line == (
        "xlafuse report: error: --roofline-cell 'no@default' is no traced cell; traced cells: none"
    )
    assert not out.exists()


def test_report_of_an_empty_results_file_is_a_report_of_no_cell(tmp_path, capsys):
    # issue 47: a results file with no cells still gives a page that says so (it was exit 2)
    path = tmp_path / "results.jsonl"
    path.write_text("\n")
    assert main(["report", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out == f"{tmp_path / 'report.md'}\n"
    assert err.splitlines() == [
        f"results file '{path}' holds no cell (it is empty): report.md and report.html say so"
    ]
    assert (tmp_path / "report.md").read_text().endswith(f"(0 cells)\n\n{NO_CELLS}\n")
    assert f'<p class="banner" id="banner">{NO_CELLS}</p>' in (tmp_path / REPORT_HTML).read_text()


def test_a_line_that_is_json_but_no_record_is_named(tmp_path, capsys):
    path = _results(tmp_path / "r")
    with open(path, "a") as f:
        f.write(json.dumps({"workload": "chain", "size": "tiny"}) + "\n")
    assert main(["report", path, "--out", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().err.splitlines()[0] == (
        f"{path}: skipped 1 line that is not a record (line 2: not a cell record (a record is a "
        "JSON object with the keys workload, size, mode, dtype, variant, backend, device_kind; "
        "this one has no mode, dtype, variant, backend, device_kind))"
    )


def test_inspect_dot_into_a_folder_that_cannot_be_made(capsys):
    line = _error(capsys, ["inspect", HLO, "--dot", f"{UNWRITABLE}/g.dot"])
    assert line.startswith(
        f"xlafuse inspect: error: cannot write to folder of the --dot file '{UNWRITABLE}'"
    )


def test_diff_measure_traces_is_a_file(tmp_path, capsys, monkeypatch):
    import xlafuse.measurement.kernel_diff as kernel_diff

    monkeypatch.setattr(kernel_diff, "measure_workload_diff", lambda *a: pytest.fail("measured"))
    afile = tmp_path / "afile"
    afile.write_text("x")
    argv = ["diff", "--workload", "chain", "--measure", "--traces", str(afile)]
    assert _error(capsys, argv) == (
        f"xlafuse diff: error: --traces folder '{afile}' is a file, not a folder"
    )


def test_validate_rejudge_of_malformed_json(tmp_path, capsys):
    path = tmp_path / "v.json"
    path.write_text('{"cells": [1]}')
    assert _error(capsys, ["validate", "--rejudge", str(path)]) == (
        f"xlafuse validate: error: --rejudge: {path} is not a validation.json written by "
        "`xlafuse validate --out` (not a cell of validation.json: a cell is an object, not 1)"
    )


def test_validate_names_a_missing_config_first(capsys):
    line = _error(capsys, ["validate", "nosuch.toml"])
    assert line.startswith("xlafuse validate: error: config file 'nosuch.toml' not found")


@pytest.mark.parametrize("calls", ["0", "-1"])
def test_coldstart_calls_below_one(capsys, monkeypatch, calls):
    from xlafuse.measurement import coldstart

    monkeypatch.setattr(coldstart, "measure_cold_start", lambda *a, **k: pytest.fail("started"))
    line = _error(capsys, ["coldstart", "--workload", "chain", "--calls", calls])
    assert line == f"xlafuse coldstart: error: --calls must be 1 or more, got {calls}"


def test_explain_of_a_file(capsys):
    assert _error(capsys, ["explain", HLO]) == (
        f"xlafuse explain: error: {HLO!r} is a file; explain reads an --xla_dump_to folder (with "
        "a priority-fusion dump), or --workload NAME; one HLO file: `xlafuse inspect FILE`"
    )


def test_diff_names_a_file_that_is_not_hlo(tmp_path, capsys):
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\xd6\xff\x00binary")
    line = _error(capsys, ["diff", HLO, str(garbage)])
    assert line.startswith(f"xlafuse diff: error: {garbage}: line 1: binary file (NUL byte)")


@pytest.mark.parametrize("command", [["run", "c.toml"], ["compare", "chain"]])
def test_an_empty_variant_selection_is_refused(capsys, no_child, command):
    assert _error(capsys, [*command, "--variants", ""]) == (
        f"xlafuse {command[0]}: error: --variants '' names no variant; give comma-separated "
        "names, e.g. --variants default,no-fusion"
    )


def test_fresh_moves_the_old_report_aside_with_the_results(tmp_path):
    results = tmp_path / "results.jsonl"
    for name, text in (("results.jsonl", "{}\n"), ("report.md", "old"), ("speedup.png", "")):
        (tmp_path / name).write_text(text)
    plan.move_aside(results)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert len(left) == 3 and not {"results.jsonl", "report.md", "speedup.png"} & set(left)
    stem = next(n for n in left if n.endswith(".jsonl.old")).removesuffix(".jsonl.old")
    assert f"{stem}.report.md.old" in left and f"{stem}.speedup.png.old" in left


# 5. one problem, not two, for a torch reference without torch: tests/test_torch_variants.py


def test_compare_refuses_an_unknown_variant_before_building(capsys):
    assert main(["compare", "mlp", "--variants", "default,no-fuson"]) == 2
    err = capsys.readouterr().err
    assert "unknown variant 'no-fuson' (did you mean 'no-fusion'?)" in err
    assert "building" not in err and "compiling" not in err


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (["variants", "nah"], "nah"),
        (["run", "configs/quickstart.toml", "--overrides", "x=1"], "--overrides x=1"),
    ],
)
def test_a_word_a_command_does_not_take_is_named_by_that_command(capsys, argv, extra):
    # argparse's top-level parser would say `xlafuse: error: ...`, naming no command
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.startswith(f"usage: xlafuse {argv[0]} ")
    assert err.splitlines()[-1] == f"xlafuse {argv[0]}: error: unrecognized arguments: {extra}"


# issue 42, item 13: a program of the user's that raises or calls sys.exit is one line naming it

PROGRAMS = os.path.join(os.path.dirname(__file__), "data", "user", "programs.py")
EXITS = """\
import sys


def exits(n: int = 4):
    sys.exit(3)
"""


def test_coldstart_of_a_function_that_raises_starts_no_child(capsys, monkeypatch):
    from xlafuse.measurement import coldstart

    monkeypatch.setattr(coldstart, "_run_child", lambda request: pytest.fail("started a child"))
    line = _error(capsys, ["coldstart", "--workload", f"{PROGRAMS}:raises", "--overrides", "n=7"])
    assert line == (
        f"xlafuse coldstart: error: entry '{PROGRAMS}:raises' raised RuntimeError: no data for n=7"
    )


@pytest.mark.parametrize("command", ["coldstart", "inspect", "diff", "explain"])
def test_a_function_that_calls_sys_exit_is_one_line_naming_it(
    capsys, monkeypatch, tmp_path, command
):
    from xlafuse.measurement import coldstart

    monkeypatch.setattr(coldstart, "_run_child", lambda request: pytest.fail("started a child"))
    (tmp_path / "up.py").write_text(EXITS)
    entry = f"{tmp_path / 'up.py'}:exits"
    assert _error(capsys, [command, "--workload", entry]) == (
        f"xlafuse {command}: error: entry '{entry}' raised SystemExit: 3"
    )


def test_an_import_that_calls_sys_exit_is_one_line_naming_it(capsys, tmp_path):
    (tmp_path / "exits.py").write_text("import sys\n\nsys.exit(4)\n")
    target = str(tmp_path / "exits.py")
    assert _error(capsys, ["compare", "mlp", "--import", target]) == (
        f"xlafuse compare: error: --import: importing {target!r} raised SystemExit: 4"
    )
    assert _error(capsys, ["inspect", "--workload", f"{target}:f"]) == (
        f"xlafuse inspect: error: entry '{target}:f': importing {target!r} raised SystemExit: 4"
    )
