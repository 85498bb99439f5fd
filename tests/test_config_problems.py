"""Issue 42, items 10 and 16: wrong-typed variant options, duplicate workload tables, every
config problem in one pass, and `xlafuse.measure`'s parameters of the wrong type: each one
located line (exit 2 at the CLI), never a TypeError or AttributeError."""

import sys

import jax.numpy as jnp
import jaxlib
import pytest
from helpers import config_file

import xlafuse
from xlafuse.cli import main
from xlafuse.compiler.variants import DISABLE_PASSES, Variant, from_options
from xlafuse.errors import XlafuseError
from xlafuse.experiment.config import parse_config
from xlafuse.models import user

PASSES = 'must be a string of pass names ("a,b") or an array of them'
ONE_VALUE = (
    "must be a string, a boolean or a number, not {} (an XLA option takes one value; several "
    'passes go in xla_disable_hlo_passes = "a,b")'
)
LINES = "experiment.variants[1]"


@pytest.fixture(autouse=True)
def own_imports(monkeypatch):
    """The entries these tests import are forgotten after each (their folders off sys.path)."""
    monkeypatch.setattr(user, "_IMPORTED", dict(user._IMPORTED))
    monkeypatch.setattr(sys, "path", list(sys.path))


def _problems(data: dict) -> list[str]:
    with pytest.raises(XlafuseError) as info:
        parse_config(data, backend="cpu")
    return [line.strip() for line in str(info.value).splitlines()[1:]]


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (5, "an integer 5"),
        (True, "a boolean True"),
        (1.5, "a number 1.5"),
        ([1, 2], "an array [1, 2]"),
        ({"a": "fusion"}, "a table {'a': 'fusion'}"),
    ],
)
def test_a_wrong_typed_pass_list_is_a_config_problem(value, shown):
    variant = {"name": "x", "xla_disable_hlo_passes": value}
    data = {"workloads": ["chain"], "experiment": {"variants": ["default", variant]}}
    assert _problems(data) == [f"{LINES}.xla_disable_hlo_passes: {PASSES}, not {shown}"]


def test_a_wrong_typed_variant_option_is_one_line_and_exit_2(tmp_path, capsys):
    path = config_file(
        tmp_path,
        '[experiment]\nvariants = ["default", { name = "x", xla_disable_hlo_passes = 5 }]\n'
        '[[workloads]]\nname = "chain"\n',
    )
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        f"xlafuse run: error: {path}: 1 problem in the config:\n"
        f"  {LINES}.xla_disable_hlo_passes: {PASSES}, not an integer 5\n"
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        (
            {"name": "x", "xla_disable_hlo_passes": 5},
            f"variant 'x': xla_disable_hlo_passes {PASSES}, not an integer 5",
        ),
        (
            {"name": "x", "xla_disable_hlo_passes": ["fusion", 2]},
            f"variant 'x': xla_disable_hlo_passes {PASSES}, not an array ['fusion', 2]",
        ),
        (
            {"name": "x", "xla_cpu_enable_fast_math": None},
            f"variant 'x': xla_cpu_enable_fast_math {ONE_VALUE.format('nothing')}",
        ),
        (
            {"name": "x", "xla_cpu_enable_fast_math": [True]},
            f"variant 'x': xla_cpu_enable_fast_math {ONE_VALUE.format('an array [True]')}",
        ),
        (
            {"name": 5, "xla_cpu_enable_fast_math": True},
            "a variant's name must be a non-empty string, not 5",
        ),
        (5, "a variant is a preset name, a Variant or a dict, not int"),
    ],
)
def test_measure_refuses_a_wrong_typed_variant_in_one_line(variant, message):
    with pytest.raises(XlafuseError) as err:
        xlafuse.measure(lambda x: x + 1, jnp.ones(3), variants=["default", variant])
    assert str(err.value) == message


def test_a_variant_of_wrong_typed_fields_is_refused_where_it_is_made():
    with pytest.raises(ValueError) as err:
        Variant("v", disable_passes="fusion")
    assert str(err.value) == (
        "variant 'v': disable_passes must be a tuple of strings, not a string 'fusion'"
    )
    with pytest.raises(ValueError, match=r"^variant 'v': xla_x must be a string, a boolean"):
        Variant("v", backend_options={"cpu": {"xla_x": [1]}})
    assert from_options({DISABLE_PASSES: "fusion, ,dot-library-rewriter"}).disable_passes == (
        "fusion",
        "dot-library-rewriter",
    )


def test_a_duplicate_workload_table_is_a_config_problem(tmp_path):
    twice = {"workloads": ["chain", {"name": "mlp"}, {"name": "chain", "size": "tiny"}]}
    assert _problems(twice) == [
        "workloads[2]: chain/tiny/forward is listed twice (also workloads[0]): each cell is "
        "measured once; remove one, or give it another size, mode, dtype or overrides"
    ]
    entry = tmp_path / "prog.py"
    entry.write_text("def forward(n=4):\n    raise RuntimeError('not called')\n")
    spec = {"entry": f"{entry}:forward", "overrides": {"n": 4}}
    assert _problems({"workloads": [spec, dict(spec)]}) == [
        "workloads[1]: forward[n=4]/custom/forward is listed twice (also workloads[0]): each "
        "cell is measured once; remove one, or give it another size, mode, dtype or overrides"
    ]
    # one cell per backend: the same workload on two backends is not a duplicate
    apart = [{"name": "chain", "backends": ["cpu"]}, {"name": "chain", "backends": ["gpu"]}]
    assert [w.label for w in parse_config({"workloads": apart}, backend="cpu").workloads] == [
        "chain/tiny/forward",
        "chain/tiny/forward",
    ]
    other = [{"name": "chain"}, {"name": "chain", "overrides": {"ops": 4}}]
    assert len(parse_config({"workloads": other}, backend="cpu").workloads) == 2


