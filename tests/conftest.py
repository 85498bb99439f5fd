"""Shared test fixtures: sample paths, a strict JAX configuration, GPU skipping."""

from pathlib import Path

import jax
import pytest

SAMPLES = Path(__file__).parent / "data" / "h200-jax0.11.2"
DUMP_FOLDER = SAMPLES / "dump_block_fwd"

jax.config.update("jax_numpy_rank_promotion", "raise")


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


@pytest.fixture
def samples() -> Path:
    return SAMPLES


@pytest.fixture
def dump_folder() -> Path:
    return DUMP_FOLDER
