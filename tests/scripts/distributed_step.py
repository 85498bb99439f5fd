"""One data-parallel mlp train step as one process of a jax.distributed run, started by
tests/test_distributed.py through `xlafuse.distributed.launch` (which adds --distributed,
--coordinator, --num-processes, --process-id and --timeout). Process 0 writes the new
train state (parameters, optimizer state, batch statistics), gathered from every process, and
the loss into the .npz named by its argument; the test judges them against the same step on
one process.
"""

from __future__ import annotations

import argparse

from xlafuse.distributed import arrays, runtime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--distributed", action="store_true")
    parser.add_argument("--coordinator")
    parser.add_argument("--num-processes", type=int)
    parser.add_argument("--process-id", type=int)
    parser.add_argument("--timeout", type=float)
    args = parser.parse_args()
    layout = runtime.initialize(
        coordinator=args.coordinator,
        num_processes=args.num_processes,
        process_id=args.process_id,
        timeout_s=args.timeout,
    )
    import jax  # after initialize: JAX's backend starts with the processes joined
    import numpy as np

    from xlafuse import models

    workload = models.build("mlp", mode="train", batch=4, devices=4, parallelism="data")
    step = jax.jit(workload.fn, **workload.jit_kwargs())
    new_state, loss = step(*workload.fresh_args())
    leaves = arrays.to_host(new_state)
    if layout.writer:
        np.savez(args.out, *leaves, loss=arrays.to_host(loss))


if __name__ == "__main__":
    main()
