"""Do two variants compute the same thing? Largest differences, judged with a dtype-aware tolerance.

Fused code is not bitwise equal to unfused code: XLA contracts a*b+c into one FMA, keeps
intermediates in registers at higher precision, and may reorder reductions. So outputs are compared
with a tolerance that scales with the precision the program computed in and with the size of the
values.

The one rule, used by `xlafuse run`, `xlafuse compare`, `xlafuse.measure`, `xlafuse tune` and the
report (`judge_workload`):

- An element passes when `|out - ref| <= atol + rtol * |ref|`, with `(rtol, atol_frac)` by dtype
  (float32 1e-4 / 1e-5, bfloat16 5e-2 / 1e-2, float16 1e-2 / 1e-3, float64 1e-9 / 1e-12, 8-bit
  and 4-bit floats 0.25 / 0.05; integers and booleans must match exactly) and
  `atol = atol_frac * max|ref|` over the array, so elements near zero are judged against the
  array's scale. When the computation ran in a lower precision than the outputs' dtype (a
  float32 loss of a bfloat16 model), the looser tolerance of the two applies. Non-finite values
  must match exactly (nan with nan, inf with inf of the same sign).
- The precision a program computed in is its workload's dtype, or lower where its float32 dots
  and convolutions ran lower (`computed_precision`, read from the optimized HLO and the
  device): on an NVIDIA GPU of compute capability 8.0 or above, a float32 dot or convolution
  below HIGHEST precision (JAX's default) runs in TF32, whose 10-bit mantissa is float16's, so
  it is judged at float16's tolerance ("tf32", `rules.TF32`); an explicit `algorithm=` names its
  own precision. On the CPU float32 dots are float32. The looser of the reference's program
  and the judged one applies, and the verdict names it (`NumericDiff.precision`).
- A forward call: every output.
- A train step (one step from the same state): the loss; the gradient, read from the optimizer's
  first moment (after one Adam step it is 0.1 x the gradient) and judged leaf by leaf as a
  vector: `||out - ref|| / ||ref||` at most `GRADIENT_RTOL` (float32 1e-2, TF32 and float16
  5e-2, bfloat16 1e-1); the batch statistics (means and variances over the batch), judged the
  same way; and the updated parameters, element by element. Adam's first step moves a parameter
  by `lr * g / (|g| + eps)`, +-lr whatever the gradient's size, so a gradient whose sign is
  rounding noise moves it either way: each parameter may also differ by as much as that update
  changes when its gradient moves within the gradient's tolerance (up to 2 x lr where the
  gradient is zero within tolerance, nothing where it is clearly not).
- A user's step (`(new_state, *outputs)`, `xlafuse.models.user`) whose state holds an
  Adam-family optimizer state after its first step (optax's: `count` 1, first moment `mu`) is
  judged by the same rule: the optimizer's moments as vectors ("gradient"), the parameters they
  belong to (found in the state by `mu`'s tree paths) element by element with the allowance,
  its learning rate read from the reference step (the largest parameter move), the rest of the
  state ("state") and its other outputs ("outputs") element by element. Any other step is
  compared whole, as a forward call.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from xlafuse.distributed.arrays import to_host
from xlafuse.kinds import Backend, Mode
from xlafuse.measurement.rules import LOW_PRECISION, TF32, TF32_MIN_COMPUTE_CAPABILITY, TOLERANCES
from xlafuse.models.train import ADAM_B1, gradient_of_first_step


def tolerance(dtype: Any) -> tuple[float, float]:
    """(rtol, relative atol) for comparing outputs of `dtype`; integers and bools must match."""
    dt = np.dtype(dtype)
    if dt.kind in "biu":
        return (0.0, 0.0)
    if dt.kind == "c":
        dt = np.dtype(np.float32 if dt.itemsize == 8 else np.float64)
    return TOLERANCES.get(dt.name, LOW_PRECISION)


TF32_NAME = "tf32"  # the one precision that is no dtype: float32's range, float16's mantissa


def precision_tolerance(precision: Any) -> tuple[float, float]:
    """(rtol, relative atol) of a computation in `precision`: a dtype, or "tf32"."""
    return TF32 if precision == TF32_NAME else tolerance(precision)


def precision_name(precision: Any) -> str:
    """ "tf32", or the dtype's name ("float32" for `np.float32`)."""
    return TF32_NAME if precision == TF32_NAME else np.dtype(precision).name


