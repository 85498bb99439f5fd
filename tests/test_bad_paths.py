"""A path that is neither a file nor a folder is named for what it is (issue 42, item 15).

`/dev/null`, a FIFO, a symlink loop and a broken symlink given to `inspect`, `diff`, `explain` and
`run` are one line saying what they are (`xlafuse.errors.path_kind`), exit 2, never "no such
file"; none is opened (a FIFO would block: an alarm fails a test that waits). A binary
priority-fusion dump is "binary file", as `inspect` says of a binary HLO file, with no byte of
it echoed.
"""

import os
import shutil
import signal
import sys

import pytest
from helpers import usage_error

from xlafuse.errors import FOLDER, NOTHING, REGULAR_FILE, path_kind

HLO = os.path.join(os.path.dirname(__file__), "data", "trace-chain4", "no-fusion.hlo.txt")
CHAIN = os.path.join(
    os.path.dirname(__file__), "data", "h200-jax0.11.2", "why", "chain_module_1325"
)
INSPECTED = (
    "expected an optimized HLO text file (Compiled.as_text() or *after_optimizations.txt), an "
    "--xla_dump_to folder, or --workload NAME"
)
KINDS = ("device", "fifo", "loop", "broken")


@pytest.fixture(autouse=True)
def no_waiting():
    """Fails a test that blocks (opening a FIFO waits for a writer) instead of hanging."""
    if sys.platform == "win32":
        yield
        return

    def stop(signum, frame):
        raise AssertionError("blocked: a FIFO was opened")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def odd(tmp_path):
    """{kind: (path, what it is)} of paths that are neither a regular file nor a folder."""
    os.mkfifo(tmp_path / "fifo")
    os.symlink("loop", tmp_path / "loop")
    os.symlink("nowhere", tmp_path / "broken")
    return {
        "device": ("/dev/null", "a character device"),
        "fifo": (str(tmp_path / "fifo"), "a FIFO"),
        "loop": (str(tmp_path / "loop"), "a symlink loop"),
        "broken": (str(tmp_path / "broken"), "a broken symlink to 'nowhere'"),
    }


def test_path_kind_names_each_kind_without_opening(odd, tmp_path):
    assert {k: path_kind(path) for k, (path, _) in odd.items()} == {
        k: what for k, (_, what) in odd.items()
    }
    assert (path_kind(HLO), path_kind(tmp_path), path_kind(tmp_path / "no")) == (
        REGULAR_FILE,
        FOLDER,
        NOTHING,
    )
    assert path_kind(f"{HLO}/below") == NOTHING  # a path through a file


@pytest.mark.parametrize("kind", KINDS)
def test_inspect_names_what_the_path_is(capsys, odd, kind):
    path, what = odd[kind]
    assert usage_error(capsys, "inspect", path) == (
        f"{path!r} is not a regular file or a folder ({what}); {INSPECTED}\n"
    )


@pytest.mark.parametrize("kind", KINDS)
def test_diff_names_what_the_path_is(capsys, odd, kind):
    path, what = odd[kind]
    assert usage_error(capsys, "diff", HLO, path) == (
        f"{path!r} is not a regular file ({what}); {INSPECTED}\n"
    )


@pytest.mark.parametrize("kind", KINDS)
def test_explain_names_what_the_path_is(capsys, odd, kind):
    path, what = odd[kind]
    assert usage_error(capsys, "explain", path) == (
        f"{path!r} is not a folder ({what}); expected an --xla_dump_to folder, or --workload NAME\n"
    )


@pytest.mark.parametrize("kind", KINDS)
def test_run_names_what_the_config_path_is(capsys, odd, kind):
    path, what = odd[kind]
    assert usage_error(capsys, "run", path) == (
        f"{path!r} is not a regular file ({what}); expected a TOML config file, e.g. "
        "configs/quickstart.toml\n"
    )


def test_a_fifo_module_in_a_dump_folder_is_not_opened(capsys, tmp_path):
    module = tmp_path / "module_0001.jit_f.cpu_after_optimizations.txt"
    os.mkfifo(module)
    assert usage_error(capsys, "inspect", tmp_path, "--module", "jit_f") == (
        f"{str(module)!r} is not a regular file (a FIFO); {INSPECTED}\n"
    )


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"fusion_steps {\n \x00\x01\xff\xfe \x89PNG\n", "line 2: binary file (NUL byte), not a "
         "priority-fusion dump"),
        (b"fusion_steps {\n \xff\xfe \x89PNG\n", "line 2: not UTF-8 text (invalid start byte at "
         "byte 16)"),
    ],
)  # fmt: skip
def test_explain_of_a_binary_priority_dump_echoes_no_bytes(capsys, tmp_path, data, reason):
    folder = tmp_path / "dump"
    shutil.copytree(CHAIN, folder)
    dump = folder / "module_1325.jit_f.priority_fusion_dump.txt"
    dump.write_bytes(data)
    assert usage_error(capsys, "explain", folder) == f"{dump}: {reason}\n"
