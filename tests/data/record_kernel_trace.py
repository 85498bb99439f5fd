"""Records a workload's traced kernels for the kernel-join and lineage tests (run on a GPU).

    PYTHONPATH=. python3 tests/data/record_kernel_trace.py gpt2 full train default no-fusion \
        --out tests/data/trace-gpt2-train --calls 2

Writes, per variant, `<variant>.hlo.txt.gz` (the optimized module) and `<variant>.events.json.gz`
({"calls": N, "events": [[name, start_ns, duration_ns, line, hlo_op], ...]}, what
`xlafuse.measurement.kernels.trace_events` read from the trace), and `unoptimized.hlo.txt.gz`. Source
paths of this checkout are written relative to it.
"""

import argparse
import gzip
import json
import tempfile
from pathlib import Path

from xlafuse import models
from xlafuse.compiler.jit import compile_workload, unoptimized_hlo
from xlafuse.compiler.variants import get as get_variant
from xlafuse.measurement import timing
from xlafuse.measurement.kernels import find_trace, trace_events
from xlafuse.measurement.profile import trace_calls

ROOT = str(Path(__file__).resolve().parents[2]) + "/"


def write(path: Path, text: str) -> None:
    with gzip.open(path, "wt", compresslevel=9) as f:
        f.write(text.replace(ROOT, ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("size")
    parser.add_argument("mode")
    parser.add_argument("variants", nargs="+")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--calls", type=int, default=2)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = models.build(args.workload, size=args.size, mode=args.mode)
    write(args.out / "unoptimized.hlo.txt.gz", unoptimized_hlo(work))
    advance = timing.thread_state if work.mode == "train" else timing.same_args
    for name in args.variants:
        compiled = compile_workload(work, get_variant(name))
        write(args.out / f"{name}.hlo.txt.gz", compiled.hlo_text)
        record_events(compiled, work, args.calls, advance, args.out / f"{name}.events.json.gz")


def record_events(compiled, work, calls: int, advance, path: Path) -> None:
    """Traces `calls` calls and writes their kernel events (the module docstring's form)."""
    with tempfile.TemporaryDirectory() as tmp:
        trace_calls(compiled, work.fresh_args(), calls, advance, Path(tmp))
        basis, events = trace_events(find_trace(tmp))
    payload = {"calls": calls, "basis": basis, "events": [list(e) for e in events]}
    write(path, json.dumps(payload))
    print(path.name, basis, len(events), "events")


if __name__ == "__main__":
    main()