@dataclasses.dataclass(frozen=True)
class NumericDiff:
    """How far one set of outputs is from a reference set.

    Attributes:
      max_abs_diff: largest |out - ref| over every output element.
      max_rel_diff: largest |out - ref| / max(|ref|, tiny) over every element.
      within_tolerance: every output passes `np.allclose` with its dtype's tolerance.
      worst_dtype: the dtype of the output that came closest to (or past) its tolerance.
      worst_part: for a train step, the part that came closest ("loss", "gradient", "params",
        "batch_stats"; a user's step: "gradient", "params", "state", "outputs"); None for a
        forward call.
      precision: the precision the program computed in, whose tolerance judged its float
        outputs ("float32", "tf32", "bfloat16", ...; `judge_workload`); None when only the
        outputs' own dtypes judged them.
    """

    max_abs_diff: float
    max_rel_diff: float
    within_tolerance: bool
    worst_dtype: str | None = None
    worst_part: str | None = None
    precision: str | None = None

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
            "numerics_precision": self.precision,
        }


def compare_outputs(reference: Any, outputs: Any, *, compute_dtype: Any = None) -> NumericDiff:
    """Compare two pytrees of arrays leaf by leaf.

    Args:
      reference: the reference outputs.
      outputs: the outputs to judge.
      compute_dtype: the precision the outputs were computed in, when lower than their own dtype
        (a float32 loss of a bfloat16 model carries bfloat16 error; "tf32" for float32 dots
        that ran in TF32): the looser tolerance applies.

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
# TF32 has float16's mantissa: float16's allowance.
GRADIENT_RTOL = {
    "float64": 1e-9,
    "float32": 1e-2,
    TF32_NAME: 5e-2,
    "float16": 5e-2,
    "bfloat16": 1e-1,
}


def compare_train_steps(
    reference: Mapping[str, Any],
    outputs: Mapping[str, Any],
    *,
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
    judged = []
    for part in TRAIN_PARTS:
        if reference.get(part) is None:
            continue
        extra = None
        if part == "params" and reference.get("gradient") is not None:
            extra = _noise_allowance(reference["gradient"], compute_dtype, learning_rate)
        if part in NORMWISE_PARTS:
            judged.append((part, *_compare_normwise(reference[part], outputs[part], compute_dtype)))
        else:
            diff = _compare_trees(reference[part], outputs[part], compute_dtype, extra)
            judged.append((part, *diff))
    return _joined(judged)


def _joined(judged: list[tuple[str, NumericDiff, float]]) -> NumericDiff:
    """One NumericDiff of several parts' `(part, diff, worst ratio)`: the largest differences,
    every part within tolerance, the worst part the one closest to its tolerance."""
    result, worst_ratio = None, -1.0
    max_abs = max_rel = 0.0
    ok = True
    for part, diff, ratio in judged:
        max_abs, max_rel = max(max_abs, diff.max_abs_diff), max(max_rel, diff.max_rel_diff)
        ok = ok and diff.within_tolerance
        if ratio > worst_ratio:
            result, worst_ratio = (diff.worst_dtype, part), ratio
    worst_dtype, worst_part = result or (None, None)
    return NumericDiff(max_abs, max_rel, ok, worst_dtype, worst_part)


def gradient_tolerance(compute_dtype: Any) -> float:
    """The largest normwise relative error of a gradient leaf computed in `compute_dtype`."""
    name = precision_name(compute_dtype) if compute_dtype is not None else "float32"
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
        rtol, atol_frac = max((rtol, atol_frac), precision_tolerance(compute_dtype))
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
    state = workload.structured_state(leaves=to_host(new_leaves))
    return {
        "loss": to_host(loss),
        "gradient": gradient_of_first_step(state["opt_state"]),
        "batch_stats": state["batch_stats"],
        "params": state["params"],
    }


def judge_workload(
    workload: Any, reference: Any, outputs: Any, *, precision: str | None = None
) -> NumericDiff:
    """The numerics verdict of one call of a workload against the reference's call.

    Args:
      workload: the workload both calls are of.
      reference, outputs: the two calls' outputs, from `host_outputs`.
      precision: the precision the programs' float32 dots and convolutions ran at when lower
        (`computed_precision` of the reference's program and the judged one: "tf32" on an
        NVIDIA GPU at default precision); None when they ran at their dtype, or are unknown.

    Returns:
      The verdict by the rule of this module's docstring, judged at the looser of the
      workload's dtype and `precision`, which its `precision` names.
    """
    judging = judging_precision(workload.dtype, precision=precision)
    if _zoo_train_step(workload):
        learning_rate = float(workload.config.get("learning_rate", 0.0))
        diff = compare_train_steps(
            reference, outputs, compute_dtype=judging, learning_rate=learning_rate
        )
    elif workload.mode == Mode.TRAIN:
        diff = compare_user_steps(
            reference, outputs, lambda: to_host(workload.args[0]), compute_dtype=judging
        )
    else:
        diff = compare_outputs(reference, outputs, compute_dtype=judging)
    return dataclasses.replace(diff, precision=judging)


def judging_precision(dtype: Any, *, precision: str | None = None) -> str:
    """The precision a program of `dtype` is judged at: the looser of its dtype and the
    `precision` its dots ran at ("tf32" for a float32 program on TF32; a bfloat16 program stays
    bfloat16)."""
    name = precision_name(dtype)
    if precision is None:
        return name
    return max((name, precision_name(precision)), key=precision_tolerance)


# A user's step: (new_state, *outputs), its state compared by tree path.
STATE = "[0]"  # the path key of a step's new state in its outputs


def compare_user_steps(
    reference: Any, outputs: Any, before: Any, *, compute_dtype: Any = None
) -> NumericDiff:
    """Judge a user's step `(new_state, *outputs)` against a reference step from the same state.

    Args:
      reference, outputs: the two steps' outputs on the host.
      before: the state both steps started from (host arrays), or a function returning it
        (called only when the state holds an optimizer's first step).
      compute_dtype: the precision the step computed in.

    Returns:
      By the train rule (this module's docstring) when the new state holds an Adam-family
      optimizer state after its first step; else `compare_outputs` of the whole outputs.

    Raises:
      ValueError: the outputs differ in structure, shapes or dtypes.
    """
    found = _first_moment(reference)
    if found is None:
        return compare_outputs(reference, outputs, compute_dtype=compute_dtype)
    if jax.tree.structure(reference) != jax.tree.structure(outputs):
        return compare_outputs(
            reference, outputs, compute_dtype=compute_dtype
        )  # raises, naming both
    moments, mu = found
    ref_leaves, out_leaves = _keyed(reference), [leaf for _, leaf in _keyed(outputs)]
    params = _parameters_of(ref_leaves, moments, mu)
    before = before() if callable(before) else before
    initial = dict(_keyed((before,)))  # keyed as the new state is: under "[0]"
    groups, gradient, moves = _user_groups(ref_leaves, out_leaves, params, moments, initial)
    learning_rate = float(np.concatenate(moves).max(initial=0.0)) if moves else 0.0
    allowances = _noise_allowance(gradient, compute_dtype, learning_rate) if gradient else []
    judged = []
    for part, (refs, outs, extras) in groups.items():
        if part == "gradient":
            judged.append((part, *_compare_normwise(refs, outs, compute_dtype)))
            continue
        extra = [None if i is None else allowances[i] for i in extras]
        judged.append((part, *_compare_trees(refs, outs, compute_dtype, extra)))
    return _joined(judged)


def _user_groups(ref_leaves, out_leaves, params, moments, initial):
    """The leaves of two user steps grouped by the part of the train rule each is judged by.

    Returns:
      (groups, gradient, moves): part -> (reference leaves, output leaves, the index into
      `gradient` of each parameter's gradient, else None); the gradient of each parameter
      recovered from its first moment; each parameter's move from `initial` (its value
      before the step), flattened.
    """
    groups: dict[str, tuple[list, list, list]] = {}
    gradient, moves = [], []
    for (path, ref), out in zip(ref_leaves, out_leaves, strict=True):
        part = _user_part(path, moments)
        extra = None
        if path in params:
            part, g = "params", np.asarray(params[path], dtype=np.float64) / (1.0 - ADAM_B1)
            gradient.append(g)
            extra = len(gradient) - 1
            start = initial.get(path)
            if start is not None and np.shape(start) == np.shape(ref):
                moves.append(np.abs(np.asarray(ref, np.float64) - np.asarray(start)).ravel())
        refs, outs, extras = groups.setdefault(part, ([], [], []))
        refs.append(ref)
        outs.append(out)
        extras.append(extra)
    return groups, gradient, moves


def _keyed(tree: Any, is_leaf: Any = None) -> list[tuple[tuple[str, ...], Any]]:
    """The leaves of a pytree with their paths, each key as `jax.tree_util.keystr` writes it."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_leaf)
    return [(tuple(jax.tree_util.keystr((k,)) for k in path), leaf) for path, leaf in flat]


def _is_moment_state(node: Any) -> bool:
    """An Adam-family optimizer state (optax's `ScaleByAdamState`, ...): a count and a first
    moment `mu`."""
    return hasattr(node, "mu") and hasattr(node, "count")


def _first_moment(reference: Any):
    """(the paths of every optimizer-moment state in the new state, the first moment `mu` of
    the first that has taken exactly one step), or None when none has."""
    if not isinstance(reference, tuple | list) or not reference:
        return None
    nodes = [
        (path, node)
        for path, node in _keyed(reference, is_leaf=_is_moment_state)
        if path[:1] == (STATE,) and _is_moment_state(node)
    ]
    for _, node in nodes:
        count = np.asarray(node.count)
        if count.size and np.issubdtype(count.dtype, np.number) and np.all(count == 1):
            return [path for path, _ in nodes], node.mu
    return None


def _parameters_of(leaves, moments, mu) -> dict[tuple[str, ...], Any]:
    """The new state's parameters that `mu` is the first moment of, by path: the first
    subtree outside the optimizer's state whose arrays sit at `mu`'s paths with its shapes;
    each mapped to its leaf of `mu`. Empty when none is."""
    shapes = {
        path: np.shape(leaf)
        for path, leaf in leaves
        if path[:1] == (STATE,) and not _under(path, moments)
    }
    firsts = _keyed(mu)
    if not firsts:
        return {}
    tail, shape = firsts[0][0], np.shape(firsts[0][1])
    for path, own in shapes.items():
        if own != shape or (tail and path[-len(tail) :] != tail):
            continue
        prefix = path[: len(path) - len(tail)]
        if all(shapes.get(prefix + q) == np.shape(m) for q, m in firsts):
            return {prefix + q: m for q, m in firsts}
    return {}


def _under(path: tuple[str, ...], prefixes: list[tuple[str, ...]]) -> bool:
    return any(path[: len(p)] == p for p in prefixes)


def _user_part(path: tuple[str, ...], moments: list[tuple[str, ...]]) -> str:
    """ "gradient" for an optimizer's moments (its count is "state"), "state" for the rest of
    the new state, "outputs" for the step's other outputs."""
    for prefix in moments:
        if path[: len(prefix)] == prefix:
            return "state" if path[len(prefix) : len(prefix) + 1] == (".count",) else "gradient"
    return "state" if path[:1] == (STATE,) else "outputs"


# The precision of a program's float32 dots and convolutions, from its optimized HLO.
_MATMUL = re.compile(
    r"=\s*\(?\s*(?P<type>[a-z][a-z0-9]*)\[(?:/\*index=\d+\*/|[^=])*?"
    r"\s(?P<op>dot|convolution|custom-call)\("
)
_LIBRARY_CALL = re.compile(r'custom_call_target="(__cublas\$(?![^"]*f8)[^"]*|__cudnn\$conv[^"]*)"')
_ALGORITHM = re.compile(r'algorithm[=":]+\s*"?(?:ALG_)?(?P<name>DOT_\w+|dot_\w+)', re.IGNORECASE)
_OPERAND_PRECISION = re.compile(r'operand_precision(?:=\{(?P<text>[^}]*)\}|":\[(?P<json>[^\]]*)\])')


def dot_precision(
    hlo_text: str, *, backend: str, compute_capability: str | float | None = None
) -> str | None:
    """The lowest precision the float32 dots and convolutions of a program ran at, when below
    float32.

    Each float32 `dot`, `convolution` and cuBLAS or cuDNN convolution call of the optimized
    HLO: an explicit algorithm (`algorithm=dot_tf32_tf32_f32`, a GEMM's `"algorithm"`) names
    its precision; a cuDNN algorithm with `TENSOR_OP_MATH` ran in TF32; otherwise HIGHEST
    operand precision is float32, and anything below it (DEFAULT, HIGH: JAX's default) is TF32
    on an NVIDIA GPU of compute capability `rules.TF32_MIN_COMPUTE_CAPABILITY` or above (unless
    `NVIDIA_TF32_OVERRIDE=0` turns TF32 off), float32 elsewhere (the CPU).

    Args:
      hlo_text: the program's optimized HLO text (`CompiledVariant.hlo_text`).
      backend: "cpu" or "gpu".
      compute_capability: the GPU's, e.g. "9.0" (`device_compute_capability`); None when not
        an NVIDIA GPU.

    Returns:
      "tf32", "bfloat16", ... ; None when every float32 dot ran in float32, or there is none.
    """
    default = TF32_NAME if _tf32_by_default(backend, compute_capability) else "float32"
    lowest = None
    for line in hlo_text.splitlines():
        if "dot(" not in line and "convolution(" not in line and "custom-call(" not in line:
            continue
        match = _MATMUL.search(line)
        if match is None or match["type"] != "f32":
            continue
        if match["op"] == "custom-call" and not _LIBRARY_CALL.search(line):
            continue
        ran = _line_precision(line, default)
        if ran != "float32" and (lowest is None or _looser(ran, lowest)):
            lowest = ran
    return lowest


def _tf32_by_default(backend: str, compute_capability: str | float | None) -> bool:
    if backend != Backend.GPU or compute_capability is None:
        return False
    if os.environ.get("NVIDIA_TF32_OVERRIDE") == "0":
        return False
    try:
        return float(compute_capability) >= TF32_MIN_COMPUTE_CAPABILITY
    except ValueError:  # not an NVIDIA compute capability (a ROCm gfx name)
        return False


def _line_precision(line: str, default: str) -> str:
    """The precision one float32 dot or convolution instruction ran at."""
    algorithm = _ALGORITHM.search(line)
    if algorithm is not None:  # ALG_UNSET names none
        return _algorithm_precision(algorithm["name"].lower())
    if "TENSOR_OP_MATH" in line:
        return TF32_NAME
    operands = _OPERAND_PRECISION.search(line)
    if operands is not None:
        named = (operands["text"] or operands["json"] or "").replace('"', "").lower().split(",")
        if named and all(p.strip() == "highest" for p in named):
            return "float32"
    return default


def _algorithm_precision(name: str) -> str:
    """An XLA dot algorithm (`dot_bf16_bf16_f32_x6`) as the precision it computes at."""
    if name.startswith(("dot_f32", "dot_f64")) or name.endswith(("_x6", "_x9")):
        return "float32"
    if "tf32" in name:
        return "float32" if name.endswith("_x3") else TF32_NAME
    if name.endswith("_x3"):
        return TF32_NAME  # bf16 x3 keeps about as many bits as TF32 (a little more)
    if "f16_f16" in name and "bf16" not in name:
        return "float16"
    return "bfloat16"


def _looser(a: str, b: str) -> bool:
    return precision_tolerance(a) > precision_tolerance(b)


def device_compute_capability(backend: str) -> str | None:
    """The compute capability of the first GPU ("9.0"); None off an NVIDIA GPU."""
    if backend != Backend.GPU:
        return None
    try:
        devices = jax.devices("gpu")
    except RuntimeError:  # no GPU backend in this process
        return None
    return getattr(devices[0], "compute_capability", None) if devices else None


def computed_precision(*programs: Any) -> str | None:
    """The lowest precision the float32 dots of any of `programs` ran at (`dot_precision`),
    on this process's device; None when all ran in float32.

    Args:
      programs: `CompiledVariant`s (their `hlo_text` and `backend`), None for one not known.
    """
    lowest = None
    for program in programs:
        text = getattr(program, "hlo_text", None)
        if not text:
            continue
        backend = program.backend
        ran = dot_precision(
            text, backend=backend, compute_capability=device_compute_capability(backend)
        )
        if ran is not None and (lowest is None or _looser(ran, lowest)):
            lowest = ran
    return lowest


def _zoo_train_step(workload: Any) -> bool:
    """A train step with the zoo's state (params, AdamW state, batch statistics), judged by the
    train rule; a user's step (`xlafuse.models.user`) has a state of its own, compared whole."""
    return workload.mode == Mode.TRAIN and workload.state_tree is not None


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
