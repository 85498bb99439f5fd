"""Variants -> XLA options, the passes of the running XLA, one compile path, child processes.

This package was `xlafuse.compile` until issue 45; `xlafuse.compile` is now only the function
(`xlafuse.compiler.jit.compile`), and the old module paths (`xlafuse.compile.variants`) still
import, as the modules here (`xlafuse/__init__.py`).
"""
