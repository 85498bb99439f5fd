"""Every plot says what it shows: title, axis units, workload and variant names, ceilings' basis."""

import dataclasses

import pytest

from xlafuse.report import coldstart, plots
from xlafuse.report import markdown as report_md
from xlafuse.results.parts import (
    CeilingsRecord,
    ColdStartRecord,
    FusionRecord,
    ModelRecord,
    RatesRecord,
    SpeedupRecord,
    TimingRecord,
)
from xlafuse.results.records import CellResult

COPY = 5.0e9  # bytes/s
PEAK = 2.0e11  # FLOP/s


def _cell(workload, variant, kernels, median_s, flops=None, tflops=None, **extra):
    return CellResult(
        workload=workload, size="tiny", mode="forward", dtype="float32", variant=variant,
        backend="cpu", device_kind="cpu", cell_id=f"{workload}{extra}/{variant}",
        model=ModelRecord(flops=flops),
        fusion=FusionRecord(kernels=kernels, modeled_bytes=1_000_000 if flops else None),
        timing=TimingRecord(median_s=median_s),
        speedup=SpeedupRecord(vs_reference=1e-3 / median_s),
        rates=RatesRecord(tflops=tflops, basis="time_median_s"),
        ceilings=CeilingsRecord(
            copy_bytes_per_s=COPY, copy_basis="pipelined_s_per_call", matmul_flops_per_s=PEAK
        ),
        **extra,
    )  # fmt: skip


RECORDS = [
    _cell("chain", "default", 1, 1e-3, overrides={"ops": 16}),
    _cell("chain", "no-fusion", 20, 2e-3, overrides={"ops": 16}),
    # intensity 2 FLOP/byte: the roof is 1e10 FLOP/s; 0.02 TFLOP/s is above it, 0.005 below.
    _cell("mlp", "default", 10, 1e-3, flops=2_000_000, tflops=0.02),
    _cell("mlp", "no-fusion", 40, 3e-3, flops=2_000_000, tflops=0.005),
]


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions save, by file name."""
    saved = {}

    def save(fig, path, tight=True):
        saved[path.name] = fig
        return True

    monkeypatch.setattr(plots, "save", save)
    return saved


def _texts(fig):
    ax = fig.axes[0]
    legend = ax.get_legend()
    return {
        "title": ax.get_title(),
        "x": ax.get_xlabel(),
        "y": ax.get_ylabel(),
        "legend": [t.get_text() for t in legend.get_texts()] if legend else [],
        "notes": [t.get_text() for t in ax.texts] + [t.get_text() for t in fig.texts],
        "ticks": [t.get_text() for t in ax.get_xticklabels()],
    }


@pytest.fixture
def plotted(figures, tmp_path):
    """The texts of each figure `write_plots` saves for RECORDS, by file name."""
    report_md.write_plots(RECORDS, tmp_path)
    return {name: _texts(fig) for name, fig in figures.items()}


@pytest.mark.parametrize(
    ("png", "expected"),
    [
        (
            "speedup.png",
            {
                "title": "Speedup over default = default's median / the variant's median, "
                "same rounds\non latency (cpu)",
                "y": "speedup vs default (x)",
                "ticks": ["chain[ops=16]/tiny/forward", "mlp/tiny/forward"],
                "legend": ["default", "no-fusion"],
            },
        ),
        (
            "kernels_vs_time.png",
            {
                "title": "Kernels per call vs latency per call (cpu)",
                "x": "kernels per call (count, log scale)",
                "y": "median time per call (ms, log scale)",
                "legend": ["default", "no-fusion"],
                "notes": ["chain[ops=16]/tiny/forward", "mlp/tiny/forward"],
            },
        ),
    ],
    ids=["speedup keeps override labels", "kernels names every workload and variant"],
)
def test_plot_says_what_it_shows(plotted, png, expected):
    assert {key: plotted[png][key] for key in expected} == expected


def test_roofline_draws_the_measured_ceilings_and_explains_points_above(plotted):
    texts = plotted["roofline.png"]
    assert texts["title"] == "Roofline under the measured ceilings (cpu)"
    assert texts["x"] == "arithmetic intensity (FLOP / modeled byte)"
    assert texts["y"] == "achieved FLOP/s (analytic FLOPs / time_median_s)"
    assert texts["legend"] == [
        "default",
        "no-fusion",
        "1: mlp/tiny/forward",
        "copy ceiling 5 GB/s\n(measured: x + 1, read + write, per pipelined_s_per_call)",
        "matmul ceiling 0.2 TFLOP/s (measured: large square matmul)",
    ]
    assert texts["notes"][:2] == ["1", "1"]
    assert texts["notes"][2].startswith("1 point lies above the measured ceilings: modeled bytes")
    assert [r.variant for r in plots.roofline_points_above(RECORDS)] == ["default"]
    markdown = report_md.render_markdown(RECORDS, plots=["roofline.png"])
    assert "Roofline: 1 point lies above the measured ceilings" in markdown
    assert markdown.rstrip().endswith("(mlp/tiny/forward default)")


def test_roofline_leaves_out_cache_resident_cells_and_says_so(figures, tmp_path):
    resident = dataclasses.replace(
        RECORDS[3], rates=RatesRecord(tflops=0.005, basis="time_median_s", cache_resident=True)
    )
    report_md.write_plots([*RECORDS[:3], resident], tmp_path)
    fig = figures["roofline.png"]
    texts = _texts(fig)
    assert texts["legend"][:2] == ["default", "1: mlp/tiny/forward"]
    assert texts["notes"][-1].startswith("1 cache-resident cell left out (arrays that fit")
    # The legend sits right of the axes, outside the data.
    assert fig.axes[0].get_legend().get_bbox_to_anchor().x0 > fig.axes[0].bbox.x1
    only_resident = [r for r in RECORDS if r.workload == "chain"] + [resident]
    assert not plots.plot_roofline(only_resident, tmp_path / "r.png")


def test_plots_leave_the_callers_matplotlib_backend_alone(tmp_path):
    import matplotlib

    before = matplotlib.get_backend()
    report_md.write_plots(RECORDS, tmp_path)
    assert matplotlib.get_backend() == before
    assert (tmp_path / "speedup.png").stat().st_size > 1000


def test_cold_start_plot_has_title_units_and_labels(monkeypatch, tmp_path):
    import matplotlib.figure

    saved = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, *a, **k: saved.append(fig))
    cold_start = ColdStartRecord(cold_compile_s=0.3, warm_compile_s=0.01)
    rows = [dataclasses.replace(RECORDS[0], cold_start=cold_start)]
    assert coldstart.coldstart_plot(rows, tmp_path / "c.png")
    texts = _texts(saved[0])
    assert texts["title"] == "Compile time, empty vs filled persistent cache (cpu)"
    assert texts["y"] == "compile time (s, log scale)"
    assert texts["ticks"] == ["chain[ops=16]/tiny/forward\ndefault"]
    assert texts["legend"] == [
        "cold (empty cache, new process)",
        "warm (filled cache, new process)",
    ]
