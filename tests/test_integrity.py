"""Runs that cannot be fooled: result identity, torn files, locks, early output checks, stdout."""

import dataclasses
import io
import json
import os
import subprocess

import jax
import pytest
from helpers import FAST_TIMING, config_file, stop_cold_start_after_one_step

from xlafuse.cli import main
from xlafuse.errors import XlafuseError
from xlafuse.experiment import runner
from xlafuse.experiment.config import VariantConfig, parse_config
from xlafuse.results import records
from xlafuse.results.records import append_result, finished_cells, load_results


def _config(out, workloads=({"name": "mul_add_relu"},), variants=("default",), **timing):
    return parse_config(
        {
            "experiment": {"name": "t", "output": str(out), "variants": list(variants)},
            "workloads": list(workloads),
            "timing": {**FAST_TIMING, **timing},
            "measure": {"calibrate": False},
        },
        backend="cpu",
    )


@pytest.fixture
def no_calibration(monkeypatch):
    """Fails the test if the runner calibrates (that is: starts measuring)."""

    def calibrate(*args, **kwargs):
        raise AssertionError("calibrated before the output folder was checked")

    monkeypatch.setattr(runner, "calibrate", calibrate)


def test_resume_under_other_timing_settings_is_refused(tmp_path):
    runner.run_experiment(_config(tmp_path), progress=False)
    with pytest.raises(XlafuseError) as info:
        runner.run_experiment(_config(tmp_path, repeats=5), progress=False)
    message = str(info.value)
    assert "\n" not in message
    assert "holds results measured under other settings (timing.repeats: 1 in the file, 5 now)" in (
        message
    )
    assert "pass --fresh to move that file aside and start over, or write to another --out" in (
        message
    )
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 1
    # --fresh is the way out.
    (record,) = runner.run_experiment(_config(tmp_path, repeats=5), fresh=True, progress=False)
    assert record.settings["timing"]["repeats"] == 5


def test_records_carry_every_setting_that_changes_a_measurement(tmp_path):
    inline = {"name": "nf", "xla_disable_hlo_passes": "fusion"}
    records = runner.run_experiment(_config(tmp_path, variants=("default", inline)), progress=False)
    settings = records[1].settings
    assert set(settings) == {
        "experiment", "reference", "backend", "device_kind", "timing", "measure", "XLA_FLAGS",
        "jax", "jaxlib", "xlafuse", "variant",
    }  # fmt: skip
    assert settings["variant"] == {"disable_passes": ["fusion"], "options": {}, "process_flags": []}
    assert settings["measure"] == {"profile": False, "calibrate": False, "cold_start": False}
    assert records[0].settings["variant"]["disable_passes"] == []


def test_resume_with_a_variant_of_the_same_name_but_other_options_is_refused(tmp_path):
    first = {"name": "x", "xla_disable_hlo_passes": "fusion"}
    runner.run_experiment(_config(tmp_path, variants=("default", first)), progress=False)
    changed = {"name": "x", "xla_cpu_enable_fast_math": True}
    with pytest.raises(XlafuseError, match=r"variant 'x': .*\"fusion\".* in the file, .*now"):
        runner.run_experiment(_config(tmp_path, variants=("default", changed)), progress=False)


