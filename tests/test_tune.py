"""`xlafuse tune`: the space, the searches (coordinate descent, successive halving, the grid) on
a fake clock, the numerics and rerun rules, best.toml, and the command on bad input. Never a
wall-clock time asserted."""

import dataclasses
import json
import tomllib
from pathlib import Path

import pytest

from xlafuse.cli import main
from xlafuse.errors import UnknownNameError, XlafuseError
from xlafuse.experiment.tune.evaluate import Evaluator, Target
from xlafuse.experiment.tune.evidence import Evidence
from xlafuse.experiment.tune.rerun import Rerun, candidate_from
from xlafuse.experiment.tune.search import (
    OK,
    Score,
    coordinate_descent,
    grid,
    successive_halving,
)
from xlafuse.experiment.tune.space import (
    FAMILIES,
    Candidate,
    enumerate_space,
    families_for,
    parse_knob,
    space_grid,
)
from xlafuse.experiment.tune.tuner import GRID_EFFORT, best_toml, tune


def run(capsys, *argv):
    code = main(list(map(str, argv)))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_space_is_every_combination_with_the_default_first():
    families = families_for("gpu", names=["gemm-fusion", "command-buffers"])
    space = enumerate_space({"unroll": (1, 8)}, families)
    assert len(space) == 1 + 2 * 3 * 3  # the default, then knobs x choices
    assert space[0] == Candidate((), (("gemm-fusion", "on"), ("command-buffers", "on")))
    assert space[0].name == "default" and space[0].options() == {}
    names = [c.name for c in space]
    assert len(set(names)) == len(names)
    assert "unroll=8 gemm-fusion=off command-buffers=off" in names
    both = next(c for c in space if c.name == "unroll=8 gemm-fusion=off command-buffers=off")
    assert both.options() == {
        "xla_gpu_enable_triton_gemm": False,
        "xla_gpu_enable_command_buffer": "",
    }
    assert candidate_from(json.loads(json.dumps(both.to_dict()))) == both


def test_families_apply_where_they_exist():
    assert [f.name for f in families_for("cpu")] == ["fusion"]
    # the implementation family (issue 46) is searched when named only
    unnamed = ("fusion", "implementation")
    assert [f.name for f in families_for("gpu")] == [n for n in FAMILIES if n not in unnamed]
    # the CPU's fusion off is the no-fusion variant's passes, validated as variants are
    (off,) = [c for c in enumerate_space({}, families_for("cpu")) if c.name == "fusion=off"]
    assert off.options() == {"xla_disable_hlo_passes": "fusion,dot-library-rewriter"}
    off.variant().compiler_options(backend="cpu")
    with pytest.raises(UnknownNameError, match=r"'fusoin' \(did you mean 'fusion'\?\)"):
        families_for("cpu", names=["fusoin"])
    with pytest.raises(UnknownNameError, match="'fusion' applies on cpu only, not on this gpu"):
        families_for("gpu", names=["fusion"])
    with pytest.raises(UnknownNameError, match="unknown option family 'gemm'; accepted: "):
        families_for("gpu", names=["gemm"])
    with pytest.raises(UnknownNameError, match="applies on gpu only, not on this cpu"):
        families_for("cpu", names=["gemm-fusion"])


def test_a_knob_is_its_name_and_each_value_s_text():
    assert parse_knob("unroll=1,2, 4") == ("unroll", ("1", "2", "4"))
    assert parse_knob("policy=dots,none") == ("policy", ("dots", "none"))
    for bad in ("unroll", "=1,2", "unroll=", "unroll=1,1"):
        with pytest.raises(ValueError, match="--knob"):
            parse_knob(bad)


