"""Do two variants compute the same thing? Largest differences, judged with a dtype-aware tolerance.

Fused code is not bitwise equal to unfused code: XLA contracts a*b+c into one FMA, keeps
intermediates in registers at higher precision, and may reorder reductions. So outputs are compared
with a tolerance that scales with the dtype's precision and with the size of the values.

The one rule, used by `xlafuse run`, `xlafuse compare` and the report (`judge_workload`):

- An element passes when `|out - ref| <= atol + rtol * |ref|`, with `(rtol, atol_frac)` by dtype
  (float32 1e-4 / 1e-5, bfloat16 5e-2 / 1e-2, float16 1e-2 / 1e-3, float64 1e-9 / 1e-12, 8-bit
  and 4-bit floats 0.25 / 0.05; integers and booleans must match exactly) and
  `atol = atol_frac * max|ref|` over the array, so elements near zero are judged against the
  array's scale. When the computation ran in a lower precision than the outputs' dtype (a
  float32 loss of a bfloat16 model), the looser tolerance of the two applies. Non-finite values
  must match exactly (nan with nan, inf with inf of the same sign).
- A forward call: every output.
- A train step (one step from the same state): the loss; the gradient, read from the optimizer's
  first moment (after one Adam step it is 0.1 x the gradient) and judged leaf by leaf as a
  vector: `||out - ref|| / ||ref||` at most `GRADIENT_RTOL` (float32 1e-2, bfloat16 1e-1,
  float16 5e-2); the batch statistics (means and variances over the batch), judged the same
  way; and the updated parameters, element by element. Adam's first step moves a parameter by `lr * g / (|g| + eps)`, +-lr
  whatever the gradient's size, so a gradient whose sign is rounding noise moves it either way:
  each parameter may also differ by as much as that update changes when its gradient moves
  within the gradient's tolerance (up to 2 x lr where the gradient is zero within tolerance,
  nothing where it is clearly not).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from xlafuse.distributed.arrays import to_host
from xlafuse.measure.rules import LOW_PRECISION, TOLERANCES
from xlafuse.models.train import gradient_of_first_step


def tolerance(dtype: Any) -> tuple[float, float]:
    """(rtol, relative atol) for comparing outputs of `dtype`; integers and bools must match."""
    dt = np.dtype(dtype)
    if dt.kind in "biu":
        return (0.0, 0.0)
    if dt.kind == "c":
        dt = np.dtype(np.float32 if dt.itemsize == 8 else np.float64)
    return TOLERANCES.get(dt.name, LOW_PRECISION)


@dataclasses.dataclass(frozen=True)
class NumericDiff:
    """How far one set of outputs is from a reference set.

    Attributes:
      max_abs_diff: largest |out - ref| over every output element.
      max_rel_diff: largest |out - ref| / max(|ref|, tiny) over every element.
      within_tolerance: every output passes `np.allclose` with its dtype's tolerance.
      worst_dtype: the dtype of the output that came closest to (or past) its tolerance.
      worst_part: for a train step, the part that came closest ("loss", "gradient", "params",
        "batch_stats"); None for a forward call.
    """

    max_abs_diff: float
    max_rel_diff: float
    within_tolerance: bool
    worst_dtype: str | None = None
    worst_part: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def record_fields(self) -> dict[str, Any]:
        """The flat record keys of this diff (`CellResult.numerics` on disk); XLA and torch cells
        both give their numerics this way."""
        return {
            "max_abs_diff": self.max_abs_diff,
            "max_rel_diff": self.max_rel_diff,
            "within_tolerance": self.within_tolerance,
            "numerics_worst_part": self.worst_part,
        }


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
    diff, _ = _compare_trees(reference, outputs, compute_dtype)
    return diff


def _compare_trees(reference, outputs, compute_dtype, extra_allowed=None):
    """(NumericDiff, worst ratio) of two pytrees; `extra_allowed` adds a per-leaf allowance."""
    ref_leaves, ref_tree = jax.tree.flatten(reference)
    out_leaves, out_tree = jax.tree.flatten(outputs)
    if ref_tree != out_tree:
        raise ValueError(f"outputs have structure {out_tree}, reference has {ref_tree}")
    max_abs = max_rel = 0.0
    ok = True
    worst, worst_ratio = None, -1.0
    extras = extra_allowed or [None] * len(ref_leaves)
    for ref, out, extra in zip(ref_leaves, out_leaves, extras, strict=True):
        ref, out = np.asarray(ref), np.asarray(out)
        if ref.shape != out.shape or ref.dtype != out.dtype:
            raise ValueError(
                f"output {out.dtype}{list(out.shape)} does not match reference "
                f"{ref.dtype}{list(ref.shape)}"
            )
        abs_diff, rel_diff, ratio = _leaf_diff(ref, out, compute_dtype, extra)
        max_abs, max_rel = max(max_abs, abs_diff), max(max_rel, rel_diff)
        ok = ok and ratio <= 1.0
        if ratio > worst_ratio:
            worst, worst_ratio = str(ref.dtype), ratio
    return NumericDiff(max_abs, max_rel, ok, worst), worst_ratio


TRAIN_PARTS = ("loss", "gradient", "batch_stats", "params")
NORMWISE_PARTS = ("gradient", "batch_stats")  # reductions over the batch: judged as vectors
ADAM_EPS = 1e-8  # optax.adamw's default eps, which the zoo's train steps use
# Normwise relative error allowed in a gradient leaf, by compute dtype. A gradient is a long chain
# of reductions (backpropagation through every layer): elementwise comparison is ill-posed where
# terms cancel, so the gradient is judged as a vector, ||out - ref|| / ||ref||. Measured on the
# zoo's tiny train steps (float32, CPU, fused vs unfused): gpt2, mlp and attention below 1e-4;
# resnet50 up to 3.2e-3 in its last stage, where BatchNorm normalizes over 8 values per channel
# (sums that cancel). A wrong gradient is off by O(1).
GRADIENT_RTOL = {"float64": 1e-9, "float32": 1e-2, "float16": 5e-2, "bfloat16": 1e-1}


def compare_train_steps(
    reference: Mapping[str, Any],
    outputs: Mapping[str, Any],
    compute_dtype: Any = None,
    learning_rate: float = 0.0,
) -> NumericDiff:
    """Judge one train step against a reference step taken from the same state.

    Args:
      reference: `{"loss", "gradient", "batch_stats", "params"}` of the reference step, each a
        pytree of host arrays ("gradient" may be None when the optimizer keeps no first moment;
        then parameters get no allowance); `params` and `gradient` leaves correspond.
      outputs: the same for the step to judge.
      compute_dtype: the precision the step computed in.
      learning_rate: the optimizer's learning rate (the size of Adam's first step).

    Returns:
      The NumericDiff over every part; `worst_part` names the part closest to its tolerance.
    """
    result, worst_ratio = None, -1.0
    max_abs = max_rel = 0.0
    ok = True
    for part in TRAIN_PARTS:
        if reference.get(part) is None:
            continue
        extra = None
        if part == "params" and reference.get("gradient") is not None:
            extra = _noise_allowance(reference["gradient"], compute_dtype, learning_rate)
        if part in NORMWISE_PARTS:
            diff, ratio = _compare_normwise(reference[part], outputs[part], compute_dtype)
        else:
            diff, ratio = _compare_trees(reference[part], outputs[part], compute_dtype, extra)
        max_abs, max_rel = max(max_abs, diff.max_abs_diff), max(max_rel, diff.max_rel_diff)
        ok = ok and diff.within_tolerance
        if ratio > worst_ratio:
            result, worst_ratio = (diff.worst_dtype, part), ratio
    worst_dtype, worst_part = result or (None, None)
    return NumericDiff(max_abs, max_rel, ok, worst_dtype, worst_part)


def gradient_tolerance(compute_dtype: Any) -> float:
    """The largest normwise relative error of a gradient leaf computed in `compute_dtype`."""
    name = np.dtype(compute_dtype).name if compute_dtype is not None else "float32"
    return GRADIENT_RTOL.get(name, GRADIENT_RTOL["float32"])


def _compare_normwise(reference: Any, outputs: Any, compute_dtype: Any):
    """(NumericDiff, worst ratio) judging each leaf by `||out - ref|| / ||ref||`."""
    limit = gradient_tolerance(compute_dtype)
    max_abs = max_rel = 0.0
    worst, worst_ratio = None, -1.0
    for ref, out in zip(jax.tree.leaves(reference), jax.tree.leaves(outputs), strict=True):
        r = np.asarray(ref, dtype=np.float64)
        o = np.asarray(out, dtype=np.float64)
        if r.shape != o.shape:
            raise ValueError(f"gradient shape {list(o.shape)} does not match {list(r.shape)}")
        if r.size == 0:
            continue
        error = float(np.linalg.norm(o - r) / max(np.linalg.norm(r), np.finfo(np.float64).tiny))
        max_abs = max(max_abs, float(np.abs(o - r).max()))
        max_rel = max(max_rel, error)
        if error / limit > worst_ratio:
            worst, worst_ratio = str(np.asarray(ref).dtype), error / limit
    return NumericDiff(max_abs, max_rel, worst_ratio <= 1.0, worst), worst_ratio


def _noise_allowance(
    gradient: Any, compute_dtype: Any, learning_rate: float, eps: float = ADAM_EPS
) -> list:
    """Per parameter element: how far Adam's first update moves when the gradient moves within
    its tolerance.

    The first update is `lr * g / (|g| + eps)`, increasing in g: over `[g - a, g + a]` (a: the
    gradient's allowed difference) it changes by at most the larger of its two one-sided
    changes. That is ~2 x lr where the interval crosses zero (the sign is noise), ~lr x a / |g|
    where |g| is near eps, and ~0 elsewhere.
    """

    def update(g):
        return g / (np.abs(g) + eps)

    allowances = []
    for grad in jax.tree.leaves(gradient):
        g = np.asarray(grad, dtype=np.float64)
        rtol, _ = _tolerance_for(np.asarray(grad).dtype, compute_dtype)
        a = gradient_tolerance(compute_dtype) * float(np.abs(g).max(initial=0.0)) + rtol * np.abs(g)
        change = np.maximum(np.abs(update(g + a) - update(g)), np.abs(update(g - a) - update(g)))
        allowances.append(learning_rate * change)
    return allowances


def _tolerance_for(dtype: Any, compute_dtype: Any) -> tuple[float, float]:
    rtol, atol_frac = tolerance(dtype)
    if compute_dtype is not None and np.dtype(dtype).kind in "fc":
        rtol, atol_frac = max((rtol, atol_frac), tolerance(compute_dtype))
    return rtol, atol_frac


def host_outputs(workload: Any, outputs: Any) -> Any:
    """What `judge_workload` compares, copied to the host.

    Args:
      workload: the `xlafuse.models.Workload` that produced `outputs`.
      outputs: what one call of its function returned.

    Returns:
      The outputs of a forward call, or of a user's step; for a zoo train step, the dict of
      `compare_train_steps`. Arrays that span processes (`jax.distributed`) are gathered
      first, on every process (`xlafuse.distributed.arrays.to_host`).
    """
    if not _zoo_train_step(workload):
        return to_host(outputs)

    new_leaves, loss = outputs
    state = workload.structured_state(to_host(new_leaves))
    return {
        "loss": to_host(loss),
        "gradient": gradient_of_first_step(state["opt_state"]),
        "batch_stats": state["batch_stats"],
        "params": state["params"],
    }


def judge_workload(workload: Any, reference: Any, outputs: Any) -> NumericDiff:
    """The numerics verdict of one call of a workload against the reference's call.

    Both arguments come from `host_outputs`; the rule is in this module's docstring.
    """
    if _zoo_train_step(workload):
        learning_rate = float(workload.config.get("learning_rate", 0.0))
        return compare_train_steps(reference, outputs, workload.dtype, learning_rate)
    return compare_outputs(reference, outputs, compute_dtype=workload.dtype)


def _zoo_train_step(workload: Any) -> bool:
    """A train step with the zoo's state (params, AdamW state, batch statistics), judged by the
    train rule; a user's step (`xlafuse.models.user`) has a state of its own, compared whole."""
    return workload.mode == "train" and workload.state_tree is not None


def _leaf_diff(
    ref: np.ndarray, out: np.ndarray, compute_dtype=None, extra_allowed=None
) -> tuple[float, float, float]:
    """(max abs diff, max rel diff, worst diff / allowed diff) of one array."""
    rtol, atol_frac = _tolerance_for(ref.dtype, compute_dtype)
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
    if extra_allowed is not None:
        allowed = allowed + extra_allowed
    tiny = np.finfo(np.float64).tiny
    # Elements near zero are judged against atol, so one 1e-30 reference does not dominate.
    rel = diff / np.maximum(mag, max(atol, tiny))
    ratio = float(np.max(np.where(diff == 0, 0.0, diff / np.maximum(allowed, tiny))))
    if not same_nonfinite:
        ratio = float("inf")
    return float(diff.max()), float(rel.max()), ratio
