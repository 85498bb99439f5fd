"""`xlafuse tune`'s files (issue 42): tune.jsonl written as each trial ends and resumed, the
folder checked and locked before anything compiles, best.toml that reruns what was tuned and
holds any value as TOML. In-process, with fake measurements (no compile) unless said; the
interrupts of a real `xlafuse tune` are tests/test_crash_tune.py's."""

import errno
import json
import os
import tomllib
from pathlib import Path

import pytest

from xlafuse.cli import main
from xlafuse.errors import XlafuseError
from xlafuse.experiment.tune.best import best_toml, toml_value
from xlafuse.experiment.tune.evaluate import Target
from xlafuse.experiment.tune.rerun import Rerun
from xlafuse.experiment.tune.search import OK, Score
from xlafuse.experiment.tune.space import Candidate, families_for
from xlafuse.experiment.tune.tuner import TuneResult, tune
from xlafuse.results import records

ROLLOUT = Target("examples/cartpole.py:rollout", {}, {"envs": 16})
KNOBS = {"unroll": (1, 2, 4, 8)}
FAMILIES = families_for("gpu", names=["command-buffers"])  # data only: nothing compiles here
MS = {1: 6.0, 2: 5.0, 4: 4.0, 8: 4.5}
CHOICE_MS = {"on": 0.0, "off": 0.3, "min-graph-1": -0.2}


def ms(candidate: Candidate) -> float:
    knobs, choices = dict(candidate.knobs), dict(candidate.choices)
    return (MS[knobs.get("unroll", 1)] + CHOICE_MS[choices["command-buffers"]]) * 1e-3


class Measure:
    """A fake measurement that records its calls, and raises KeyboardInterrupt at call `stop`."""

    def __init__(self, stop: int | None = None):
        self.calls, self.stop = [], stop

    def __call__(self, candidate, effort):
        if len(self.calls) == self.stop:
            raise KeyboardInterrupt
        self.calls.append((candidate.name, effort))
        return Score(OK, ms(candidate), "", 0.5)


def prover(verdict="faster"):
    def prove(spec):
        prove.calls += 1
        return Rerun("pipelined", 1.5, (1.4, 1.6), verdict, 6e-3, 4e-3, (1.0, 1.1))

    prove.calls = 0
    return prove


def tuned(out, measure, prove=None, *, target=ROLLOUT, knobs=KNOBS, search="descent"):
    prove = prove or prover()
    return tune(target, knobs, FAMILIES, 100, out=out, prove=True, say=lambda line: None, evaluate=measure, prover=prove,
                search=search)  # fmt: skip


def lines(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "tune.jsonl").read_text().splitlines()]


def trial_keys(folder: Path) -> list[tuple[str, int]]:
    return [(r["candidate"]["name"], r["effort"]) for r in lines(folder) if r["kind"] == "trial"]


@pytest.mark.parametrize("search", ["descent", "halving", "grid"])
def test_each_trial_is_written_as_it_ends_and_a_rerun_resumes_the_search(tmp_path, search):
    once = Measure()
    whole = tuned(tmp_path / "once", once, search=search)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        tuned(out, Measure(stop=5), search=search)
    head, *kept = lines(out)
    assert head["kind"] == "tune" and head["target"].endswith("examples/cartpole.py:rollout")
    assert (head["overrides"], head["knobs"], head["space"], head["search"]) == (
        {"envs": 16}, {"unroll": [1, 2, 4, 8]}, ["command-buffers"], search
    )  # fmt: skip
    assert [(r["candidate"]["name"], r["effort"]) for r in kept] == once.calls[:5]
    again = Measure()
    resumed = tuned(out, again, search=search)
    assert again.calls == once.calls[5:]  # no finished trial measured again
    assert [(t.candidate, t.effort) for t in resumed.search.trials] == [
        (t.candidate, t.effort) for t in whole.search.trials
    ]
    assert resumed.best == whole.best and trial_keys(out) == trial_keys(tmp_path / "once")


