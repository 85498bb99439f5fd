"""`xlafuse run` stopped at each crash point, by Ctrl-C (SIGINT) and by kill -9 (SIGKILL), then
resumed: the results file ends with the cells of an uninterrupted run, each once (issue 42).

The run is a child process (`python -c DRIVER`) that stops itself at the chosen point, so each
point is hit exactly: after the first cell's record is written, half-way through writing a record,
and while the report's first plot is being written. The resume runs in this process, as
`xlafuse run` again.
"""

import signal
import subprocess
import sys

import pytest
from helpers import REPO, config_file

from xlafuse.cli import main
from xlafuse.results.records import read_results

# Children started, interrupted and resumed: slow by nature, run by .ci/run's second command.
pytestmark = pytest.mark.slow

CONFIG = (
    '[experiment]\nname = "crash"\nvariants = ["default", "no-fusion"]\n'
    '[[workloads]]\nname = "mul_add_relu"\n'
    "[timing]\nwarmup = 1\nmin_time_s = 0\nmin_iters = 2\nmax_iters = 2\nrepeats = 1\n"
    "[measure]\ncalibrate = false\n"
)

# argv: POINT SIGNAL ARGS...: `xlafuse ARGS` that sends itself SIGNAL at POINT.
DRIVER = """
import os, signal, sys

point, how = sys.argv[1], getattr(signal, sys.argv[2])


def stop():
    os.kill(os.getpid(), how)


if point == "after-the-first-cell":
    from xlafuse.experiment import runner

    appended = runner.append_result

    def append(*args, **kwargs):
        appended(*args, **kwargs)
        stop()

    runner.append_result = append
elif point == "inside-a-record":
    from xlafuse.results import records

    class HalfWritten:
        def __getattr__(self, name):
            return getattr(os, name)

        def write(self, fd, data):
            written = os.write(fd, bytes(data[: len(data) // 2]))
            stop()
            return written

    records.os = HalfWritten()
elif point == "writing-the-report":
    from matplotlib.figure import Figure

    saved = Figure.savefig

    def savefig(self, *args, **kwargs):
        saved(self, *args, **kwargs)
        stop()

    Figure.savefig = savefig
from xlafuse.cli import main

sys.exit(main(sys.argv[3:]))
"""

POINTS = ("after-the-first-cell", "inside-a-record", "writing-the-report")
# What the interrupted run left: its exit status, and the records in the file.
LEFT = {
    ("after-the-first-cell", "SIGINT"): (130, 1),
    ("after-the-first-cell", "SIGKILL"): (-signal.SIGKILL, 1),
    ("inside-a-record", "SIGINT"): (130, 0),  # the half-written record is cut back
    ("inside-a-record", "SIGKILL"): (-signal.SIGKILL, 0),  # ...or left torn, set aside later
    ("writing-the-report", "SIGINT"): (130, 2),
    ("writing-the-report", "SIGKILL"): (-signal.SIGKILL, 2),
}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The cell ids of the run that no one stopped, in file order."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    config = config_file(folder, CONFIG)
    assert main(["run", str(config), "--out", str(folder / "out"), "--no-progress"]) == 0
    return [r.cell_id for r in read_results(folder / "out").records]


@pytest.mark.parametrize("how", ["SIGINT", "SIGKILL"])
@pytest.mark.parametrize("point", POINTS)
def test_a_run_stopped_anywhere_resumes_to_the_cells_of_an_uninterrupted_run(
    uninterrupted, tmp_path, capsys, point, how
):
    config, out = config_file(tmp_path, CONFIG), tmp_path / "out"
    command = [sys.executable, "-c", DRIVER, point, how, "run", str(config), "--out", str(out)]
    proc = subprocess.run(
        [*command, "--no-progress"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    status, kept = LEFT[point, how]
    assert proc.returncode == status, proc.stderr[-2000:]
    if how == "SIGINT":
        assert proc.stderr == "xlafuse: interrupted\n"
    path = out / "results.jsonl"
    if kept:
        assert len(read_results(path).records) == kept
    elif how == "SIGINT":
        assert path.read_bytes() == b""  # the record half-written when Ctrl-C came: cut back
    else:
        assert path.read_bytes() and not path.read_bytes().endswith(b"\n")  # torn by kill -9

    assert main(["run", str(config), "--out", str(out), "--no-progress"]) == 0
    resumed = capsys.readouterr().out
    records = read_results(out)
    assert records.skipped == ()
    assert [r.cell_id for r in records.records] == uninterrupted  # each cell once, in order
    assert all(r.ok for r in records.records)
    if kept == len(uninterrupted):
        assert f"all {kept} cells already in" in resumed
    if (point, how) == ("inside-a-record", "SIGKILL"):
        (torn,) = out.glob("results.torn-*.txt")
        assert torn.stat().st_size > 0
    # The report is whole: every plot it names exists, none is cut short.
    text = (out / "report.md").read_text()
    assert f"({len(uninterrupted)} cells)" in text
    plots = sorted(out.glob("*.png"))
    assert plots and all(p.stat().st_size > 1000 and f"]({p.name})" in text for p in plots)
