"""The reader's optional C fast path (`xlafuse/hlo/_scan.c`); everything else is in pyproject.toml.

`optional=True`: without a C compiler the install goes on, and the reader is pure Python.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("xlafuse.hlo._scan", ["xlafuse/hlo/_scan.c"], optional=True)])
