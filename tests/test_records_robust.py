"""Results files that stay honest under bad input and a full disk (issue 42): a file of another
program is refused by `run`, a record with a wrong-typed field is one located line and never a
lost report, a record that does not fit on the disk is named and cut back, every report file is
written whole or not at all, a changed module of the user's is a changed program, and lines
skipped on resume are one line each."""

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import FAST_TIMING, REPO, config_file

from xlafuse.cli import main
from xlafuse.errors import XlafuseError
from xlafuse.experiment import runner
from xlafuse.experiment.config import parse_config
from xlafuse.models import registry, user
from xlafuse.results import records
from xlafuse.results.records import CellResult, append_result, read_results

CONFIG = (
    '[experiment]\nname = "t"\nvariants = ["default", "no-fusion"]\n'
    '[[workloads]]\nname = "mul_add_relu"\n'
    "[timing]\nwarmup = 1\nmin_time_s = 0\nmin_iters = 3\nmax_iters = 3\nrepeats = 1\n"
    "[measure]\ncalibrate = false\n"
)
WAY_OUT = (
    "resuming would mix them; pass --fresh to move that file aside and start over, or write to "
    "another --out"
)
NOT_A_RECORD = (
    "not a cell record (a record is a JSON object with the keys workload, size, mode, dtype, "
    "variant, backend, device_kind; this one has no workload, size, mode, dtype, variant, "
    "backend, device_kind)"
)