def test_a_recorded_proof_is_not_run_again_nor_the_conclusion_written_twice(tmp_path):
    def interrupted(spec):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # inside the proof: every trial kept
        tuned(tmp_path, Measure(), interrupted)
    measured = trial_keys(tmp_path)
    proof, again = prover(), Measure()
    first = tuned(tmp_path, again, proof)
    assert (again.calls, proof.calls, first.confirmed) == ([], 1, True)
    assert [r["kind"] for r in lines(tmp_path)][-2:] == ["proof", "conclusion"]
    proof = prover()
    second = tuned(tmp_path, Measure(), proof)
    assert proof.calls == 0 and second.proof == first.proof
    kinds = [r["kind"] for r in lines(tmp_path)]
    assert (kinds.count("proof"), kinds.count("conclusion")) == (1, 1)
    assert trial_keys(tmp_path) == measured


def test_an_interrupt_while_writing_keeps_the_conclusion_and_the_rerun_writes_best_toml(
    tmp_path, monkeypatch
):
    from xlafuse.experiment.tune import tuner

    def interrupted(path, write, noun):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(tuner, "write_atomically", interrupted)
        with pytest.raises(KeyboardInterrupt):
            tuned(tmp_path, Measure())
    assert lines(tmp_path)[-1]["kind"] == "conclusion"
    assert not (tmp_path / "best.toml").exists()
    again = Measure()
    tuned(tmp_path, again)
    assert again.calls == [] and (tmp_path / "best.toml").exists()
    assert [r["kind"] for r in lines(tmp_path)].count("conclusion") == 1


