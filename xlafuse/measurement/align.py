"""One call's GPU launches aligned with the HLO's kernels in program order (the thunk sequence).

XLA launches a straight-line program's kernels in the order of its schedule, which is the order
the optimized HLO prints them in. So the launches of one call and the kernels of the module are
two sequences to align, as a diff aligns lines: a monotone matching that pairs as many
launches as it can with the kernels they can be, and the best of those (`align_launches`).
Names decide what can pair: a launch named as a kernel (`wrapped_add_2` for `wrapped_add.2`,
weight 4), with a suffix (`gemm_fusion_dot_11_0`, 3), or as a twin XLA reuses (`wrapped_add`
for `wrapped_add.7`: identical fusions are compiled once, 2); a launch named after no kernel
(a cuBLAS or cuDNN kernel, `nvjet_*`) pairs with a library call (1), a memcpy launch with a
plain `copy` (1). The order then decides which twin or which library call: no kernel-name
guess, and a launch out of place cannot take a call that belongs to a later one.

A library call may launch more than one kernel (cuBLASLt's `Memset` before its GEMM, a split-K
reduction after it): a memset is never aligned, and a launch left over next to a launch paired
with a library call is another launch of that call (`extra_launches`).

The alignment is a dynamic program over launches x kernels, one numpy row per launch (GPT-2 full
train, 912 launches and 840 kernels: 0.02 s). It is made for a program whose kernels are all in
one computation; one with a loop body or a branch, whose launches repeat or are skipped, is
joined by names (`xlafuse.measurement.validate.join_kernels`), see `fits`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from xlafuse.measurement.validate import (
    BY_NAME,
    LIBRARY,
    MEMCPY_LAUNCH,
    REUSED,
    SUFFIXED,
    ModeledKernel,
    base_name,
    is_memcpy,
    mangle,
)

# The table's size: launches x kernels scores of 2 bytes (4 where a score may pass 32,767). 19.4
# M cells took 2.75 s here; GPT-2 full train without fusion is 5,463 x 5,293 (58 MB).
MAX_BYTES = 128 << 20
_LABELS = {4: BY_NAME, 3: SUFFIXED, 2: REUSED, 1: LIBRARY}


def fits(launches: int, kernels: Sequence[ModeledKernel]) -> bool:
    """Whether one call's launches are aligned: every kernel in one computation (no loop body
    or branch, whose launches repeat or skip), and a table of a bounded size."""
    straight = len({k.computation for k in kernels}) <= 1
    cells = (launches + 1) * (len(kernels) + 1)
    return straight and cells * _score_type(launches, len(kernels)).itemsize <= MAX_BYTES


def _score_type(launches: int, kernels: int) -> np.dtype:
    """The smallest type a score fits in: at most 4 per pair, min(launches, kernels) pairs."""
    return np.dtype(np.int16 if 4 * min(launches, kernels) < 1 << 15 else np.int32)


def align_launches(
    kernels: Sequence[ModeledKernel], names: Sequence[str]
) -> tuple[dict[int, int], dict[int, str]]:
    """(launch index -> kernel index, kernel index -> how it was matched) of one call.

    Args:
      kernels: the HLO's kernels in program order.
      names: the call's launch names in launch order.
    """
    weights = _Weights(kernels)
    rows = [weights.row(name) for name in names]
    score = np.zeros((len(names) + 1, len(kernels) + 1), _score_type(len(names), len(kernels)))
    for j, row in enumerate(rows, start=1):
        previous = score[j - 1]
        candidate = np.maximum(previous[1:], previous[:-1] + row)
        score[j, 1:] = np.maximum.accumulate(candidate)
    owner: dict[int, int] = {}
    how: dict[int, str] = {}
    j, i = len(names), len(kernels)
    while j > 0 and i > 0:  # a tie goes to pairing this launch: the later launch keeps a call
        weight = int(rows[j - 1][i - 1])
        if weight and score[j, i] == score[j - 1, i - 1] + weight:
            owner[j - 1] = i - 1
            how[i - 1] = MEMCPY_LAUNCH if kernels[i - 1].copy else _LABELS[weight]
            j, i = j - 1, i - 1
        elif score[j, i] == score[j, i - 1]:
            i -= 1
        else:
            j -= 1
    extra_launches(kernels, names, owner)
    return owner, how


def extra_launches(
    kernels: Sequence[ModeledKernel], names: Sequence[str], owner: dict[int, int]
) -> None:
    """A leftover launch named after no kernel, next to one paired with a library call, is
    another launch of that call (in place): a memset belongs to the launch after it (cuBLASLt
    clears its workspace before the GEMM), anything else (a split-K reduction) to the one
    before it, else to the one after."""
    named = {base_name(k.name) for k in kernels}
    for j, name in enumerate(names):
        if j in owner or base_name(name) in named or is_memcpy(name):
            continue
        for k in (j + 1, j - 1) if is_memset(name) else (j - 1, j + 1):
            i = owner.get(k)
            if i is not None and kernels[i].library:
                owner[j] = i
                break


def is_memset(launch_name: str) -> bool:
    """A memset's launch (`Memset 0`): it clears a buffer for the launch after it."""
    return "memset" in launch_name.lower()


class _Weights:
    """What each launch name may pair with, as a row of weights over the kernels."""

    def __init__(self, kernels: Sequence[ModeledKernel]):
        self.size = len(kernels)
        self.exact: dict[str, list[int]] = defaultdict(list)
        self.base: dict[str, list[int]] = defaultdict(list)
        self.mangled = [mangle(k.name) for k in kernels]
        for i, name in enumerate(self.mangled):
            self.exact[name].append(i)
            self.base[base_name(name)].append(i)
        self.library = np.array([k.library for k in kernels], dtype=bool)
        self.copies = np.array([k.copy for k in kernels], dtype=bool)
        self.cache: dict[str, np.ndarray] = {}

    def row(self, name: str) -> np.ndarray:
        cached = self.cache.get(name)
        if cached is not None:
            return cached
        row = np.zeros(self.size, dtype=np.int16)
        if is_memset(name):  # never a call of its own: placed beside its call afterwards
            self.cache[name] = row
            return row
        if is_memcpy(name):
            row[self.copies] = 1
        twins = self.base.get(base_name(name), [])
        row[twins] = 2
        suffixed = [i for i in twins if name.startswith(self.mangled[i] + "_")]
        row[suffixed] = 3
        row[self.exact.get(name, [])] = 4
        if not twins and not is_memcpy(name):
            row[self.library] = 1  # a library's own kernel name: a library call
        self.cache[name] = row
        return row
