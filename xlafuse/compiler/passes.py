"""The HLO pass names of the running XLA, discovered once per backend and jaxlib version.

XLA silently ignores an unknown name in `xla_disable_hlo_passes`, so a typo would turn a
"no-fusion" experiment into a second copy of "default". To catch that, xlafuse asks XLA which
passes it runs: a child process compiles a small probe program with the pass pipeline's verbose
log switched on (`TF_CPP_VMODULE=hlo_pass_pipeline=1` must be set before XLA starts, hence the
child), and every "HLO pass NAME" and "Running HLO pass pipeline on module M: NAME" line is
collected. Pipeline names count too: disabling a pipeline ("fusion" on the GPU) disables its passes.

The list is cached in memory and on disk (`$XDG_CACHE_HOME/xlafuse/`, one file per backend,
platform version (the CUDA/driver stack of a GPU plugin) and jaxlib version), so the probe runs
once per machine and version. A backend JAX does not see here is an error, never a guess: the
probe would otherwise list the CPU's passes under the GPU's name.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import jaxlib

from xlafuse.errors import XlafuseError
from xlafuse.kinds import Backend

# Substrings that mark a pass as fusion-related (for `xlafuse passes` and error messages).
_FUSION_MARKERS = (
    "fusion",
    "fuse",
    "triton",
    "gemm",
    "softmax",
    "command-buffer",
    "ynn",
    "dot-library",
)

_PASS_LINE = re.compile(r"hlo_pass_pipeline\.cc:\d+\]\s+HLO pass ([^\s:]+)\s*$", re.MULTILINE)
_PIPELINE_LINE = re.compile(r"Running HLO pass pipeline on module [^:]+: (.+?)\s*$", re.MULTILINE)

# The probe touches the pass families a fusion study cares about: elementwise chains, a reduction,
# a softmax (Triton normalization fusion on GPU), a matmul (GEMM rewriters), a loop and a sort.
_PROBE = """
import jax, jax.numpy as jnp
def probe(x, w):
    y = jax.nn.softmax(x @ w, axis=-1)
    y = jnp.cos(y) * 2.0 + 1.0
    y = jax.lax.fori_loop(0, 3, lambda i, c: c * 1.5 + jnp.sin(c), y)
    return y.sum(axis=0), jnp.sort(y, axis=-1), jax.nn.relu(y).astype(jnp.bfloat16)
x = jnp.ones((64, 128), jnp.float32)
w = jnp.ones((128, 128), jnp.float32)
jax.jit(probe).lower(x, w).compile()
"""


def platform_version(backend: str) -> str:
    """The PJRT platform version of `backend` here (on a GPU: the plugin's CUDA stack).

    Raises:
      XlafuseError: JAX has no such backend on this machine.
    """
    try:
        device = jax.devices(backend)[0]
    except RuntimeError:
        raise XlafuseError(
            f"backend {backend!r} is not present here (JAX's backend is "
            f"{jax.default_backend()!r}); its passes can only be listed where it runs"
        ) from None
    return str(device.client.platform_version)


def _cache_file(backend: str, version: str) -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xlafuse"
    digest = hashlib.sha256(version.encode()).hexdigest()[:10]
    return root / f"passes-{backend}-{digest}-jaxlib{jaxlib.__version__}.json"


def _probe_passes(backend: str) -> frozenset[str]:
    env = dict(os.environ)
    env.update(
        TF_CPP_MIN_LOG_LEVEL="0",
        TF_CPP_VMODULE="hlo_pass_pipeline=1",
        # A parent that holds the GPU must not be starved by a child that preallocates it.
        XLA_PYTHON_CLIENT_PREALLOCATE="false",
    )
    env.pop("XLA_FLAGS", None)  # disabled passes would vanish from the log
    if backend == Backend.CPU:
        env["JAX_PLATFORMS"] = (
            "cpu"  # GPU platform names differ by plugin (cuda, rocm): keep the default
        )
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=300
    )
    log = proc.stderr
    names = set(_PASS_LINE.findall(log)) | set(_PIPELINE_LINE.findall(log))
    if proc.returncode != 0 or not names:
        errors = [ln for ln in log.splitlines() if "Error" in ln] or log.strip().splitlines()[-1:]
        raise RuntimeError(
            f"could not list XLA's passes for backend {backend!r} (probe exit {proc.returncode}): "
            f"{errors[-1] if errors else 'no output'}"
        )
    return frozenset(names)


@functools.cache
def known_passes(*, backend: str | None = None) -> frozenset[str]:
    """Every HLO pass and pipeline name the running XLA uses for `backend`.

    Args:
      backend: "cpu" or "gpu"; None means `jax.default_backend()`.

    Returns:
      The names, as accepted by `xla_disable_hlo_passes`.

    Raises:
      XlafuseError: the backend is not present here.
      RuntimeError: the probe process failed (its last log line is in the message).
    """
    backend = backend or jax.default_backend()
    version = platform_version(backend)
    path = _cache_file(backend, version)
    key = {"backend": backend, "platform_version": version, "jaxlib": jaxlib.__version__}
    try:
        cached = json.loads(path.read_text())
        if all(cached.get(k) == v for k, v in key.items()):
            return frozenset(cached["passes"])
    except (OSError, ValueError, KeyError, AttributeError):
        pass
    names = _probe_passes(backend)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {**key, "passes": sorted(names)}
        path.write_text(json.dumps(payload, indent=1))
    except OSError:
        pass  # a read-only home only costs a probe per process
    return names


def fusion_passes(*, backend: str | None = None) -> list[str]:
    """The fusion-related subset of `known_passes(backend)`, sorted."""
    return sorted(p for p in known_passes(backend=backend) if any(m in p for m in _FUSION_MARKERS))
