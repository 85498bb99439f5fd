"""Where a tuning winner's time went, on a GPU: device time with its interval, kernels per
call, and the before/after kernel groups that gained or lost most.

The rerun (`rerun`) decides on untraced time; this is read afterwards from traced calls of the
same two compiled programs, in the same fresh process. Device time is the kernels' time: on a
launch-bound program the wall clock can gain where the device time does not (fewer launches,
no longer kernels), and the two figures side by side say which.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xlafuse.hlo.diff import diff_modules
from xlafuse.hlo.parse import parse_hlo
from xlafuse.kinds import Mode
from xlafuse.measurement import timing
from xlafuse.measurement.kernel_diff import kernel_diff_record, trace_kernel_times
from xlafuse.measurement.profile import device_speedup, profile_device_time

if TYPE_CHECKING:
    from xlafuse.compiler.jit import CompiledVariant
    from xlafuse.models.workload import Workload

TRACED_CALLS = 10
TOP_GROUPS = 5


@dataclasses.dataclass(frozen=True)
class Evidence:
    """Device-side figures of the default program and the winner.

    Attributes:
      device_s: (default, winner) kernel seconds per call.
      device_speedup: the default's over the winner's, with `device_ci` and `device_verdict`
        (None when the traced calls did not split into per-call times).
      kernels_per_call: (default, winner) kernel launches per call.
      gains: the kernel groups where the winner is faster (`kernel_diff.changes`), largest first.
      losses: those where it is slower.
    """

    device_s: tuple[float, float]
    device_speedup: float | None
    device_ci: tuple[float, float] | None
    device_verdict: str | None
    kernels_per_call: tuple[float, float]
    gains: tuple[dict[str, Any], ...] = ()
    losses: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Evidence:
        """From `to_dict()` output (JSON turns tuples into lists)."""
        return cls(**as_tuples(data))

    def lines(self) -> list[str]:
        """What the tune prints about it."""
        (d_ref, d_own), (k_ref, k_own) = self.device_s, self.kernels_per_call
        line = f"  device time {d_own * 1e3:.4g} vs {d_ref * 1e3:.4g} ms"
        if self.device_speedup is not None:
            lo, hi = self.device_ci
            line += f": {self.device_speedup:.2f}x [{lo:.2f}, {hi:.2f}] {self.device_verdict}"
        out = [line, f"  kernels per call {k_own:.0f} vs {k_ref:.0f}"]
        for title, groups in (("gain", self.gains), ("loss", self.losses)):
            for g in groups:
                names = ", ".join(g["kernels_b"][:2] or g["kernels_a"][:2])
                delta = (g["time_b_s"] - g["time_a_s"]) * 1e6
                out.append(f"  {title}: {g['kind']} {names} {delta:+.1f} us per call")
        return out


def as_tuples(data: dict[str, Any]) -> dict[str, Any]:
    """A `to_dict()` read back from JSON: its lists as the tuples the fields hold."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}


def gather(
    programs: tuple[tuple[Workload, CompiledVariant], tuple[Workload, CompiledVariant]],
    same_program: bool,
) -> Evidence:
    """Traces both compiled programs and reads their device time, kernels and groups.

    Args:
      programs: ((workload, compiled) of the default program, the same of the winner).
      same_program: whether the two differ only in XLA options (then both are traced back to
        one unoptimized module and the groups follow its instructions; else the groups pair
        kernels by their optimized graphs alone).
    """
    ref, own = (
        profile_device_time(c, w.fresh_args(), calls=TRACED_CALLS, advance=_advance(w))
        for w, c in programs
    )
    speedup = device_speedup(own, ref)
    gains, losses = _groups(programs, same_program)
    return Evidence(
        (ref.device_time_s, own.device_time_s),
        None if speedup is None else speedup.speedup,
        None if speedup is None else tuple(speedup.ci),
        None if speedup is None else speedup.verdict,
        (ref.device_kernels_per_call, own.device_kernels_per_call),
        gains,
        losses,
    )


def _advance(work):
    return timing.thread_state if work.mode == Mode.TRAIN else timing.same_args


def _groups(programs, same_program: bool):
    """(gains, losses): the top kernel groups by the change of their time, with intervals."""
    with tempfile.TemporaryDirectory(prefix="xlafuse-tune-trace-") as tmp:
        times = [
            trace_kernel_times(c, w, TRACED_CALLS, Path(tmp) / name)
            for name, (w, c) in zip(("default", "winner"), programs, strict=True)
        ]
    (_, default), (_, winner) = programs
    unoptimized = default.unoptimized_hlo() if same_program else None
    reference = parse_hlo(unoptimized, source="default") if unoptimized else None
    diff = diff_modules(
        parse_hlo(default.hlo_text, source="default"),
        parse_hlo(winner.hlo_text, source="winner"),
        labels=("default", "winner"),
        reference=reference,
        texts=(unoptimized, default.hlo_text, winner.hlo_text),
    )
    record = kernel_diff_record(diff, times[0], times[1], top=TOP_GROUPS)
    return tuple(record.get("gains", ())), tuple(record.get("losses", ()))
