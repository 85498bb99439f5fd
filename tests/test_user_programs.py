"""Programs of the user's (issue 25): entries and imports through configs, the CLI and
`xlafuse.measure`; what their records carry; every bad input in one line."""

import json
import shutil

import jax.numpy as jnp
import pytest
from helpers import FAST_TIMING, REPO

import xlafuse
from xlafuse import models
from xlafuse.cli import main
from xlafuse.errors import XlafuseError
from xlafuse.experiment.config import load_config, parse_config
from xlafuse.experiment.measure_fn import program_sha256
from xlafuse.experiment.runner import run_experiment
from xlafuse.models import user
from xlafuse.report.markdown import write_report
from xlafuse.results.records import read_results

DATA = REPO / "tests" / "data" / "user"
PROGRAMS = DATA / "programs.py"
EXAMPLES = REPO / "examples"
MY_MODELS = EXAMPLES / "my_models.py"

# Each way to name a program: (what --workload / compare takes, --import or None, overrides).
FORMS = {
    "file": (f"{PROGRAMS}:forward", None, "n=32"),
    "module": ("programs:forward", None, "n=32"),
    "step": (f"{PROGRAMS}:step", None, "n=32"),
    "workload": (f"{PROGRAMS}:workload", None, "batch=2"),
    "registered": ("gated_mlp", str(MY_MODELS), None),
}


@pytest.fixture(autouse=True)
def own_imports(fresh_registry):
    """Each test imports and registers the user's code afresh (conftest's `fresh_registry`)."""


@pytest.fixture
def on_path(monkeypatch):
    """The test programs' folder importable as modules (`programs:forward`)."""
    monkeypatch.syspath_prepend(str(DATA))


def _cli_json(capsys, *argv) -> dict:
    assert main(list(argv)) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def _with(form: str, *argv) -> list[str]:
    _, imported, overrides = FORMS[form]
    extra = ["--import", imported] if imported else []
    return [*argv, *extra, *(["--overrides", overrides] if overrides else [])]


def _overrides(form: str) -> dict:
    text = FORMS[form][2]
    if not text:
        return {}
    key, value = text.split("=")
    return {key: int(value)}


@pytest.mark.parametrize("form", list(FORMS))
def test_every_entry_point_compiles_the_same_program(form, on_path, capsys, tmp_path):
    spec, imported, _ = FORMS[form]
    if imported:
        user.import_target(imported)
    compared = _cli_json(capsys, *_with(form, "compare", spec, "--json"))
    kernels = compared["rows"][0]["kernels"]
    assert (
        _cli_json(capsys, *_with(form, "inspect", "--workload", spec, "--json"))["kernels"]
        == kernels
    )
    diff = _cli_json(capsys, *_with(form, "diff", "--workload", spec, "--json"))
    assert diff["kernels"] == {
        "a": kernels,
        "b": compared["rows"][1]["kernels"],
        "delta": (compared["rows"][1]["kernels"] - kernels),
    }
    explained = _cli_json(capsys, *_with(form, "explain", "--workload", spec, "--json"))
    assert explained["lineage"]["counts"] == diff["lineage"]["a"]

    workload = models.build(spec, **_overrides(form))
    measured = xlafuse.measure(workload, timing=FAST_TIMING, calibrate=False)
    assert [r.fusion.kernels for r in measured.records] == [
        row["kernels"] for row in compared["rows"]
    ]
    entry = {"name": "mine", "entry": spec} if ":" in spec else {"name": spec}
    config = parse_config(
        {
            "imports": [imported] if imported else [],
            "experiment": {"name": "mine", "output": str(tmp_path / "run")},
            "workloads": [{**entry, "mode": workload.mode, "overrides": _overrides(form)}],
            "timing": FAST_TIMING,
            "measure": {"calibrate": False},
        }
    )
    ran = run_experiment(config, progress=False)
    assert [r.fusion.kernels for r in ran] == [row["kernels"] for row in compared["rows"]]
    assert all(r.ok for r in ran) and all(r.ok for r in measured.records)
    # xlafuse.measure's records are a run's: the same keys, the same schema
    assert {k for r in ran for k in r.to_dict()} == {
        k for r in measured.records for k in r.to_dict()
    }


