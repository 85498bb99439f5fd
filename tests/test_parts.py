"""Record parts built by explicit constructors; `Part.of` refuses a source that lacks a field."""

import types

import pytest

from xlafuse.experiment import fields
from xlafuse.measurement.collectives import CommProfile
from xlafuse.measurement.timing import Timing
from xlafuse.results import parts


def test_of_refuses_a_source_without_a_field():
    source = types.SimpleNamespace(num_params=3, items_per_call=8, items_unit="rows")
    with pytest.raises(AttributeError, match="SimpleNamespace has no flops for ModelRecord"):
        parts.ModelRecord.of(source)
    assert parts.ModelRecord.of(source, flops=None).num_params == 3
    assert parts.ModelRecord.of(None) == parts.ModelRecord()


def test_of_leaves_the_fields_another_source_fills():
    report = types.SimpleNamespace(
        kernels=2, fusions=2, real_fusions=1, custom_calls=0, custom_call_targets={},
        kinds={"kLoop": 2}, modeled_bytes=64, launches_per_call=2, modeled_bytes_per_call=64,
        flops_per_call=0, per_call_basis="per call",
    )  # fmt: skip
    part = parts.FusionRecord.of(report, missed_fusions=None)
    assert (part.kernels, part.kernels_basis, part.generated_kernels) == (2, None, None)


def test_timing_part_names_every_figure():
    timing = Timing(2.0, 1.0, 3.0, 0.5, 9, 1.5, 10, 2, 0.25, (1.0, 2.0), (1.5,))
    part = fields.timing_part(timing)
    assert part == parts.TimingRecord.from_flat(timing.to_dict())
    assert (part.median_s, part.min_s, part.pipelined_s_per_call, part.host_s_per_call) == (
        2.0, 0.5, 1.5, 0.25,
    )  # fmt: skip


def test_comm_part_from_the_profiles_json_form():
    comm = CommProfile(comm_time_s=2e-3, overlap_s=5e-4, comm_kernels_per_call=4.0, calls=10)
    part = fields.comm_part(comm.to_dict())
    assert (part.time_s, part.overlap_s, part.kernels_per_call) == (2e-3, 5e-4, 4.0)
    assert part.overlap_fraction == pytest.approx(0.25)
    assert fields.comm_part(None) == parts.CommRecord()


def test_a_run_resolves_each_variant_once(tmp_path, monkeypatch):
    from xlafuse.compiler import variants
    from xlafuse.experiment import runner
    from xlafuse.experiment.config import parse_config

    calls = []
    real_get = variants.get
    monkeypatch.setattr(variants, "get", lambda spec: calls.append(spec) or real_get(spec))
    config = parse_config(
        {
            "experiment": {"name": "t", "variants": ["default", "no-fusion"]},
            "workloads": [{"name": "mul_add_relu"}, {"name": "gelu"}],
            "timing": {"warmup": 1, "min_time_s": 0, "min_iters": 2, "max_iters": 3},
            "measure": {"calibrate": False},
        },
        backend="cpu",
    )
    records = runner.run_experiment(config, out=tmp_path, progress=False)
    assert len(records) == 4 and all(r.ok for r in records)
    assert sorted(calls) == ["default", "no-fusion"]  # 4 cells, each variant resolved once


def test_a_speedup_without_a_pipelined_figure_leads_with_latency():
    from xlafuse.measurement import timing
    from xlafuse.measurement.stats import Speedup

    reference = Timing(2.0, 1.0, 3.0, 0.5, 9, 1.5, 10, 2, 0.25)
    latency = Speedup(0.5, (0.4, 0.6), "slower", True)
    part = fields.speedup_part(timing.Comparison(latency, None, False, reference), "pipelined")
    assert part.lead == "latency" and part.vs_reference == 0.5
    assert part.basis == timing.BASES[("latency", False)]
