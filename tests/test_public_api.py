"""Every public name is importable, documented, and listed in __all__ once."""

import inspect

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


def test_measure_is_the_function_and_the_subpackage():
    import xlafuse.measure.timing as timing  # the import system binds xlafuse.measure
    from xlafuse.experiment.measure_fn import measure

    assert timing.TimingSettings().warmup >= 1
    assert callable(xlafuse.measure) and xlafuse.measure.timing is timing
    assert "measure" in xlafuse.__all__ and "Measurement" in xlafuse.__all__
    assert inspect.getdoc(measure).startswith("Measure `fn(*args)` under each variant")