class FakeClock:
    """Each evaluation costs `cost` seconds of this clock."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def fake_evaluate(times, clock, cost=1.0, statuses=None):
    calls = []

    def evaluate(candidate, effort):
        clock.now += cost * effort
        calls.append((candidate, effort))
        status = (statuses or {}).get(candidate, OK)
        return Score(status, times[candidate] if status == OK else None)

    return evaluate, calls


def test_successive_halving_finds_the_known_best_with_a_quarter_of_the_grid():
    times = {f"c{i}": 1.0 + ((i * 7) % 16) / 10 for i in range(16)}  # c0 is the fastest
    clock = FakeClock()
    evaluate, calls = fake_evaluate(times, clock)
    result = successive_halving(list(times), evaluate, budget_s=1000, clock=clock)
    assert result.ranked[0] == "c0" and not result.budget_spent
    # 16 at effort 1, 8 at 2, 4 at 4, 2 at 8: 64 units against a grid at effort 8 of 128
    assert [n for n in (sum(1 for _, e in calls if e == k) for k in (1, 2, 4, 8))] == [16, 8, 4, 2]
    assert sum(e for _, e in calls) == 64


def test_the_budget_cuts_a_round_and_ranks_what_it_measured():
    times = {"default": 2.0, "a": 1.0, "b": 3.0, "c": 0.5}
    clock = FakeClock()
    evaluate, calls = fake_evaluate(times, clock)
    result = successive_halving(list(times), evaluate, budget_s=2.5, clock=clock)
    assert [c for c, _ in calls] == ["default", "a", "b"]  # c is never measured
    assert result.ranked == ("a", "default", "b") and result.budget_spent


def test_the_grid_measures_every_candidate_alike_and_ranks_them():
    times = {"default": 2.0, "a": 1.0, "b": 3.0, "wrong": 0.5}
    clock = FakeClock()
    evaluate, calls = fake_evaluate(times, clock, statuses={"wrong": "numerics"})
    result = grid(list(times), evaluate, effort=4, clock=clock)
    assert calls == [(c, 4) for c in times]
    assert result.ranked == ("a", "default", "b") and not result.budget_spent
    assert result.seconds == 16.0  # four candidates at effort 4, one second per unit


def test_a_grid_tune_says_so_in_its_record(tmp_path):
    space = enumerate_space({"unroll": (2, 8)}, [])
    clock = FakeClock()
    evaluate, calls = fake_evaluate({space[0]: 2.0, space[1]: 1.9, space[2]: 1.0}, clock)
    lines = []
    target = Target("examples/cartpole.py:rollout", {}, {"envs": 16})
    result = tune(target, {"unroll": (2, 8)}, [], 1, out=tmp_path, prove=False, say=lines.append, evaluate=evaluate,
                  search="grid")  # fmt: skip
    assert lines[0] == "tune: 3 candidates, the whole grid, no budget"
    assert {e for _, e in calls} == {GRID_EFFORT} and len(calls) == 3
    assert result.best.name == "unroll=8"
    summary = json.loads((tmp_path / "tune.jsonl").read_text().splitlines()[-1])
    assert (summary["search"], summary["budget_s"]) == ("grid", None)
    assert summary["search_s"] >= 0  # the real clock's: tune's own, not the fake evaluator's


def test_a_candidate_that_changes_the_answer_never_wins():
    times = {"default": 2.0, "wrong": 0.1, "right": 1.5}
    clock = FakeClock()
    evaluate, _ = fake_evaluate(times, clock, statuses={"wrong": "numerics"})
    result = successive_halving(list(times), evaluate, budget_s=100, clock=clock)
    assert result.ranked[0] == "right" and "wrong" not in result.ranked


def fake_rerun(verdict, speedup):
    def prover(spec):
        prover.spec = spec
        return Rerun("pipelined", speedup, (speedup - 0.01, speedup + 0.01), verdict,
                     0.002, 0.002 / speedup, (1.0, 1.2))  # fmt: skip

    return prover


def tuned(verdict, speedup, tmp_path, lines):
    space = enumerate_space({"unroll": (2, 8)}, [])
    times = {space[0]: 2.0, space[1]: 1.9, space[2]: 1.0}
    clock = FakeClock()
    evaluate, _ = fake_evaluate(times, clock)
    target = Target("examples/cartpole.py:rollout", {}, {"envs": 16})
    return tune(target, {"unroll": (2, 8)}, [], 100, out=tmp_path, prove=True, say=lines.append, evaluate=evaluate,
                prover=fake_rerun(verdict, speedup))  # fmt: skip


def test_a_winner_the_rerun_does_not_confirm_is_noise(tmp_path):
    lines = []
    result = tuned("same", 1.01, tmp_path, lines)
    assert result.best.name == "unroll=8" and not result.confirmed
    assert lines[-2] == (
        "no confirmed winner: the search's fastest, unroll=8: 1.01x [1.00, 1.02] same on "
        "pipelined in a fresh process (1.98 vs 2 ms; compile 1.2 vs 1.0 s), is noise"
    )
    summary = json.loads((tmp_path / "tune.jsonl").read_text().splitlines()[-1])
    assert (summary["confirmed"], summary["best"]["knobs"]) == (False, {"unroll": 8})


def test_a_confirmed_winner_and_its_best_toml(tmp_path):
    lines = []
    result = tuned("faster", 2.0, tmp_path, lines)
    assert result.confirmed and lines[-2].startswith("winner: unroll=8: 2.00x [1.99, 2.01] faster")
    config = tomllib.loads((tmp_path / "best.toml").read_text())
    assert config["experiment"]["variants"] == ["default"]
    programs = [(w["name"], w.get("overrides")) for w in config["workloads"]]
    assert programs == [
        ("rollout-default", {"envs": 16}),
        ("rollout-tuned", {"envs": 16, "unroll": 8}),
    ]  # labels that are not the variants' names
    file, _, function = config["workloads"][0]["entry"].rpartition(":")
    assert function == "rollout" and not Path(file).is_absolute()  # no path of this machine
    assert (tmp_path / file).resolve() == Path("examples/cartpole.py").resolve()


def test_the_evidence_of_a_gpu_rerun_reads_back_and_prints():
    group = {"kind": "fusion", "kernels_a": ["loop_fusion.3"], "kernels_b": ["loop_fusion.7"],
             "time_a_s": 40e-6, "time_b_s": 12e-6}  # fmt: skip
    loss = {**group, "kind": "only B", "kernels_a": [], "kernels_b": ["copy.2"], "time_a_s": 0.0}
    evidence = Evidence(
        (5.6e-3, 4.0e-3), 1.4, (1.38, 1.42), "faster", (4006.0, 1130.0), (group,), (loss,)
    )
    proof = Rerun("latency", 1.41, (1.4, 1.42), "faster", 5.6e-3, 3.97e-3, (1.0, 3.5), evidence)
    again = Rerun.from_dict(json.loads(json.dumps(proof.to_dict())))
    assert again == proof
    assert evidence.lines() == [
        "  device time 4 vs 5.6 ms: 1.40x [1.38, 1.42] faster",
        "  kernels per call 1130 vs 4006",
        "  gain: fusion loop_fusion.7 -28.0 us per call",
        "  loss: only B copy.2 +12.0 us per call",
    ]


def test_best_toml_puts_options_beside_the_default_and_runs(tmp_path, capsys):
    space = enumerate_space({}, families_for("gpu", names=["gemm-fusion"]))
    result = tune(Target("mul_add_relu", {"size": "tiny"}), {}, families_for("gpu", names=["gemm-fusion"]),
                  100, out=None, prove=False, say=lambda line: None, evaluate=fake_evaluate({space[0]: 2.0, space[1]: 1.0,
                  space[2]: 1.5}, FakeClock())[0])  # fmt: skip
    text = best_toml(result)
    config = tomllib.loads(text)
    assert config["experiment"]["variants"] == [
        "default", {"name": "tuned", "xla_gpu_enable_triton_gemm": False}
    ]  # fmt: skip
    assert config["workloads"] == [{"name": "mul_add_relu", "size": "tiny"}]
    # on this CPU the GPU option does not apply: the run says so per cell and goes on; the
    # knob-only form runs whole
    knobs = tomllib.loads(
        text.replace(', { name = "tuned", xla_gpu_enable_triton_gemm = false }', "")
    )
    assert knobs["experiment"]["variants"] == ["default"]
    path = tmp_path / "best.toml"
    path.write_text(text.replace(', { name = "tuned", xla_gpu_enable_triton_gemm = false }', "")
                    + "\n[timing]\nwarmup = 1\nmin_time_s = 0\nmin_iters = 2\nmax_iters = 2\n"
                    "repeats = 1\n[measure]\ncalibrate = false\n")  # fmt: skip
    code, _, err = run(capsys, "run", path, "--out", tmp_path / "res")
    assert code == 0, err
    assert (tmp_path / "res" / "results.jsonl").read_text().count("\n") == 1


def test_the_real_evaluator_refuses_a_changed_answer():
    target = Target("examples/cartpole.py:rollout", {}, {"envs": 8, "steps": 5})
    evaluate = Evaluator(target)
    default, longer, unrolled = (Candidate(()), Candidate((("steps", 9),)),
                                 Candidate((("unroll", 5),)))  # fmt: skip
    assert evaluate(default, 1).ok
    changed = evaluate(longer, 1)
    assert changed.status == "numerics" and changed.detail.startswith("max rel diff ")
    assert evaluate(unrolled, 1).ok
    refused = evaluate(Candidate((("colour", 1),)), 1)
    assert refused.status == "rejected" and "colour" in refused.detail


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--knob", "unroll"], "--knob 'unroll': expected NAME=V1,V2,..."),
        (["--budget-s", "0"], "--budget-s 0: need a finite number of seconds above 0"),
        (["--budget-s", "inf"], "--budget-s inf: need a finite number of seconds above 0"),
        (["--budget-s", "nan"], "--budget-s nan: need a finite number of seconds above 0"),
        (["--space", "gemm-fusion"], "option family 'gemm-fusion' applies on gpu only"),
        (["--knob", "envs=2,4", "--overrides", "envs=8"], "envs given both as --knob and"),
        (
            ["--search", "halvng"],
            "--search 'halvng' (did you mean 'halving'?); accepted: descent, halving, grid",
        ),
        (
            ["--knob", "unrol=1,2"],
            "knob 'unrol': 'examples/cartpole.py:rollout' takes no "
            "override of that name (did you mean 'unroll'?); accepted: envs, hidden, steps, unroll",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, error):
    code, _, err = run(capsys, "tune", "examples/cartpole.py:rollout", *argv)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("xlafuse tune: error: ") and error in err


@pytest.mark.parametrize(
    ("knob", "error"),
    [
        ("unroll=2,x", "override unroll='x' for workload 'cartpole': need an integer >= 1"),
        # typed as the workload's own value, a float
        ("learning_rate=0.1,-1", "override learning_rate=-1.0 for workload 'cartpole': need a"),
    ],
)
def test_a_zoo_knob_value_it_refuses_is_a_usage_error_before_any_compile(capsys, knob, error):
    code, out, err = run(capsys, "tune", "cartpole", "--knob", knob)
    assert code == 2 and err.count("\n") == 1 and error in err
    assert "candidates" not in out  # nothing searched


@pytest.mark.gpu
def test_tune_finds_an_unroll_of_the_rollout_and_proves_it_on_a_gpu(tmp_path):
    # On the H200 full cartpole (1,024 x 500) is launch-bound: unroll 4 was 1.27x [1.26, 1.28]
    # on latency and 1.18x on device time (experiments/h200/tune); tiny cartpole (64 x 32) is
    # not (its default won there).
    target = Target("cartpole", {"size": "full"})
    result = tune(target, {"unroll": (1, 4)}, [], 60, out=tmp_path, say=lambda line: None)
    assert result.best is not None and dict(result.best.knobs).get("unroll", 1) > 1
    assert result.confirmed and result.proof.verdict == "faster"
    evidence = result.proof.evidence  # where the time went, from traced calls
    assert evidence.kernels_per_call[1] < evidence.kernels_per_call[0]


def test_the_rerun_times_both_programs_in_a_fresh_process():
    from xlafuse.experiment.tune.rerun import rerun

    target = "examples/cartpole.py:rollout"
    default, unrolled = Candidate(), Candidate((("unroll", 5),))
    spec = {"target": target, "overrides": {"envs": 8, "steps": 5},
            "default": default.to_dict(), "winner": unrolled.to_dict(),
            "timing": {"warmup": 1, "min_time_s": 0, "min_iters": 3, "max_iters": 30, "repeats": 3}}  # fmt: skip
    got = rerun(spec, timeout_s=300)
    assert got.figure == "pipelined"  # on a CPU, as the search ranks
    assert got.speedup == pytest.approx(got.default_s / got.winner_s)
    assert got.ci[0] <= got.speedup <= got.ci[1] and min(got.compile_s) > 0
    with pytest.raises(XlafuseError, match=r"the rerun failed \(exit 1\): .*nosuch"):
        rerun({**spec, "target": "nosuch"}, timeout_s=300)


def test_a_sharded_target_is_tuned_with_its_host_devices(capfd):
    # On a CPU, N devices are N host devices: the command runs itself again with them.
    code = main(["tune", "mlp", "--devices", "2", "--space", "none", "--budget-s", "5",
                 "--no-rerun"])  # fmt: skip
    out, _ = capfd.readouterr()
    assert code == 0 and "nothing beats the default program: it ranked first" in out


def test_the_target_s_own_knob_values_are_not_measured_twice():
    defaults = Target("cartpole", {"size": "small"}).defaults()
    assert (defaults["unroll"], defaults["envs"]) == (1, 256)
    space = enumerate_space(
        {"unroll": (1, 2)}, families_for("gpu", names=["command-buffers"]), defaults=defaults
    )
    names = [c.name for c in space]
    assert "unroll=1" not in names  # the default program again
    assert names[:3] == [
        "default",
        "unroll=1 command-buffers=off",
        "unroll=1 command-buffers=min-graph-1",
    ]
    assert len(space) == 1 + 2 * 3 - 1
    entry = Target("examples/cartpole.py:rollout", {}, {"envs": 16}).defaults()
    assert entry == {"envs": 16, "steps": 100, "hidden": 64, "unroll": 1}


TABLE = """
[experiment]
name = "t"
output = "OUT"

