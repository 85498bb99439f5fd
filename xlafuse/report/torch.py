"""The report's "XLA beside PyTorch" section and plot: the same workloads, both frameworks.

Reads only the records (`CellResult`), so it needs no torch. Per workload with at least
one torch cell: a table of every variant (XLA and torch) side by side, then one line comparing
XLA's `default` with `torch-inductor`: kernels per call, modeled bytes, time (device time where
profiled, else the wall-clock median) and the longest kernels of each, where profiled. Kernel counts
and bytes carry their basis: on a GPU both frameworks' kernels are profiler device kernels; on
the CPU XLA counts kernels in its optimized HLO and torch counts Inductor's generated kernel calls
(or eager's aten ops), so CPU counts compare programs, not launches.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from xlafuse.kinds import Framework
from xlafuse.report.figure import new_figure, save
from xlafuse.report.lines import lead, lead_time, reference_time
from xlafuse.results.records import CellResult

FRAMEWORKS_PNG = "xla_vs_torch.png"
XLA_VARIANT = "default"
TORCH_VARIANT = "torch-inductor"

_COLUMNS = (
    "framework", "variant", "kernels/call", "modeled MB", "time ms (figure)", "device ms",
    "speedup vs ref", "device speedup", "compile s (cold / warm)", "numerics",
)  # fmt: skip


def _key(r: CellResult) -> str:
    extra = ",".join(f"{k}={v}" for k, v in sorted(r.overrides.items()))
    name = f"{r.workload}{f'[{extra}]' if extra else ''}"
    return f"{name} / {r.size} / {r.mode} / {r.dtype}"


def _groups(records: Sequence[CellResult]) -> dict[str, list[CellResult]]:
    """Workloads that have a torch cell, each with all of its ok records."""
    groups: dict[str, list[CellResult]] = {}
    for r in records:
        if r.ok:
            groups.setdefault(_key(r), []).append(r)
    return {k: g for k, g in groups.items() if any(_is_torch(r) for r in g)}


def _is_torch(r: CellResult) -> bool:
    return r.framework == Framework.TORCH


def frameworks_section(records: Sequence[CellResult]) -> str:
    """The markdown section, or "" when no record ran a torch variant."""
    groups = _groups(records)
    if not groups:
        return ""
    lines = ["## XLA beside PyTorch (same models, same weights)", "", _versions(records)]
    lines += ["", _BASIS_NOTE, ""]
    for key, group in groups.items():
        lines += [f"### {key}", "", "| " + " | ".join(_COLUMNS) + " |"]
        lines.append("|" + "---|" * len(_COLUMNS))
        reference = next((r for r in group if r.variant == r.reference), None)
        lines += ["| " + " | ".join(_row(r, reference)) + " |" for r in group]
        lines += ["", *_verdict(group), ""]
    cells = [r.fusion for g in groups.values() for r in g]
    bases = sorted({f.kernels_basis for f in cells if f.kernels_basis})
    byte_bases = sorted({f.modeled_bytes_basis for f in cells if f.modeled_bytes_basis})
    if bases:
        lines += ["Torch kernel counts: " + "; ".join(bases) + ".", ""]
    if byte_bases:
        lines += ["Torch modeled bytes: " + "; ".join(byte_bases) + ".", ""]
    return "\n".join(lines)


def _versions(records: Sequence[CellResult]) -> str:
    """ "jax 0.11.2 beside torch 2.11.0": the framework versions the records ran on."""
    seen: dict[str, set[str]] = {}
    for r in records:
        if r.framework_version:
            seen.setdefault(r.framework or Framework.JAX, set()).add(r.framework_version)
    return " beside ".join(f"{f} {', '.join(sorted(v))}" for f, v in sorted(seen.items())) + "."


_BASIS_NOTE = (
    "XLA rows count kernels in the optimized HLO (a GPU profile where profiled) and model bytes "
    "from it; torch rows say their basis below. Speedups are against the XLA reference, timed "
    "by the same functions and rules (paired in alternation where the reference is in process). "
    "Under Inductor's CUDA graphs, kernels/call includes the launches that copy each non-static "
    "input into the graph's buffers before a replay (shown in brackets with their device time). "
    "Top kernels are summed by kernel name over a call: XLA runs identical fusions through one "
    "compiled kernel (one name for every layer's softmax) and cuBLAS names a kernel by its "
    "tiling, so one name may be several launches."
)


def _kernels(r: CellResult) -> float | None:
    """Kernels per call: the device profile's where profiled, else the fusion report's."""
    return r.device.kernels_per_call or r.fusion.kernels


def _row(r: CellResult, reference: CellResult | None) -> list[str]:
    cold = r.cold_start.cold_compile_s or r.compile.compile_s
    warm = r.cold_start.warm_compile_s
    compile_text = _num(cold, spec=".3g") + (f" / {warm:.3g}" if warm is not None else "")
    return [
        r.framework or Framework.JAX,
        r.variant,
        _num(_kernels(r), spec=".4g") + _input_copies(r),
        _num(r.fusion.modeled_bytes, 1e-6, ".4g"),
        _lead_time(r, reference),
        _num(r.device.time_s, 1e3, ".4g"),
        _speedup(r.speedup.vs_reference, r.speedup.verdict),
        _speedup(r.device.speedup, r.device.speedup_verdict),
        compile_text,
        _numerics(r),
    ]


def _lead_time(r: CellResult, reference: CellResult | None) -> str:
    """`0.52 (ref 0.19) pipelined`: the figure the speedup divides, the reference's beside it
    (over the same rounds; in records that predate that, the reference row's own)."""
    own = lead_time(r)
    ref = reference_time(r, figure=None, reference=reference) if r.variant != r.reference else None
    text = _num(own, 1e3, ".4g")
    if own is not None and ref is not None:
        text += f" (ref {ref * 1e3:.4g})"
    return f"{text} {lead(r)}"


def _input_copies(r: CellResult) -> str:
    copies = r.device.input_copy_kernels_per_call
    if not copies:
        return ""
    return f" ({copies:.4g} input copies, {r.device.input_copy_time_s * 1e3:.3g} ms)"


def _speedup(value: float | None, verdict: str | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}x" + (f" ({verdict})" if verdict else "")


def _numerics(r: CellResult) -> str:
    numerics = r.numerics
    if numerics.within_tolerance is None:
        return "reference" if r.variant == r.reference else "-"
    verdict = "ok" if numerics.within_tolerance else "FLAGGED"
    return f"{verdict} (max abs {numerics.max_abs_diff or 0:.2g})"


def _num(value: Any, scale: float = 1.0, spec: str = "") -> str:
    if value is None:
        return "-"
    return format(value * scale, spec)


def _seconds(r: CellResult) -> tuple[float | None, str]:
    if r.device.time_s:
        return r.device.time_s, "device time"
    return r.timing.median_s, "wall-clock median"


def _verdict(group: Sequence[CellResult]) -> list[str]:
    """One line: where XLA's default launches more kernels or moves more bytes than Inductor."""
    xla = next((r for r in group if r.variant == XLA_VARIANT), None)
    ind = next((r for r in group if r.variant == TORCH_VARIANT), None)
    if xla is None or ind is None:
        return []
    parts = []
    xk, ik = _kernels(xla), _kernels(ind)
    if xk is not None and ik is not None:
        than = "more than" if xk > ik else ("fewer than" if xk < ik else "as many as")
        parts.append(f"XLA launches {xk:.4g} kernel(s) per call, {than} Inductor's {ik:.4g}")
    xb, ib = xla.fusion.modeled_bytes, ind.fusion.modeled_bytes
    if xb and ib:
        parts.append(f"moves {xb / 1e6:.4g} MB vs {ib / 1e6:.4g} MB ({xb / ib:.2f}x)")
    (xs, basis), (its, _) = _seconds(xla), _seconds(ind)
    if xs and its:
        parts.append(
            f"{basis} {xs * 1e3:.4g} ms vs {its * 1e3:.4g} ms (Inductor/XLA {its / xs:.2f}x)"
        )
    lines = [f"**{XLA_VARIANT} vs {TORCH_VARIANT}:** " + "; ".join(parts) + "."] if parts else []
    for r in (xla, ind):
        top = r.device.top_kernels
        if top:
            shown = ", ".join(f"`{name[:60]}` {s * 1e6:.1f} us" for name, s in top[:3])
            lines.append(f"Top kernels ({r.variant}): {shown}.")
    return lines


def frameworks_plot(records: Sequence[CellResult], path: Path) -> bool:
    """Speedup over the XLA reference per workload, XLA and torch variants side by side.

    Device speedups where every plotted cell has one (GPU profiles), else wall clock.
    Returns False (nothing written) when no workload has a torch cell.
    """
    groups = _groups(records)
    rows = [r for g in groups.values() for r in g]
    if not rows:
        return False
    import numpy as np

    device = all(r.device.speedup is not None or r.variant == r.reference for r in rows)
    variants = list(dict.fromkeys(r.variant for r in rows))
    workloads = list(groups)
    width = 0.8 / len(variants)
    fig, ax = new_figure((max(6, 1.6 * len(workloads) * len(variants) / 2), 4))
    for i, variant in enumerate(variants):
        values = []
        for key in workloads:
            r = next((x for x in groups[key] if x.variant == variant), None)
            value = None if r is None else (1.0 if variant == r.reference else _plotted(r, device))
            values.append(np.nan if value is None else value)
        torch_variant = any(_is_torch(r) for r in rows if r.variant == variant)
        ax.bar(
            np.arange(len(workloads)) + i * width,
            values,
            width,
            label=variant,
            hatch="//" if torch_variant else None,
        )
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(np.arange(len(workloads)) + width * (len(variants) - 1) / 2)
    ax.set_xticklabels([k.replace(" / ", "\n") for k in workloads], fontsize=7)
    basis = "device time" if device else "wall clock"
    ax.set_ylabel(f"speedup vs XLA reference ({basis}, log)")
    ax.set_title("XLA and PyTorch (hatched) on the same models")
    ax.legend(fontsize=7)
    return save(fig, path)


def _plotted(r: CellResult, device: bool) -> float | None:
    """The speedup the plot shows: per-call device time where every cell has one, else wall."""
    return r.device.speedup if device else r.speedup.vs_reference
