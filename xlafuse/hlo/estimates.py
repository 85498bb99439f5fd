"""XLA:GPU's own estimate of each fusion's time, as its backend_config carries it (issue 28).

Compiled with the per-compile option `xla_gpu_collect_cost_model_stats=True` (`COST_MODEL_OPTION`),
XLA:GPU runs its cost models over the optimized module and writes each fusion's estimate into
the fusion's backend_config: `"reification_cost":[{"compute_time_us":..,
"memory_access_time_us":..,"exec_time_us":..,"end_to_end_cycles":..}, ...]`. Without the
option the list is printed empty (`"reification_cost":[]`).

One entry per cost model that answered, in the order XLA ran them: first the analytical GPU
performance model (the one priority fusion weighs most fusions with; its `name` is empty), then,
where they apply, named ones ("indexing-cost-model" for Triton fusions,
"experimental-gemm-cost-model" for GEMM fusions, "sol", a speed-of-light model, for most fusions
and for library calls). A model that cannot estimate a kernel may still write an entry: Triton
fusions (the softmax rewriter's, attention's) carry a first entry near 2e9 us, and a GEMM model
may print "Infinity". Such a value is a sentinel, not a time: `predicted` skips it, and nothing
here averages entries. The GPU performance model's figure for a Triton block-level fusion (the
softmax rewriter's, fusion kind "__triton") is such a non-time even below the sentinel bound (9.7e7 us
on GPT-2 full forward, a kernel measured at 305 us); XLA's priority fusion weighs those fusions with
the indexing cost model instead, so their prediction is that model's (`TRITON_MODEL`). Seen on the H200 (jax 0.11.2, transformer_block full forward): every one
of 16 fusions and every one of 4 cuBLAS calls (the latter "sol" only) carried an estimate.
"""

from __future__ import annotations

import json
import math
import re
from typing import NamedTuple

COST_MODEL_OPTION = "xla_gpu_collect_cost_model_stats"
SENTINEL_US = 1e8  # an estimate at or above 100 s is a model's "cannot estimate", not a time
DEFAULT_MODEL = "gpu-performance-model"  # the unnamed first entry
TRITON_MODEL = "indexing-cost-model"  # the model priority fusion weighs Triton fusions with
_TRITON_FUSION = re.compile(r'\\?"kind\\?"\s*:\s*\\?"__triton\\?"')  # block-level, not a GEMM
_KEY = "reification_cost"
_FILLED = 'reification_cost":[{'  # as XLA prints a backend_config (raw JSON) since it has one
_LIST = re.compile(r'reification_cost\\?"\s*:\s*\[([^\]]*)\]')


class Estimate(NamedTuple):
    """One cost model's estimate of one fusion (microseconds; None where not given).

    `model`: the entry's `name`, or DEFAULT_MODEL for the unnamed first entry.
    """

    model: str
    exec_time_us: float | None
    compute_time_us: float | None = None
    memory_access_time_us: float | None = None
    end_to_end_cycles: float | None = None

    @property
    def is_sentinel(self) -> bool:
        """Whether the value says "cannot estimate": absent, not finite (XLA prints
        "Infinity"), or at or above SENTINEL_US."""
        us = self.exec_time_us
        return us is None or not math.isfinite(us) or us >= SENTINEL_US


def has_estimates(text: str) -> bool:
    """Whether an HLO text holds any non-empty `reification_cost` (one substring scan, about
    1 ms for 3 MB: the reader looks no further into a module without one)."""
    return _FILLED in text


def estimates(backend_config: str | None) -> tuple[Estimate, ...]:
    """Every entry of a backend_config's `reification_cost`, in order (() when none).

    Raises:
        ValueError: an entry that is not a JSON object (the message quotes it).
    """
    if not backend_config or _KEY not in backend_config:
        return ()
    found = _LIST.search(backend_config)
    if found is None or not found.group(1).strip():
        return ()
    body = found.group(1).replace('\\"', '"')
    try:
        entries = json.loads(f"[{body}]")
    except json.JSONDecodeError:
        raise ValueError(
            f"reification_cost is not a list of JSON objects: [{body[:200]}]"
        ) from None
    return tuple(_estimate(e, i) for i, e in enumerate(entries))


def _estimate(entry: dict, index: int) -> Estimate:
    if not isinstance(entry, dict):
        raise ValueError(f"reification_cost entry {index} is not a JSON object: {entry!r}")

    def number(key: str) -> float | None:
        value = entry.get(key)
        return float(value) if isinstance(value, int | float | str) and value != "" else None

    return Estimate(
        str(entry.get("name") or DEFAULT_MODEL),
        number("exec_time_us"),
        number("compute_time_us"),
        number("memory_access_time_us"),
        number("end_to_end_cycles"),
    )


def predicted(backend_config: str | None) -> Estimate | None:
    """The estimate a kernel's prediction is: the first entry that is not a sentinel (the GPU
    performance model's where it answered, else the next model's); for a Triton block-level
    fusion the indexing cost model's where it answered. None without one."""
    answered = [e for e in estimates(backend_config) if not e.is_sentinel]
    if answered and _TRITON_FUSION.search(backend_config or ""):
        return next((e for e in answered if e.model == TRITON_MODEL), answered[0])
    return answered[0] if answered else None