# `xlafuse ARGV` in a child whose files stop at SIZE bytes (RLIMIT_FSIZE: a write past it fails
# part-way with EFBIG, "File too large", as a write to a full disk does with ENOSPC).
FILE_SIZE_LIMITED = (
    "import resource, sys\n"
    "size = int(sys.argv[1])\n"
    "resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))\n"
    "from xlafuse.cli import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)


def _config(out, variants=("default", "no-fusion")):
    return parse_config(
        {
            "experiment": {"name": "t", "output": str(out), "variants": list(variants)},
            "workloads": [{"name": "mul_add_relu"}],
            "timing": FAST_TIMING,
            "measure": {"calibrate": False},
        },
        backend="cpu",
    )


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """A run's results folder: mul_add_relu under default and no-fusion (two lines)."""
    out = tmp_path_factory.mktemp("measured")
    runner.run_experiment(_config(out), progress=False)
    return out


@pytest.fixture
def nothing_measured(monkeypatch):
    """Fails the test if the runner compiles a cell."""
    monkeypatch.setattr(runner, "compile_workload", lambda *a, **k: pytest.fail("compiled"))


def _run(capsys, config, out) -> tuple[int, str, str]:
    code = main(["run", str(config), "--out", str(out), "--no-progress"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# Item 5: `run` adds records only to a results file of its own.


@pytest.mark.parametrize(
    "content, reason",
    [
        (b'{"foo": 1}\n', f"none of its 1 lines is a record (line 1: {NOT_A_RECORD})"),
        (b'{"foo": 1}', f"none of its 1 lines is a record (line 1: {NOT_A_RECORD})"),
        (
            b'{"foo": 1}\n{"bar": 2}\n{"wor',
            f"none of its 2 lines is a record (line 1: {NOT_A_RECORD})",
        ),
    ],
    ids=["foreign-lines", "no-final-newline", "with-a-torn-tail"],
)
def test_run_refuses_a_results_file_of_another_program(
    tmp_path, capsys, nothing_measured, content, reason
):
    out = tmp_path / "out"
    out.mkdir()
    path = out / "results.jsonl"
    path.write_bytes(content)
    code, stdout, err = _run(capsys, config_file(tmp_path, CONFIG), out)
    assert (code, stdout) == (2, "")
    assert err == (
        f"xlafuse run: error: {path} is not a results file (JSON lines from `xlafuse run`): "
        f"{reason}; records are added only to a results file of xlafuse's: pass --fresh to "
        "move it aside and start over, or write to another --out\n"
    )
    assert path.read_bytes() == content  # untouched: not even its torn tail moved aside
    assert sorted(p.name for p in out.iterdir()) == [".xlafuse.lock", "results.jsonl"]


def test_run_refuses_a_binary_file_and_fresh_moves_it_aside(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl").write_bytes(b"\x89PNG\r\n\x1a\n")
    code, stdout, err = _run(capsys, config_file(tmp_path, CONFIG), out)
    assert (code, stdout) == (2, "")
    assert err == (
        f"xlafuse run: error: {out / 'results.jsonl'} is not a results file: not UTF-8 text "
        "(byte 0x89 at offset 0); records are added only to a results file of xlafuse's: pass "
        "--fresh to move it aside and start over, or write to another --out\n"
    )
    assert main(["run", str(tmp_path / "c.toml"), "--out", str(out), "--fresh"]) == 0
    (aside,) = out.glob("results.*.jsonl.old")
    assert aside.read_bytes() == b"\x89PNG\r\n\x1a\n"
    assert len(read_results(out).records) == 2


def test_run_appends_to_a_file_that_holds_only_blank_lines(tmp_path):
    (tmp_path / "results.jsonl").write_text("\n\n")
    config = _config(tmp_path, variants=("default",))
    (record,) = runner.run_experiment(config, progress=False, report=False)
    assert record.ok
    assert read_results(tmp_path).records == (record,)


# Item 9: a record with a wrong-typed field is a skipped line, named, never a lost report.

WRONG_TYPES = [
    ("variant", None, "variant is null, not a string"),
    ("time_median_s", "fast", 'time_median_s is "fast", not a number or null'),
    ("kernels", "many", 'kernels is "many", not an integer or null'),
    ("speedup_vs_reference", "2x", 'speedup_vs_reference is "2x", not a number or null'),
    ("overrides", "x", 'overrides is "x", not an object'),
    ("speedup_ci", [1, "b"], 'speedup_ci is [1, "b"], not a list of numbers or null'),
    ("devices", True, "devices is true, not an integer"),
    ("speedup_ci", [1], "speedup_ci is [1], not two numbers (low, high) or null"),
]


@pytest.mark.parametrize("key, value, reason", WRONG_TYPES, ids=[str(v) for _, v, _ in WRONG_TYPES])
def test_a_wrong_typed_field_is_a_skipped_line_and_the_report_is_written(
    measured, tmp_path, capsys, key, value, reason
):
    first, second = (measured / "results.jsonl").read_text().splitlines()
    path = tmp_path / "results.jsonl"
    path.write_text(f"{first}\n{json.dumps({**json.loads(second), key: value})}\n")
    assert main(["report", str(path)]) == 0
    captured = capsys.readouterr()
    note = f"{path}: skipped 1 line that is not a record (line 2: not a cell record ({reason}))"
    assert captured.err == f"{note}\n"
    assert captured.out == f"{tmp_path / 'report.md'}\n"
    text = (tmp_path / "report.md").read_text()
    assert "(1 cells)" in text and note in text


def test_a_record_names_every_wrong_typed_field(tmp_path):
    record = CellResult("mlp", "tiny", "forward", "float32", "default", "cpu", "cpu").to_dict()
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({**record, "variant": 3, "wall_s": "1s", "status": "ok"}) + "\n")
    with pytest.raises(XlafuseError) as info:
        read_results(path)
    assert str(info.value) == (
        f"{path} is not a results file (JSON lines from `xlafuse run`): none of its 1 lines is "
        'a record (line 1: not a cell record (variant is 3, not a string; wall_s is "1s", not '
        "a number or null))"
    )


def test_every_published_results_file_reads_without_a_skipped_line():
    files = sorted((REPO / "experiments").rglob("results.jsonl"))
    assert files
    for path in files:
        assert read_results(path).skipped == (), path


def test_a_resume_skips_a_wrong_typed_record_in_one_line_and_measures_its_cell_again(
    measured, tmp_path, capsys
):
    first, second = (measured / "results.jsonl").read_text().splitlines()
    out = tmp_path / "out"
    out.mkdir()
    path = out / "results.jsonl"
    path.write_text(f"{json.dumps({**json.loads(first), 'time_median_s': 'fast'})}\n{second}\n")
    code, stdout, err = _run(capsys, config_file(tmp_path, CONFIG), out)
    assert code == 0
    assert err == (
        f"xlafuse: {path}:1: skipping a record that is not a cell record (time_median_s is "
        '"fast", not a number or null)\n'
    )
    assert "1 cells to run on cpu (cpu), 1 already done" in stdout
    read = read_results(path)
    assert [r.variant for r in read.records] == ["no-fusion", "default"]
    assert read.skipped == (
        (1, 'not a cell record (time_median_s is "fast", not a number or null)'),
    )


# Item 14: lines skipped on resume are one line each, not Python warnings.


def test_lines_skipped_on_resume_are_one_line_each_at_the_cli(measured, tmp_path, capsys):
    first, second = (measured / "results.jsonl").read_text().splitlines()
    out = tmp_path / "out"
    out.mkdir()
    path = out / "results.jsonl"
    path.write_text(f"{first}\nnot json\n[1]\n{second}\n")
    code, stdout, err = _run(capsys, config_file(tmp_path, CONFIG), out)
    assert code == 0
    assert err == (
        f"xlafuse: {path}:2: skipping a record that is not valid JSON (Expecting value: line 1 "
        "column 1 (char 0))\n"
        f"xlafuse: {path}:3: skipping a record that is not a cell record (a record is a JSON "
        "object, not list)\n"
    )
    assert "all 2 cells already in" in stdout


def test_lines_skipped_on_resume_warn_python_callers_at_their_call(measured, tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text((measured / "results.jsonl").read_text() + "not json\n")
    with pytest.warns(records.SkippedLineWarning) as warned:
        runner.run_experiment(_config(tmp_path), progress=False, report=False)
    (warning,) = [w for w in warned if w.category is records.SkippedLineWarning]
    assert str(warning.message) == (
        f"{path}:3: skipping a record that is not valid JSON (Expecting value: line 1 column 1 "
        "(char 0))"
    )
    assert warning.filename == __file__


# Item 11: a full disk names the file and loses nothing earlier.


class _FullDisk:
    """`os` as records.py sees it on a disk that fills: `whole` writes go through, the next
    writes only `part` of its bytes, then every write fails with ENOSPC."""

    def __init__(self, whole: int, part: int = 40):
        self.whole, self.part = whole, part

    def __getattr__(self, name):
        return getattr(os, name)

    def write(self, fd, data):
        if self.whole > 0:
            self.whole -= 1
            return os.write(fd, data)
        if self.part:
            part, self.part = self.part, 0
            return os.write(fd, bytes(data[:part]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_record_that_does_not_fit_is_cut_back_and_named(tmp_path, monkeypatch):
    path = tmp_path / "results.jsonl"
    record = CellResult("mlp", "tiny", "forward", "float32", "default", "cpu", "cpu")
    append_result(path, record)
    before = path.read_bytes()
    monkeypatch.setattr(records, "os", _FullDisk(whole=0))
    with pytest.raises(XlafuseError) as info:
        append_result(path, record)
    assert str(info.value) == (
        f"cannot append a record to {str(path)!r}: No space left on device; the records "
        "before it are kept"
    )
    assert path.read_bytes() == before


def test_a_disk_full_at_the_first_record_names_the_file(tmp_path):
    # A real run in a child whose files stop at 2,000 bytes: its first record (about 4 KB) is
    # cut short by the OS part-way, as on a full disk.
    config, out = config_file(tmp_path, CONFIG), tmp_path / "out"
    command = [sys.executable, "-c", FILE_SIZE_LIMITED, "2000", "run", str(config)]
    proc = subprocess.run(
        [*command, "--out", str(out), "--no-progress"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    path = out / "results.jsonl"
    assert (proc.returncode, proc.stderr) == (
        2,
        f"xlafuse run: error: cannot append a record to {str(path)!r}: File too large; the "
        "records before it are kept\n",
    )
    assert path.read_bytes() == b""  # cut back: a resume starts clean
    assert not (out / "report.md").exists() and "report" not in proc.stdout


def test_a_disk_full_later_keeps_the_earlier_records_and_reports_them(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(records, "os", _FullDisk(whole=1))
    out = tmp_path / "out"
    code, stdout, err = _run(capsys, config_file(tmp_path, CONFIG), out)
    path = out / "results.jsonl"
    assert code == 2
    assert err == (
        f"xlafuse run: error: cannot append a record to {str(path)!r}: No space left on "
        "device; the records before it are kept\n"
    )
    (kept,) = read_results(path).records
    assert kept.variant == "default" and path.read_text().count("\n") == 1
    assert f"report: {out / 'report.md'}" in stdout
    assert "(1 cells)" in (out / "report.md").read_text()
    # the next run resumes after the kept record
    monkeypatch.setattr(records, "os", os)
    code, stdout, _ = _run(capsys, tmp_path / "c.toml", out)
    assert code == 0 and "1 cells to run on cpu (cpu), 1 already done" in stdout


def test_a_report_on_a_full_disk_names_the_plot_and_leaves_no_file_cut_short(measured, tmp_path):
    out = tmp_path / "report"
    out.mkdir()
    earlier = b"an earlier plot"
    (out / "speedup.png").write_bytes(earlier)
    # Every file the child writes stops at 4 KiB: the plots are larger.
    command = [sys.executable, "-c", FILE_SIZE_LIMITED, "4096", "report", str(measured)]
    proc = subprocess.run(
        [*command, "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr == (
        f"xlafuse report: error: cannot write plot {str(out / 'speedup.png')!r}: File too large "
        "(any earlier speedup.png is kept)\n"
    )
    assert (out / "speedup.png").read_bytes() == earlier
    assert sorted(p.name for p in out.iterdir()) == ["speedup.png"]  # no temporary file left


def test_report_checks_its_output_folder_before_any_plot(measured, tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    code = main(["report", str(measured), "--out", str(tmp_path / "afile")])
    assert code == 2
    assert capsys.readouterr().err == (
        f"xlafuse report: error: output folder '{tmp_path / 'afile'}' is a file, not a folder\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_a_report_interrupted_while_writing_keeps_the_earlier_report(
    measured, tmp_path, monkeypatch
):
    from xlafuse.report.markdown import write_report

    write_report(measured, out_dir=tmp_path)
    earlier = (tmp_path / "report.md").read_bytes()
    written = Path.write_text

    def interrupted(self, text, *args, **kwargs):  # Ctrl-C half-way through report.md
        written(self, text[: len(text) // 2], *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_report(measured, out_dir=tmp_path)
    assert (tmp_path / "report.md").read_bytes() == earlier
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


# Item 7: a changed module of the user's is a changed program.

PROGRAM = """
import jax.numpy as jnp
import {helper}


def step(n=8):
    return {helper}.forward, (jnp.ones((n,), jnp.float32),)
"""


@pytest.fixture
def program(tmp_path, monkeypatch):
    """An entry `prog.py:step` whose function lives in a module beside it; the module is
    imported under a name of this test's alone, and forgotten after it."""
    helper = f"physics_{os.getpid()}_{abs(hash(str(tmp_path))) % 10**8}"
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "prog.py").write_text(PROGRAM.format(helper=helper))
    (folder / f"{helper}.py").write_text("def forward(x):\n    return x * 2 + 1\n")
    monkeypatch.setattr(user, "_IMPORTED", dict(user._IMPORTED))
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield folder, helper
    sys.modules.pop(helper, None)


def test_a_changed_module_that_an_entry_imports_is_refused_on_resume(tmp_path, capsys, program):
    folder, helper = program
    config = config_file(
        tmp_path,
        '[experiment]\nname = "u"\nvariants = ["default"]\n'
        '[[workloads]]\nentry = "src/prog.py:step"\nname = "prog"\n'
        "[timing]\nwarmup = 1\nmin_time_s = 0\nmin_iters = 3\nmax_iters = 3\nrepeats = 1\n"
        "[measure]\ncalibrate = false\n",
    )
    out = tmp_path / "out"
    assert _run(capsys, config, out)[0] == 0
    (record,) = read_results(out).records
    files = {
        f"{helper}.py": user.file_sha256(folder / f"{helper}.py"),
        "prog.py": user.file_sha256(folder / "prog.py"),
    }
    assert record.source_files == files
    assert record.source_sha256 == user.sources_sha256(files)
    code, stdout, _ = _run(capsys, config, out)
    assert code == 0 and "all 1 cells already in" in stdout  # nothing changed: resumed

    (folder / f"{helper}.py").write_text("def forward(x):\n    return x * 3 + 1\n")
    new = user.file_sha256(folder / f"{helper}.py")
    code, stdout, err = _run(capsys, config, out)
    assert (code, stdout) == (2, "")
    assert err == (
        f"xlafuse run: error: {out / 'results.jsonl'} holds results measured under other "
        f"settings (workload 'prog': its source changed: {helper}.py (sha256 "
        f"{files[f'{helper}.py'][:12]} in the file, {new[:12]} now)): {WAY_OUT}\n"
    )


def test_source_files_follow_the_users_imports_and_leave_installed_code_out(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "entry.py").write_text(
        "import os\nimport numpy\nimport xlafuse\nimport helpers\nfrom pkg.sub import thing\n"
        "def f():\n    import lazy\n"
    )
    (tmp_path / "helpers.py").write_text("import jax\n")
    (tmp_path / "lazy.py").write_text("")
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub.py").write_text("from . import other\nthing = 1\n")
    (tmp_path / "pkg" / "other.py").write_text("")
    (tmp_path / "unused.py").write_text("")
    files = user.source_files(tmp_path / "entry.py")
    assert list(files) == [
        "entry.py", "helpers.py", "lazy.py", "pkg/__init__.py", "pkg/other.py", "pkg/sub.py",
    ]  # fmt: skip
    assert files["helpers.py"] == user.file_sha256(tmp_path / "helpers.py")
    alone = user.source_files(tmp_path / "lazy.py")
    assert user.sources_sha256(alone) == user.file_sha256(tmp_path / "lazy.py")


def test_the_zoo_and_its_examples_hash_their_own_file_alone():
    assert registry.source_sha256("mlp") is None
    example = REPO / "examples" / "cartpole.py"  # imports jax and xlafuse only
    assert user.source_files(example) == {"cartpole.py": user.file_sha256(example)}


@pytest.mark.parametrize(
    ("field", "cut"),
    [("kernel_times", "time_s"), ("kernel_diff", "groups"), ("missed_fusions", "top")],
)
def test_a_malformed_trace_object_is_one_line_and_the_report_is_written(
    tmp_path, capsys, field, cut
):
    """A record's own fields are typed on read; the objects nested in them (a hand-edited or
    cut-short trace) are not: the sections made from them say so, and the rest is written."""
    lines = (REPO / "experiments" / "h200" / "kernels" / "results.jsonl").read_text().splitlines()
    broken = []
    for line in lines:
        data = json.loads(line)
        if isinstance(data.get(field), dict) and cut in data[field]:
            del data[field][cut]
        broken.append(json.dumps(data))
    (tmp_path / "results.jsonl").write_text("\n".join(broken) + "\n")
    assert main(["report", str(tmp_path)]) == 0
    text = (tmp_path / "report.md").read_text()
    assert "traced sections are not shown: a record's trace or missed fusions are malformed" in text
    assert "| variant | latency ms | pipelined ms |" in text  # every cell's time table is there


class _InterruptedAt:
    """`os` with a Ctrl-C at one point of appending: "write" halfway through the line, or
    "fsync" once the whole line is written."""

    def __init__(self, where: str):
        self.where = where

    def __getattr__(self, name):
        return getattr(os, name)

    def write(self, fd, data):
        if self.where == "write":
            os.write(fd, bytes(data[: len(data) // 2]))
            raise KeyboardInterrupt
        return os.write(fd, data)

    def fsync(self, fd):
        if self.where == "fsync":
            self.where = None
            raise KeyboardInterrupt
        return os.fsync(fd)


@pytest.mark.parametrize(("where", "kept"), [("write", 1), ("fsync", 2)])
def test_a_ctrl_c_while_appending_keeps_a_whole_line_and_cuts_a_half_one(
    tmp_path, monkeypatch, where, kept
):
    path = tmp_path / "results.jsonl"
    record = CellResult("mlp", "tiny", "forward", "float32", "default", "cpu", "cpu")
    append_result(path, record)
    monkeypatch.setattr(records, "os", _InterruptedAt(where))
    with pytest.raises(KeyboardInterrupt):
        append_result(path, record)
    monkeypatch.undo()
    assert path.read_bytes().endswith(b"\n")
    assert len(read_results(path).records) == kept
