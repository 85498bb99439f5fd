"""Non-array leaves are static, as `eqx.filter_jit` has them (issue 44): a module holding
functions, ints and strings beside its arrays goes through every entry point as it is, to the
same program."""

import dataclasses
import json
import textwrap

import jax
import jax.numpy as jnp
import pytest
from helpers import FAST_TIMING

import xlafuse
from xlafuse.cli import main
from xlafuse.compiler import static
from xlafuse.models import user
from xlafuse.results.records import read_results

# A module as Equinox writes one (every field a leaf), without Equinox: `jax.nn.relu` and
# `jnp.ravel` among its leaves, an int that sizes a Python loop, a string it branches on.
PROGRAM = """
import dataclasses

import jax
import jax.numpy as jnp


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Net:
    w: jax.Array
    activation: object
    flatten: object
    depth: int
    mode: str

    def __call__(self, x):
        for _ in range(self.depth):
            x = self.activation(x @ self.w) + x
        return self.flatten(x) if self.mode == "flat" else x


def make(n=8, mode="flat"):
    return Net(jnp.eye(n) * 0.5, jax.nn.relu, jnp.ravel, 3, mode), jnp.ones((4, n))


def apply(net, x):
    return net(x)


def forward(n: int = 8):
    return apply, make(n)


def train(net, x):
    loss, grad = jax.value_and_grad(lambda w: (dataclasses.replace(net, w=w)(x) ** 2).mean())(net.w)
    return dataclasses.replace(net, w=net.w - 0.01 * grad), loss


def step(n: int = 8):
    return train, make(n), (0,)


def renamed(net, x):
    return dataclasses.replace(net, mode="other"), x.sum()


def bad_step(n: int = 8):
    return renamed, make(n), (0,)
"""

NAMES = ["relu", "ravel", "3", "'flat'"]
PATHS = ["[0].activation", "[0].flatten", "[0].depth", "[0].mode"]


@pytest.fixture
def program(tmp_path, monkeypatch):
    """The module, written to a file: (its path, the module imported)."""
    monkeypatch.setattr(user, "_IMPORTED", dict(user._IMPORTED))
    path = tmp_path / "net.py"
    path.write_text(PROGRAM)
    return path, user.import_target(path)


def _json(capsys, *argv) -> dict:
    assert main(list(argv)) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_jax_jit_refuses_the_module_and_split_lists_what_it_makes_static(program):
    _, module = program
    net, x = module.make()
    with pytest.raises(TypeError, match=r"was passed to the function at path net\.activation"):
        jax.jit(module.apply)(net, x)
    parts = static.split(module.apply, (net, x))
    assert [(s.path, s.name) for s in parts.static] == list(zip(PATHS, NAMES, strict=True))
    assert isinstance(parts.args[0], list) and parts.args[1] is x  # arrays only, positions kept
    assert jax.jit(parts.fn)(*parts.args).shape == (32,)
    plain = static.split(jnp.sin, (x,))
    assert plain.fn is jnp.sin and plain.args == (x,) and plain.static == ()


def test_one_program_through_compare_inspect_run_measure_and_compile(program, capsys, tmp_path):
    path, module = program
    spec = f"{path}:forward"
    compared = _json(capsys, "compare", spec, "--json")
    kernels = compared["rows"][0]["kernels"]
    assert kernels > 1 and compared["rows"][1]["within_tolerance"]
    inspected = _json(capsys, "inspect", "--workload", spec, "--json")
    assert inspected["kernels"] == kernels
    assert inspected["static_leaves"] == [
        {"path": p, "name": n} for p, n in zip(PATHS, NAMES, strict=True)
    ]
    assert main(["inspect", "--workload", spec]) == 0
    assert "static: 4 leaves (relu, ravel, 3, 'flat')" in capsys.readouterr().out.splitlines()

    config = tmp_path / "static.toml"
    config.write_text(
        textwrap.dedent(f"""
        [experiment]
        name = "static"
        output = "{tmp_path / "out"}"
        variants = ["default"]

        [[workloads]]
        entry = "net.py:forward"

        [timing]
        {" ".join(f"{k} = {v}" + chr(10) for k, v in FAST_TIMING.items())}
        [measure]
        calibrate = false
        """)
    )
    assert main(["run", str(config), "--no-progress"]) == 0, capsys.readouterr().err
    (record,) = read_results(tmp_path / "out" / "results.jsonl").records
    assert record.ok and record.fusion.kernels == kernels

    net, x = module.make()
    measured = xlafuse.measure(
        module.apply, net, x, variants=["default"], timing=FAST_TIMING, calibrate=False
    )
    assert measured.records[0].fusion.kernels == kernels
    assert measured.records[0].size.startswith("args-")  # a module: its hash, statics in it
    assert xlafuse.compare(module.apply, net, x).row("default").kernels == kernels
    compiled = xlafuse.compile(module.apply)
    assert compiled.compile(net, x).report.kernels == kernels
    assert jnp.allclose(compiled(net, x), module.apply(net, x))


def test_a_step_whose_state_holds_functions_passes_its_new_state_back(program):
    _, module = program
    workload = user.build_entry(f"{program[0]}:step")
    assert workload.mode == "train" and [s.name for s in workload.static] == NAMES
    fn, args, donate = module.step()
    measured = xlafuse.measure(
        fn, *args, donate_argnums=donate, timing=FAST_TIMING, calibrate=False
    )
    assert [r.ok for r in measured.records] == [True, True]
    assert measured.record("no-fusion").numerics.within_tolerance


def test_a_step_that_changes_its_static_leaves_is_refused(program):
    with pytest.raises(user.EntryError) as err:
        user.build_entry(f"{program[0]}:bad_step")
    assert str(err.value) == (
        f"entry '{program[0]}:bad_step': a step's new state must hold the static leaves (not "
        "arrays) of its state, args[0], unchanged (the next call is traced with those of "
        "args[0])"
    )


def test_xlafuse_compile_gives_back_static_leaves_and_compiles_per_value(program):
    _, module = program
    net, x = module.make()
    same = xlafuse.compile(lambda net, x: (net, x.sum()))
    out, total = same(net, x)
    assert out.activation is jax.nn.relu and out.mode == "flat" and float(total) == 32.0
    same(net, x)
    same(dataclasses.replace(net, mode="other"), x)  # another value: another program
    assert len(same._compiled) == 2
