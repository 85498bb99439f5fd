"""What two compilations of one program fused differently (A -> B).

Kernels are matched through their ops' metadata: each kernel holds a set of op keys, the distinct
`op_name`s of its ops (e.g. "jit(f)/Block/LayerNorm_0/mul"), or, for a kernel without any, its
source lines ("file.py:12"). Names repeat (two `add`s on one line share a key), so the match is
by sets, not by identity:

* "split": a kernel of A holds keys that no single kernel of B holds together; its parts are the
  B kernels made only of those keys, plus (greedily) kernels for keys still left. Typical for
  default -> no-fusion.
* "fused": the reverse, a kernel of B holding keys split over several kernels of A.

Keys found on one side only (ops rewritten away, or renamed) are ignored. Changes are listed
largest modeled-traffic change first; the traffic of the parts counts their whole kernels.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from xlafuse.hlo.fusion import FusionReport, KernelInfo, analyze_module
from xlafuse.hlo.parse import HloModule


@dataclass(frozen=True)
class FusionChange:
    """Ops one kernel holds together on one side and several kernels hold on the other.

    Attributes:
        direction: "split" (together in A, apart in B) or "fused" (apart in A, together in B).
        kernel: the kernel holding the ops together.
        parts: the kernels holding them apart.
        op_names: the op keys concerned.
        together_bytes: modeled bytes of `kernel`.
        apart_bytes: modeled bytes of the `parts`, summed.
    """

    direction: str
    kernel: str
    parts: tuple[str, ...]
    op_names: tuple[str, ...]
    together_bytes: int
    apart_bytes: int

    @property
    def bytes_delta(self) -> int:
        """Modeled bytes of B minus those of A for these ops."""
        delta = self.apart_bytes - self.together_bytes
        return delta if self.direction == "split" else -delta

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict of the fields plus `bytes_delta`."""
        out = {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}
        out["bytes_delta"] = self.bytes_delta
        return out


