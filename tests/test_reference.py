"""A workload's reference and the one rule cells are timed against it by (issue 30): the XLA cells
and the PyTorch twins both call `time_against`; the reference is a frozen value.

The twins' module needs torch, which this machine may not have: its cell runs here with a fake
`torch` and a fake twin program, so what the XLA cells and the twins share is tested on a CPU.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import types

import pytest

from xlafuse.kinds import Backend, Verdict
from xlafuse.measurement import timing
from xlafuse.measurement.reference import Reference, compared_apart, judge_against, time_against
from xlafuse.measurement.timing import TimingSettings

SETTINGS = TimingSettings(warmup=1, min_time_s=0, min_iters=3, max_iters=60, repeats=1)


class Clock:
    """A clock that only the fake programs move: each call takes its own fixed seconds."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Program:
    """A compiled program that takes `seconds` per call on `clock` and counts its calls."""

    measured = None  # compiled in this process (not in a child of its own)

    def __init__(self, clock: Clock, seconds: float):
        self.clock, self.seconds, self.calls = clock, seconds, 0

    def __call__(self, *args):
        self.calls += 1
        self.clock.now += self.seconds
        return 0.0


def _fresh_args():
    return (1.0,)


def test_a_reference_is_frozen():
    reference = Reference()
    with pytest.raises(dataclasses.FrozenInstanceError):
        reference.timing = None  # type: ignore[misc]


def test_a_cell_is_paired_with_a_reference_compiled_in_this_process():
    clock = Clock()
    ref, own = Program(clock, 2e-3), Program(clock, 1e-3)
    reference = Reference(compiled=ref, fresh_args=_fresh_args)
    assert reference.pairs
    timed, comparison = time_against(reference, own, (1.0,), SETTINGS, clock=clock)
    assert comparison is not None and comparison.paired
    # Alternating rounds: the reference made as many timed calls as the cell.
    assert ref.calls >= timed.iters and own.calls >= timed.iters
    assert comparison.latency.speedup == pytest.approx(2.0)
    assert comparison.latency.verdict == Verdict.FASTER == "faster"
    assert comparison.reference.time_median_s == pytest.approx(2e-3)


def test_the_reference_cell_itself_is_timed_alone_without_a_comparison():
    clock = Clock()
    own = Program(clock, 1e-3)
    timed, comparison = time_against(None, own, (1.0,), SETTINGS, clock=clock)
    assert comparison is None
    assert timed.time_median_s == pytest.approx(1e-3)


def test_without_its_program_a_cell_is_compared_with_the_reference_cells_samples():
    clock = Clock()
    ref_timing = timing.measure(Program(clock, 3e-3), (1.0,), settings=SETTINGS, clock=clock)
    # A recorded reference that could not be compiled again: its error, no program.
    reference = Reference(timing=ref_timing, error="recompiling the reference failed: x")
    assert not reference.pairs
    own = Program(clock, 1e-3)
    timed, comparison = time_against(reference, own, (1.0,), SETTINGS, clock=clock)
    assert comparison is not None and not comparison.paired
    assert comparison.latency.speedup == pytest.approx(3.0)
    assert compared_apart(Reference(), timed) is None  # no samples of the reference: none


def test_a_reference_measured_in_its_own_child_process_is_not_paired():
    clock = Clock()
    ref = Program(clock, 2e-3)
    ref.measured = object()  # a process-flag variant: measured in its child
    reference = Reference(compiled=ref, fresh_args=_fresh_args)
    assert not reference.pairs
    _, comparison = time_against(reference, Program(clock, 1e-3), (1.0,), SETTINGS, clock=clock)
    assert comparison is None and ref.calls == 0


def test_numerics_are_judged_only_against_known_reference_outputs():
    assert judge_against(None, object(), {}) is None
    assert judge_against(Reference(), object(), {}) is None


@pytest.fixture
def torch_measure(monkeypatch):
    """`xlafuse.torch.measure` imported against a fake `torch` and a fake twin program module
    (what it needs of them at import), then removed again."""
    torch = types.ModuleType("torch")
    torch.utils = types.ModuleType("torch.utils")
    dispatch = types.ModuleType("torch.utils._python_dispatch")
    dispatch.TorchDispatchMode = type("TorchDispatchMode", (), {})
    program = types.ModuleType("xlafuse.torch.program")
    program.TorchProgram = object
    for name in ("build_program", "host_outputs", "synchronize"):
        setattr(program, name, lambda *a, **k: pytest.fail("the fake twin builds nothing"))
    program.backend_of = lambda device: Backend(device.type)  # a fake device of type "cpu"
    fakes = {"torch": torch, "torch.utils": torch.utils, "torch.utils._python_dispatch": dispatch}
    fakes["xlafuse.torch.program"] = program
    for name, module in fakes.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.delitem(sys.modules, "xlafuse.torch.measure", raising=False)
    yield importlib.import_module("xlafuse.torch.measure")
    sys.modules.pop("xlafuse.torch.measure", None)


def test_a_twin_cell_is_timed_against_the_xla_reference_by_the_same_rule(torch_measure):
    clock = Clock()
    twin = Program(clock, 1e-3)
    program = types.SimpleNamespace(
        call=twin, args=(1.0,), train=False, device=types.SimpleNamespace(type="cpu")
    )
    request = types.SimpleNamespace(settings=SETTINGS, profile_calls=0)
    xla = Program(clock, 4e-3)
    reference = Reference(compiled=xla, fresh_args=_fresh_args)
    fields = torch_measure._timed(program, request, reference)
    comparison = fields[torch_measure.COMPARISON]
    assert comparison.paired and xla.calls > 0
    assert fields["iters"] >= SETTINGS.min_iters and fields["time_median_s"] > 0
    # The same rule, read from the same function: no comparison without a reference's figures.
    alone = torch_measure._timed(program, request, Reference())
    assert alone[torch_measure.COMPARISON] is None


def test_a_twin_cell_carries_the_references_error_and_no_numerics(torch_measure, monkeypatch):
    clock = Clock()
    program = types.SimpleNamespace(
        call=Program(clock, 1e-3),
        args=(1.0,),
        train=False,
        device=types.SimpleNamespace(type="cpu"),
    )
    twin = torch_measure.TwinRun(program, outputs={}, counts={"kernels": 3})
    monkeypatch.setattr(torch_measure, "run_twin", lambda workload, variant: twin)
    variant = types.SimpleNamespace(torch_compile=None)
    request = types.SimpleNamespace(settings=SETTINGS, profile_calls=0)
    reference = Reference(error="recompiling the reference failed: x")
    fields = torch_measure.measure_cell(object(), variant, request, reference)
    assert fields["kernels"] == 3 and fields["reference_error"] == reference.error
    assert "max_abs_diff" not in fields and fields[torch_measure.COMPARISON] is None
