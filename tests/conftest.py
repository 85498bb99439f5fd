"""Shared test fixtures: sample paths, a strict JAX configuration, GPU skipping, the recorded
GPT-2 train step, a compilation cache for a module's tests, how `pytest -n` shares out the files."""

import fnmatch
import os
from pathlib import Path

import jax
import pytest
from helpers import GPT2_TRAIN, recorded_hlo

from xlafuse.compiler import cache
from xlafuse.compiler.cache import NO_CACHE_ENV

SAMPLES = Path(__file__).parent / "data" / "h200-jax0.11.2"
DUMP_FOLDER = SAMPLES / "dump_block_fwd"

jax.config.update("jax_numpy_rank_promotion", "raise")

# The suite never writes the user's compilation cache (~/.cache/xlafuse/jax): xlafuse's commands,
# here and in the processes the tests start, compile without it; tests/test_compile_cache.py
# turns it on in temporary folders.
os.environ[NO_CACHE_ENV] = "1"


def _has_gpu() -> bool:
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


def pytest_collection_modifyitems(config, items):
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (none visible to JAX)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# Files that share what takes seconds to build run on one worker together under `pytest -n`,
# so that it is built once: the recorded GPT-2 train step's diffs (`gpt2_train_diffs`), the zoo's
# programs compiled into the session's cache (`shared_compile_cache`).
WORKER_GROUPS = {
    "tests/test_diff.py": "gpt2_train_diffs",
    "tests/test_lineage*.py": "gpt2_train_diffs",
    "tests/test_truth.py": "shared_compile_cache",
    "tests/test_models.py": "shared_compile_cache",
    "tests/test_hlo_flops.py": "shared_compile_cache",
}


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's; unknown without it
def pytest_xdist_make_scheduler(config, log):
    """`pytest -n N` (the README's command): each file runs whole on one worker, so that its
    module fixtures (a run, a child's checks) are built once, not once per worker, and the files
    of one of WORKER_GROUPS run on one worker. Another `--dist` than -n's own (load) is left to
    pytest-xdist."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            groups = [g for p, g in WORKER_GROUPS.items() if fnmatch.fnmatch(path, p)]
            return groups[0] if groups else path

    return ByFile(config, log)


@pytest.fixture
def samples() -> Path:
    return SAMPLES


@pytest.fixture
def dump_folder() -> Path:
    return DUMP_FOLDER


@pytest.fixture(scope="session")
def gpt2_train():
    """(text, module) of the GPT-2 full train step (bf16) on the H200 (jax 0.11.2): its
    unoptimized module and its compilations under default, no-gemm-fusion and no-fusion
    (`tests/data/record_kernel_trace.py`)."""
    return recorded_hlo(GPT2_TRAIN, ("unoptimized", "default", "no-gemm-fusion", "no-fusion"))


@pytest.fixture(scope="session")
def gpt2_train_diffs(gpt2_train):
    """`diff_modules` of default against no-gemm-fusion and against no-fusion, by B's name (each
    traces both sides to the unoptimized module: `lineage_a`, `lineage_b`). Built once: each
    takes seconds."""
    from xlafuse.hlo.diff import diff_modules

    ref_text, ref = gpt2_train["unoptimized"]
    text_a, a = gpt2_train["default"]
    diffs = {}
    for b in ("no-gemm-fusion", "no-fusion"):
        text_b, other = gpt2_train[b]
        diffs[b] = diff_modules(
            a, other, labels=("default", b), reference=ref, texts=(ref_text, text_a, text_b)
        )
    return diffs


@pytest.fixture(scope="session")
def compile_cache_folder(tmp_path_factory) -> Path:
    """The session's compilation cache folder (each worker's own under `pytest -n`)."""
    return tmp_path_factory.mktemp("compile-cache")


@pytest.fixture(scope="module")
def shared_compile_cache(compile_cache_folder):
    """JAX's persistent compilation cache on for a module's tests, in the session's folder: a
    program that a test compiles again, in this module or in another that uses the fixture, is
    read back, not compiled (the same program and options, or it is compiled). For modules whose
    tests check what a program is and computes, never how it was compiled
    (`pytestmark = pytest.mark.usefixtures("shared_compile_cache")`; list the module in
    WORKER_GROUPS)."""
    with cache.persistent_cache(compile_cache_folder, xla_caches=False):
        yield


@pytest.fixture
def fresh_registry(monkeypatch):
    """The user's imports and the workloads they register restored after the test (a copy of
    a file at another path, imported by a later test, registers its names again)."""
    from xlafuse.models import registry, user

    registry.available()  # the zoo registered first, as in any process
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(user, "_IMPORTED", dict(user._IMPORTED))
