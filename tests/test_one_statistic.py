"""One statistic per figure: every shown time implies the shown speedup (issue 26).

A speedup is the reference's median over the variant's on the figure the cell leads with, over
the same rounds; the table and the console line show both medians beside it. Checked on every
published results file and on a fresh quickstart run.
"""

import dataclasses
import pathlib

import pytest

from xlafuse.experiment import runner
from xlafuse.experiment.config import load_config
from xlafuse.measurement.timing import TimingSettings
from xlafuse.report.lines import LINE_WIDTH, cell_line, lead, lead_time, reference_time
from xlafuse.report.markdown import render_markdown
from xlafuse.results.records import append_result, latest_per_cell, read_results

ROOT = pathlib.Path(__file__).resolve().parent.parent
PUBLISHED = sorted((ROOT / "experiments").rglob("results.jsonl"))


def contradictions(records) -> list[str]:
    """The records whose shown times do not imply their shown speedup (empty: none)."""
    wrong = []
    for r in records:
        if not r.ok or r.variant == r.reference or r.speedup.vs_reference is None:
            continue
        own, ref, speedup = (
            lead_time(r),
            reference_time(r, figure=None, reference=_reference(records, r)),
            r.speedup,
        )
        if own is None or ref is None:
            wrong.append(f"{r.cell_id}: a speedup without both times")
            continue
        exact = speedup.lead is not None or speedup.basis is None  # new, or the oldest form
        if exact and speedup.vs_reference != pytest.approx(ref / own):
            wrong.append(f"{r.cell_id}: {speedup.vs_reference} is not {ref} / {own}")
        if (speedup.verdict == "faster" and ref <= own) or (
            speedup.verdict == "slower" and ref >= own
        ):
            wrong.append(f"{r.cell_id}: {speedup.verdict} but {ref} against {own}")
    return wrong


def _reference(records, record):
    """The reference cell of `record`'s workload (the table's reference row)."""
    same = ("workload", "size", "mode", "dtype", "overrides", "devices", "parallelism")
    for r in records:
        if (
            r.ok
            and r.variant == r.reference
            and all(getattr(r, k) == getattr(record, k) for k in same)
        ):
            return r
    return None


def _shown(records) -> tuple[str, list[str]]:
    table = render_markdown(records)
    lines = [cell_line(r, reference=_reference(records, r)) for r in records]
    return table, lines


@pytest.mark.parametrize("path", PUBLISHED, ids=lambda p: p.parent.relative_to(ROOT).as_posix())
def test_published_times_imply_their_speedups(path):
    records = latest_per_cell(read_results(path).records)
    assert contradictions(records) == []
    table, lines = _shown(records)
    for r in records:
        reference = _reference(records, r)
        if (
            r.ok
            and r.variant != r.reference
            and reference_time(r, figure=None, reference=reference)
        ):
            own, ref = lead_time(r) * 1e3, reference_time(r, figure=None, reference=reference) * 1e3
            assert f"{own:.3g} (ref {ref:.3g})" in table
            assert f"{own:.3g} vs {ref:.3g} ms" in cell_line(r, reference=reference)
    assert all(len(part) <= LINE_WIDTH for line in lines for part in line.splitlines())


def _quickstart_config():
    config = load_config(ROOT / "configs" / "quickstart.toml")
    fast = TimingSettings(warmup=1, min_time_s=0.05, min_iters=5, max_iters=300, repeats=3)
    return dataclasses.replace(config, timing=fast)


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    out = tmp_path_factory.mktemp("quickstart")
    return runner.run_experiment(_quickstart_config(), out=out, progress=False)


def test_a_fresh_quickstart_shows_one_statistic_per_figure(quickstart):
    assert len(quickstart) == 14 and all(r.ok for r in quickstart)
    assert contradictions(quickstart) == []
    for r in quickstart:
        pipelined = r.mode == "train" or r.backend == "cpu"
        assert lead(r) == ("pipelined" if pipelined else "latency")
        if r.variant != r.reference:
            # Both figures were compared; the one that leads is the record's speedup.
            s = r.speedup
            assert s.latency is not None and s.pipelined is not None
            assert s.vs_reference == (s.pipelined if pipelined else s.latency)
            assert s.latency == pytest.approx(s.reference_median_s / r.timing.median_s)
            assert s.pipelined == pytest.approx(
                s.reference_pipelined_s / r.timing.pipelined_s_per_call
            )
            assert s.ci[0] <= s.vs_reference <= s.ci[1]
    # One calibration for the file, on an array far larger than the cache.
    ceilings = {repr(r.ceilings) for r in quickstart}
    assert len(ceilings) == 1
    c = quickstart[0].ceilings
    assert c.copy_array_bytes >= 8 * c.cache_bytes
    assert c.copy_range[0] <= c.copy_bytes_per_s <= c.copy_range[1]


def test_a_resume_reuses_the_files_calibration(quickstart, tmp_path, monkeypatch):
    kept = [r for r in quickstart if r.workload != "mlp"]
    for r in kept:
        append_result(tmp_path / "results.jsonl", r)
    calls = []
    monkeypatch.setattr(runner, "calibrate", lambda backend: calls.append(backend))
    records = runner.run_experiment(
        _quickstart_config(), out=tmp_path, only=["mlp"], progress=False
    )
    assert calls == []  # not measured again: the file's calibration was reused
    assert len(records) == 4
    assert {repr(r.ceilings) for r in records} == {repr(kept[0].ceilings)}
