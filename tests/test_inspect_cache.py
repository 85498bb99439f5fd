"""The result cache of `xlafuse inspect --workload` (`xlafuse.compiler.cache.result_key`,
`xlafuse.cli.inspect_cmd`): the second inspect of the same program reads the first one's HLO.

A hit is told by the command's own note on stderr and by JAX's events (no backend compile: the
program was neither traced nor compiled), never by time. Every cache lives in a temporary
XDG_CACHE_HOME; tests/conftest.py turns the cache off for the rest of the suite
(XLAFUSE_NO_CACHE=1), which these tests undo. Two child processes and about ten tiny compiles.
"""

import json
import re
import subprocess
import sys

import pytest

from xlafuse.cli import main
from xlafuse.compiler import cache

INSPECT = ["inspect", "--workload", "mlp", "--size", "tiny", "--top", "3"]
NOTE = re.compile(
    r"^xlafuse inspect: reused the compile of \d{4}-\d\d-\d\d \d\d:\d\d from the cache "
    r"\(--no-cache compiles again\)$",
    re.MULTILINE,
)

# A command in a fresh process, as a user runs it, with JAX's backend compiles printed last.
_COUNTED = """\
import json, sys
from xlafuse.compiler import cache
from xlafuse.cli import main
with cache.cache_events() as counted:
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "compiles": counted[cache.BACKEND_COMPILES]}), file=sys.stderr)
"""

ENTRY = """\
import jax.numpy as jnp
from helper import scale

def program(n=8):
    return (lambda x: jnp.tanh(x) * scale(), (jnp.ones((n, n)),))
"""


@pytest.fixture
def results(tmp_path, monkeypatch):
    """The commands' caches on, in a temporary XDG_CACHE_HOME; returns the results folder."""
    monkeypatch.delenv(cache.NO_CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "xlafuse" / cache.RESULTS_FOLDER


def _inspect(argv, capsys):
    """(stdout, whether the stored compile was reused, backend compiles) of `xlafuse ARGV`."""
    with cache.cache_events() as counted:
        assert main(argv) == 0
    out = capsys.readouterr()
    return out.out, bool(NOTE.search(out.err)), counted[cache.BACKEND_COMPILES]


def _fresh_process(argv):
    done = subprocess.run([sys.executable, "-c", _COUNTED, *argv], capture_output=True, text=True)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 0, done.stderr
    return done.stdout, bool(NOTE.search(done.stderr)), json.loads(lines[-1])


def test_the_second_inspect_in_a_fresh_process_reuses_the_first_compile(results):
    first_out, first_reused, first = _fresh_process([*INSPECT, "--json"])
    second_out, second_reused, second = _fresh_process([*INSPECT, "--json"])

    assert (first_reused, second_reused) == (False, True)
    assert first["compiles"] >= 1 and second == {"code": 0, "compiles": 0}
    assert json.loads(second_out) == json.loads(first_out)
    assert sorted(p.suffix for p in results.iterdir()) == [".hlo", ".json"]


def test_a_reused_compile_prints_the_same_text(results, capsys):
    first = _inspect(INSPECT, capsys)
    second = _inspect(INSPECT, capsys)

    assert first[1:] == (False, first[2]) and first[2] >= 1
    assert second == (first[0], True, 0)


@pytest.mark.parametrize(
    "changed",
    [["--overrides", "batch=4"], ["--variant", "no-fusion"], ["--no-cache"]],
    ids=["override", "variant", "no-cache"],
)
def test_another_program_or_no_cache_compiles_again(results, capsys, changed):
    _inspect(INSPECT, capsys)
    _, reused, compiles = _inspect([*INSPECT, *changed], capsys)

    assert not reused and compiles >= 1


def test_the_environment_variable_turns_it_off(results, capsys, monkeypatch):
    _inspect(INSPECT, capsys)
    monkeypatch.setenv(cache.NO_CACHE_ENV, "1")
    _, reused, compiles = _inspect(INSPECT, capsys)

    assert not reused and compiles >= 1


def test_a_changed_source_file_of_the_entry_compiles_again(results, capsys, tmp_path):
    (tmp_path / "helper.py").write_text("def scale():\n    return 2.0\n")
    (tmp_path / "prog.py").write_text(ENTRY)
    argv = ["inspect", "--workload", f"{tmp_path / 'prog.py'}:program"]
    assert _inspect(argv, capsys)[1:] != (True, 0)
    assert _inspect(argv, capsys)[1:] == (True, 0)

    (tmp_path / "helper.py").write_text("def scale():\n    return 2.0  # changed\n")
    helper_changed = _inspect(argv, capsys)
    (tmp_path / "prog.py").write_text(ENTRY + "# changed\n")
    entry_changed = _inspect(argv, capsys)

    assert not helper_changed[1] and helper_changed[2] >= 1
    assert not entry_changed[1] and entry_changed[2] >= 1


@pytest.mark.parametrize("part", [cache.RESULT_META_SUFFIX, cache.RESULT_HLO_SUFFIX])
def test_a_corrupt_entry_compiles_again_and_is_written_anew(results, capsys, part):
    first = _inspect(INSPECT, capsys)
    (stored,) = results.glob(f"*{part}")
    stored.write_text(stored.read_text()[:100])

    again = _inspect(INSPECT, capsys)
    third = _inspect(INSPECT, capsys)

    assert again[1] is False and again[2] >= 1
    assert third == (first[0], True, 0)


def test_an_entry_in_a_folder_that_cannot_be_read_is_no_entry(results, capsys):
    _inspect(INSPECT, capsys)
    (meta,) = results.glob(f"*{cache.RESULT_META_SUFFIX}")
    meta.unlink()
    meta.mkdir()  # a folder where the entry's file was: unreadable

    out = _inspect(INSPECT, capsys)

    assert out[1] is False and out[2] >= 1