def test_the_example_config_runs_resumes_and_refuses_a_changed_model(tmp_path, capsys):
    folder = tmp_path / "examples"
    shutil.copytree(EXAMPLES, folder)
    config = folder / "user.toml"
    text = config.read_text().replace("envs = 256, steps = 100", "envs = 8, steps = 5")
    text = text.replace("[timing]", "[measure]\ncalibrate = false\n\n[timing]")
    config.write_text(text.replace("min_time_s = 0.5", "min_time_s = 0"))
    out = tmp_path / "out"
    assert main(["run", str(config), "--out", str(out), "--no-progress"]) == 0
    records = read_results(out / "results.jsonl").records
    assert [(r.workload, r.size, r.mode, r.variant) for r in records] == [
        ("my_cartpole", "custom", "forward", "default"),
        ("my_cartpole", "custom", "forward", "no-fusion"),
        ("gated_mlp", "tiny", "forward", "default"),
        ("gated_mlp", "tiny", "forward", "no-fusion"),
        ("gated_mlp", "tiny", "train", "default"),
        ("gated_mlp", "tiny", "train", "no-fusion"),
    ]
    cartpole_sha = user.file_sha256(folder / "cartpole.py")
    models_sha = user.file_sha256(folder / "my_models.py")
    assert {(r.entry, r.source_sha256) for r in records} == {
        ("cartpole.py:rollout", cartpole_sha),
        (None, models_sha),
    }
    assert all(r.ok for r in records)
    assert all(r.numerics.within_tolerance for r in records if r.variant == "no-fusion")
    capsys.readouterr()
    assert main(["run", str(config), "--out", str(out), "--no-progress"]) == 0
    assert "all 6 cells already in" in capsys.readouterr().out

    with (folder / "cartpole.py").open("a") as f:
        f.write("\n# a change\n")
    assert main(["run", str(config), "--out", str(out), "--no-progress"]) == 2
    changed = user.file_sha256(folder / "cartpole.py")
    assert capsys.readouterr().err == (
        f"xlafuse run: error: {out / 'results.jsonl'} holds results measured under other "
        f"settings (workload 'my_cartpole': its source file changed (sha256 {cartpole_sha[:12]} "
        f"in the file, {changed[:12]} now)): resuming would mix them; pass --fresh to move "
        "that file aside and start over, or write to another --out\n"
    )


def test_measure_records_are_a_runs_and_report(tmp_path):
    def mul_add(x, a, b):
        return x * a + b

    x, a, b = jnp.arange(256.0), jnp.full((256,), 2.0), jnp.ones(256)
    measured = xlafuse.measure(mul_add, x, a, b, timing=FAST_TIMING, calibrate=False)
    default, unfused = measured.records
    assert (default.workload, default.size, default.mode, default.variant) == (
        "mul_add",
        "f32[256],~f32[256],f32[256]",  # its arguments' types: jnp.full's is weak
        "forward",
        "default",
    )
    assert default.source_sha256 == program_sha256(mul_add)  # its file and its code
    assert (default.fusion.kernels, unfused.fusion.kernels) == (1, 2)
    # a CPU cell leads with the pipelined figure; its speedup is the reference's shown time
    # over the variant's, over the same rounds, and lies in its own interval
    speedup = unfused.speedup
    assert speedup.lead == "pipelined"
    assert speedup.vs_reference == pytest.approx(
        speedup.reference_pipelined_s / unfused.timing.pipelined_s_per_call
    )
    assert speedup.ci[0] <= speedup.vs_reference <= speedup.ci[1]
    text = str(measured)
    assert text.splitlines()[0] == "mul_add/f32[256],~f32[256],f32[256]/forward on cpu (cpu)"
    assert "| variant | latency ms | pipelined ms |" in text
    assert "| no-fusion | 2 | 2 | 0 |" in text  # kernels, launches per call, real fusions
    report = measured.write(tmp_path)
    assert "mul_add" in report.read_text()
    assert [r.variant for r in read_results(tmp_path / "results.jsonl").records] == [
        "default",
        "no-fusion",
    ]
    write_report(tmp_path / "results.jsonl", out_dir=tmp_path / "again")
    other = xlafuse.measure(mul_add, x, a, b, timing={**FAST_TIMING, "min_iters": 2,
                            "max_iters": 2}, calibrate=False)  # fmt: skip
    with pytest.raises(XlafuseError, match="holds results measured under other settings"):
        other.write(tmp_path)


