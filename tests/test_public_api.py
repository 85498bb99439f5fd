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