[tune]
workload = { name = "cartpole", size = "tiny", overrides = { steps = 8 } }
knobs = { unroll = [2, 4] }
space = ["while-loop-double-buffering"]
budget_s = 2
rerun = false
"""


def test_a_tune_table_is_read_and_its_gpu_families_left_out_on_a_cpu(tmp_path):
    from xlafuse.experiment.tune.table import parse_tune_table

    table = parse_tune_table(tomllib.loads(TABLE), "cpu")
    assert table.target == Target("cartpole", {"size": "tiny", "mode": "forward"}, {"steps": 8})
    assert (table.knobs, table.budget_s, table.search, table.rerun) == (
        {"unroll": (2, 4)}, 2.0, "descent", False
    )  # fmt: skip
    assert str(table.output) == "OUT"
    assert table.option_families("cpu") == ([], ["while-loop-double-buffering"])
    assert [f.name for f in table.option_families("gpu")[0]] == ["while-loop-double-buffering"]


def test_a_bad_tune_table_lists_every_problem_where_it_is():
    from xlafuse.experiment.tune.table import parse_tune_table

    bad = TABLE.replace('size = "tiny"', 'size = "tinny"').replace("budget_s = 2", "budget_s = 0")
    bad = bad.replace(
        "rerun = false", 'rerun = "no"\nsearch = "grdi"\nknbos = 1\nfigure = "pipelind"'
    )
    bad = bad.replace('"while-loop-double-buffering"', '"while-loop-double-bufering"')
    with pytest.raises(XlafuseError) as caught:
        parse_tune_table(tomllib.loads(bad), "cpu")
    lines = str(caught.value).splitlines()
    assert lines[0] == "7 problems in the config:"
    assert lines[1:] == [
        "  tune.knbos: unknown key (did you mean 'knobs'?); accepted: workload, knobs, space, "
        "budget_s, search, rerun, figure",
        "  tune.workload.size: unknown size 'tinny' for workload 'cartpole' (did you mean "
        "'tiny'?); accepted: tiny, small, full",
        "  tune.space: unknown option family 'while-loop-double-bufering' (did you mean "
        "'while-loop-double-buffering'?); accepted: " + ", ".join(FAMILIES),
        "  tune.budget_s: need a finite number of seconds above 0, not 0",
        "  tune.search: 'grdi' (did you mean 'grid'?); accepted: descent, halving, grid",
        "  tune.rerun: must be true or false, not 'no'",
        "  tune.figure: 'pipelind' (did you mean 'pipelined'?); accepted: latency, pipelined",
    ]


def test_run_and_tune_of_a_tune_config_search_it(tmp_path, capsys):
    config = tmp_path / "tune.toml"
    config.write_text(TABLE.replace("OUT", str(tmp_path / "out")))
    code, out, err = run(capsys, "run", config)
    assert (code, err) == (0, "")
    assert out.splitlines()[:2] == [
        "tune: while-loop-double-buffering: not on this cpu, left out of the space",
        "tune: 3 candidates, budget 2 s",
    ]
    summary = json.loads((tmp_path / "out" / "tune.jsonl").read_text().splitlines()[-1])
    assert summary["search"] == "descent" and summary["proof"] is None
    assert tomllib.loads((tmp_path / "out" / "best.toml").read_text())["workloads"]
    code, _, err = run(capsys, "tune", config, "--budget-s", "5")
    assert code == 2 and err == (
        f"xlafuse tune: error: --budget-s: not for a config with a [tune] table ({config}): "
        "the table decides the target, its knobs, space and budget; --out may replace its "
        "output\n"
    )


def test_halving_measures_the_default_first_then_a_fixed_sample_of_the_space():
    from xlafuse.experiment.tune.tuner import halving_order

    space = tuple(
        enumerate_space({"unroll": (2, 4, 8, 16)}, families_for("gpu", names=["autotune"]))
    )
    order = halving_order(space)
    assert order[0] == space[0] and sorted(order, key=space.index) == list(space)
    assert order == halving_order(space)  # the same every time
    # a budget of four trials measures across the knob's values, not the first one's corner
    assert order[1:4] != list(space[1:4])
    assert len({dict(c.knobs)["unroll"] for c in order[1:5]}) > 1


@pytest.mark.parametrize("command", ["tune", "run"])
def test_a_bad_tune_table_prints_every_problem_and_exits_2(tmp_path, capsys, command):
    config = tmp_path / "bad.toml"
    config.write_text('[tune]\nworkload = { name = "cartpol" }\nbudget_s = -1\n')
    code, out, err = run(capsys, command, config)
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"xlafuse {command}: error: {config}: 2 problems in the config:",
        "  tune.workload.name: unknown workload 'cartpol' (did you mean 'cartpole'?); accepted: "
        "attention, cartpole, chain, cos_relu, gelu, gpt2, layernorm, lstm, matmul_bias_act, "
        "mlp, mul_add_relu, resnet50, rmsnorm, softmax, swiglu, transformer_block",
        "  tune.budget_s: need a finite number of seconds above 0, not -1",
    ]


@pytest.mark.parametrize(
    ("head", "problem"),
    [
        ("[experiment]\noutput = 5\n", "experiment.output: must be a string, not 5"),
        ("experiment = 3\n", "experiment: must be a table ([experiment])"),
    ],
)
def test_a_tune_config_s_experiment_table_is_checked_too(head, problem):
    from xlafuse.experiment.tune.table import parse_tune_table

    data = tomllib.loads(head + '[tune]\nworkload = { name = "cartpole" }\n')
    with pytest.raises(XlafuseError) as caught:
        parse_tune_table(data, "cpu")
    assert str(caught.value).splitlines() == ["1 problem in the config:", f"  {problem}"]


# Coordinate descent, on a fake clock that charges a compile per new candidate.

SYNTHETIC_KNOBS = {"unroll": (1, 2, 4, 8, 16, 32)}
SYNTHETIC_FAMILIES = ("while-loop-double-buffering", "multi-output-fusion", "command-buffers")
UNROLL_MS = {1: 6.0, 2: 5.2, 4: 4.6, 8: 4.9, 16: 5.5, 32: 6.5}
COMMAND_BUFFERS_MS = {"on": 0.0, "off": 0.4, "min-graph-1": 0.1}
COMPILE_S = 5.0  # what the fake clock charges a candidate's first measurement


def synthetic_space():
    """6 x 2 x 2 x 3 = 72 candidates (the default program is unroll=1 with XLA's defaults), and
    the same as a grid."""
    families = families_for("gpu", names=SYNTHETIC_FAMILIES)
    defaults = {"unroll": 1}
    space = enumerate_space(SYNTHETIC_KNOBS, families, defaults=defaults)
    return space, space_grid(SYNTHETIC_KNOBS, families, defaults=defaults)


def synthetic_ms(candidate):
    """A known landscape: unroll 4 is the best unroll; double buffering gains 0.6 ms on an
    unrolled loop and loses 0.3 ms on the plain one; the other families only lose. The best is
    unroll=4 with double buffering on (4.0 ms): two values other than the default's."""
    unroll, choices = dict(candidate.knobs).get("unroll", 1), dict(candidate.choices)
    ms = UNROLL_MS[unroll]
    if choices["while-loop-double-buffering"] == "on":
        ms += -0.6 if unroll > 1 else 0.3
    ms += 0.2 if choices["multi-output-fusion"] == "off" else 0.0
    return ms + COMMAND_BUFFERS_MS[choices["command-buffers"]]


class CompilingEvaluator:
    """A fake `Evaluator`: a candidate's first measurement (or its first after `keep` let it
    go) costs `compile_s` of the clock, then each one `effort` seconds."""

    def __init__(self, times, clock, compile_s=COMPILE_S, statuses=None):
        self.times, self.clock, self.compile_s = times, clock, compile_s
        self.statuses = statuses or {}
        self.compiled, self.compiles, self.calls = set(), 0, []

    def __call__(self, candidate, effort):
        if candidate not in self.compiled:
            self.clock.now += self.compile_s
            self.compiled.add(candidate)
            self.compiles += 1
        self.clock.now += effort
        self.calls.append((candidate, effort))
        status = self.statuses.get(candidate, OK)
        return Score(status, self.times[candidate] if status == OK else None)

    def keep(self, candidates):
        self.compiled &= set(candidates)


def descend(statuses=None, budget_s=10_000.0, times=None):
    space, coordinates = synthetic_space()
    clock = FakeClock()
    times = times or {c: synthetic_ms(c) / 1e3 for c in space}
    evaluate = CompilingEvaluator(times, clock, statuses=statuses)
    result = coordinate_descent(
        coordinates,
        evaluate,
        budget_s,
        clock=clock,
        keep=evaluate.keep,
        finish_effort=GRID_EFFORT // 2,
    )
    return result, evaluate, clock, space


def named(space, name):
    return next(c for c in space if c.name == name)


def test_descent_finds_the_best_combination_with_a_quarter_of_the_grid_s_candidates():
    result, evaluate, _, space = descend()
    assert len(space) == 72
    best = named(space, "unroll=4 while-loop-double-buffering=on")
    assert min(space, key=synthetic_ms) == best
    assert result.ranked[0] == best and not result.budget_spent
    measured = {c for c, _ in evaluate.calls}
    # sweep 1: the default, 5 more unrolls, 1 + 1 + 2 choices; sweep 2: the 5 other unrolls
    # with double buffering on; nothing moves then, and every other line is cached
    assert len(measured) == 1 + 5 + 1 + 1 + 2 + 5 == 15
    assert len(measured) * 4 <= len(space)
    assert evaluate.calls[0] == (space[0], 1)  # the default program first
    # the finish: the four fastest at effort 4, then two at the grid's effort
    assert [e for _, e in evaluate.calls if e > 1] == [4, 4, 4, 4, 8, 8]
    assert result.last_score(best).time_s == pytest.approx(4.0e-3)


def test_descent_takes_a_quarter_of_the_grid_s_time_where_compiles_are_charged():
    result, evaluate, clock, space = descend()
    descent_s = clock.now
    assert evaluate.compiles == 15  # the finish's candidates were kept compiled
    grid_clock = FakeClock()
    grid_evaluate = CompilingEvaluator({c: synthetic_ms(c) / 1e3 for c in space}, grid_clock)
    exhaustive = grid(space, grid_evaluate, GRID_EFFORT, clock=grid_clock)
    assert exhaustive.ranked[0] == result.ranked[0]
    assert grid_clock.now == 72 * (COMPILE_S + GRID_EFFORT) == 936
    assert descent_s == 15 * (COMPILE_S + 1) + 4 * 4 + 2 * 8 == 122
    assert descent_s * 4 <= grid_clock.now


def test_a_failed_candidate_never_becomes_the_descent_s_point_nor_wins():
    space, _ = synthetic_space()
    unroll_4 = named(space, "unroll=4")
    wrong = named(space, "unroll=4 while-loop-double-buffering=on command-buffers=off")
    times = {c: synthetic_ms(c) / 1e3 for c in space}
    times[unroll_4] = times[wrong] = 1e-6  # the fastest, were they right
    statuses = {unroll_4: "numerics", wrong: "numerics"}
    result, evaluate, _, _ = descend(statuses, times=times)
    assert {unroll_4, wrong} <= {c for c, _ in evaluate.calls}  # measured, and refused
    assert result.ranked[0] == named(space, "unroll=4 while-loop-double-buffering=on")
    assert unroll_4 not in result.ranked and wrong not in result.ranked
    assert all(e == 1 for c, e in evaluate.calls if c in statuses)  # never measured again


def test_the_budget_stops_the_descent_and_ranks_what_it_measured():
    result, evaluate, _, space = descend(budget_s=20.0)  # 6 s a candidate: four of them
    measured = [c for c, _ in evaluate.calls]
    assert [c.name for c in measured] == ["default", "unroll=2", "unroll=4", "unroll=8"]
    assert result.budget_spent
    assert [c.name for c in result.ranked] == ["unroll=4", "unroll=8", "unroll=2", "default"]
    # a budget that ends in the finish: spent too, its ranking of what that round measured
    result, evaluate, _, _ = descend(budget_s=15 * (COMPILE_S + 1) + 1)
    assert result.budget_spent and [e for _, e in evaluate.calls if e > 1] == [4]
    assert result.ranked == (named(space, "unroll=4 while-loop-double-buffering=on"),)


def test_gains_each_under_the_margin_are_tried_together():
    """Double buffering and min-graph-1 each 1.5% faster on unroll 4 (under MOVE_MARGIN, so the
    descent moves on neither), 3% together: the one combined candidate finds it."""
    space, _ = synthetic_space()

    def ms(candidate):
        choices = dict(candidate.choices)
        unroll = dict(candidate.knobs).get("unroll", 1)
        small = (choices["while-loop-double-buffering"] == "on") + (
            choices["command-buffers"] == "min-graph-1"
        )
        other = 0.2 * (choices["multi-output-fusion"] == "off") + 0.4 * (
            choices["command-buffers"] == "off"
        )
        return UNROLL_MS[unroll] * (1 - 0.015 * small * (unroll > 1)) + other

    result, evaluate, _, _ = descend(times={c: ms(c) / 1e3 for c in space})
    both = named(space, "unroll=4 while-loop-double-buffering=on command-buffers=min-graph-1")
    assert result.ranked[0] == both
    assert result.last_score(both).time_s == pytest.approx(4.6e-3 * 0.97)
    # sweep 1 (1 + 5 + 1 + 1 + 2), sweep 2 (all cached), then the combined point: one more
    assert len({c for c, _ in evaluate.calls}) == 1 + 5 + 1 + 1 + 2 + 1


# cartpole (full) on the H200, unroll 1/4/16/32 x double buffering x command buffers: ms per
# call, (unroll, double buffering, command buffers) -> time. `GRID_MS`: the exhaustive grid at
# effort 8 (experiments/h200/tune/cartpole-wide-grid); `DESCENT_MS`: a descent's first sweep at
# effort 1 in another process (cartpole-wide-3), where double buffering measured 1% slower alone.
GRID_MS = {
    (1, "off", "on"): 7.420, (1, "off", "off"): 18.148, (1, "off", "min-graph-1"): 7.501,
    (1, "on", "on"): 6.011, (1, "on", "off"): 18.237, (1, "on", "min-graph-1"): 5.786,
    (4, "off", "on"): 5.722, (4, "off", "off"): 19.551, (4, "off", "min-graph-1"): 5.839,
    (4, "on", "on"): 5.849, (4, "on", "off"): 18.015, (4, "on", "min-graph-1"): 5.623,
    (16, "off", "on"): 6.588, (16, "off", "off"): 20.580, (16, "off", "min-graph-1"): 6.632,
    (16, "on", "on"): 7.889, (16, "on", "off"): 21.867, (16, "on", "min-graph-1"): 8.142,
    (32, "off", "on"): 7.105, (32, "off", "off"): 29.097, (32, "off", "min-graph-1"): 7.388,
    (32, "on", "on"): 9.829, (32, "on", "off"): 30.772, (32, "on", "min-graph-1"): 11.398,
}  # fmt: skip
DESCENT_MS = {
    (1, "off", "on"): 7.430, (4, "off", "on"): 5.900, (16, "off", "on"): 6.194,
    (32, "off", "on"): 6.837, (4, "on", "on"): 5.958, (4, "off", "off"): 22.903,
    (4, "off", "min-graph-1"): 5.832,
}  # fmt: skip


def test_near_ties_are_combined_on_the_h200_s_measurements():
    """Replayed: the descent's first sweep as it measured, every other point as the grid did.
    Neither double buffering (1% slower) nor min-graph-1 (1% faster) passes the margin; taking
    each line's fastest value gives unroll=4 min-graph-1, measured already; the product of the
    near ties holds the grid's best, which then wins the finish."""
    knobs = {"unroll": (1, 4, 16, 32)}
    families = families_for("gpu", names=("while-loop-double-buffering", "command-buffers"))
    coordinates = space_grid(knobs, families, defaults={"unroll": 1})
    space = enumerate_space(knobs, families, defaults={"unroll": 1})

    def point(candidate):
        choices = dict(candidate.choices)
        return (dict(candidate.knobs).get("unroll", 1), choices["while-loop-double-buffering"],
                choices["command-buffers"])  # fmt: skip

    clock = FakeClock()
    times = {c: GRID_MS[point(c)] / 1e3 for c in space}
    evaluate = CompilingEvaluator(times, clock)
    first_sweep = {c: DESCENT_MS[point(c)] / 1e3 for c in space if point(c) in DESCENT_MS}

    def replay(candidate, effort):
        score = evaluate(candidate, effort)  # the clock and the compiles charged alike
        if effort == 1 and candidate in first_sweep:
            return Score(OK, first_sweep[candidate])
        return score

    result = coordinate_descent(coordinates, replay, 10_000.0, clock=clock, keep=evaluate.keep)
    best = min(space, key=lambda c: times[c])
    assert best.name == "unroll=4 while-loop-double-buffering=on command-buffers=min-graph-1"
    assert result.ranked[0] == best
    measured = {c for c, _ in evaluate.calls}
    assert len(measured) == len(DESCENT_MS) + 1 and len(space) == 24  # one more: the best


def test_the_descent_never_measures_a_candidate_twice_at_one_effort():
    result, evaluate, _, _ = descend()
    assert len(set(evaluate.calls)) == len(evaluate.calls)
    # the second sweep's lines through the point (all but unroll's) were all measured already
    assert sum(1 for t in result.trials if t.round == 1) == 5
    assert [t.effort for t in result.trials] == [e for _, e in evaluate.calls]


def test_the_space_grid_is_the_space_as_coordinates():
    import itertools

    space, coordinates = synthetic_space()
    assert coordinates.start == (1, "off", "on", "on")
    assert coordinates.candidate(coordinates.start) == space[0] == coordinates.default
    points = list(itertools.product(*coordinates.axes))
    assert {coordinates.candidate(p) for p in points} == set(space)
    assert coordinates.candidate((4, "on", "on", "on")).name == (
        "unroll=4 while-loop-double-buffering=on"
    )
    # the target's own unroll not listed (or not known): the descent starts at the first one,
    # and the default program is measured first but is no point of the grid
    for defaults in ({"unroll": 1}, None):
        off_grid = space_grid({"unroll": (2, 8)}, [], defaults=defaults)
        assert off_grid.start == (2,) and off_grid.candidate((2,)).name == "unroll=2"
        assert off_grid.default == Candidate()


def test_a_descent_tune_starts_off_the_grid_when_the_default_is_not_on_it(tmp_path):
    lines = []
    result = tuned("faster", 2.0, tmp_path, lines)  # unroll=2,8; the rollout's own is 1
    assert lines[0] == "tune: 3 candidates, budget 100 s" and result.search_kind == "descent"
    names = [(t.candidate.name, t.effort) for t in result.search.trials]
    assert names[:3] == [("default", 1), ("unroll=2", 1), ("unroll=8", 1)]
    assert result.best.name == "unroll=8"
    summary = json.loads((tmp_path / "tune.jsonl").read_text().splitlines()[-1])
    assert (summary["search"], summary["budget_s"]) == ("descent", 100)


def test_every_search_is_accepted_by_the_command_line_and_a_table():
    from xlafuse.cli import tune_cmd
    from xlafuse.experiment.tune import tuner
    from xlafuse.experiment.tune.table import parse_tune_table

    assert tune_cmd.SEARCHES == tuner.SEARCHES and tuner.DEFAULT_SEARCH == "descent"
    for name in tuner.SEARCHES:
        tune_cmd.check_search(name)
        table = TABLE.replace("rerun = false", f'rerun = false\nsearch = "{name}"')
        assert parse_tune_table(tomllib.loads(table), "cpu").search == name
    with pytest.raises(XlafuseError, match=r"'descnt' \(did you mean 'descent'\?\); accepted: "):
        parse_tune_table(tomllib.loads(TABLE + 'search = "descnt"\n'), "cpu")


def test_the_figure_tuned_for_is_the_user_s_choice_else_the_cell_s_lead(tmp_path, capsys):
    from xlafuse.cli import tune_cmd
    from xlafuse.experiment.tune import tuner
    from xlafuse.experiment.tune.evaluate import ranked_figure
    from xlafuse.experiment.tune.table import parse_tune_table

    assert tune_cmd.FIGURES == tuner.FIGURES == ("latency", "pipelined")
    assert ranked_figure(None, False, "gpu") == "latency"  # a forward call on a GPU
    assert ranked_figure(None, True, "gpu") == ranked_figure(None, False, "cpu") == "pipelined"
    assert ranked_figure("pipelined", False, "gpu") == "pipelined"
    assert ranked_figure("latency", True, "cpu") == "latency"
    table = parse_tune_table(tomllib.loads(TABLE + 'figure = "latency"\n'), "cpu")
    assert table.target.figure == "latency"
    assert parse_tune_table(tomllib.loads(TABLE), "cpu").target.figure is None
    # the real evaluator ranks on it (pipelined on this CPU unless chosen), and the proof's
    # request and best.toml carry it
    target = Target("examples/cartpole.py:rollout", {}, {"envs": 8, "steps": 5}, "latency")
    for chosen, lead in (
        (target, "latency"),
        (dataclasses.replace(target, figure=None), "pipelined"),
    ):
        evaluate = Evaluator(chosen)
        assert evaluate(Candidate(()), 1).ok and evaluate.lead == lead
    lines = []
    space = enumerate_space({"unroll": (2, 8)}, [])
    prover = fake_rerun("faster", 2.0)
    evaluate, _ = fake_evaluate({space[0]: 2.0, space[1]: 1.9, space[2]: 1.0}, FakeClock())
    result = tune(
        target,
        {"unroll": (2, 8)},
        [],
        100,
        out=None,
        prove=True,
        say=lines.append,
        evaluate=evaluate,
        prover=prover,
    )
    assert prover.spec["figure"] == "latency"
    assert best_toml(result).splitlines()[1] == (
        "# tuned for latency time: the run's records hold both speedups"
    )
    with pytest.raises(SystemExit) as caught:  # argparse's choices: one line, exit 2
        main(["tune", "chain", "--figure", "pipelind"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert caught.value.code == 2 and err.startswith("xlafuse tune: error: argument --figure: ")


def test_the_descent_reads_the_shared_clock(monkeypatch):
    from xlafuse.experiment.tune import search, tuner

    seen = []
    monkeypatch.setattr(search, "coordinate_descent", lambda *a, clock, **k: seen.append(clock))
    tuner._search("descent", (), None, 1.0, tuner._Leaderboard(print), synthetic_space()[1])
    assert seen == [tuner._shared_clock]


def test_a_descent_tune_from_the_command_line(capsys):
    code, out, err = run(capsys, "tune", "examples/cartpole.py:rollout", "--overrides",
                         "envs=8,steps=5", "--knob", "unroll=1,5", "--search", "descent",
                         "--space", "none", "--budget-s", "60", "--no-rerun")  # fmt: skip
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == "tune: 2 candidates, budget 60 s"


# issue 43 item 3: a knob's values are read as --overrides values are, typed against the
# target's own values; issue 42 item 16: what a [tune] table's rerun = false says.


def test_knob_values_are_read_as_overrides_are():
    from xlafuse.cli._devices import parse_overrides
    from xlafuse.cli.tune_cmd import override_value

    for text in ("false", "True", "8", "0.5", "1e-3", "dots", '"quoted"', "-1"):
        assert override_value(text) == parse_overrides([f"k={text}"])["k"]
    assert [override_value(t) for t in ("false", "True", "8", "0.5", "dots")] == [
        False, True, 8, 0.5, "dots"
    ]  # fmt: skip


def test_knob_values_take_the_type_of_the_target_s_own():
    from xlafuse.experiment.tune.space import typed_knobs

    defaults = {"rate": 0.5, "name": "a", "flag": False, "count": 4}
    knobs = {"rate": (1, 2.5), "name": (1, "b"), "flag": (False, True), "count": (2, 4)}
    texts = {"rate": ("1", "2.5"), "name": ("1", "b"), "flag": ("false", "true"),
             "count": ("2", "4")}  # fmt: skip
    typed = typed_knobs(knobs, defaults, texts=texts)
    assert typed == {"rate": (1.0, 2.5), "name": ("1", "b"), "flag": (False, True),
                     "count": (2, 4)}  # fmt: skip
    assert [type(v) for v in typed["rate"] + typed["name"]] == [float, float, str, str]
    with pytest.raises(ValueError, match=r"knob 'rate': a value is given twice \(1.0, 1.0\)"):
        typed_knobs({"rate": (1, 1.0)}, defaults)
    # a value equal to the target's own is the default program, measured once
    for knob, names in (("flag", ["default", "flag=True"]), ("count", ["default", "count=2"])):
        assert [
            c.name for c in enumerate_space({knob: typed[knob]}, [], defaults=defaults)
        ] == names
    one = enumerate_space({"flag": (1,)}, [], defaults={"flag": True})  # 1 is not True to a program
    assert [c.name for c in one] == ["default", "flag=1"]


FLAG = f"{Path(__file__).parent / 'data' / 'user' / 'tune_flag.py'}:make"


def test_a_boolean_knob_reaches_the_program_as_a_boolean(tmp_path, capsys):
    code, out, err = run(capsys, "tune", FLAG, "--knob", "flag=false,true", "--space", "none",
                         "--out", tmp_path)  # fmt: skip
    assert (code, err) == (0, "")
    assert "[round 0, effort 1] default (flag=False): " in out
    assert "[round 0, effort 1] flag=True: " in out
    trials = [json.loads(line) for line in (tmp_path / "tune.jsonl").read_text().splitlines()]
    measured = [(t["candidate"]["knobs"], t["status"]) for t in trials if t["kind"] == "trial"]
    assert ({}, "ok") in measured and ({"flag": True}, "ok") in measured  # numerics pass
    assert trials[0]["knobs"] == {"flag": [False, True]}
    assert trials[0]["knob_defaults"] == {"flag": False}
    text = (tmp_path / "best.toml").read_text()
    assert "overrides = { flag = true }" in text  # flag=False spins a loop: 10x slower
    assert tomllib.loads(text)["workloads"][1]["overrides"] == {"flag": True}
    # its rerun: two workloads whose labels are not the variants' names ("default")
    quick = "\n[timing]\nwarmup = 1\nmin_time_s = 0\nmin_iters = 2\nmax_iters = 2\nrepeats = 1\n"
    (tmp_path / "best.toml").write_text(text + quick + "[measure]\ncalibrate = false\n")
    code, _, err = run(capsys, "run", tmp_path / "best.toml")
    assert code == 0, err
    rows = (tmp_path / "run" / "results.jsonl").read_text().splitlines()
    cells = sorted((r["workload"], r["variant"], r["status"]) for r in map(json.loads, rows))
    assert cells == [("make-default", "default", "ok"), ("make-tuned", "default", "ok")]


def test_a_tune_table_s_rerun_false_is_said_as_the_table_says_it(tmp_path, monkeypatch):
    from xlafuse.cli import tune_cmd
    from xlafuse.experiment.tune import tuner

    config = tmp_path / "tune.toml"
    config.write_text(TABLE.replace("OUT", str(tmp_path / "out")))
    seen = {}
    monkeypatch.setattr(tuner, "tune", lambda *a, **k: seen.update(k))
    assert tune_cmd.run_config(str(config), ["tune", str(config)]) == 0
    why = f"not rerun ([tune] rerun = false in {config})"
    assert (seen["prove"], seen["unproved"]) == (False, why)
    monkeypatch.undo()
    result = tuned_unproved(why, tmp_path / "lib")
    assert result.conclusion() == f"fastest in the search: unroll=8; unconfirmed: {why}"
    assert (
        tuned_unproved(tune_cmd.UNPROVED_ASKED, tmp_path / "cli")
        .conclusion()
        .endswith("unconfirmed: not rerun (--no-rerun)")
    )


def tuned_unproved(why, out):
    space = enumerate_space({"unroll": (2, 8)}, [])
    evaluate, _ = fake_evaluate({space[0]: 2.0, space[1]: 1.9, space[2]: 1.0}, FakeClock())
    target = Target("examples/cartpole.py:rollout", {}, {"envs": 16})
    return tune(target, {"unroll": (2, 8)}, [], 100, out=out, prove=False, say=lambda line: None, evaluate=evaluate,
                unproved=why)  # fmt: skip


def test_a_tune_table_s_budget_is_finite():
    from xlafuse.experiment.tune.table import parse_tune_table

    with pytest.raises(XlafuseError) as caught:
        parse_tune_table(tomllib.loads(TABLE.replace("budget_s = 2", "budget_s = inf")), "cpu")
    assert str(caught.value).splitlines()[1:] == [
        "  tune.budget_s: need a finite number of seconds above 0, not inf"
    ]
