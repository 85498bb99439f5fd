"""Experiment config validation: every problem found, located, in one error."""

from pathlib import Path

import pytest
from helpers import config_file

from xlafuse.errors import XlafuseError
from xlafuse.experiment.config import ExperimentConfig, load_config, parse_config

GOOD = """
[experiment]
name = "t"
output = "out/t"
variants = ["default", "no-fusion", { name = "cpu-no-fusion", xla_disable_hlo_passes = "fusion" }]

[[workloads]]
name = "chain"
overrides = { ops = 4 }

[[workloads]]
name = "mlp"
mode = "train"
dtype = "float32"

[timing]
min_time_s = 0
min_iters = 3
"""


def _problems(data: dict, backend: str = "cpu") -> list[str]:
    with pytest.raises(XlafuseError) as info:
        parse_config(data, backend=backend)
    return str(info.value).splitlines()[1:]


def test_good_config_parses(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text(GOOD)
    config = load_config(path, backend="cpu")
    assert isinstance(config, ExperimentConfig)
    assert [v.name for v in config.variants] == ["default", "no-fusion", "cpu-no-fusion"]
    assert config.variant("cpu-no-fusion").resolve().disable_passes == ("fusion",)
    assert [w.label for w in config.workloads] == [
        "chain[ops=4]/tiny/forward",
        "mlp/tiny/train/float32",
    ]
    assert config.timing.min_time_s == 0.0 and config.timing.min_iters == 3
    assert config.timing.max_iters == 1000  # default
    assert str(config.output) == "out/t"
    assert len(config.config_hash()) == 12


def test_one_error_lists_every_problem():
    problems = _problems(
        {
            "experimnt": {},
            "experiment": {"variants": ["default", "no-fuson"], "reference": "dflt"},
            "workloads": [
                {"name": "mlp", "size": "huge"},
                {"name": "gtp2"},
                {"name": "mul_add_relu", "mode": "train"},
                {"name": "chain", "overrides": {"ops": "16", "opps": 1}, "sise": "tiny"},
            ],
            "timing": {"min_iters": "ten", "max_iter": 5, "warmup": 0},
        }
    )
    expected = [
        "experimnt: unknown key (did you mean 'experiment'?); accepted: imports, experiment, workloads, timing, measure",
        "workloads[0].size: unknown size 'huge' for workload 'mlp'; accepted: tiny, small, full",
        "workloads[1].name: unknown workload 'gtp2' (did you mean 'gpt2'?); accepted: attention,",
        "workloads[2].mode: mode 'train' needs parameters and workload 'mul_add_relu' has none; "
        "accepted modes for 'mul_add_relu': forward.",
        "workloads[3].sise: unknown key (did you mean 'size'?)",
        "workloads[3].overrides.ops: override ops='16' for workload 'chain': need an integer >= 1",
        "workloads[3].overrides.opps: unknown override 'opps' for workload 'chain' (did you mean "
        "'ops'?); accepted: cols, ops, rows",
        "experiment.variants[1]: unknown variant 'no-fuson' (did you mean 'no-fusion'?)",
        "experiment.reference: 'dflt' is not one of the variants (did you mean 'default'?)",
        "timing.max_iter: unknown key (did you mean 'max_iters'?)",
        "timing.min_iters: must be an integer, not a string 'ten'",
        "timing.warmup: must be from 1 to 1000, not 0",
    ]
    assert len(problems) == len(expected)
    for line, start in zip(problems, expected, strict=True):
        assert line.strip().startswith(start), (line, start)


def test_error_header_counts_problems_and_names_the_file(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[[workloads]]\nname = "mlp"\nsize = "huge"\n[timing]\nrepeats = 0\n')
    with pytest.raises(XlafuseError, match=r"bad.toml: 2 problems in the config:"):
        load_config(path, backend="cpu")


def test_gpu_only_things_on_cpu():
    problems = _problems(
        {
            "experiment": {"variants": ["default", "no-cuda-graphs", "no-fusion+no-gemm-fusion"]},
            "workloads": [{"name": "attention", "overrides": {"implementation": "cudnn"}}],
        }
    )
    assert problems == [
        "  workloads[0].overrides.implementation: 'cudnn' needs a GPU; the backend is 'cpu' (use 'xla')",
        "  experiment.variants[1]: variant 'no-cuda-graphs' applies to gpu only; the backend is 'cpu'",
        "  experiment.variants[2]: variant 'no-fusion+no-gemm-fusion' applies to gpu only; "
        "the backend is 'cpu'",
    ]


def test_inline_variant_with_unknown_pass_is_caught_before_compiling():
    problems = _problems(
        {
            "experiment": {
                "variants": ["default", {"name": "x", "xla_disable_hlo_passes": "fusoin"}]
            },
            "workloads": [{"name": "chain"}],
        }
    )
    assert len(problems) == 1
    assert (
        problems[0]
        .strip()
        .startswith("experiment.variants[1]: unknown HLO pass 'fusoin' (did you mean 'fusion'?)")
    )


def test_missing_workloads_and_wrong_types():
    problems = _problems(
        {"experiment": {"name": 3, "variants": "default"}, "measure": {"profile": "yes"}}
    )
    assert [p.strip() for p in problems] == [
        "experiment.name: must be a string, not an integer 3",
        "workloads: missing: add at least one [[workloads]] table",
        "experiment.variants: must be a non-empty array of names or tables",
        "measure.profile: must be a boolean, not a string 'yes'",
    ]


def test_invalid_toml_is_one_error(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("[experiment\nname = 1\n")
    with pytest.raises(XlafuseError, match="not valid TOML"):
        load_config(path)


@pytest.mark.parametrize(
    "name", ["quickstart", "pointwise", "transformer", "resnet50", "attention", "all", "costmodel"]
)
def test_shipped_configs_are_valid_on_gpu(name):
    path = Path(__file__).parent.parent / "configs" / f"{name}.toml"
    config = load_config(path, backend="gpu")
    assert config.workloads and config.variants


def test_quickstart_is_valid_on_cpu():
    config = load_config(
        Path(__file__).parent.parent / "configs" / "quickstart.toml", backend="cpu"
    )
    assert {v.name for v in config.variants} == {"default", "no-fusion"}


def test_missing_config_file_names_the_shipped_ones(capsys):
    from xlafuse.cli import main

    assert main(["run", "configs/nope.toml"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("xlafuse run: error: config file 'configs/nope.toml' not found")
    assert "quickstart.toml" in err


def test_variant_options_and_override_values_are_checked_before_running():
    problems = _problems(
        {
            "experiment": {
                "variants": [
                    "default",
                    {"name": "x", "disable_passes": ["fusion"]},
                    {"name": "y", "xla_no_such_option": True},
                    {"name": "z", "xla_cpu_enable_fast_math": "yes"},
                    {"name": "ok", "xla_disable_hlo_passes": ["fusion"]},
                ]
            },
            "workloads": [
                {"name": "chain", "overrides": {"ops": -3}},
                {"name": "transformer_block", "overrides": {"heads": 3}},
            ],
        }
    )
    assert [p.strip() for p in problems] == [
        "workloads[0].overrides.ops: override ops=-3 for workload 'chain': need an integer >= 1",
        "workloads[1].overrides.heads: workload 'transformer_block': heads=3 must divide "
        "d_model=64 evenly",
        "experiment.variants[1].disable_passes: must be a string, a boolean or a number, not an "
        "array ['fusion'] (an XLA option takes one value; several passes go in "
        'xla_disable_hlo_passes = "a,b")',
        "experiment.variants[2]: XLA rejects the options of variant 'y': No such compile option: "
        "'xla_no_such_option'",
        "experiment.variants[3]: XLA rejects the options of variant 'z': While setting option "
        "xla_cpu_enable_fast_math, 'yes' is not a valid bool value.",
    ]


def test_cli_rejects_a_list_valued_variant_before_any_cell(tmp_path, capsys):
    from xlafuse.cli import main

    path = config_file(
        tmp_path,
        '[experiment]\nvariants = ["default", {name = "x", xla_cpu_enable_fast_math = [true]}]\n'
        '[[workloads]]\nname = "gelu"\n',
    )
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "experiment.variants[1].xla_cpu_enable_fast_math: must be a string" in err
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_a_folder_or_a_binary_file_as_config_is_one_line(tmp_path, capsys):
    from xlafuse.cli import main

    assert main(["run", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"xlafuse run: error: config {str(tmp_path)!r} is a folder; give a TOML file, "
        "e.g. configs/quickstart.toml\n"
    )
    binary = tmp_path / "c.toml"
    binary.write_bytes(b"[experiment]\nname = \xf1\x00\x01\n")
    assert main(["run", str(binary)]) == 2
    assert capsys.readouterr().err == (
        f"xlafuse run: error: {binary}: not a TOML config: not UTF-8 text (byte 0xf1 at "
        "offset 20)\n"
    )