def test_every_config_problem_comes_out_in_one_pass(tmp_path):
    (tmp_path / "prog.py").write_text("def forward(n=4):\n    raise RuntimeError('no')\n")
    data = {
        "workloads": [
            {"name": "chian", "backends": ["tpu"]},
            {"name": "chian", "devices": "2", "parallelism": 5},
            {"entry": "prog.py:forwrd", "size": "tiny", "name": 5},
            {"entry": "prog.py:forward", "mode": "trian", "overrides": {"m": 1}},
            {"name": "chain", "size": 5, "mode": "trian"},
        ],
        "experiment": {
            "variants": [
                "default",
                {"xla_disable_hlo_passes": "fusoin"},
                {"name": "y", "xla_disable_hlo_passes": "fusoin", "xla_foo": [1]},
            ]
        },
    }
    with pytest.raises(XlafuseError) as info:
        parse_config(data, backend="cpu", source=tmp_path / "c.toml")
    unknown = (
        "unknown workload 'chian' (did you mean 'chain'?); accepted: attention, cartpole, "
        "chain, cos_relu, gelu, gpt2, layernorm, lstm, matmul_bias_act, mlp, mul_add_relu, "
        "resnet50, rmsnorm, softmax, swiglu, transformer_block"
    )
    no_pass = (
        "unknown HLO pass 'fusoin' (did you mean 'fusion'?) for backend 'cpu' with jaxlib "
        f"{jaxlib.__version__}: XLA would silently ignore it. Fusion passes here: "
        "dot-library-passes, dot-library-rewriter, fusion, fusion-wrapper"
    )
    not_for_entries = (
        "not for an entry: FUNCTION's overrides decide a program of the user's (its size and "
        "dtype), on one device"
    )
    assert [line.strip() for line in str(info.value).splitlines()] == [
        f"{tmp_path / 'c.toml'}: 16 problems in the config:",
        "workloads[0].backends: 'tpu' is not a backend (did you mean 'gpu'?) (accepted: cpu, gpu)",
        f"workloads[0].name: {unknown}",
        "workloads[1].devices: must be an integer, not a string '2'",
        "workloads[1].parallelism: must be a string, not an integer 5",
        f"workloads[1].name: {unknown}",
        f"workloads[2].size: {not_for_entries}",
        "workloads[2].entry: entry 'prog.py:forwrd': 'prog.py' has no function 'forwrd' (did "
        "you mean 'forward'?)",
        "workloads[2].name: must be a string, not an integer 5",
        "workloads[3].mode: 'trian' is not a mode (did you mean 'train'?) (accepted: forward, "
        "train)",
        "workloads[3].entry: entry 'prog.py:forward': got an unexpected keyword argument 'm' "
        "(its parameters: n)",
        "workloads[4].size: must be a string, not an integer 5",
        "workloads[4].mode: unknown mode 'trian' for workload 'chain'; accepted: forward",
        "experiment.variants[1].name: missing (required)",
        f"experiment.variants[1]: {no_pass}",
        f"experiment.variants[2].xla_foo: {ONE_VALUE.format('an array [1]')}",
        f"experiment.variants[2]: {no_pass}",
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"timing": 5},
            "measure: timing=5 is not accepted; accepted: a TimingSettings, a dict of its fields "
            "(warmup, min_time_s, min_iters, max_iters, repeats) or None (the defaults)",
        ),
        ({"timing": {"warmup": "2"}}, "timing.warmup must be an integer, not '2'"),
        ({"timing": {"min_time_s": None}}, "timing.min_time_s must be a number, not None"),
        (
            {"profile": "yes"},
            "measure: profile='yes' is not accepted; accepted: True, False or None (None: trace "
            "on a GPU only)",
        ),
        ({"fresh": "no"}, "measure: fresh='no' is not accepted; accepted: True or False"),
        (
            {"name": 5},
            "measure: name=5 is not accepted; accepted: a label of letters, digits and '_', "
            "'-', '.' (or None: the function's name)",
        ),
        (
            {"name": "a/b"},
            "measure: name='a/b' is not accepted; accepted: a label of letters, digits and "
            "'_', '-', '.' (or None: the function's name)",
        ),
        (
            {"out": 3},
            "measure: out=3 is not accepted; accepted: a folder (str or Path) or None",
        ),
    ],
)
def test_measure_refuses_a_parameter_of_the_wrong_type(kwargs, message):
    with pytest.raises(XlafuseError) as err:
        xlafuse.measure(lambda x: x + 1, jnp.ones(3), **kwargs)
    assert str(err.value) == message