def test_resume_into_another_experiment_is_refused_by_the_cli(tmp_path, capsys):
    runner.run_experiment(_config(tmp_path), progress=False)
    path = tmp_path / "other.toml"
    path.write_text(
        '[experiment]\nname = "other"\nvariants = ["default"]\n[[workloads]]\nname = "mul_add_relu"\n'
        "[timing]\nwarmup = 1\nmin_time_s = 0\nmin_iters = 2\nmax_iters = 2\nrepeats = 1\n"
        "[measure]\ncalibrate = false\n"
    )
    assert main(["run", str(path), "--out", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert 'experiment: "t" in the file, "other" now' in err


def test_records_without_settings_are_not_reused(tmp_path):
    old = {"workload": "mul_add_relu", "size": "tiny", "mode": "forward", "dtype": "float32"}
    old |= {"variant": "default", "backend": "cpu", "device_kind": "cpu", "status": "ok"}
    old["cell_id"] = "mul_add_relu/tiny/forward/auto/{}/default/cpu"
    append_result(tmp_path / "results.jsonl", old)
    with pytest.raises(XlafuseError, match=r"records no settings \(older xlafuse\)"):
        runner.run_experiment(_config(tmp_path), progress=False)


def test_a_torn_last_line_is_moved_aside_and_no_record_is_lost(tmp_path):
    runner.run_experiment(_config(tmp_path), progress=False)
    path = tmp_path / "results.jsonl"
    torn = b'{"workload": "gelu", "size": "ti'
    with open(path, "ab") as f:
        f.write(torn)
    workloads = ({"name": "mul_add_relu"}, {"name": "gelu"})
    records = runner.run_experiment(_config(tmp_path, workloads), progress=False)
    assert [r.workload for r in records] == ["mul_add_relu", "gelu"]
    lines = path.read_text().splitlines()
    assert [json.loads(line)["workload"] for line in lines] == ["mul_add_relu", "gelu"]
    (aside,) = tmp_path.glob("results.torn-*.txt")
    assert aside.read_bytes() == torn


def test_append_starts_a_new_line_after_torn_bytes(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"workload": "a"')
    append_result(path, {"workload": "b"})
    assert path.read_text().splitlines() == ['{"workload": "a"', '{"workload": "b"}']


def test_a_second_run_into_a_held_folder_names_the_holder(tmp_path, no_calibration):
    with records.lock_folder(tmp_path), pytest.raises(XlafuseError) as info:
        runner.run_experiment(_config(tmp_path), progress=False)
    assert str(info.value) == (
        f"output folder {str(tmp_path)!r} is in use by another xlafuse run (PID {os.getpid()}); "
        "wait for it to end or pass another --out"
    )
    assert not (tmp_path / "results.jsonl").exists()
    # Released on exit: the folder can be used again.
    with records.lock_folder(tmp_path) as lock:
        assert lock.read_text() == f"{os.getpid()}\n"


@pytest.mark.parametrize(
    "out, message",
    [
        ("", "the output folder is an empty name; give a folder, e.g. --out results/x"),
        ("afile", "output folder '{tmp}/afile' is a file, not a folder"),
        ("afile/sub", "cannot create output folder '{tmp}/afile/sub': '{tmp}/afile' is a file"),
    ],
)
def test_output_folder_is_checked_before_anything_runs(tmp_path, no_calibration, out, message):
    (tmp_path / "afile").write_text("x")
    target = str(tmp_path / out) if out else ""
    config = dataclasses.replace(_config(tmp_path), measure=runner.ExperimentConfig.measure)
    with pytest.raises(XlafuseError) as info:
        runner.run_experiment(config, out=target, progress=False)
    assert str(info.value) == message.format(tmp=tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_output_folder_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    monkeypatch.setattr(runner, "calibrate", lambda *a: pytest.fail("calibrated"))
    config = config_file(tmp_path, '[[workloads]]\nname = "gelu"\n')
    assert main(["run", str(config), "--out", str(folder)]) == 2
    assert capsys.readouterr().err == (
        f"xlafuse run: error: cannot write to output folder '{folder}': Permission denied\n"
    )


def test_an_uncreatable_output_folder_is_one_line_exit_2(tmp_path, capsys):
    config = config_file(tmp_path, '[[workloads]]\nname = "gelu"\n')
    assert main(["run", str(config), "--out", "/proc/xlafuse-cannot-be-here"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "xlafuse run: error: cannot write to output folder '/proc/xlafuse-cannot-be-here': "
    )
    assert len(err.splitlines()) == 1


class _ClosedStdout(io.StringIO):
    """A stdout whose reader went away after the first line (`xlafuse run ... | head -1`)."""

    def write(self, text):
        if self.getvalue():
            raise BrokenPipeError(32, "Broken pipe")
        return super().write(text)


@pytest.mark.parametrize("progress", [False, True], ids=["lines", "progress-bar"])
def test_a_closed_stdout_stops_the_printing_not_the_sweep(tmp_path, monkeypatch, progress):
    stdout = _ClosedStdout()
    monkeypatch.setattr("sys.stdout", stdout)
    workloads = ({"name": "mul_add_relu"}, {"name": "gelu"})
    records = runner.run_experiment(
        _config(tmp_path, workloads, variants=("default", "no-fusion")), progress=progress
    )
    assert [r.status for r in records] == ["ok"] * 4
    assert len(load_results(tmp_path / "results.jsonl")) == 4
    assert stdout.getvalue().startswith("t: 4 cells to run on cpu")
    assert "mul_add_relu" not in stdout.getvalue()  # nothing printed once the reader left
    assert (tmp_path / "report.md").exists()


def test_variant_config_error_cells_still_resume(tmp_path):
    # A variant XLA rejects at compile (built past validation) is an error cell, run again later.
    config = _config(tmp_path)
    bad = VariantConfig("bad", None, {"xla_no_such_option": True})
    config = dataclasses.replace(config, variants=(*config.variants, bad))
    records = runner.run_experiment(config, progress=False)
    assert [r.status for r in records] == ["ok", "error"]
    assert set(finished_cells(tmp_path / "results.jsonl")) == {
        "mul_add_relu/tiny/forward/auto/{}/default/cpu"
    }


@pytest.fixture(scope="module")
def results_folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    runner.run_experiment(_config(out, variants=("default", "no-fusion")), progress=False)
    return out


def test_report_on_a_folder_reads_its_results(results_folder, tmp_path, capsys):
    assert main(["report", str(results_folder), "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"{tmp_path / 'report.md'}\n"
    assert "(2 cells)" in (tmp_path / "report.md").read_text()


def test_report_says_how_many_lines_it_skipped_and_where(results_folder, tmp_path, capsys):
    path = tmp_path / "results.jsonl"
    lines = (results_folder / "results.jsonl").read_text().splitlines()
    path.write_text(f'{lines[0]}\n[1, 2, 3]\n{lines[1]}\n{{"workload": "x", "si\n')
    assert main(["report", str(path)]) == 0
    err = capsys.readouterr().err
    assert err.startswith(
        f"{path}: skipped 2 lines that are not a record (lines 2, 4: not a cell record "
        "(a record is a JSON object, not list))"
    )
    text = (tmp_path / "report.md").read_text()
    assert "(2 cells)" in text and "skipped 2 lines" in text


@pytest.mark.parametrize(
    "content, message",
    [
        (
            b'[experiment]\nname = "x"\n',
            "is not a results file (JSON lines from `xlafuse run`): none of its 2 lines is a "
            "record (line 1: not valid JSON (Expecting value: line 1 column 2 (char 1)))",
        ),
        (
            b"[1, 2, 3]\n",
            "is not a results file (JSON lines from `xlafuse run`): none of its 1 lines is a "
            "record (line 1: not a cell record (a record is a JSON object, not list))",
        ),
        (b"\x89PNG\r\n\x1a\n\xf1", "is not a results file: not UTF-8 text (byte 0x89 at offset 0)"),
    ],
    ids=["toml", "json-array", "binary"],
)
def test_report_on_a_file_that_is_not_results_is_one_line(tmp_path, capsys, content, message):
    path = tmp_path / "input"
    path.write_bytes(content)
    assert main(["report", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"xlafuse report: error: {path} {message}\n"
    assert captured.out == ""
    assert not (tmp_path / "report.md").exists()


def test_report_on_a_folder_without_results(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"xlafuse report: error: folder {str(tmp_path)!r} has no results.jsonl\n"
    )


def _has_gpu():
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


@pytest.mark.skipif(_has_gpu(), reason="needs a machine without a GPU")
def test_passes_of_a_backend_that_is_not_here_is_one_line(capsys):
    assert main(["passes", "--backend", "gpu"]) == 2
    assert capsys.readouterr().err == (
        "xlafuse passes: error: backend 'gpu' is not present here (JAX's backend is 'cpu'); "
        "its passes can only be listed where it runs\n"
    )


def test_pass_cache_is_keyed_by_backend_platform_version_and_jaxlib(tmp_path, monkeypatch):
    import hashlib

    import jaxlib

    from xlafuse.compiler import passes

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(passes, "_probe_passes", lambda backend: frozenset({"probed"}))
    passes.known_passes.cache_clear()
    try:
        assert passes.known_passes(backend="cpu") == {"probed"}
        version = jax.devices("cpu")[0].client.platform_version
        digest = hashlib.sha256(version.encode()).hexdigest()[:10]
        (path,) = (tmp_path / "xlafuse").iterdir()
        assert path.name == f"passes-cpu-{digest}-jaxlib{jaxlib.__version__}.json"
        assert json.loads(path.read_text()) == {
            "backend": "cpu",
            "platform_version": version,
            "jaxlib": jaxlib.__version__,
            "passes": ["probed"],
        }
        # A file whose key does not match (written by another stack) is not trusted.
        path.write_text(json.dumps({"backend": "gpu", "passes": ["stale"]}))
        passes.known_passes.cache_clear()
        assert passes.known_passes(backend="cpu") == {"probed"}
    finally:
        passes.known_passes.cache_clear()


def test_progress_steps_draw_on_a_terminal():
    # Off a terminal: plain lines (tests/test_cli_first_hour.py).
    from xlafuse.cli._progress import steps

    terminal = io.StringIO()
    with steps("compare", total=2, stream=terminal, force=True) as step:
        step("building gpt2/tiny/train")
        step("compiling [ops=16] @ no-fusion")
    drawn = terminal.getvalue()
    assert "[1/2] building gpt2/tiny/train" in drawn
    assert "[2/2] compiling [ops=16] @ no-fusion" in drawn
    assert "xlafuse compare:" not in drawn


@pytest.fixture
def terminal_stderr(monkeypatch):
    """Makes the commands believe stderr is a terminal; returns what they drew there."""
    from xlafuse.cli import _progress

    drawn = io.StringIO()
    real = _progress.steps
    monkeypatch.setattr(
        _progress,
        "steps",
        lambda command, total=None: real(command, total=total, stream=drawn, force=True),
    )
    return drawn


@pytest.mark.parametrize(
    "argv, shown",
    [
        (
            ["compare", "mul_add_relu", "--json"],
            [
                "[1/3] building mul_add_relu/tiny/forward",
                "[2/3] compiling mul_add_relu/tiny/forward under default",
                "[3/3] compiling mul_add_relu/tiny/forward under no-fusion",
            ],
        ),
        (
            ["inspect", "--workload", "mul_add_relu", "--json"],
            ["[1/1] compiling mul_add_relu/tiny/forward @ default"],
        ),
        (
            ["diff", "--workload", "mul_add_relu", "--json"],
            [
                "[1/2] compiling mul_add_relu/tiny/forward @ default",
                "[2/2] compiling mul_add_relu/tiny/forward @ no-fusion",
            ],
        ),
    ],
    ids=["compare", "inspect", "diff"],
)
def test_compiling_commands_show_their_step_on_a_terminal(terminal_stderr, capsys, argv, shown):
    assert main(argv) == 0
    for line in shown:
        assert line in terminal_stderr.getvalue()
    json.loads(capsys.readouterr().out)  # stdout stays clean JSON


def test_coldstart_shows_each_child_on_a_terminal(terminal_stderr, monkeypatch):
    stop_cold_start_after_one_step(monkeypatch)
    assert main(["coldstart", "--workload", "mlp"]) == 2
    assert (
        "[1/3] mlp/tiny/forward @ default: cold start: new process, empty cache"
        in terminal_stderr.getvalue()
    )


def test_readme_quickstart_claim_is_machine_checked(tmp_path, monkeypatch, capsys):
    import importlib.util
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location(
        "bench_quickstart", root / "benchmarks" / "bench_quickstart.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    claim = bench.readme_claim_s()
    assert 0 < claim <= 60  # the quickstart's budget on 2 cores
    # The benchmark times the README's command, afresh, in a new process.
    assert "xlafuse run configs/quickstart.toml" in (root / "README.md").read_text()
    started = []
    monkeypatch.setattr(bench.subprocess, "run", lambda command, **kw: started.append(command))
    bench.time_quickstart(tmp_path)
    assert [c[1:] for c in started] == [
        ["-m", "xlafuse", "run", str(root / "configs" / "quickstart.toml"), "--out", str(tmp_path),
         "--fresh", "--no-progress"]
    ]  # fmt: skip
    # It holds the claim within a quarter either way and exits 1 past that (a fake wall time).
    monkeypatch.setattr(sys, "argv", ["bench_quickstart.py", "--keep", str(tmp_path)])
    for wall_s, exit_code in [(claim, 0), (claim * 1.2, 0), (claim * 0.8, 0), (claim * 1.3, 1)]:
        monkeypatch.setattr(bench, "time_quickstart", lambda out, s=wall_s: s)
        assert bench.main() == exit_code, wall_s
    assert "README claim is OFF: update README.md" in capsys.readouterr().out
    (tmp_path / "README.md").write_text("Run the quickstart.\n")
    with pytest.raises(SystemExit, match=r"README\.md states no quickstart time"):
        bench.readme_claim_s(tmp_path / "README.md")


def test_git_commit_names_a_dirty_tree_and_honours_the_override(tmp_path, monkeypatch):
    from xlafuse.experiment.environment import COMMIT_ENV, git_commit

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    monkeypatch.delenv(COMMIT_ENV, raising=False)
    assert git_commit(folder=tmp_path) is None  # not a checkout
    git("init", "-q")
    (tmp_path / "a.txt").write_text("one\n")
    git("add", "a.txt")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = git_commit(folder=tmp_path)
    assert len(head) == 40 and not head.endswith("-dirty")
    (tmp_path / "untracked.txt").write_text("not part of the tree\n")
    assert git_commit(folder=tmp_path) == head
    (tmp_path / "a.txt").write_text("two\n")
    assert git_commit(folder=tmp_path) == f"{head}-dirty"
    monkeypatch.setenv(COMMIT_ENV, "abc1234")
    assert git_commit(folder=tmp_path) == "abc1234"


def test_records_name_the_host_cpu_that_compiled_and_dispatched(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from xlafuse.experiment import environment as run_environment
    from xlafuse.report.markdown import _environment

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC   9654 96-Core\n\n"
        "processor\t: 1\nmodel name\t: AMD EPYC 9654 96-Core\n"
    )
    assert run_environment.host_cpu(cpuinfo=cpuinfo) == "AMD EPYC 9654 96-Core"
    monkeypatch.setattr(run_environment.platform, "processor", lambda: "x86_64")
    # no cpuinfo: what platform says
    assert run_environment.host_cpu(cpuinfo=tmp_path / "absent") == "x86_64"
    monkeypatch.setattr(run_environment.platform, "processor", lambda: "")
    assert run_environment.host_cpu(cpuinfo=tmp_path / "absent") is None

    env = run_environment.environment(config_hash="abc")
    assert env["host_cpus"] == len(os.sched_getaffinity(0))
    lines = _environment([SimpleNamespace(env={**env, "host_cpu": "AMD EPYC 9654 96-Core"})])
    assert "- host_cpu: `AMD EPYC 9654 96-Core`" in lines
    assert f"- host_cpus: `{env['host_cpus']}`" in lines
    # Records of older runs have neither key: their reports show no such line.
    assert not any("host_cpu" in line for line in _environment([SimpleNamespace(env={"jax": "1"})]))
