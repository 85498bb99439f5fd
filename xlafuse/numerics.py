"""Do two variants compute the same thing? Largest differences, judged with a dtype-aware tolerance.

Fused code is not bitwise equal to unfused code: XLA contracts a*b+c into one FMA, keeps
intermediates in registers at higher precision, and may reorder reductions. So outputs are compared
with a tolerance that scales with the dtype's precision and with the size of the values.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

# (rtol, atol as a fraction of the reference's largest magnitude), by dtype name.
_TOLERANCES = {
    "float64": (1e-9, 1e-12),
    "float32": (1e-4, 1e-5),
    "float16": (1e-2, 1e-3),
    "bfloat16": (5e-2, 1e-2),
}
_LOW_PRECISION = (2.5e-1, 5e-2)  # the f8 and f4 families


def tolerance(dtype: Any) -> tuple[float, float]:
    """(rtol, relative atol) for comparing outputs of `dtype`; integers and bools must match."""
    dt = np.dtype(dtype)
    if dt.kind in "biu":
        return (0.0, 0.0)
    if dt.kind == "c":
        dt = np.dtype(np.float32 if dt.itemsize == 8 else np.float64)
    return _TOLERANCES.get(dt.name, _LOW_PRECISION)


@dataclasses.dataclass(frozen=True)
class NumericDiff:
    """How far one set of outputs is from a reference set.

    Attributes:
      max_abs_diff: largest |out - ref| over every output element.
      max_rel_diff: largest |out - ref| / max(|ref|, tiny) over every element.
      within_tolerance: every output passes `np.allclose` with its dtype's tolerance.
      worst_dtype: the dtype of the output that came closest to (or past) its tolerance.
    """

    max_abs_diff: float
    max_rel_diff: float
    within_tolerance: bool
    worst_dtype: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def compare_outputs(reference: Any, outputs: Any, compute_dtype: Any = None) -> NumericDiff:
    """Compare two pytrees of arrays leaf by leaf.

    Args:
      reference: the reference outputs.
      outputs: the outputs to judge.
      compute_dtype: the precision the outputs were computed in, when lower than their own dtype
        (a float32 loss of a bfloat16 model carries bfloat16 error): the looser tolerance applies.

    Raises:
      ValueError: the trees differ in structure, shapes or dtypes (not a numerical difference).
    """
    ref_leaves, ref_tree = jax.tree.flatten(reference)
    out_leaves, out_tree = jax.tree.flatten(outputs)
    if ref_tree != out_tree:
        raise ValueError(f"outputs have structure {out_tree}, reference has {ref_tree}")
    max_abs = max_rel = 0.0
    ok = True
    worst, worst_ratio = None, -1.0
    for ref, out in zip(ref_leaves, out_leaves, strict=True):
        ref, out = np.asarray(ref), np.asarray(out)
        if ref.shape != out.shape or ref.dtype != out.dtype:
            raise ValueError(
                f"output {out.dtype}{list(out.shape)} does not match reference "
                f"{ref.dtype}{list(ref.shape)}"
            )
        abs_diff, rel_diff, ratio = _leaf_diff(ref, out, compute_dtype)
        max_abs, max_rel = max(max_abs, abs_diff), max(max_rel, rel_diff)
        ok = ok and ratio <= 1.0
        if ratio > worst_ratio:
            worst, worst_ratio = str(ref.dtype), ratio
    return NumericDiff(max_abs, max_rel, ok, worst)


def _leaf_diff(ref: np.ndarray, out: np.ndarray, compute_dtype=None) -> tuple[float, float, float]:
    """(max abs diff, max rel diff, worst diff / allowed diff) of one array."""
    rtol, atol_frac = tolerance(ref.dtype)
    if compute_dtype is not None and ref.dtype.kind in "fc":
        rtol, atol_frac = max((rtol, atol_frac), tolerance(compute_dtype))
    if ref.size == 0:
        return 0.0, 0.0, 0.0
    wide = np.complex128 if ref.dtype.kind == "c" else np.float64
    r, o = ref.astype(wide), out.astype(wide)
    finite = np.isfinite(r) & np.isfinite(o)
    # Non-finite values must agree exactly (nan with nan, inf with inf of the same sign).
    same_nonfinite = np.all((r == o) | (np.isnan(r) & np.isnan(o)) | finite)
    diff = np.abs(np.where(finite, o - r, 0.0))
    mag = np.abs(np.where(finite, r, 0.0))
    atol = atol_frac * float(mag.max(initial=0.0))
    allowed = atol + rtol * mag
    tiny = np.finfo(np.float64).tiny
    # Elements near zero are judged against atol, so one 1e-30 reference does not dominate.
    rel = diff / np.maximum(mag, max(atol, tiny))
    ratio = float(np.max(np.where(diff == 0, 0.0, diff / np.maximum(allowed, tiny))))
    if not same_nonfinite:
        ratio = float("inf")
    return float(diff.max()), float(rel.max()), ratio
