"""The batched Cartpole rollout of examples/cartpole.py measured by `xlafuse.measure` on a GPU.

    PYTHONPATH=. python3 experiments/h100/user_programs/measure_rollout.py OUT_DIR

1,024 environments, 500 `lax.scan` steps (the size DESIGN.md's figures were taken at), under
the default, `no-fusion` and `no-cuda-graphs`; traced (device time, every kernel's time
joined to its HLO kernel). Writes OUT_DIR/results.jsonl and report.md and prints the tables
and each cell's attribution.
"""

import sys

import xlafuse
from xlafuse.models import user

rollout = user.load_function(user.parse_entry("examples/cartpole.py:rollout"))
fn, args = rollout(envs=1024, steps=500)
measured = xlafuse.measure(
    fn,
    *args,
    variants=["default", "no-fusion", "no-cuda-graphs"],
    name="cartpole",
    profile=True,
    verbose=True,
)
print(measured)
for r in measured.records:
    k = r.trace.kernel_times
    print(
        f"{r.variant}: device {r.device.time_s * 1e3:.3f} ms/call, kernels traced "
        f"{k['time_s'] * 1e3:.3f} ms/call, attributed {k['attributed_s'] * 1e3:.3f} ms "
        f"({(1 - k['unattributed_share']) * 100:.2f}%), launches/call {k['launches_per_call']}, "
        f"HLO kernels seen {k['kernels_seen']} of {k['kernels']}"
    )
print(f"report: {measured.write(sys.argv[1])}")
