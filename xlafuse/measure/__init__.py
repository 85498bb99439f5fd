"""What xlafuse measures: timing with confidence, device time, ceilings, numerics, cold start,
traced kernels, Nsight Compute validation (one module each).

Called, `xlafuse.measure(fn, *args, variants=...)` measures a function as a run's cells: see
`xlafuse.experiment.measure_fn.measure` (`xlafuse/__init__.py` makes this package callable, so
that the function and the subpackage share the name).
"""