@dataclass(frozen=True)
class FusionDiff:
    """Counts of A and B, and the fusion changes from A to B (largest traffic change first)."""

    label_a: str
    label_b: str
    kernels_a: int
    kernels_b: int
    real_fusions_a: int
    real_fusions_b: int
    modeled_bytes_a: int
    modeled_bytes_b: int
    changes: tuple[FusionChange, ...] = ()

    @property
    def kernels_delta(self) -> int:
        """Kernels of B minus kernels of A."""
        return self.kernels_b - self.kernels_a

    @property
    def real_fusions_delta(self) -> int:
        """Real fusions of B minus those of A."""
        return self.real_fusions_b - self.real_fusions_a

    @property
    def modeled_bytes_delta(self) -> int:
        """Modeled bytes of B minus those of A."""
        return self.modeled_bytes_b - self.modeled_bytes_a

    @property
    def split(self) -> tuple[FusionChange, ...]:
        """Fused in A, split in B."""
        return tuple(c for c in self.changes if c.direction == "split")

    @property
    def fused(self) -> tuple[FusionChange, ...]:
        """Split in A, fused in B."""
        return tuple(c for c in self.changes if c.direction == "fused")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict: labels, a/b/delta for each count, the changes."""
        out: dict[str, Any] = {"a": self.label_a, "b": self.label_b}
        for key in ("kernels", "real_fusions", "modeled_bytes"):
            a, b = getattr(self, f"{key}_a"), getattr(self, f"{key}_b")
            out[key] = {"a": a, "b": b, "delta": b - a}
        out["split"] = [c.to_dict() for c in self.split]
        out["fused"] = [c.to_dict() for c in self.fused]
        return out


def diff_reports(
    a: HloModule | FusionReport,
    b: HloModule | FusionReport,
    labels: tuple[str, str] = ("A", "B"),
) -> FusionDiff:
    """Compares two compilations of one program.

    Args:
        a: the first module or its report.
        b: the second.
        labels: what to call A and B in the text rendering.

    Returns:
        The FusionDiff from A to B.
    """
    ra, rb = _report(a), _report(b)
    changes = _changes("split", ra.kernel_details, rb.kernel_details)
    changes += _changes("fused", rb.kernel_details, ra.kernel_details)
    changes.sort(key=lambda c: (-abs(c.bytes_delta), c.direction, c.kernel))
    return FusionDiff(
        label_a=labels[0],
        label_b=labels[1],
        kernels_a=ra.kernels,
        kernels_b=rb.kernels,
        real_fusions_a=ra.real_fusions,
        real_fusions_b=rb.real_fusions,
        modeled_bytes_a=ra.modeled_bytes,
        modeled_bytes_b=rb.modeled_bytes,
        changes=tuple(changes),
    )


def _report(x: HloModule | FusionReport) -> FusionReport:
    if isinstance(x, FusionReport):
        return x
    if isinstance(x, HloModule):
        return analyze_module(x)
    raise TypeError(f"expected an HloModule or a FusionReport, got {type(x).__name__}")


def op_keys(kernel: KernelInfo) -> frozenset[str]:
    """The keys a kernel is matched by: its op names, else its source lines."""
    return frozenset(kernel.op_names or kernel.source_lines)


def _changes(direction, together, apart) -> list[FusionChange]:
    """Kernels of `together` whose keys no single kernel of `apart` holds."""
    holders: dict[str, list[KernelInfo]] = defaultdict(list)
    for kernel in apart:
        for key in op_keys(kernel):
            holders[key].append(kernel)
    found = []
    for kernel in together:
        keys = {k for k in op_keys(kernel) if k in holders}
        if len(keys) < 2 or any(keys <= op_keys(h) for k in keys for h in holders[k]):
            continue
        parts = _cover(keys, holders)
        found.append(
            FusionChange(
                direction=direction,
                kernel=kernel.name,
                parts=tuple(p.name for p in parts),
                op_names=tuple(sorted(keys)),
                together_bytes=_bytes(kernel),
                apart_bytes=sum(_bytes(p) for p in parts),
            )
        )
    return found


def _cover(keys: set[str], holders: dict[str, list[KernelInfo]]) -> list[KernelInfo]:
    """The kernels holding `keys`: every one made only of these keys, then greedily (most keys
    first) others for keys still left, so a name shared with unrelated ops pulls in one kernel."""
    candidates = list({id(h): h for k in sorted(keys) for h in holders[k]}.values())
    chosen = [h for h in candidates if op_keys(h) <= keys]
    left = keys - {k for h in chosen for k in op_keys(h)}
    while left:
        best = max(candidates, key=lambda h: (len(left & op_keys(h)), -_bytes(h)))
        chosen.append(best)
        left -= op_keys(best)
    return chosen


def _bytes(kernel: KernelInfo) -> int:
    return kernel.bytes_in + kernel.bytes_out


def render_diff(diff: FusionDiff, top: int | None = 10) -> str:
    """Text: the three counts A -> B with deltas, then the changes, largest traffic first.

    Args:
        diff: from `diff_reports`.
        top: show at most this many changes of each direction (None: all).
    """
    lines = [f"A: {diff.label_a}", f"B: {diff.label_b}"]
    for key, fmt in (("kernels", str), ("real_fusions", str), ("modeled_bytes", _mb)):
        a, b = getattr(diff, f"{key}_a"), getattr(diff, f"{key}_b")
        lines.append(f"{key.replace('_', ' ')}: {fmt(a)} -> {fmt(b)} ({_signed(b - a, fmt)})")
    for title, changes in (
        ("fused in A, split in B", diff.split),
        ("split in A, fused in B", diff.fused),
    ):
        lines.append(f"\n{title}: {len(changes)}")
        lines.extend(_change_line(c) for c in changes[:top])
        if top is not None and len(changes) > top:
            lines.append(f"  ... {len(changes) - top} more")
    return "\n".join(lines)


def _change_line(change: FusionChange) -> str:
    parts = ", ".join(change.parts[:4]) + (" ..." if len(change.parts) > 4 else "")
    arrow = "->" if change.direction == "split" else "<-"
    return (
        f"  {change.kernel} {arrow} {len(change.parts)} kernels [{parts}]: "
        f"{len(change.op_names)} op names, traffic {_signed(change.bytes_delta, _mb)}"
    )


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def _signed(n: int, fmt) -> str:
    return ("+" if n > 0 else "-" if n < 0 else "+") + fmt(abs(n))
