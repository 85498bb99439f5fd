"""The JSON schema of `xlafuse inspect --json`: `InspectResult` and what it holds.

JSON schema (`InspectResult.to_json()`, `xlafuse inspect --json`), version "xlafuse.inspect/1".
Every key is always present; values are null where they do not apply::

    schema          "xlafuse.inspect/1"
    target          str: the path, or "workload NAME (SIZE, MODE)"
    target_kind     "file" | "folder" | "workload"
    path            str | null: the HLO file inspected (null for a workload or a folder listing)
    module          str | null: the HLO module name
    backend         "gpu" | "cpu" | null (null when the HLO does not say)
    variant         str | null: the variant a workload was compiled under
    thunk_launches  int | null: launches in the thunk sequence file beside the HLO, if any
    warnings        [str]
    -- the FusionReport's summary (null for a folder listing without a chosen module) --
    kernels, fusions, real_fusions, custom_calls, entry_fusions, modeled_bytes    int
    kinds                {fusion kind ("kLoop", "kInput", "kOutput", "kCustom"): count}
    custom_call_targets  {custom-call target: count}
    flops                int: FLOPs summed over the kernels whose count is known
    flops_unknown_kernels  int: kernels whose FLOPs cannot be counted (left out of flops)
    launches_per_call, modeled_bytes_per_call, flops_per_call
                         int | null: each kernel counted as often as it runs in one call (a
                         loop body times its trip count); null where a trip count is unknown
    per_call_basis       str: what the per-call figures count ("per call"; with conditionals,
                         every branch counted as taken; "per iteration, trip count unknown")
    kernels, modeled_bytes and flops count each kernel of the program text once.
    kernels_detail  [ {name, computation, opcode, kind, sub_kind, num_ops, ops: [opcode],
                       is_real_fusion, bytes_in, bytes_out (one launch), launches_per_call
                       (int | null), traffic_share (0..1 of modeled_bytes_per_call, or of
                       modeled_bytes where that is null), flops (int | null: one launch; null
                       where it cannot be counted),
                       op_names: [str], source_lines: ["file:line"], predicted_us,
                       predicted_model (XLA's own estimate and the model that gave it, from
                       a compile with xla_gpu_collect_cost_model_stats; null without one)} ]
                    in the module's execution order ([] for a folder listing)
    modules         [ {file, module, kernels, fusions, real_fusions, modeled_bytes,
                       thunk_launches} ] largest first ([] unless the target is a folder)
    devices         int | null: devices a workload was compiled for (null for HLO files)
    parallelism     "data" | "model" | null: how a sharded workload is laid out
    collectives     {count, logical, async_pairs, operand_bytes, ring_bytes, by_kind: {kind:
                     {count, sync, async_pairs, logical, operand_bytes, ring_bytes}},
                     collectives: [ {name, kind, is_async, operand_bytes, logical, group_size,
                     ring_bytes, operand_shapes, computation, op_name} ]} | null (folder listing)
                    see `xlafuse.hlo.collectives` for what counts
    static_leaves   [ {path, name} ] | null: the leaves of a program of the user's arguments
                    that are not arrays, made static (`xlafuse.compiler.static`): where each is
                    in the arguments ("[0].activation") and what it is ("relu", "3", "'same'");
                    [] for a workload without any, null for HLO files

Bytes are modeled HBM bytes (see `xlafuse.hlo.traffic`), not measurements; FLOPs are counted
from the optimized HLO's shapes by the table of `xlafuse.hlo.flops`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from xlafuse.hlo import FusionReport, HloModule, KernelInfo
from xlafuse.hlo.collectives import CollectiveReport

if TYPE_CHECKING:  # JAX: `inspect FILE` starts without it
    from xlafuse.compiler.static import StaticLeaf

SCHEMA = "xlafuse.inspect/1"
SUMMARY_KEYS = (
    "kernels",
    "fusions",
    "real_fusions",
    "custom_calls",
    "custom_call_targets",
    "kinds",
    "entry_fusions",
    "modeled_bytes",
    "flops",
    "flops_unknown_kernels",
    "launches_per_call",
    "modeled_bytes_per_call",
    "flops_per_call",
    "per_call_basis",
)


@dataclass(frozen=True)
class ModuleSummary:
    """One optimized module of a dump folder."""

    file: str
    module: str
    kernels: int
    fusions: int
    real_fusions: int
    modeled_bytes: int
    thunk_launches: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict of the fields."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class InspectResult:
    """What `inspect_target` found.

    Attributes:
        target: what was inspected, for people (a path or "workload NAME (SIZE, MODE)").
        target_kind: "file", "folder" or "workload".
        report: the inspected module's FusionReport; None for a folder listing.
        hlo: the parsed module behind `report` (for `xlafuse.report.graph`); None with `report`.
        path: the HLO file inspected, if it came from a file.
        variant: the variant a workload was compiled under.
        thunk_launches: launches listed in the thunk sequence file beside the HLO, if any.
        modules: a folder's modules, largest first (empty unless target_kind is "folder").
        warnings: things a reader should know (launch count mismatch, skipped files).
        collectives: the module's collectives (`xlafuse.hlo.collectives`); None for a folder.
        devices: devices a workload was compiled for (1 unless sharded); None for HLO files.
        parallelism: "data" or "model" for a sharded workload, else None.
        static_leaves: a workload's static leaves (`xlafuse.compiler.static.StaticLeaf`: path
            and name); None for HLO files.
    """

    target: str
    target_kind: str
    report: FusionReport | None = None
    hlo: HloModule | None = field(default=None, repr=False, compare=False)
    path: str | None = None
    variant: str | None = None
    thunk_launches: int | None = None
    modules: tuple[ModuleSummary, ...] = ()
    warnings: tuple[str, ...] = ()
    collectives: CollectiveReport | None = None
    devices: int | None = None
    parallelism: str | None = None
    static_leaves: tuple[StaticLeaf, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        """The result in the stable schema of the module docstring (JSON-able)."""
        report = self.report
        out: dict[str, Any] = {
            "schema": SCHEMA,
            "target": self.target,
            "target_kind": self.target_kind,
            "path": self.path,
            "module": report.module if report else None,
            "backend": report.backend if report else None,
            "variant": self.variant,
            "thunk_launches": self.thunk_launches,
            "warnings": list(self.warnings),
        }
        for key in SUMMARY_KEYS:
            value = getattr(report, key) if report else None
            out[key] = dict(value) if isinstance(value, Mapping) else value
        out["kernels_detail"] = (
            [_kernel_json(k, report) for k in report.kernel_details] if report else []
        )
        out["modules"] = [m.to_dict() for m in self.modules]
        out["devices"] = self.devices
        out["parallelism"] = self.parallelism
        out["collectives"] = self.collectives.to_dict() if self.collectives else None
        leaves = self.static_leaves
        out["static_leaves"] = None if leaves is None else [x.to_dict() for x in leaves]
        return out


def _kernel_json(kernel: KernelInfo, report: FusionReport) -> dict[str, Any]:
    out = kernel.to_dict()
    out["launches_per_call"] = report.runs_of(kernel)
    out["traffic_share"] = traffic_share(kernel, report)
    keys = [
        "name",
        "computation",
        "opcode",
        "kind",
        "sub_kind",
        "num_ops",
        "ops",
        "is_real_fusion",
        "bytes_in",
        "bytes_out",
        "launches_per_call",
        "traffic_share",
        "flops",
        "op_names",
        "source_lines",
        "predicted_us",
        "predicted_model",
    ]
    return {k: out[k] for k in keys}


def traffic_share(kernel: KernelInfo, report: FusionReport) -> float:
    """The kernel's share (0..1) of the module's modeled bytes per call (each kernel times its
    launches per call), or, where a trip count is unknown, of one run of each kernel; 0 when
    the module moves none."""
    one_run = kernel.bytes_in + kernel.bytes_out
    if report.modeled_bytes_per_call is None:
        total = report.modeled_bytes
        return one_run / total if total else 0.0
    total = report.modeled_bytes_per_call
    return one_run * (report.runs_of(kernel) or 0) / total if total else 0.0
