"""A config's entry takes its mode from what FUNCTION returns, as the command line does, checked
when the config is; the report's sections share one header form and one time-table layout
(issue 44, item 3)."""

from pathlib import Path

import pytest
from helpers import FAST_TIMING, config_file, run_cli

from xlafuse.experiment.config import load_config
from xlafuse.experiment.runner import run_experiment
from xlafuse.models import user
from xlafuse.report.cells import cell_tables
from xlafuse.report.markdown import write_report
from xlafuse.results import parts
from xlafuse.results.records import CellResult

# A step that counts FUNCTION's calls and its traces: the config's check calls it, never traces.
PROGRAM = """
import jax.numpy as jnp

CALLS, TRACES = [], []


def step(n: int = 8):
    CALLS.append(n)

    def update(state, x):
        TRACES.append(state.shape)
        new = state * 0.5 + x
        return new, (new**2).sum()

    return update, (jnp.zeros((n,)), jnp.ones((n,))), (0,)


def forward(n: int = 8):
    CALLS.append(n)
    return jnp.tanh, (jnp.ones((n,)),)


def broken():
    raise RuntimeError("no data")
"""


def _config(
    folder: Path, mode_line: str = "", variants: str = '["default"]', function: str = "step"
) -> Path:
    (folder / "prog.py").write_text(PROGRAM)
    return config_file(
        folder,
        f"""
[experiment]
name = "steps"
output = "{folder / "out"}"
variants = {variants}

[[workloads]]
entry = "prog.py:{function}"
name = "stepper"
{mode_line}

[[workloads]]
entry = "prog.py:broken"

[timing]
warmup = {FAST_TIMING["warmup"]}
min_time_s = {FAST_TIMING["min_time_s"]}
min_iters = {FAST_TIMING["min_iters"]}
max_iters = {FAST_TIMING["max_iters"]}
repeats = {FAST_TIMING["repeats"]}

[measure]
calibrate = false
""",
    )


def _program(folder: Path):
    return user.import_target(folder / "prog.py")


def test_an_entry_returning_a_step_without_mode_is_measured_as_a_train_step(tmp_path):
    config = load_config(_config(tmp_path))
    stepper, broken = config.workloads
    assert (stepper.label, broken.label) == ("stepper/custom/train", "broken/custom/forward")
    program = _program(tmp_path)
    assert (program.CALLS, program.TRACES) == ([8], [])  # called once, nothing traced
    records = run_experiment(config, progress=False)
    assert [(r.workload, r.mode, r.status) for r in records] == [
        ("stepper", "train", "ok"),
        ("broken", "forward", "error"),
    ]
    assert records[0].cell_id == "stepper/custom/train/auto/{}/default/cpu"
    text = write_report(tmp_path / "out").read_text()
    headers = [line for line in text.splitlines() if line.startswith("## ")]
    assert headers[headers.index("## stepper / custom / train / float32") + 1] == (
        "## broken / custom / forward"  # failed before it was built: no dtype, not "None"
    )


@pytest.mark.parametrize(
    ("function", "mode", "problem"),
    [
        (
            "step",
            "forward",
            "'forward', but entry 'prog.py:step' returns a step (fn, args, donate_argnums), "
            "measured as mode 'train': leave mode out (it is what FUNCTION returns) or set "
            'mode = "train"',
        ),
        (
            "forward",
            "train",
            "'train', but entry 'prog.py:forward' returns a forward program (fn, args), "
            "measured as mode 'forward': leave mode out (it is what FUNCTION returns) or set "
            'mode = "forward"',
        ),
    ],
)
def test_a_mode_that_is_not_what_function_returns_is_a_config_problem(
    capsys, tmp_path, function, mode, problem
):
    path = _config(tmp_path, f'mode = "{mode}"', '["default", "no-fusion"]', function)
    code, out, err = run_cli(capsys, "run", path)
    assert (code, out) == (2, "")
    assert err == (
        f"xlafuse run: error: {path}: 1 problem in the config:\n  workloads[0].mode: {problem}\n"
    )
    program = _program(tmp_path)
    assert (program.CALLS, program.TRACES) == ([8], [])  # nothing traced, so nothing compiled
    assert not (tmp_path / "out").exists()


def test_mode_train_given_on_a_step_is_kept(tmp_path):
    config = load_config(_config(tmp_path, 'mode = "train"'))
    assert config.workloads[0].mode == "train"


def _timed(variant: str, lead: str) -> CellResult:
    speedup = parts.SpeedupRecord(
        vs_reference=None if variant == "default" else 2.0,
        lead=lead,
        basis="paired rounds",
        reference_median_s=4e-3,
        reference_pipelined_s=2e-3,
    )
    return CellResult(
        workload="w", size="tiny", mode="forward", dtype="float32", variant=variant,
        backend="gpu", device_kind="gpu", reference="default", speedup=speedup,
        timing=parts.TimingRecord(median_s=2e-3, pipelined_s_per_call=1e-3),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("lead", "row"),
    [
        ("pipelined", "| no-fusion | 2 (ref 4) | **1 (ref 2)** | - | 2.00x |"),
        ("latency", "| no-fusion | **2 (ref 4)** | 1 (ref 2) | - | 2.00x |"),
    ],
)
def test_every_time_table_has_one_column_order_and_marks_the_lead(lead, row):
    table = cell_tables([_timed("default", lead), _timed("no-fusion", lead)])
    assert table[0].startswith("| variant | latency ms | pipelined ms | device ms | speedup |")
    assert table[3].startswith(row)
