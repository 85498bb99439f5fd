"""What xlafuse measures: timing with confidence, device time, ceilings, numerics, cold start,
traced kernels, Nsight Compute validation (one module each).

This package was `xlafuse.measure` until issue 45; `xlafuse.measure` is now only the function
(`xlafuse.experiment.measure_fn.measure`), and the old module paths (`xlafuse.measure.timing`)
still import, as the modules here (`xlafuse/__init__.py`).
"""
