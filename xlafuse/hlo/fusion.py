"""Kernels, fusion clusters, kinds and source attribution of an optimized HLO module.

What counts (documented here because every number in a report rests on it):

* Executed computations: the ENTRY computation, and, transitively, while bodies and conditions,
  conditional branches, `call` targets and `async-start` wrapped computations. Fused computations
  (`calls=` of a fusion) and reducers (`to_apply=` of reduce, sort, scatter, all-reduce, ...) are
  not executed on their own. Each executed computation is counted ONCE in `kernels` (the
  distinct kernels of the program text: a while body that runs 16 times counts once).
* Per call (`loops`): `launches_per_call`, `modeled_bytes_per_call` and `flops_per_call` count
  each kernel as often as its computation runs in one call: a loop body by XLA's known trip
  count (nested loops multiplied), every branch of a conditional as taken (an upper bound);
  `per_call_basis` says which. Where a kernel's computation runs an unknown number of times (a
  loop without a known trip count), the three are None and the basis is "per iteration, trip
  count unknown": `modeled_bytes` and `flops`, one run of each kernel, are then all there is.
* Kernels (launches): in executed computations, every `fusion` and `fusion-start` instruction,
  every library custom-call (cuBLAS, cuDNN, YNNPACK, ...; a hand-written kernel: Pallas Triton
  `__gpu$xla.gpu.triton`, Pallas Mosaic GPU `mosaic_gpu*`, jax-triton `triton_kernel_call`, one
  kernel each, its modeled bytes its operands and results; not annotation targets such as
  "Sharding"), and every other instruction that does work (copy, sort, rng, dot/convolution left
  unwrapped on the CPU, collectives as their `-start` or sync form). Not kernels: parameter,
  constant, bitcast, tuple, get-tuple-element, while, conditional, call, async-start (its wrapped
  computation is counted instead), `*-done`/`*-update`, after-all, add-dependency, opt-barrier.
* Fusions: instructions whose opcode is exactly `fusion` in executed computations (an async
  `fusion-start` is a kernel but not counted here, to match XLA's own instruction count);
  `kinds` counts the same instructions by their `kind=`.
* Compute ops of a fusion: the instructions of its fused computation (and nested fusions),
  except parameter, constant, bitcast, tuple and get-tuple-element.
* Modeled bytes (see `traffic`): summed over the kernels whose shapes all have a known size; a
  kernel with an instruction printed without a shape or an unbounded dim (`f32[?,8]`) is counted
  in `unsized_kernels` instead, never guessed.
* FLOPs (see `flops`): counted per kernel from its shapes and attributes (a fusion: over its
  fused computations); `flops` sums the kernels whose count is known, and a kernel that cannot
  be counted (a sort, an unknown custom-call, a shape of unknown size) is counted in
  `flops_unknown_kernels` instead, never guessed. Like `kernels`, one run of each kernel;
  `flops_per_call` counts them per call (above).
* XLA's estimate (`KernelInfo.predicted_us`, `xlafuse.hlo.estimates`): a fusion's or library
  call's own, from its backend_config, when compiled with `xla_gpu_collect_cost_model_stats` (a
  text without a filled `reification_cost` is not looked into); None for other ops, for a kernel
  without one, and where every entry is a sentinel.
* A real fusion has >= 2 compute ops, not counting a broadcast of a scalar (it costs nothing in a
  fused loop). So a fusion-wrapper single-op `wrapped_*` fusion, and `relu` = max(x, broadcast(0)),
  are not real fusions; mul+add+max is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from itertools import compress
from operator import attrgetter, itemgetter
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from xlafuse.errors import HloParseError
from xlafuse.hlo.dump import read_hlo
from xlafuse.hlo.estimates import has_estimates, predicted
from xlafuse.hlo.flops import (
    ELEMENTWISE_OPCODES,
    ZERO_FLOP_OPCODES,
    elementwise_flops,
    kernel_flops,
)
from xlafuse.hlo.ir import Computation, HloModule, Instruction, _balanced
from xlafuse.hlo.loops import PER_ITERATION, per_call_basis, runs_per_call
from xlafuse.hlo.parse import parse_hlo
from xlafuse.hlo.traffic import FREE_OPCODES, in_place_savings, kernel_bytes
from xlafuse.kinds import FusionKind

_NOT_LAUNCH = FREE_OPCODES | {
    "while", "conditional", "call", "async-start", "after-all", "add-dependency",
    "opt-barrier", "optimization-barrier", "domain", "partition-id", "replica-id",
}  # fmt: skip
_NOT_LAUNCH_TARGETS = frozenset(
    {
        "Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "MoveToHost",
        "MoveToDevice", "annotate_device_placement", "LayoutConstraint", "AllocateBuffer",
    }
)  # fmt: skip
_FUSION_OPCODES = ("fusion", "fusion-start")
# Opcodes whose called computations run as computations (not fused bodies or reducers).
_RUNS_COMPUTATIONS = frozenset({"while", "conditional", "async-start", "call"})
_GPU_HINTS = (
    '"operation_queue_id"', '"device_type"', "__cublas", "__cudnn", "__triton", "__gpu$",
    "mosaic_gpu", "triton_kernel_call",
)  # fmt: skip
_CPU_HINTS = ("__ynn", "__xnn", "xla.cpu", "__onednn", "outer_dimension_partitions")
_HINTS = _GPU_HINTS + _CPU_HINTS
_GPU_FILE = re.compile(r"gpu_after_optimizations|\.sm_\d")
_is_real_fusion = attrgetter("is_real_fusion")
_kind_of = attrgetter("kind")
_computation_of = attrgetter("computation")
_bytes_in = attrgetter("bytes_in")
_bytes_out = attrgetter("bytes_out")
_sized = attrgetter("sized")
_flops_of = attrgetter("flops")
_opcode_of = itemgetter(Instruction._fields.index("opcode"))
_op_name_of = itemgetter(Instruction._fields.index("op_name"))


class KernelInfo(NamedTuple):
    """One launch: a fusion, a library custom-call, or another op that runs as its own kernel.

    A named tuple: a report holds one per kernel (1e4 and more for a large module), and a tuple
    is made in a third of the time of an object with a `__dict__`.
    """

    name: str
    computation: str
    opcode: str
    kind: str
    sub_kind: str | None
    ops: tuple[str, ...]
    num_ops: int
    is_real_fusion: bool
    bytes_in: int
    bytes_out: int
    op_names: tuple[str, ...]
    source_lines: tuple[str, ...]
    sized: bool = True  # False: a shape has no known size; bytes_in and bytes_out are 0
    flops: int | None = None  # `xlafuse.hlo.flops`; None: an op or shape it cannot count
    # XLA's own estimate of its time, `xlafuse.hlo.estimates` (compiled with
    # COST_MODEL_OPTION); None: not compiled so, a library call, or only a sentinel
    predicted_us: float | None = None
    predicted_model: str | None = None  # the cost model `predicted_us` is from

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict of the fields (tuples become lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self._asdict().items()}


# (name, computation, ...: every field in order) -> KernelInfo, without a Python call
_kernel_info = partial(tuple.__new__, KernelInfo)


@dataclass(frozen=True)
class FusionReport:
    """Kernel and fusion counts of one module (see the module docstring for what counts)."""

    module: str
    backend: str | None
    kernels: int
    fusions: int
    real_fusions: int
    custom_calls: int
    custom_call_targets: Mapping[str, int] = field(hash=False)
    kinds: Mapping[str, int] = field(hash=False)
    entry_fusions: int = 0
    modeled_bytes: int = 0
    kernel_details: tuple[KernelInfo, ...] = ()
    unsized_kernels: int = 0  # kernels left out of modeled_bytes: a shape of unknown size
    flops: int = 0  # summed over the kernels whose FLOPs are known (`xlafuse.hlo.flops`)
    flops_unknown_kernels: int = 0  # kernels left out of flops: KernelInfo.flops is None
    launches_per_call: int | None = None  # kernels times their runs per call (None: unknown)
    modeled_bytes_per_call: int | None = None  # modeled_bytes, each kernel times its runs
    flops_per_call: int | None = None  # flops, each kernel times its runs
    per_call_basis: str = "per call"  # what the three count (`loops.per_call_basis`)
    # computation -> times it runs per call (`loops.runs_per_call`, every conditional branch
    # counted as taken; None: trip count unknown)
    runs: Mapping[str, int | None] = field(default_factory=dict, hash=False, compare=False)

    def runs_of(self, kernel: KernelInfo) -> int | None:
        """Times `kernel` launches in one call (None: its loop's trip count is unknown)."""
        return self.runs.get(kernel.computation, 1)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict: mappings become dicts, kernel_details a list of dicts (`runs` left
        out: the inspect JSON's schema)."""
        out = {k: v for k, v in self.__dict__.items() if k not in ("kernel_details", "runs")}
        out["custom_call_targets"] = dict(self.custom_call_targets)
        out["kinds"] = dict(self.kinds)
        out["kernel_details"] = [k.to_dict() for k in self.kernel_details]
        return out


def analyze_module(module: HloModule) -> FusionReport:
    """Counts kernels, fusions and modeled bytes of a parsed module.

    Args:
        module: a module from `parse_hlo`.

    Returns:
        The module's `FusionReport`. `modeled_bytes` sums the kernels whose shapes all have a
        known size; `unsized_kernels` counts the others (never guessed).

    Raises:
        HloParseError: a fusion whose fused computation calls itself (a cycle XLA rejects), or
            fusions nested too deeply to walk.
    """
    kernels = _kernels(module)
    entry = module.entry
    fusions = [k for k in kernels if k.opcode == "fusion"]
    custom = [k for k in kernels if k.opcode == "custom-call"]
    flops = list(map(_flops_of, kernels))
    runs = runs_per_call(module, branches_taken=True)
    return FusionReport(
        module=module.name,
        backend=infer_backend(module),
        kernels=len(kernels),
        fusions=len(fusions),
        # sums over map(attrgetter): the loops run in C, not as generators (one per kernel)
        real_fusions=sum(map(_is_real_fusion, kernels)),
        custom_calls=len(custom),
        custom_call_targets=MappingProxyType(_counts(k.sub_kind or "" for k in custom)),
        kinds=MappingProxyType(_counts(map(_kind_of, fusions))),
        entry_fusions=list(map(_computation_of, fusions)).count(entry.name),
        modeled_bytes=sum(map(_bytes_in, kernels)) + sum(map(_bytes_out, kernels)),
        kernel_details=tuple(kernels),
        unsized_kernels=len(kernels) - sum(map(_sized, kernels)),
        flops=sum(filter(None, flops)),  # None and 0 left out alike, in C
        flops_unknown_kernels=flops.count(None),
        **_per_call(module, kernels, flops, runs),
        runs=MappingProxyType(runs),
    )


def _per_call(
    module: HloModule, kernels: list[KernelInfo], flops: list[int | None], runs: dict
) -> dict[str, Any]:
    """The per-call fields of a report: each kernel times its computation's runs."""
    basis = per_call_basis(module, runs, {k.computation for k in kernels})
    if basis == PER_ITERATION:
        return {"per_call_basis": basis}
    times = [runs[k.computation] for k in kernels]
    return {
        "launches_per_call": sum(times),
        "modeled_bytes_per_call": sum(
            (k.bytes_in + k.bytes_out) * n for k, n in zip(kernels, times, strict=True)
        ),
        "flops_per_call": sum(f * n for f, n in zip(flops, times, strict=True) if f),
        "per_call_basis": basis,
    }


def _kernels(module: HloModule) -> list[KernelInfo]:
    """Every launch of the executed computations, in program order (see `analyze_module`)."""
    kernels: list[KernelInfo] = []
    instr: Instruction | None = None
    # XLA's estimates are read only from a text that holds one (most hold none: no look)
    estimated = has_estimates(module.text) if module.text else True
    try:
        for comp in executed_computations(module):
            for instr in comp.instructions:
                launch = _LAUNCHES[instr.opcode]
                if launch is _OP or (
                    launch is _CUSTOM_CALL and instr.custom_call_target not in _NOT_LAUNCH_TARGETS
                ):
                    kernels.append(_single_op_kernel(module, comp, instr, estimated))
                elif launch is _FUSION:
                    kernels.append(_fusion_kernel(module, comp, instr, estimated))
    except RecursionError:
        line = instr.line if instr else None
        raise HloParseError(
            "fusions nested too deeply to walk", line=line, source=module.source
        ) from None
    return kernels


def _counts(values) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:  # most modules count a few values: a Counter costs more to make
        counts[value] = counts.get(value, 0) + 1
    return counts


def analyze_hlo(text_or_path: str | Path) -> FusionReport:
    """Parses HLO (text, or a path to a file) and analyzes it.

    Args:
        text_or_path: HLO text, or a str/Path naming a file of HLO text.

    Returns:
        The module's `FusionReport`.

    Raises:
        HloParseError: malformed text, a binary file, or a path that does not exist.
    """
    text, source = read_hlo(text_or_path)
    return analyze_module(parse_hlo(text, source=source))


def executed_computations(module: HloModule) -> list[Computation]:
    """The ENTRY computation and those it runs (loops, branches, calls), each once, in BFS order."""
    entry = module.entry
    seen = {entry.name}
    order = [entry]
    for comp in order:  # grows while iterating: a breadth-first walk
        for instr in [i for i in comp.instructions if i.opcode in _RUNS_COMPUTATIONS]:
            for name in instr.called_computations:
                comp_ = _lookup(module, name)
                if comp_ is not None and name not in seen:
                    seen.add(name)
                    order.append(comp_)
    return order


def infer_backend(module: HloModule) -> str | None:
    """ "gpu" or "cpu" from the file name, custom-call targets and backend_config; else None."""
    if module.source and _GPU_FILE.search(Path(module.source).name):
        return "gpu"
    if module.text and not _may_hold_hint(module.text):
        return None  # no hint in any attribute that holds one
    for comp in module.computations:
        for instr in comp.instructions:
            raw = getattr(instr.attributes, "text", None)  # as printed: skip it unsplit
            if raw is not None and not _has_hint(raw):
                continue
            text = (instr.attributes.get("backend_config") or "") + (
                instr.attributes.get("custom_call_target") or ""
            )
            if any(h in text for h in _GPU_HINTS):
                return "gpu"
            if any(h in text for h in _CPU_HINTS):
                return "cpu"
    return None


def _may_hold_hint(text: str) -> bool:
    """Whether a hint may be in a `backend_config` or `custom_call_target` value of the module's
    text; never False where one is. Each value is looked at on its own line, rather than the
    whole text searched for each hint (ten scans of a 4 MB module: 20 ms). A line that does not
    hold its value whole (a value on the next line, open brackets or quotes, a comment) answers
    True: the instructions' own attributes then decide."""
    for key in _HINT_KEYS:
        at = text.find(key)
        while at >= 0:
            end = text.find("\n", at)
            line = text[at : end if end >= 0 else len(text)]
            if any(map(line.__contains__, _HINTS)):
                return True
            value = line[len(key) :].strip(" \t\r=")
            if not value or "//" in line or "/*" in line or not _balanced(line):
                return True
            at = text.find(key, at + len(key))
    return False


_HINT_KEYS = ("backend_config", "custom_call_target")


def _has_hint(text: str) -> bool:
    """Whether a backend hint can be in the text: the two attribute names that hold hints are
    looked for first (most texts have neither; two scans of a large text cost less than ten)."""
    if "backend_config" not in text and "custom_call_target" not in text:
        return False
    return any(map(text.__contains__, _HINTS))


_NONE, _FUSION, _CUSTOM_CALL, _OP = "none", "fusion", "custom-call", "op"


class _Launches(dict):
    """Opcode -> how it launches, decided on the first look-up of each opcode; then a dict
    subscript (half the time of an `lru_cache` call, once per instruction analyzed)."""

    def __missing__(self, opcode: str) -> str:
        launch = self[opcode] = _launch_of(opcode)
        return launch


def _launch_of(opcode: str) -> str:
    """How an opcode launches: not at all, as a fusion, as a custom-call (a launch unless its
    target is an annotation), or as one op."""
    if opcode in _NOT_LAUNCH or opcode.endswith(("-done", "-update")):
        return _NONE
    if opcode in _FUSION_OPCODES:
        return _FUSION
    return _CUSTOM_CALL if opcode == "custom-call" else _OP


_LAUNCHES = _Launches()


def _single_op_kernel(
    module: HloModule, comp: Computation, instr: Instruction, estimated: bool
) -> KernelInfo:
    """A launch that is one instruction (most kernels): built without a list of its ops; a
    library call's estimate read only from a module that holds estimates."""
    opcode = instr.opcode
    sized = kernel_bytes(instr, comp)
    bytes_in, bytes_out = sized or (0, 0)
    # free and elementwise ops (most kernels) without a call; a sized kernel's output is sized
    if opcode in ZERO_FLOP_OPCODES:
        flops = 0
    elif opcode in ELEMENTWISE_OPCODES and sized is not None:
        flops = instr.shape.num_elements
    else:
        flops = kernel_flops(instr, comp, module)
    op_name, source_file = instr.op_name, instr.source_file
    estimate = None
    if estimated and opcode == "custom-call":
        estimate = predicted(instr.attributes.get("backend_config"))
    return _kernel_info((
        instr.name, comp.name, opcode, opcode,
        instr.custom_call_target if opcode == "custom-call" else None, (opcode,), 1, False,
        bytes_in, bytes_out, (op_name,) if op_name else (),
        (f"{source_file}:{instr.source_line}",) if source_file else (), sized is not None, flops,
        estimate and estimate.exec_time_us, estimate and estimate.model,
    ))  # fmt: skip


def _fusion_kernel(
    module: HloModule, comp: Computation, instr: Instruction, estimated: bool
) -> KernelInfo:
    inner, complete = _fused_instructions(module, instr, (comp.name,))
    if inner:
        compute = [i for i in inner if i.opcode not in FREE_OPCODES]
        opcodes = tuple(map(_opcode_of, compute))
        weighty = len(compute)
        if "broadcast" in opcodes:  # only a broadcast (of a scalar) weighs nothing
            by_name = {i.name: i for i in inner}
            broadcasts = compress(compute, map("broadcast".__eq__, opcodes))
            weighty -= sum(_scalar_broadcast(i, by_name) for i in broadcasts)
        ops = [instr, *compute]
        op_names = _distinct(map(_op_name_of, ops))
        source_lines = _distinct(f"{i.source_file}:{i.source_line}" for i in ops if i.source_file)
    else:
        compute = [instr]
        opcodes = (instr.opcode,)
        weighty = 0
        op_names = (instr.op_name,) if instr.op_name else ()
        source_lines = (f"{instr.source_file}:{instr.source_line}",) if instr.source_file else ()
    sized = kernel_bytes(instr, comp)
    bytes_in, bytes_out = sized or (0, 0)
    if sized is not None and len(set(instr.operands)) == len(instr.operands):
        fused = _lookup(module, instr.called_computations[0]) if instr.called_computations else None
        if fused is not None:
            read, written = in_place_savings(fused)
            bytes_in, bytes_out = bytes_in - read, bytes_out - written
    # a fusion of elementwise and free ops (most) from its ops at hand; the others walked again
    flops = elementwise_flops(compute, opcodes) if inner and complete else None
    if flops is None:
        flops = kernel_flops(instr, comp, module)
    estimate = predicted(instr.attributes.get("backend_config")) if estimated else None
    return _kernel_info((
        instr.name, comp.name, instr.opcode, instr.fusion_kind or FusionKind.LOOP,
        instr.backend_kind,
        opcodes, len(compute), weighty >= 2, bytes_in, bytes_out, op_names, source_lines,
        sized is not None, flops, estimate and estimate.exec_time_us, estimate and estimate.model,
    ))  # fmt: skip


def _fused_instructions(
    module: HloModule, instr: Instruction, calling: tuple[str, ...]
) -> tuple[list[Instruction], bool]:
    """Instructions of a fusion's fused computation, nested fusions expanded in place, and
    whether every computation named was found (one that is not is left out).

    Raises:
        HloParseError: a fused computation that calls itself, directly or through others.
    """
    out: list[Instruction] = []
    complete = True
    for name in instr.attributes.get("calls", "").strip("{}").replace("%", "").split(","):
        comp = _lookup(module, name.strip())
        if comp is None:
            complete = False
            continue
        if comp.name in calling:
            raise HloParseError(
                f"fusion %{instr.name} calls computation {comp.name!r} inside itself "
                f"({' -> '.join((*calling, comp.name))}): a cycle, which XLA rejects",
                line=instr.line,
                source=module.source,
            )
        instructions = comp.instructions
        if "fusion" not in map(_opcode_of, instructions):  # most: no nested fusion, in C
            out.extend(instructions)
            continue
        for inner in instructions:
            if inner.opcode == "fusion":
                nested, found = _fused_instructions(module, inner, (*calling, comp.name))
                out.extend(nested)
                complete &= found
            else:
                out.append(inner)
    return out, complete


def _lookup(module: HloModule, name: str) -> Computation | None:
    try:
        return module.computation(name)
    except KeyError:
        return None


def _scalar_broadcast(instr: Instruction, by_name: Mapping[str, Instruction]) -> bool:
    if instr.opcode != "broadcast" or not instr.operands:
        return False
    source = by_name.get(instr.operands[0])
    return source is not None and not source.shape.is_tuple and not source.shape.dims


def _distinct(values) -> tuple[str, ...]:
    return tuple(dict.fromkeys(filter(None, values)))
