"""Every public name is importable, documented, and listed in __all__ once."""

import inspect
import subprocess
import sys

import jax.numpy as jnp
from helpers import FAST_TIMING

import xlafuse


def test_every_public_name_exists_and_is_documented():
    assert len(xlafuse.__all__) == len(set(xlafuse.__all__))
    for name in xlafuse.__all__:
        obj = getattr(xlafuse, name)
        assert inspect.getdoc(obj), f"xlafuse.{name} has no docstring"


def test_api_names_from_the_design():
    for name in ("compile", "compare", "analyze_hlo", "variants", "models", "run_experiment"):
        assert name in xlafuse.__all__
    assert issubclass(xlafuse.UnknownPassError, ValueError)
    assert issubclass(xlafuse.HloParseError, ValueError)


def test_compile_and_measure_are_plainly_the_functions():
    from xlafuse.compiler.jit import compile as compile_function
    from xlafuse.experiment.measure_fn import measure

    assert xlafuse.compile is compile_function and xlafuse.measure is measure
    assert inspect.isfunction(xlafuse.compile) and inspect.isfunction(xlafuse.measure)
    assert "measure" in xlafuse.__all__ and "Measurement" in xlafuse.__all__
    assert inspect.getdoc(measure).startswith("Measure `fn(*args)` under each variant")


def test_the_old_module_paths_import_the_same_modules_as_the_new():
    import xlafuse.measure.timing as timing  # the subpackages' names before issue 45
    from xlafuse.compile import cache
    from xlafuse.compile.variants import Variant
    from xlafuse.measure import rules

    import xlafuse.compiler.cache
    import xlafuse.compiler.variants
    import xlafuse.measurement.rules
    import xlafuse.measurement.timing

    assert timing is xlafuse.measurement.timing and xlafuse.measure.timing is timing
    assert (timing.__name__, timing.__spec__.name) == ("xlafuse.measurement.timing",) * 2
    assert Variant is xlafuse.compiler.variants.Variant and cache is xlafuse.compiler.cache
    assert rules is xlafuse.measurement.rules
    assert inspect.isfunction(xlafuse.compile) and inspect.isfunction(xlafuse.measure)


OLD_PATHS_FIRST = """
import xlafuse.measure.timing as timing
from xlafuse.compile.variants import Variant
import xlafuse, xlafuse.measurement.timing, xlafuse.compiler.variants
assert timing is xlafuse.measurement.timing is xlafuse.measure.timing
assert Variant is xlafuse.compiler.variants.Variant
assert callable(xlafuse.measure) and callable(xlafuse.compile)
print(xlafuse.compile.__module__, xlafuse.measure.__module__)
"""


def test_an_old_path_imported_before_anything_else_leaves_the_functions_in_place():
    done = subprocess.run(
        [sys.executable, "-c", OLD_PATHS_FIRST], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout) == (
        0,
        "xlafuse.compiler.jit xlafuse.experiment.measure_fn\n",
    )


def test_compile_and_measure_still_compile_and_measure():
    def mul_add(x, a):
        return x * a + 1.0

    x, a = jnp.arange(4.0), jnp.full((4,), 2.0)
    assert xlafuse.compile(mul_add, variant="no-fusion")(x, a).tolist() == [1.0, 3.0, 5.0, 7.0]
    measured = xlafuse.measure(mul_add, x, a, timing=FAST_TIMING, calibrate=False)
    assert [(r.variant, r.ok) for r in measured.records] == [("default", True), ("no-fusion", True)]