def test_a_torn_last_line_and_a_bad_line_are_set_aside_and_named(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        tuned(tmp_path, Measure(stop=3))
    path = tmp_path / "tune.jsonl"
    text = path.read_text().splitlines()
    bad = json.loads(text[2])
    bad["effort"] = "lots"
    path.write_text("\n".join([*text[:2], json.dumps(bad), *text[3:]]) + '\n{"kind": "tri')
    said = []
    tune(
        ROLLOUT,
        KNOBS,
        FAMILIES,
        100,
        out=tmp_path,
        prove=False,
        say=said.append,
        evaluate=Measure(),
    )
    torn = next(tmp_path.glob("tune.torn-*.txt"))
    assert torn.read_text() == '{"kind": "tri'
    assert said[:3] == [
        f"tune: a torn last line of {path} was moved aside to {torn}",
        f"tune: {path} line 3: a trial's effort or status of the wrong type: skipped",
        f"tune: resuming {path}: 2 trials measured before, not measured again",
    ]


def test_a_folder_of_another_tuning_is_refused_naming_what_differs(tmp_path):
    tuned(tmp_path, Measure())
    other = Target("examples/cartpole.py:rollout", {}, {"envs": 32})
    with pytest.raises(XlafuseError) as caught:
        tuned(tmp_path, Measure(), target=other)
    assert str(caught.value) == (
        f'{tmp_path / "tune.jsonl"} holds another tuning (overrides: {{"envs": 16}} in the '
        'file, {"envs": 32} now): resuming would mix them; pass another --out'
    )
    with pytest.raises(XlafuseError, match=r'\(knobs: \{"unroll": \[1, 2, 4, 8\]\} in the file, '):
        tuned(tmp_path, Measure(), knobs={"unroll": (1, 2)})


def write_tuning(folder: Path) -> None:
    tuned(folder, Measure())


@pytest.mark.parametrize(
    ("prepare", "error"),
    [
        (
            lambda d: (d / "results.jsonl").write_text('{"foo": 1}\n'),
            "output folder '{d}' holds the results of an `xlafuse run` (results.jsonl): a tune "
            "writes into a folder of its own; pass another --out",
        ),
        (
            lambda d: (d / "tune.jsonl").write_text('{"foo": 1}\n'),
            "{d}/tune.jsonl is not a tune's file: pass another --out",
        ),
        (
            lambda d: (d / "tune.jsonl").write_text("not json\n"),
            "{d}/tune.jsonl is not a tune's file (line 1 is no tune header): pass another --out",
        ),
        (  # as published before issue 42 (experiments/h200/tune/): trials, no header
            lambda d: (d / "tune.jsonl").write_text('{"candidate": {"name": "default"}}\n'),
            "{d}/tune.jsonl is not a tune's file (an older xlafuse tune's: no header line): "
            "pass another --out",
        ),
        (
            lambda d: (d / "best.toml").write_text("[experiment]\n"),
            "output folder '{d}' holds a best.toml that no tune.jsonl there accounts for: not a "
            "tune's folder; pass another --out",
        ),
        (
            lambda d: (
                write_tuning(d),
                (d / "tune.jsonl").write_text(
                    (d / "tune.jsonl").read_text().replace('"format": 1', '"format": 9', 1)
                ),
            ),
            "{d}/tune.jsonl was written by a newer xlafuse (format 9; this one reads 1): pass "
            "another --out",
        ),
    ],
)
def test_a_folder_of_another_kind_is_refused_before_anything_compiles(
    tmp_path, capsys, prepare, error
):
    prepare(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    code, out, err = run(capsys, "tune", "cartpole", "--knob", "unroll=1,2", "--out", tmp_path)
    assert (code, out) == (2, "")  # nothing searched
    assert err == f"xlafuse tune: error: {error.format(d=tmp_path)}\n"
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert {k: v for k, v in after.items() if k in before} == before  # nothing touched


def run(capsys, *argv):
    code = main(list(map(str, argv)))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_second_tune_into_a_folder_in_use_is_refused(tmp_path, capsys):
    with records.lock_folder(tmp_path):  # as a tune running into it holds it
        code, out, err = run(capsys, "tune", "cartpole", "--knob", "unroll=1,2", "--out", tmp_path)
    assert (code, out) == (2, "")
    assert err == (
        f"xlafuse tune: error: output folder '{tmp_path}' is in use by another xlafuse run "
        f"(PID {os.getpid()}); wait for it to end or pass another --out\n"
    )


@pytest.mark.parametrize(
    ("out", "error"),
    [
        ("afile.txt", "output folder '{d}/afile.txt' is a file, not a folder"),
        (
            "afile.txt/sub",
            "cannot create output folder '{d}/afile.txt/sub': '{d}/afile.txt' is a file",
        ),
    ],
)
def test_out_is_checked_before_the_search(tmp_path, capsys, out, error):
    (tmp_path / "afile.txt").write_text("mine\n")
    code, text, err = run(capsys, "tune", "cartpole", "--knob", "unroll=1,2", "--out",
                          tmp_path / out)  # fmt: skip
    assert (code, text) == (2, "")
    assert err == f"xlafuse tune: error: {error.format(d=tmp_path)}\n"
    assert (tmp_path / "afile.txt").read_text() == "mine\n"


def test_a_full_disk_names_the_file_and_keeps_what_was_written(tmp_path, monkeypatch):
    appended = records.append_result

    def append(path, record):
        if Path(path).exists() and Path(path).read_text().count("\n") >= 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        appended(path, record)

    monkeypatch.setattr(records, "append_result", append)
    with pytest.raises(XlafuseError) as caught:
        tuned(tmp_path, Measure())
    assert str(caught.value) == (
        f"cannot write to '{tmp_path / 'tune.jsonl'}': No space left on device (the lines "
        "written before are kept)"
    )
    assert [r["kind"] for r in lines(tmp_path)] == ["tune", "trial", "trial"]


def test_best_toml_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    tuned(tmp_path, Measure())
    best = tmp_path / "best.toml"
    before = best.read_text()

    def full(src, dst):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(XlafuseError) as caught:
        tuned(tmp_path, Measure())  # the same tuning: it only writes best.toml again
    assert str(caught.value) == (
        f"cannot write config '{best}': No space left on device (any earlier best.toml is kept)"
    )
    assert best.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".xlafuse.lock", "best.toml",
                                                           "tune.jsonl"]  # fmt: skip


# best.toml


def result_of(target, knobs=(), choices=(), proof=None):
    space = (Candidate(), Candidate(tuple(knobs), tuple(choices)))
    search = type("S", (), {"trials": (), "budget_spent": False, "seconds": 0.0})()
    return TuneResult(target, space, search, space[1], proof)


EVERY_KIND = {
    "flag": True,
    "off": False,
    "count": 8,
    "negative": -3,
    "rate": 0.001,
    "big": 1e300,
    "forever": float("inf"),
    "text": "dots",
    "emoji": "\U0001f600 ok",
    "accents": "café",
    "quotes": 'say "hi"',
    "backslash": "C:\\path\\x",
    "lines": "a\nb\tc\r",
    "control": "\x01\x1f\x7f",
    "dotted.key": "a key TOML must quote",
}


def test_every_kind_of_knob_value_is_valid_toml_and_reads_back_the_same(tmp_path):
    result = result_of(ROLLOUT, tuple(EVERY_KIND.items()))
    config = tomllib.loads(best_toml(result, folder=tmp_path))
    assert config["workloads"][1]["overrides"] == {"envs": 16, **EVERY_KIND}
    for value in EVERY_KIND.values():
        assert tomllib.loads(f"v = {toml_value(value)}")["v"] == value
    assert "\\ud83d" not in best_toml(result, folder=tmp_path)  # JSON's surrogates are not TOML


def test_a_value_toml_cannot_hold_is_refused_before_anything_measures():
    # a command line's bytes that are not UTF-8 reach Python as lone surrogates
    measure = Measure()
    with pytest.raises(XlafuseError) as caught:
        tuned(None, measure, knobs={"unroll": (2, "\udcff")})
    assert str(caught.value) == (
        "knob unroll='\\udcff': '\\udcff' holds a lone surrogate, which TOML cannot hold"
    )
    assert measure.calls == []


def test_best_toml_reruns_a_sharded_target_with_its_mesh_into_its_own_folder(tmp_path):
    target = Target("mlp", {"size": "tiny", "mode": "forward", "devices": 2,
                            "parallelism": "model"}, {"batch": 8})  # fmt: skip
    text = best_toml(result_of(target, (("batch", 16),)), folder=tmp_path / "t", processes=2)
    config = tomllib.loads(text)
    assert config["experiment"]["name"] == "tune-mlp"
    assert config["experiment"]["output"] == f"{tmp_path}/t/run"  # not results/tune
    assert config["workloads"] == [
        {"name": "mlp", "size": "tiny", "mode": "forward", "devices": 2, "parallelism": "model",
         "overrides": {"batch": 8}},
        {"name": "mlp", "size": "tiny", "mode": "forward", "devices": 2, "parallelism": "model",
         "overrides": {"batch": 16}},
    ]  # fmt: skip
    assert f"#   xlafuse launch --processes 2 -- run {tmp_path}/t/best.toml" in text


@pytest.mark.usefixtures("fresh_registry")
def test_best_toml_of_a_tune_with_imports_runs(tmp_path, capsys):
    folder = tmp_path / "t"
    code, _, err = run(capsys, "tune", "gated_mlp", "--import", "examples/my_models.py",
                       "--space", "none", "--knob", "batch=2,4", "--budget-s", "5",
                       "--no-rerun", "--out", folder)  # fmt: skip
    assert code == 0, err
    text = (folder / "best.toml").read_text()
    config = tomllib.loads(text)
    imported = (folder / config["imports"][0]).resolve()
    assert imported == Path("examples/my_models.py").resolve()
    assert config["experiment"]["output"] == f"{folder}/run"
    quick = "\n[timing]\nwarmup = 1\nmin_time_s = 0\nmin_iters = 2\nmax_iters = 2\nrepeats = 1\n"
    (folder / "best.toml").write_text(text + quick + "[measure]\ncalibrate = false\n")
    code, _, err = run(capsys, "run", folder / "best.toml")
    assert code == 0, err
    assert (folder / "run" / "results.jsonl").exists()
    assert not (folder / "results.jsonl").exists()  # the tune's folder stays a tune's