def test_measure_a_step_threads_its_state_and_keeps_a_folder(tmp_path):
    fn, args, donate = user.load_function(user.parse_entry(f"{PROGRAMS}:step"))(n=16)
    measured = xlafuse.measure(
        fn, *args, donate_argnums=donate, timing=FAST_TIMING, calibrate=False, out=tmp_path
    )
    assert [r.mode for r in measured.records] == ["train", "train"]
    assert all(r.ok for r in measured.records)
    assert measured.record("no-fusion").numerics.within_tolerance
    assert measured.results_path == tmp_path / "results.jsonl"
    assert (tmp_path / "report.md").is_file()
    assert measured.record("default").speedup.lead == "pipelined"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"variants": []}, "variants must be a non-empty list"),
        ({"variants": "default"}, "variants must be a non-empty list"),
        ({"variants": ["default", "default"]}, "variant 'default' is given twice"),
        ({"variants": ["default", "no-fusoin"]}, "did you mean 'no-fusion'"),
        ({"variants": ["default", "torch-eager"]}, "runs a zoo workload's PyTorch twin"),
        ({"timing": {"warmup": 0}}, "timing.warmup must be from 1 to 1000, not 0"),
        ({"timing": {"wramup": 1}}, "timing: unknown ['wramup']"),
        ({"donate_argnums": (1,)}, "a step donates its state, argument 0"),
    ],
)
def test_measure_refuses_bad_input_before_any_compile(kwargs, message):
    with pytest.raises(XlafuseError) as err:
        xlafuse.measure(lambda x, y: x + y, jnp.ones(3), jnp.ones(3), **kwargs)
    assert message in str(err.value)


