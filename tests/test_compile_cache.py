"""The persistent compilation cache of xlafuse's commands (`xlafuse.compiler.cache`).

Hits are asserted from JAX's own monitoring events (`cache.cache_events`), never from times.
Every cache lives in a temporary folder (XDG_CACHE_HOME): tests/conftest.py turns the cache off
for the rest of the suite (XLAFUSE_NO_CACHE=1), which these tests undo where they need it on.
The file starts three child processes (two commands and a cold-start child), about 10 s.
"""

import json
import shutil
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

import xlafuse
from xlafuse.cli import main
from xlafuse.compiler import cache
from xlafuse.compiler.jit import compile_variant
from xlafuse.experiment import fields
from xlafuse.experiment.warmup import warmup
from xlafuse.measurement.coldstart import run_start
from xlafuse.report.cells import cell_tables
from xlafuse.results import parts
from xlafuse.results.records import CellResult

INSPECT = ["inspect", "--workload", "mlp", "--size", "tiny", "--top", "1"]

# A command in a fresh process, as a user runs it, with JAX's cache counters printed last.
_COUNTED = """\
import json, sys
from xlafuse.compiler import cache
from xlafuse.cli import main
with cache.cache_events() as counted:
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "hits": counted[cache.CACHE_HITS],
                  "written": counted[cache.CACHE_MISSES]}), file=sys.stderr)
"""


@pytest.fixture
def user_cache(tmp_path, monkeypatch):
    """The commands' cache on, in a temporary XDG_CACHE_HOME; returns its folder."""
    monkeypatch.delenv(cache.NO_CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "xlafuse" / "jax"


def _fresh_process(argv):
    done = subprocess.run([sys.executable, "-c", _COUNTED, *argv], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stderr.strip().splitlines()[-1])


def test_the_second_command_in_a_fresh_process_is_served_from_the_cache(user_cache):
    first = _fresh_process(INSPECT)
    shutil.rmtree(user_cache.parent / cache.RESULTS_FOLDER)  # inspect's own cache: not this one
    second = _fresh_process(INSPECT)

    assert first["code"] == second["code"] == 0
    assert first["hits"] == 0 and first["written"] >= 1
    assert second == {"code": 0, "hits": first["written"], "written": 0}
    assert cache.cache_entry_count(user_cache) == first["written"]


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (INSPECT, {}),
        (["--no-cache", *INSPECT], {}),
        ([*INSPECT, "--no-cache"], {}),
        (INSPECT, {cache.NO_CACHE_ENV: "1"}),
    ],
    ids=["on", "flag-before", "flag-after", "env"],
)
def test_no_cache_and_the_environment_turn_the_cache_off(user_cache, monkeypatch, argv, env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with cache.cache_events() as counted:
        assert main(argv) == 0

    cache_on = argv == INSPECT and not env  # the control: this test sees a cache that is on
    assert counted[cache.CACHE_MISSES] >= 1 if cache_on else counted[cache.CACHE_MISSES] == 0
    assert counted[cache.CACHE_HITS] == 0
    assert (cache.cache_entry_count(user_cache) > 0) == cache_on


def test_a_folder_that_cannot_be_written_is_a_note_and_no_cache(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(cache.NO_CACHE_ENV, raising=False)
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))

    assert main(INSPECT) == 0

    folder = tmp_path / "file" / "xlafuse" / "jax"
    assert capsys.readouterr().err.splitlines()[0] == (
        f"xlafuse inspect: note: cannot create compilation cache folder {str(folder)!r}: "
        f"{str(tmp_path / 'file')!r} is a file; compiling without the cache (--no-cache or "
        "XLAFUSE_NO_CACHE=1 skips it)"
    )


def test_cold_start_reads_no_cache_it_inherits(tmp_path, monkeypatch):
    """A cold-start child without a folder of its own compiles afresh, even where its
    environment names a filled cache (the user's JAX_COMPILATION_CACHE_DIR)."""
    theirs = tmp_path / "theirs"
    cell = {"name": "mlp", "size": "tiny"}
    warmup(cell, cache_dir=theirs)
    entries = cache.cache_entry_count(theirs)
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(theirs))

    run = run_start(cell, variant="default", cache_dir=None, steady_calls=1)

    assert (run.cache_hits, run.cache_misses, run.cache_entries) == (0, 0, 0)
    assert cache.cache_entry_count(theirs) == entries


def _double_plus_one(x):
    return x * 2.0 + 1.0


def test_compare_after_compile_shows_the_compile_as_cached():
    x = jnp.ones((16, 16), jnp.float32)
    xlafuse.compile(_double_plus_one).compile(x)

    comparison = xlafuse.compare(_double_plus_one, x, variants=("default", "no-fusion"))

    default, no_fusion = comparison.rows
    assert (default.compile_cached, default.compile_s) == (True, None)
    assert no_fusion.compile_cached is False and no_fusion.compile_s > 0
    lines = str(comparison).splitlines()
    header = lines[1].split("  ")
    column = [cell.strip() for cell in header if cell.strip()].index("compile s")
    assert [line.split()[column] for line in lines[2:4]] == [
        "cached",
        f"{no_fusion.compile_s:.3f}",
    ]


def test_a_cached_compile_is_recorded_and_reported_as_cached():
    x = np.ones(8, np.float32)
    first = compile_variant(_double_plus_one, (x,), {}, "default")
    again = compile_variant(_double_plus_one, (x,), {}, "default")

    assert again.compile_cached and not first.compile_cached
    part = fields.compile_part(again)
    assert (part.compile_cached, part.compile_s) == (True, None)
    assert part.flat()["compile_cached"] is True
    name = {"workload": "f", "size": "tiny", "mode": "forward", "dtype": "float32"}
    machine = {"variant": "default", "backend": "cpu", "device_kind": "cpu"}
    record = CellResult.from_dict({**name, **machine, **part.flat()})  # as a results file
    assert record.compile == part
    work_table = cell_tables([record])[-1]
    assert work_table.splitlines()[-1].split("|")[-3].strip() == "cached"
    assert parts.CompileRecord().compile_cached is None  # a record from before the field
