"""What tracing does to a loop program's time on a GPU, and which way of tracing comes closest.

For each program (the zoo's `cartpole` and `lstm` at full size, and examples/cartpole.py's rollout
at 1,024 envs x 500 steps), compiled with default options and with
`xla_enable_command_buffers_during_profiling`, it prints per call:

- untraced: the pipelined time (N calls dispatched back to back, one sync; median of rounds);
- traced, kernel sum: the profiler's kernel durations summed (xlafuse's device time);
- traced, span: first kernel start to last kernel end of each call (the whole call on the device,
  gaps between kernels included, without adding up per-kernel events);
- traced, wall: the pipelined time of the same calls while the profiler runs;
- with 1 and with 10 traced calls.

    PYTHONPATH=. python3 benchmarks/bench_trace_perturbation.py [--out FILE.json]

Needs a GPU (exits with a line on a CPU).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax

from xlafuse import models
from xlafuse.measurement.profile import device_kernel_events
from xlafuse.models.loops import cartpole  # noqa: F401  (registers the zoo's loops)

ROUNDS, BURST = 7, 20
OPTIONS = {
    "default": {},
    "cmdbuf-under-profiler": {"xla_enable_command_buffers_during_profiling": True},
}


def _example():
    path = Path(__file__).parent.parent / "examples" / "cartpole.py"
    spec = importlib.util.spec_from_file_location("user_cartpole", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.rollout(envs=1024, steps=500)


def _programs():
    for name in ("cartpole", "lstm"):
        work = models.build(name, size="full")
        yield f"{name}/full", work.fn, work.args
    fn, args = _example()
    yield "rollout 1024x500", fn, args


def _pipelined(call) -> float:
    jax.block_until_ready(call())
    samples = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        out = [call() for _ in range(BURST)]
        jax.block_until_ready(out)
        samples.append((time.perf_counter() - start) / BURST)
    return statistics.median(samples)


def _traced(call, calls: int) -> dict[str, float]:
    from jax.profiler import ProfileData

    jax.block_until_ready(call())
    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp):
            start = time.perf_counter()
            jax.block_until_ready([call() for _ in range(calls)])
            wall = (time.perf_counter() - start) / calls
        (path,) = Path(tmp).rglob("*.xplane.pb")
        events = device_kernel_events(ProfileData.from_file(str(path)).planes)
    kernels = sorted(next(iter(events.values())), key=lambda e: e[1])
    per_call = len(kernels) // calls
    spans = [
        kernels[i * per_call + per_call - 1][1]
        + kernels[i * per_call + per_call - 1][2]
        - kernels[i * per_call][1]
        for i in range(calls)
    ]
    return {
        "kernel_sum_s": sum(e[2] for e in kernels) * 1e-9 / calls,
        "span_s": statistics.median(spans) * 1e-9,
        "traced_wall_s": wall,
        "launches_per_call": len(kernels) / calls,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    if jax.default_backend() != "gpu":
        print("bench_trace_perturbation: needs a GPU (JAX sees none)", file=sys.stderr)
        return 2
    rows = []
    for label, fn, fn_args in _programs():
        for option, opts in OPTIONS.items():
            compiled = jax.jit(fn).lower(*fn_args).compile(compiler_options=opts or None)

            def call(compiled=compiled, fn_args=fn_args):
                return compiled(*fn_args)

            row = {"program": label, "options": option, "pipelined_s": _pipelined(call)}
            for calls in (1, 10):
                row[f"traced_{calls}"] = _traced(call, calls)
            rows.append(row)
            t10 = row["traced_10"]
            print(
                f"{label:18s} {option:22s} pipelined {row['pipelined_s'] * 1e3:7.3f} ms | "
                f"10 traced: sum {t10['kernel_sum_s'] * 1e3:7.3f} span {t10['span_s'] * 1e3:7.3f}"
                f" wall {t10['traced_wall_s'] * 1e3:7.3f} ({t10['launches_per_call']:.0f} "
                f"launches) | 1 traced: sum {row['traced_1']['kernel_sum_s'] * 1e3:7.3f} "
                f"span {row['traced_1']['span_s'] * 1e3:7.3f}",
                flush=True,
            )
    if args.out:
        device = jax.devices()[0].device_kind
        args.out.write_text(json.dumps({"device": device, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
