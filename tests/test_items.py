"""Items per call and their unit (issue 44): stated in FUNCTION's return, a config table, the
command line or `xlafuse.measure`, and shown as throughput (items/s in that unit) in the tables
and plots; an override of the wrong type named with its parameter's default."""

import textwrap
import tomllib

import jax.numpy as jnp
import pytest
from helpers import FAST_TIMING, REPO

import xlafuse
from xlafuse.cli import _devices, build_parser, main
from xlafuse.errors import XlafuseError
from xlafuse.experiment.config import parse_config
from xlafuse.models import Items, user
from xlafuse.report.cells import throughput_text
from xlafuse.results.records import read_results

PROGRAMS = REPO / "tests" / "data" / "user" / "programs.py"

ROLLOUT = """
import jax.numpy as jnp

from xlafuse.models import Items


def rollout(envs: int = 16, steps: int = 4):
    def run(x):
        for _ in range(steps):
            x = jnp.tanh(x) + 1.0
        return x.sum()

    return run, (jnp.ones(envs),), Items(envs * steps, "env-steps")


def step(n: int = 8):
    return (lambda s, x: (s * 0.5 + x, s.sum())), (jnp.ones(n), jnp.ones(n)), (0,), Items(n)


def plain(n: int = 8):
    return jnp.sin, (jnp.ones(n),)
"""


@pytest.fixture
def program(tmp_path, monkeypatch):
    monkeypatch.setattr(user, "_IMPORTED", dict(user._IMPORTED))
    path = tmp_path / "rollout.py"
    path.write_text(ROLLOUT)
    return path


def test_functions_return_says_items_and_measure_shows_them_per_second(program):
    rollout = user.build_entry(f"{program}:rollout", overrides={"envs": 8})
    assert (rollout.mode, rollout.items_per_call, rollout.items_unit) == (
        "forward",
        32,
        "env-steps",
    )
    step = user.build_entry(f"{program}:step")
    assert (step.mode, step.items_per_call, step.items_unit) == ("train", 8, "items")
    plain = user.build_entry(f"{program}:plain")
    assert (plain.items_per_call, plain.items_unit) == (1, "calls")

    measured = xlafuse.measure(
        jnp.sin, jnp.ones(8), items=Items(4096, "tokens"), timing=FAST_TIMING, calibrate=False
    )
    record = measured.record("default")
    assert (record.model.items_per_call, record.model.items_unit) == (4096, "tokens")
    assert record.rates.items_per_s == pytest.approx(4096 / record.timing.median_s)
    assert throughput_text(record.rates.items_per_s, "tokens") in str(measured)
    assert str(measured).count(" tokens/s |") == 2  # one per variant, in the work table


def test_a_config_table_says_items_and_the_report_shows_them(program, tmp_path, capsys):
    config = tmp_path / "items.toml"
    timing = "".join(f"{k} = {v}\n" for k, v in FAST_TIMING.items())
    config.write_text(
        textwrap.dedent(f"""
        [experiment]
        name = "items"
        output = "{tmp_path / "out"}"

        [[workloads]]
        entry = "rollout.py:plain"
        items = 51200
        items_unit = "env-steps"

        [[workloads]]
        entry = "rollout.py:step"

        [timing]
        """)
        + timing
        + "[measure]\ncalibrate = false\n"
    )
    assert main(["run", str(config), "--no-progress"]) == 0, capsys.readouterr().err
    records = read_results(tmp_path / "out" / "results.jsonl").records
    units = {(r.workload, r.mode, r.model.items_per_call, r.model.items_unit) for r in records}
    assert units == {("plain", "forward", 51200, "env-steps"), ("step", "train", 8, "items")}
    report = (tmp_path / "out" / "report.md").read_text()
    assert report.count(" env-steps/s |") == 2 and report.count(" items/s |") == 2
    assert (tmp_path / "out" / "throughput.png").is_file()


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ("items = 0", "workloads[0].items: the count 0 must be an int above 0 (items one call "
         "processes)"),
        ('items = "many"', "workloads[0].items: the count 'many' must be an int above 0 (items "
         "one call processes)"),
        ('items = 8\nitems_unit = ""', "workloads[0].items_unit: the unit '' must be a word such "
         "as 'env-steps' or 'tokens'"),
        ('items_unit = "tokens"', "workloads[0].items_unit: goes with items = N (items one call "
         "processes)"),
    ],
)  # fmt: skip
def test_a_config_tables_items_are_checked_with_the_config(table, problem):
    text = f'[experiment]\nname = "x"\n[[workloads]]\nname = "chain"\n{table}\n'
    with pytest.raises(XlafuseError) as err:
        parse_config(tomllib.loads(text))
    assert str(err.value).splitlines() == ["1 problem in the config:", f"  {problem}"]


def test_the_command_line_says_items(program, capsys):
    argv = ["inspect", "--workload", f"{program}:plain", "--items", "512", "--items-unit", "rows"]
    cell = _devices.cell_of(build_parser(command="inspect").parse_args(argv))
    workload = cell.build()
    assert (workload.items_per_call, workload.items_unit) == (512, "rows")
    assert main([*argv[:3], "--items-unit", "rows"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "xlafuse inspect: error: --items-unit rows goes with --items N (items one call processes)"
    )
    assert main([*argv[:3], "--items", "0"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "xlafuse inspect: error: --items 0 --items-unit items: the count 0 must be an int above 0 "
        "(items one call processes)"
    )


def test_items_are_checked_where_they_are_made():
    with pytest.raises(XlafuseError, match=r"^Items\(0, 'items'\): the count 0 must be an int"):
        Items(0)
    with pytest.raises(XlafuseError, match=r"^measure: items=5 is not accepted"):
        xlafuse.measure(jnp.sin, jnp.ones(3), items=5)
    assert throughput_text(51.2e6, "env-steps") == "51.2M env-steps/s"
    assert throughput_text(None, "tokens") == "-"


def test_an_override_of_the_wrong_type_names_its_parameter_and_default(capsys):
    assert main(["inspect", "--workload", f"{PROGRAMS}:forward", "--overrides", "n=abc"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"xlafuse inspect: error: override n='abc' of {PROGRAMS}:forward must be an int (its "
        "default is 64)"
    )
    with pytest.raises(user.EntryError, match=r"override n=2.5 of .*:forward must be an int"):
        user.build_entry(f"{PROGRAMS}:forward", overrides={"n": 2.5})
