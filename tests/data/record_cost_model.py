"""Records what XLA's GPU cost model predicts for each fusion, beside the measured kernels
(run on a GPU; issue 28's first evidence).

    PYTHONPATH=. python3 tests/data/record_cost_model.py transformer_block full forward \
        --out tests/data/costmodel-transformer_block --calls 20

Compiles the workload under `default` twice: as is, and with the per-compile option
`xla_gpu_collect_cost_model_stats=True`, which writes the cost model's estimate into every
fusion's backend_config (`reification_cost`). Writes `<name>.hlo.txt.gz` (the optimized
module), `<name>.events.json.gz` (traced kernel events, as record_kernel_trace.py) and
`summary.json`: kernels of each, device time per call over the traced calls, and how many
fusions carry a non-empty `reification_cost`.
"""

import argparse
import json
import re
from pathlib import Path

from record_kernel_trace import record_events, write  # this folder's recorder: same formats

from xlafuse import models
from xlafuse.compiler.jit import compile_workload
from xlafuse.compiler.variants import from_options
from xlafuse.measurement import timing
from xlafuse.measurement.profile import profile_device_time

OPTION = {"xla_gpu_collect_cost_model_stats": True}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("size")
    parser.add_argument("mode")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = models.build(args.workload, size=args.size, mode=args.mode)
    advance = timing.thread_state if work.mode == "train" else timing.same_args
    summary = {}
    for name, options in (("default", {}), ("costmodel", OPTION)):
        compiled = compile_workload(work, from_options(options, name=name))
        text = compiled.hlo_text
        write(args.out / f"{name}.hlo.txt.gz", text)
        compiled(*work.fresh_args())
        profile = profile_device_time(
            compiled, work.fresh_args(), calls=args.calls, advance=advance
        )
        record_events(compiled, work, 2, advance, args.out / f"{name}.events.json.gz")
        summary[name] = {
            "kernels": compiled.report.kernels,
            "fusions": compiled.report.fusions,
            "with_estimate": len(re.findall(r'"reification_cost":\[\{', text)),
            "device_time_s": profile.device_time_s,
            "per_call_s": list(profile.per_call_s),
            "kernels_per_call": profile.device_kernels_per_call,
        }
        print(name, json.dumps({k: v for k, v in summary[name].items() if k != "per_call_s"}))
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
