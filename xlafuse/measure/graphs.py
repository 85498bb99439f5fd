"""Graph capture: per-call latency of dispatch-bound work with CUDA graphs on and off.

When a step is many tiny kernels, the GPU waits on the CPU launching them one by one. XLA's
command buffers record the kernel sequence once as a CUDA graph and replay it with one launch
(`xla_gpu_enable_command_buffer`; empty = off). Fusion attacks the same cost from the other side:
fewer kernels to launch. This study crosses the two on small shapes:

    default (graphs on, fusion on)      no-cuda-graphs (off, on)
    no-fusion (on, off)                 no-fusion-no-graphs (off, off)

and reports the synchronized per-call latency (median, p10, p90). For reference, on an H200
(jax 0.11.2) an unfused 8-op chain on 4096 floats took ~162 us per call without command buffers
and ~73 us with them. On a CPU there are no CUDA graphs: the study returns a skip note.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

GRAPH_VARIANTS = ("default", "no-cuda-graphs", "no-fusion", "no-fusion-no-graphs")
SKIP_NOTE = "skipped: CUDA graphs exist only on the GPU"
# Small shapes, many kernels: a 32-op chain on 4096 floats, and one tiny transformer train step.
DISPATCH_BOUND = (
    {"name": "chain", "size": "tiny", "overrides": {"ops": 32, "rows": 32, "cols": 128}},
    {"name": "transformer_block", "size": "tiny", "mode": "train"},
)
_GRAPHS_OFF = "xla_gpu_enable_command_buffer"


@dataclasses.dataclass(frozen=True)
class GraphsRow:
    """Per-call latency of one workload under one variant.

    Attributes:
      workload: label, e.g. "chain[cols=128,ops=32,rows=32]/tiny/forward".
      variant: the variant's name.
      graphs: whether command buffers (CUDA graphs) were on.
      fusion: whether the fusion pipeline was on.
      kernels: kernels per call in the optimized HLO.
      time_median_s: median seconds per synchronized call.
      time_p10_s: 10th percentile.
      time_p90_s: 90th percentile.
      iters: calls timed.
    """

    workload: str
    variant: str
    graphs: bool
    fusion: bool
    kernels: int | None
    time_median_s: float
    time_p10_s: float
    time_p90_s: float
    iters: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class GraphsResult:
    """The graph-capture study: one row per workload x variant, or a skip note.

    Attributes:
      backend: "cpu" or "gpu".
      rows: the measurements (empty when skipped).
      skipped: why nothing was measured, or None.
    """

    backend: str
    rows: tuple[GraphsRow, ...] = ()
    skipped: str | None = None

    def to_records(self) -> list[dict[str, Any]]:
        """Records for a results file / `graphs_section`: one per row, or one skip record."""
        if self.skipped:
            return [{"study": "graphs", "backend": self.backend, "skipped": self.skipped}]
        return [{"study": "graphs", "backend": self.backend, **r.to_dict()} for r in self.rows]


def measure_graphs(
    workloads: Sequence[Any] = DISPATCH_BOUND,
    variants: Sequence[str] = GRAPH_VARIANTS,
    settings: Any = None,
    backend: str | None = None,
) -> GraphsResult:
    """Time each workload under graphs on/off x fusion on/off, in this process.

    Args:
      workloads: workload specs (names, dicts, WorkloadConfigs); see `coldstart.workload_spec`.
      variants: variant names (they must apply to the backend).
      settings: a `timing.TimingSettings`; default: 5 warm-up calls, at least 200 calls or 1 s.
      backend: the backend to report for; JAX's default when None.

    Returns:
      The GraphsResult; on a CPU, empty with `skipped` set to SKIP_NOTE.
    """
    import jax

    backend = backend or jax.default_backend()
    if backend != "gpu":
        return GraphsResult(backend, skipped=SKIP_NOTE)
    from xlafuse.measure import timing

    settings = settings or timing.TimingSettings(warmup=5, min_time_s=1.0, min_iters=200)
    rows = []
    for spec in workloads:
        workload, label = _build(spec)
        rows.extend(_measure_row(workload, label, v, settings) for v in variants)
    return GraphsResult(backend, tuple(rows))


def _build(spec: Any):
    from xlafuse import models
    from xlafuse.measure.coldstart import workload_spec

    s = workload_spec(spec)
    workload = models.build(
        s["name"], s["size"], s["mode"], s["dtype"], s["seed"], **s["overrides"]
    )
    extra = ",".join(f"{k}={v}" for k, v in sorted(s["overrides"].items()))
    name = f"{s['name']}[{extra}]" if extra else s["name"]
    return workload, f"{name}/{s['size']}/{s['mode']}"


def _measure_row(workload, label: str, variant_name: str, settings) -> GraphsRow:
    import jax

    from xlafuse.compile.jit import compile_variant
    from xlafuse.compile.variants import get
    from xlafuse.measure import timing

    variant = get(variant_name)
    compiled = compile_variant(workload.fn, workload.args, {}, variant, {})
    measured = timing.measure(compiled, workload.args, settings)
    return GraphsRow(
        workload=label,
        variant=variant.name,
        graphs=variant.options.get(_GRAPHS_OFF, None) != "",
        fusion="fusion" not in variant.passes_for(jax.default_backend()),
        kernels=_kernels(compiled),
        time_median_s=measured.time_median_s,
        time_p10_s=measured.time_p10_s,
        time_p90_s=measured.time_p90_s,
        iters=measured.iters,
    )


def _kernels(compiled) -> int | None:
    try:
        return compiled.report.kernels
    except Exception:  # the HLO parser may not know a new instruction; latency still counts
        return None
