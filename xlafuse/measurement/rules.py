"""The thresholds the measurements are judged by, in one module that needs no JAX (the report
formats its reading notes from them).

- HOST_BOUND: a cell whose pipelined time per call is above this many times its device time is
  host-bound (`xlafuse.experiment.fields.with_rates`).
- TRACE_PERTURBED: a cell whose traced kernel time per call is above this many times its
  untraced pipelined time per call ran another program under the profiler (XLA turns command
  buffers off while tracing, so every launch of a loop is its own): its device time and kernel
  times are those of the traced program (`xlafuse.experiment.fields.with_rates`).
- TOLERANCES: (rtol, atol as a fraction of the reference's largest magnitude) by dtype name, for
  comparing outputs (`xlafuse.measurement.numerics.tolerance`); LOW_PRECISION for the f8 and f4
  families.
- TF32: the same pair for a float32 program whose dots and convolutions ran in TF32 (an NVIDIA
  GPU at default precision): TF32 keeps float16's 10-bit mantissa, so float16's tolerance
  (`xlafuse.measurement.numerics.dot_precision`). TF32_MIN_COMPUTE_CAPABILITY: the first NVIDIA
  compute capability (Ampere, 8.0) whose tensor cores run float32 dots in TF32.
"""

HOST_BOUND = 1.15
TRACE_PERTURBED = 1.05
TOLERANCES = {
    "float64": (1e-9, 1e-12),
    "float32": (1e-4, 1e-5),
    "float16": (1e-2, 1e-3),
    "bfloat16": (5e-2, 1e-2),
}
LOW_PRECISION = (2.5e-1, 5e-2)
TF32 = (1e-2, 1e-3)
TF32_MIN_COMPUTE_CAPABILITY = 8.0