def test_measure_refuses_a_function_jax_cannot_trace():
    def branchy(x):
        return x if x.sum() > 0 else -x

    with pytest.raises(XlafuseError, match=r"^'branchy': fn\(\*args\) cannot be traced by jax"):
        xlafuse.measure(branchy, jnp.ones(3))


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["compare", "nofile.py:f"], "entry 'nofile.py:f': no file '{cwd}/nofile.py' (not found)"),
        (
            ["compare", "no_such_module_xyz:f"],
            "entry 'no_such_module_xyz:f': no module 'no_such_module_xyz' (not importable from "
            "here; a file is given as path/x.py)",
        ),
        (
            ["inspect", "--workload", "{programs}:forwrd"],
            "entry '{programs}:forwrd': 'programs.py' has no function 'forwrd' (did you mean "
            "'forward'?)",
        ),
        (
            ["diff", "--workload", "{programs}:raises", "--overrides", "n=7"],
            "entry '{programs}:raises' raised RuntimeError: no data for n=7",
        ),
        (
            ["explain", "--workload", "{programs}:wrong_shape"],
            "entry '{programs}:wrong_shape' returned an array float32[3]; accepted: an "
            "xlafuse.models.Workload, (fn, args) with fn(*args) jit-able, or (fn, args, "
            "donate_argnums) for a step fn(state, ...) -> (new_state, ...)",
        ),
        (
            ["compare", "{programs}:not_jittable"],
            "entry '{programs}:not_jittable': fn(*args) cannot be traced by jax.jit: "
            "TracerBoolConversionError: Attempted boolean conversion of traced array with "
            "shape bool[].",
        ),
        (
            ["compare", "{programs}:bad_step"],
            "entry '{programs}:bad_step': a step's first output must be its new state, shaped "
            "like args[0] (the next call takes it in place of args[0])",
        ),
        (
            ["compare", "{programs}:forward", "--overrides", "m=3"],
            "entry '{programs}:forward': got an unexpected keyword argument 'm' (its "
            "parameters: n)",
        ),
        (
            ["coldstart", "--workload", "{programs}:forward", "--size", "small"],
            "--size goes with a zoo workload; '{programs}:forward' is a program of yours: give "
            "it keyword arguments with --overrides (its mode is what it returns)",
        ),
        (
            ["inspect", "--workload", "{programs}:forward", "--devices", "2"],
            "entry '{programs}:forward': a program of the user's runs on one device here "
            "(devices=2); shard it inside FUNCTION, or register it as a workload",
        ),
        (
            ["compare", "x.py:1f"],
            "entry 'x.py:1f' is not FILE.py:FUNCTION or MODULE:FUNCTION "
            "(e.g. examples/cartpole.py:rollout)",
        ),
        (["compare", "mlp", "--import", "nofile.py"], "--import: no file 'nofile.py' (not found)"),
        (
            ["compare", "mlp", "--import", "{data}/broken.py"],
            "--import: importing '{data}/broken.py' raised ZeroDivisionError: division by zero",
        ),
        (
            ["warmup", "{data}/clash.toml", "--cache", "{tmp}/cache"],
            "{data}/clash.toml: 4 problems in the config:",
        ),
    ],
)
def test_bad_user_programs_are_one_line_and_exit_2(argv, error, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    names = {"programs": PROGRAMS, "data": DATA, "tmp": tmp_path, "cwd": tmp_path.resolve()}
    assert main([a.format(**names) for a in argv]) == 2
    lines = capsys.readouterr().err.splitlines()
    # progress lines ("[1/3] building ...") may come first: then the one error line, no traceback
    assert lines[-1] == f"xlafuse {argv[0]}: error: {error.format(**names)}"
    assert all(line.startswith(f"xlafuse {argv[0]}: [") for line in lines[:-1])


def test_config_problems_of_entries_are_located():
    with pytest.raises(XlafuseError) as err:
        load_config(DATA / "clash.toml")
    assert str(err.value).splitlines() == [
        f"{DATA / 'clash.toml'}: 4 problems in the config:",
        "  imports[0]: no file 'missing.py' (not found)",
        "  workloads[0].name: 'mlp' is a zoo workload's name; give the entry another name "
        '(name = "my_forward")',
        "  workloads[1].size: not for an entry: FUNCTION's overrides decide a program of the "
        "user's (its size and dtype), on one device",
        "  workloads[2].entry: entry 'programs.py:forwad': 'programs.py' has no function "
        "'forwad' (did you mean 'forward'?)",
    ]


def test_a_program_that_fails_in_one_cell_is_an_error_record_and_the_run_goes_on(tmp_path):
    config = parse_config(
        {
            "experiment": {"name": "mixed", "output": str(tmp_path)},
            "workloads": [
                {"entry": f"{PROGRAMS}:raises", "name": "broken"},
                {"entry": f"{PROGRAMS}:wrong_shape", "name": "shapeless"},
                {"entry": f"{PROGRAMS}:forward", "name": "fwd"},
            ],
            "timing": FAST_TIMING,
            "measure": {"calibrate": False},
        }
    )
    records = run_experiment(config, progress=False)
    assert [(r.workload, r.status) for r in records] == [
        ("broken", "error"),
        ("broken", "error"),
        ("shapeless", "error"),
        ("shapeless", "error"),
        ("fwd", "ok"),
        ("fwd", "ok"),
    ]
    assert records[0].error == f"entry '{PROGRAMS}:raises' raised RuntimeError: no data for n=4"
    assert records[2].error.startswith(
        f"entry '{PROGRAMS}:wrong_shape' returned an array float32[3]; accepted: "
    )


def test_a_child_process_rebuilds_a_program_of_the_users(tmp_path, monkeypatch):
    from xlafuse.measurement import coldstart

    monkeypatch.chdir(tmp_path)
    user.import_target(MY_MODELS)
    spec = coldstart.workload_spec(models.build(f"{PROGRAMS}:forward", n=8))
    assert (spec["name"], spec["label"], spec["overrides"]) == (
        f"{PROGRAMS}:forward",
        "forward",
        {"n": 8},
    )
    assert str(MY_MODELS) in spec["imports"]
    result = coldstart.run_start(spec, variant="default", steady_calls=1)
    assert result.compile_s > 0


def test_the_docs_example_runs_as_written(monkeypatch, capsys):
    from helpers import small_calibration

    from xlafuse.experiment import measure_fn
    from xlafuse.experiment.fields import ceilings_part
    from xlafuse.measurement.timing import TimingSettings

    text = (REPO / "docs" / "your-model.md").read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    assert len([line for line in code.splitlines() if line.strip()]) == 15
    # the example as a user runs it, with the suite's fast timing and small calibration
    monkeypatch.setattr(measure_fn, "_timing", lambda _: TimingSettings(**FAST_TIMING))
    monkeypatch.setattr(
        measure_fn, "_process_ceilings", lambda b: ceilings_part(small_calibration(b))
    )
    exec(compile(code, "docs/your-model.md", "exec"), {"__name__": "my_block_example"})
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "my_block/tiny/train on cpu (cpu)"
    assert "| no-fusion |" in out and "pipelined, paired" in out


@pytest.mark.gpu
def test_measure_of_the_rollout_on_a_gpu_attributes_every_kernel():
    rollout = user.load_function(user.parse_entry(f"{EXAMPLES / 'cartpole.py'}:rollout"))
    fn, args = rollout(envs=256, steps=50)
    measured = xlafuse.measure(fn, *args, timing=FAST_TIMING, calibrate=False)
    default, unfused = measured.records
    for record in measured.records:
        times = record.trace.kernel_times
        assert record.ok and record.backend == "gpu"
        assert record.device.time_s > 0 and times["time_s"] > 0
        assert times["unattributed_share"] == 0, times["unattributed_top"]
        assert times["attributed_s"] == pytest.approx(times["time_s"])
    assert default.fusion.kernels < unfused.fusion.kernels
    assert unfused.trace.kernel_diff and "error" not in unfused.trace.kernel_diff


def test_workloads_lists_what_an_import_registers(capsys):
    assert main(["workloads", "gated_mlp", "--import", str(MY_MODELS)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("gated_mlp  modes: forward, train")
    assert "  d_hidden       int    64     2048   16384" in out


def test_run_and_warmup_take_imports_on_the_command_line(tmp_path, capsys):
    config = tmp_path / "mine.toml"
    config.write_text(
        '[experiment]\nvariants = ["default"]\n\n[[workloads]]\nname = "gated_mlp"\n\n'
        "[measure]\ncalibrate = false\n\n[timing]\n"
        + "\n".join(f"{k} = {v}" for k, v in FAST_TIMING.items())
    )
    out = tmp_path / "out"
    assert main(["run", str(config), "--out", str(out), "--import", str(MY_MODELS)]) == 0
    (record,) = read_results(out / "results.jsonl").records
    assert (record.workload, record.entry) == ("gated_mlp", None)
    assert record.source_sha256 == user.file_sha256(MY_MODELS)
    capsys.readouterr()
    assert main(["warmup", str(config), "--cache", str(tmp_path / "cache"), "--import",
                 str(MY_MODELS)]) == 0  # fmt: skip
    assert "compiled  gated_mlp/tiny/forward @ default" in capsys.readouterr().out


def test_one_label_names_one_program():
    with pytest.raises(XlafuseError) as err:
        parse_config(
            {
                "workloads": [
                    {"entry": f"{PROGRAMS}:forward", "name": "mine"},
                    {"entry": f"{PROGRAMS}:step", "name": "mine", "mode": "train"},
                    {"entry": f"{PROGRAMS}:forward", "name": "mine", "overrides": {"n": 8}},
                    {"entry": f"{PROGRAMS}:forward", "name": "a/b"},
                ]
            }
        )
    assert str(err.value).splitlines()[1:] == [
        f"  workloads[1].name: 'mine' already names entry '{PROGRAMS}:forward' (workloads[0])",
        "  workloads[3].name: 'a/b' is no label (: or /); give the entry another name "
        '(name = "my_forward")',
    ]
