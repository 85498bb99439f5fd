"""xlafuse under `jax.distributed`: several processes, one SPMD program (issue 31).

A program bigger than one host runs as several processes (one per host or per GPU, started by
Slurm, mpirun or `xlafuse launch`), each compiling the same SPMD program over the global
devices. This package holds what the other layers need of that runtime, and nothing of
measuring:

- `runtime`: `initialize` (the coordinator checked first: a port in use or unreachable is one
  line), gloo collectives on a CPU, and the `Layout` of the running processes;
- `lockstep`: what keeps timing rounds in step across processes (a barrier before each round,
  process 0's decisions, the slowest process's samples); `SOLO` for one process;
- `messages`: a small JSON value sent from process 0 to every process (the cells to run);
- `arrays`: a global array brought to every process's host (outputs judged as on one process);
- `watch`: what each process is doing, its heartbeat, and the watchdog that stops a process
  within a timeout when another died or hung, with one line naming it;
- `launch`: N local processes of one command on a free localhost port, supervised.

See docs/distributed.md.
"""
