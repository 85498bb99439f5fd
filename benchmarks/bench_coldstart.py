"""Cold vs warm compile of the tiny gpt2 train step, in fresh processes (printed, not asserted).

    python benchmarks/bench_coldstart.py [--workload gpt2 --size tiny --mode train --repeats 3]

Each repeat starts three children (cold, warm, AOT load) with an empty cache folder.
"""

from __future__ import annotations

import argparse
import statistics

from xlafuse.measurement.coldstart import measure_cold_start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="gpt2")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--mode", default="train")
    parser.add_argument("--variant", default="default")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    spec = {"name": args.workload, "size": args.size, "mode": args.mode}
    results = [measure_cold_start(spec, variant=args.variant) for _ in range(args.repeats)]
    print(f"{args.workload}/{args.size}/{args.mode} @ {args.variant} on {results[0].backend}")
    print(" repeat  cold_s  warm_s  speedup  aot_load_s  steady_ms  hit")
    for i, r in enumerate(results):
        print(
            f" {i:6d}  {r.cold_compile_s:6.3f}  {r.warm_compile_s:6.3f}  {r.cache_speedup:6.1f}x"
            f"  {r.aot_load_s:10.3f}  {r.steady_call_s * 1e3:9.3f}  {r.cache_hit}"
        )
    cold = statistics.median(r.cold_compile_s for r in results)
    warm = statistics.median(r.warm_compile_s for r in results)
    print(f" median: cold {cold:.3f} s, warm {warm:.3f} s, cache speedup {cold / warm:.1f}x")


if __name__ == "__main__":
    main()
