"""How much faster the second `xlafuse inspect` of a compile-heavy program is: the caches of
xlafuse's commands (`xlafuse.compiler.cache`).

Runs `xlafuse inspect --workload gpt2 --size small --mode train` (by default) in fresh
processes with empty cache folders of their own (XDG_CACHE_HOME set to a temporary folder):
once with the folders empty, then `--repeat` times with them filled (inspect reuses its stored
compile: nothing is built or traced), then `--repeat` times with inspect's own results emptied
before each run (JAX's persistent cache alone: the program is built and traced, its executable
read). Prints each run's wall-clock seconds, whether it reused a stored compile, the
persistent-cache hits and entries written that JAX counted in it, and the first run's seconds
over the median of each kind of filled run. The goal is at least 5x on a 2-core CPU machine.

    python benchmarks/bench_cache.py [--workload W] [--size S] [--mode M] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from xlafuse.compiler.cache import (
    NO_CACHE_ENV,
    cache_entry_count,
    default_folder,
    results_folder,
)

GOAL = 5.0
REUSED = "reused the compile of"  # inspect's note on stderr when its stored compile served

# The command as a user runs it, with JAX's own cache counters and the seconds of its phases
# (JAX's duration events, summed) printed last on stderr.
_COUNTED = """\
import json, sys, time
start = time.perf_counter()
from jax._src import monitoring
from xlafuse.compiler import cache
from xlafuse.cli import main
phases = {}
def on_duration(event, seconds, **kwargs):
    name = event.rsplit("/", 1)[1]
    phases[name] = phases.get(name, 0.0) + seconds
monitoring.register_event_duration_secs_listener(on_duration)
imported = time.perf_counter() - start
with cache.cache_events() as counted:
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "hits": counted[cache.CACHE_HITS],
                  "written": counted[cache.CACHE_MISSES], "import_s": imported, **phases}),
      file=sys.stderr)
sys.exit(code)
"""

# JAX's duration events, as the breakdown names them.
_PHASES = {
    "jaxpr_trace_duration": "trace",
    "jaxpr_to_mlir_module_duration": "lower",
    "backend_compile_duration": "compile or read",
    "cache_retrieval_time_sec": "of which read",
}


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, dict[str, int]]:
    """Seconds of one fresh process running `xlafuse ARGV`, and its cache counts."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _COUNTED, *argv], env=env, capture_output=True, text=True
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"xlafuse {' '.join(argv)} failed: {done.stderr.strip()[-400:]}")
    counts = json.loads(done.stderr.strip().splitlines()[-1])
    return seconds, {**counts, "reused": REUSED in done.stderr}


def _line(what: str, seconds: float, counts: dict) -> str:
    """One run: its seconds, cache counts and the phases JAX timed."""
    phases = ", ".join(f"{shown} {counts.get(event, 0.0):.1f}" for event, shown in _PHASES.items())
    reused = "reused" if counts["reused"] else "      "
    return (
        f"  {what}: {seconds:6.2f} s  {reused}  hits {counts['hits']}  written "
        f"{counts['written']}  (import {counts['import_s']:.1f}, {phases} s)"
    )


def _speedup(what: str, first: float, runs: list[float]) -> str:
    """The first run's seconds over the median of `runs`, against the goal."""
    ratio = first / statistics.median(runs)
    verdict = "meets" if ratio >= GOAL else "misses"
    return f"  speedup, {what}: {ratio:.1f}x (first / median; {verdict} the goal of {GOAL:g}x)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="gpt2")
    parser.add_argument("--size", default="small")
    parser.add_argument("--mode", default="train")
    parser.add_argument("--repeat", type=int, default=2, help="runs with the cache filled")
    args = parser.parse_args()
    argv = ["inspect", "--workload", args.workload, "--size", args.size, "--mode", args.mode]
    argv += ["--top", "5"]
    with tempfile.TemporaryDirectory(prefix="xlafuse-bench-cache-") as tmp:
        env = {k: v for k, v in os.environ.items() if k != NO_CACHE_ENV}
        env["XDG_CACHE_HOME"] = tmp
        folder = default_folder(environ=env)
        print(f"xlafuse {' '.join(argv)}  (cache folder {folder}, {os.cpu_count()} cores)")
        first, counts = run_once(argv, env)
        print(_line("first, empty caches        ", first, counts))
        reused, compiled = [], []
        for i in range(args.repeat):
            seconds, counts = run_once(argv, env)
            reused.append(seconds)
            print(_line(f"again {i + 1}, filled           ", seconds, counts))
        size = sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())
        print(f"  compilation cache: {cache_entry_count(folder)} entries, {size / 1e6:.1f} MB")
        stored = results_folder(environ=env)
        size = sum(p.stat().st_size for p in stored.rglob("*") if p.is_file())
        print(
            f"  inspect's results: {len(list(stored.glob('*.json')))} entries, {size / 1e6:.1f} MB"
        )
        for i in range(args.repeat):
            shutil.rmtree(stored, ignore_errors=True)
            seconds, counts = run_once(argv, env)
            compiled.append(seconds)
            print(_line(f"again {i + 1}, executables only", seconds, counts))
        print(_speedup("inspect's stored compile", first, reused))
        print(_speedup("the compilation cache alone", first, compiled))


if __name__ == "__main__":
    main()
