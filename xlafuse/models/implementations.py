"""Implementations of a workload's computation: its own program, and hand-fused kernels (issue 46).

A workload's own program (`OWN`, "xla": the plain JAX program, fused by XLA) is what its cells
compile unless a variant names another implementation (`impl=NAME`,
`xlafuse.compiler.variants`). A zoo workload declares the operation that tokamax implements
(`register(..., op=...)`): `attention` (`dot_product_attention`), `layernorm` (`layer_norm`),
`swiglu` (`gated_linear_unit`) and GPT-2's train step (its LM head and loss,
`linear_softmax_cross_entropy_loss`). Its other implementations are tokamax's, by the names
`OPS` lists: `tokamax_xla` (tokamax's own XLA program), `xla_chunked`, `cudnn`, `mosaic` (Pallas
Mosaic GPU), `triton`, as tokamax offers them for that operation on the device.

The choice is made when the program is traced: `routed(fn, op, name)` is `fn` with `name`
chosen for `op` while it runs (a context variable the zoo's modules read through `chosen`), so
an implementation has the workload's arguments, parameters and inputs, and the program differs
in that operation only. A program of the user's brings its own implementations: functions of
the same arguments (`xlafuse.measure({"xla": f, "mine": g}, ...)`, a config entry's
`implementations` table).

tokamax is an optional extra (`TOKAMAX_INSTALL`), imported on first use (`tokamax_module`).
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import importlib
import importlib.metadata
import importlib.util
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import jax

from xlafuse.compiler import static
from xlafuse.compiler.variants import implementation_problem
from xlafuse.errors import XlafuseError, error_line
from xlafuse.kinds import Backend

OWN = "xla"  # the workload's own program: what XLA fuses by itself
TOKAMAX_INSTALL = 'pip install -e ".[tokamax]"'
ONE_DEVICE = "an implementation runs on one device here (devices = 1)"
MOSAIC_CAPABILITY = 9.0  # Pallas Mosaic GPU: sm_90 (Hopper) or newer
TRITON_CAPABILITY = 8.0  # Triton: sm_80 (Ampere) or newer


@dataclasses.dataclass(frozen=True)
class Implementation:
    """Another implementation of a workload's computation (`Workload.implementations`): a
    function of the workload's arguments computing what its `fn` computes.

    Attributes:
      fn: the function (jit-able, the same arguments and outputs as the workload's `fn`).
      interpreted: it holds a Pallas kernel run in interpret mode (`pallas_call(...,
        interpret=True)`, `interpreted`): its times are not compiled kernels' and are never
        compared with theirs.
      op: the zoo's op it routes to tokamax (`OPS`; what `problem` checks); None for a
        function of the user's.
    """

    fn: Callable[..., Any]
    interpreted: bool = False
    op: str | None = None


@dataclasses.dataclass(frozen=True)
class Kernel:
    """One of tokamax's implementations of an operation, as xlafuse names it.

    Attributes:
      argument: what tokamax's `implementation=` is given.
      key: its key in tokamax's table of the operation (what tokamax offers on the device).
      needs_gpu: runs on an NVIDIA GPU only (a Pallas, Triton or cuDNN kernel: tokamax's run
        on no CPU, not even interpreted).
      capability: the least compute capability it runs on (None: any).
      dtypes: the compute dtypes it takes (empty: any).
    """

    argument: str
    key: str
    needs_gpu: bool = False
    capability: float | None = None
    dtypes: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Op:
    """An operation tokamax implements, as a zoo workload declares it.

    Attributes:
      name: what the zoo calls it (`register(..., op=name)`).
      function: tokamax's function.
      module: the tokamax module whose `IMPLEMENTATIONS` table says what it offers.
      kernels: xlafuse's name -> the Kernel; each a name an `impl=` part may give.
      modes: the modes it applies in (the LM head's loss: train only).
      replaces: what of the workload it replaces, for messages.
    """

    name: str
    function: str
    module: str
    kernels: Mapping[str, Kernel]
    modes: tuple[str, ...] = ("forward", "train")
    replaces: str = ""


_XLA = Kernel("xla", "xla")
_TRITON = Kernel("triton", "triton", needs_gpu=True, capability=TRITON_CAPABILITY)
_SIXTEEN_BIT = ("bfloat16", "float16")
OPS: Mapping[str, Op] = MappingProxyType({op.name: op for op in (
    Op("attention", "dot_product_attention", "tokamax._src.ops.attention.api", {
        "tokamax_xla": _XLA,
        "xla_chunked": Kernel("xla_chunked", "xla_chunked"),
        "cudnn": Kernel("cudnn", "cudnn", needs_gpu=True, dtypes=_SIXTEEN_BIT),
        "mosaic": Kernel("mosaic", "mosaic_gpu", needs_gpu=True, capability=MOSAIC_CAPABILITY),
        "triton": _TRITON,
    }, replaces="its causal attention"),
    Op("layer_norm", "layer_norm", "tokamax._src.ops.normalization.api",
       {"tokamax_xla": _XLA, "triton": _TRITON}, replaces="its LayerNorm"),
    Op("gated_linear_unit", "gated_linear_unit", "tokamax._src.ops.gated_linear_unit.api", {
        "tokamax_xla": _XLA,
        "mosaic": Kernel("mosaic", "mosaic", needs_gpu=True, capability=MOSAIC_CAPABILITY),
        "triton": _TRITON,
    }, replaces="its gated linear unit"),
    # tokamax >= 0.0.13 names its chunked loss "chunked_xla" (attention's is "xla_chunked")
    Op("lm_head_loss", "linear_softmax_cross_entropy_loss",
       "tokamax._src.ops.linear_softmax_cross_entropy_loss.api",
       {"tokamax_xla": _XLA, "xla_chunked": Kernel("chunked_xla", "chunked_xla")},
       modes=("train",), replaces="its LM head and loss (logits never materialized)"),
)})  # fmt: skip

_CHOSEN: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "xlafuse_implementation", default=MappingProxyType({})
)


def chosen(op: str) -> str | None:
    """The implementation chosen for `op` in the program being traced (None: its own)."""
    return _CHOSEN.get().get(op)


def routed(fn: Callable[..., Any], op: str, name: str) -> Callable[..., Any]:
    """`fn` with implementation `name` chosen for `op` while it runs (and so while jax traces
    it); its name kept (the HLO module is `jit_<name>` either way)."""

    @functools.wraps(fn)
    def program(*args: Any, **kwargs: Any) -> Any:
        token = _CHOSEN.set(MappingProxyType({op: name}))
        try:
            return fn(*args, **kwargs)
        finally:
            _CHOSEN.reset(token)

    return program


def names(op: str | None) -> tuple[str, ...]:
    """The implementations of a workload declaring `op`: its own first, then tokamax's."""
    return (OWN, *OPS[op].kernels) if op is not None else (OWN,)


def kernel(op: str, name: str) -> Kernel:
    """The Kernel that tokamax runs for implementation `name` of `op`."""
    return OPS[op].kernels[name]


def tokamax_installed() -> bool:
    """Whether tokamax can be imported (looked up, not imported: its import takes seconds)."""
    return importlib.util.find_spec("tokamax") is not None


def tokamax_version() -> str | None:
    """tokamax's installed version (None: not installed)."""
    try:
        return importlib.metadata.version("tokamax")
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def tokamax_module() -> Any:
    """tokamax, imported once, with absl's flags marked parsed.

    tokamax reads its options through absl flags, and parses `sys.argv` the first time one is
    read: xlafuse's own command line (`--variants ...`) would be refused there
    (UnrecognizedFlagError), so the flags are marked parsed first, at their defaults.
    """
    module = importlib.import_module("tokamax")
    from absl import flags  # a dependency of tokamax's

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    return module


def offered(op: str) -> tuple[str, ...]:
    """The implementations of `op` that the installed tokamax offers (its `IMPLEMENTATIONS`
    table; a tokamax without that table: every one, its call then says what it lacks)."""
    tokamax_module()
    try:
        table = importlib.import_module(OPS[op].module).IMPLEMENTATIONS
    except (ImportError, AttributeError):
        return tuple(OPS[op].kernels)
    return tuple(name for name, k in OPS[op].kernels.items() if k.key in table)


def problem(
    workload: str,
    op: str | None,
    name: str,
    *,
    mode: str,
    dtype: str | None,
    devices: int = 1,
    backend: str | None = None,
) -> str | None:
    """Why workload `workload` (declaring `op`) cannot run implementation `name` here, in one
    line saying what is accepted; None when it can.

    What is checked, in order: that the workload has `name` (`names`), that it applies in
    `mode`, on one device, that tokamax is installed (the line names the extra), that the
    device can run it (a GPU, its compute capability, the dtype), and that the installed
    tokamax offers it (`offered`). The device is checked only where `backend` is JAX's own
    (a config validated for another backend runs there).
    """
    accepted = names(op)
    if name not in accepted:
        return (
            f"workload {workload!r} has no implementation {name!r}; accepted: "
            f"{', '.join(f'impl={n}' for n in accepted)}"
        )
    if name == OWN:
        return None
    spec = OPS[op]
    if mode not in spec.modes:
        return (
            f"implementation {name!r} of {workload!r} replaces {spec.replaces}: it applies to "
            f"mode {', '.join(spec.modes)}, not {mode!r}"
        )
    if devices != 1:
        return f"implementation {name!r} of {workload!r}: {ONE_DEVICE}, not devices={devices}"
    if not tokamax_installed():
        return (
            f"implementation {name!r} of {workload!r} is tokamax's, which is not installed: "
            f"{TOKAMAX_INSTALL}"
        )
    return _device_problem(workload, op, name, dtype=dtype, backend=backend)


def _device_problem(
    workload: str, op: str, name: str, *, dtype: str | None, backend: str | None
) -> str | None:
    """What of the device (or the installed tokamax) keeps implementation `name` of `op` from
    running (see `problem`)."""
    spec = kernel(op, name)
    where = f"implementation {name!r} of {workload!r}"
    if spec.dtypes and dtype is not None and dtype not in spec.dtypes:
        return f"{where} needs dtype {' or '.join(spec.dtypes)}, not {dtype}"
    if backend is not None and backend != jax.default_backend():
        return None  # validated for another backend: its device is not this one
    device_problem = gpu_problem(op, name, where)
    if device_problem:
        return device_problem
    try:
        found = offered(op)
    except ImportError as err:  # installed, but a dependency of its import is missing
        return f"{where} is tokamax's, which cannot be imported here: {error_line(err)}"
    if name not in found:
        return (
            f"{where}: tokamax {tokamax_version()} does not offer {name!r} for "
            f"{OPS[op].function} here; it offers: "
            f"{', '.join(f'impl={n}' for n in found) or 'none'}"
        )
    return None


def gpu_problem(op: str, name: str, where: str) -> str | None:
    """Why JAX's default device cannot run implementation `name` of `op` (None: it can): a
    GPU kernel on another backend, or a GPU older than its compute capability."""
    spec = kernel(op, name)
    if not spec.needs_gpu:
        return None
    device = jax.devices()[0]
    if device.platform != Backend.GPU:
        anywhere = [f"impl={n}" for n, k in OPS[op].kernels.items() if not k.needs_gpu]
        return (
            f"{where} is a GPU kernel and JAX's backend is {device.platform!r} (tokamax's GPU "
            f"kernels have no interpret mode there); here: {', '.join([f'impl={OWN}', *anywhere])}"
        )
    capability = float(getattr(device, "compute_capability", "0") or 0)
    if spec.capability is not None and capability < spec.capability:
        return (
            f"{where} needs an NVIDIA GPU of compute capability {spec.capability:g} or newer "
            f"(sm_{int(spec.capability * 10)}); this {device.device_kind} is "
            f"sm_{int(capability * 10)}"
        )
    return None


# --- tokamax's calls, one per operation (the zoo's modules call these when `chosen`) ---------


def attention(q: jax.Array, k: jax.Array, v: jax.Array, name: str) -> jax.Array:
    """Causal attention of (batch, seq, heads, head_dim) arrays by tokamax's `name`."""
    tokamax = tokamax_module()
    argument = kernel("attention", name).argument
    return tokamax.dot_product_attention(q, k, v, is_causal=True, implementation=argument)


def layer_norm(
    x: jax.Array, scale: jax.Array, offset: jax.Array, *, epsilon: float, name: str
) -> jax.Array:
    """LayerNorm over the last axis by tokamax's `name` (computed in float32 there)."""
    tokamax = tokamax_module()
    argument = kernel("layer_norm", name).argument
    return tokamax.layer_norm(x, scale, offset, epsilon=epsilon, implementation=argument)


def gated_linear_unit(
    x: jax.Array, weights: jax.Array, *, activation: Callable[[jax.Array], jax.Array], name: str
) -> jax.Array:
    """`activation(x @ weights[:, 0]) * (x @ weights[:, 1])` by tokamax's `name`; `weights`
    of shape (d_in, 2, d_hidden)."""
    tokamax = tokamax_module()
    argument = kernel("gated_linear_unit", name).argument
    return tokamax.gated_linear_unit(x, weights, activation=activation, implementation=argument)


def lm_head_loss(
    hidden: jax.Array, embedding: jax.Array, labels: jax.Array, name: str
) -> jax.Array:
    """The mean next-token cross-entropy of `hidden` (batch, seq, d_model) against `labels`
    (batch, seq), through the tied output embedding (vocab, d_model), by tokamax's `name`
    (`linear_softmax_cross_entropy_loss`: the LM head's matmul and the loss in one op)."""
    tokamax = tokamax_module()
    argument = kernel("lm_head_loss", name).argument
    d_model = hidden.shape[-1]
    x = hidden.reshape(-1, d_model)
    weights = embedding.astype(hidden.dtype).T
    return tokamax.linear_softmax_cross_entropy_loss(
        x, labels.reshape(-1), weights, reduction="mean", implementation=argument
    )


# --- a program of the user's: its implementations are functions of its own arguments ---------


def attach(
    workload: Any,
    functions: Mapping[str, Callable[..., Any]],
    args: tuple[Any, ...],
    *,
    where: str,
    own: str = OWN,
    wrap: Callable[[Callable[..., Any]], Callable[..., Any]] = lambda fn: fn,
) -> Any:
    """A program of the user's with its other implementations, each checked by tracing.

    Args:
      workload: the Workload of the user's own function (`user.workload_from`).
      functions: name -> a function of the same arguments computing the same outputs.
      args: the arguments as the user gave them (static leaves in place: each function is
        split as the own one was, `xlafuse.compiler.static.split`).
      where: how messages name the program (`entry 'x.py:f'`, `'f'`).
      own: the name of the workload's own function (the reference implementation).
      wrap: applied to each function before it is traced (an entry's: stdout to stderr).

    Returns:
      The Workload with `implementation` = `own`, `implementations` and `interpreted` set.

    Raises:
      XlafuseError: a name that is not one (or is `own`'s), a value that is not a function, a
        function jax cannot trace with the arguments, or whose outputs differ from the own
        one's in structure, shape or dtype (one line: which, and what is accepted).
    """
    own_out, own_interpreted = _traced(
        f"{where}: implementation {own!r}", workload.fn, workload.args
    )
    found = {}
    for name, fn in functions.items():
        what = f"{where}: implementation {name!r}"
        _check_function(what, name, fn, own)
        program = static.split(wrap(fn), args)
        out, runs_interpreted = _traced(what, program.fn, program.args)
        difference = output_difference(own_out, out)
        if difference:
            theirs, ours = difference
            raise XlafuseError(
                f"{what} returns {theirs} where {own!r} returns {ours}; an implementation "
                "returns what the program's own function does (structure, shapes, dtypes)"
            )
        found[name] = Implementation(program.fn, runs_interpreted)
    return dataclasses.replace(
        workload, implementation=own, implementations=found, interpreted=own_interpreted
    )


def _check_function(what: str, name: Any, fn: Any, own: str) -> None:
    """Refuse an implementation's name or function before it is traced."""
    problem = implementation_problem(name)
    if problem:
        raise XlafuseError(f"{what}: {problem}")
    if name == own:
        raise XlafuseError(f"{what}: {own!r} names the program's own function; give another name")
    if not callable(fn):
        raise XlafuseError(f"{what} is {type(fn).__name__}, not a function of the arguments")


def _traced(what: str, fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Any, bool]:
    """(the output shapes of `fn(*args)`, whether it runs a Pallas kernel interpreted): traced
    once (`jax.make_jaxpr`), nothing compiled.

    Raises:
      XlafuseError: jax cannot trace it (the trace error's first line).
    """
    try:
        closed, out = jax.make_jaxpr(fn, return_shape=True)(*args)
    except (Exception, SystemExit) as err:  # the user's code
        raise XlafuseError(f"{what} cannot be traced by jax.jit: {error_line(err)}") from err
    return out, interpreted(closed)


def output_difference(own: Any, other: Any) -> tuple[str, str] | None:
    """(what `other` returns, what `own` returns) where two programs' output shapes first
    differ (their tree structure, then each leaf's shape and dtype); None where they agree."""
    own_leaves, own_tree = jax.tree.flatten(own)
    leaves, tree = jax.tree.flatten(other)
    if tree != own_tree:
        return f"outputs {tree}", str(own_tree)
    for i, (a, b) in enumerate(zip(own_leaves, leaves, strict=True)):
        if (a.shape, a.dtype) != (b.shape, b.dtype):
            return f"output {i} {b.dtype}{list(b.shape)}", f"{a.dtype}{list(a.shape)}"
    return None


def interpreted(closed: Any) -> bool:
    """Whether a (closed) jaxpr holds a `pallas_call` run in interpret mode (its `interpret`
    parameter set: True, or interpret parameters), in it or in a jaxpr nested in it."""
    jaxpr = getattr(closed, "jaxpr", closed)
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call" and eqn.params.get("interpret"):
            return True
        if any(interpreted(sub) for sub in _nested(eqn.params.values())):
            return True
    return False


def _nested(values: Any) -> list[Any]:
    """The jaxprs among an equation's parameters (a jit's, a scan's body, a cond's branches)."""
    found = []
    for value in values:
        if isinstance(value, tuple | list):
            found.extend(_nested(value))
        elif hasattr(value, "eqns") or hasattr(getattr(value, "jaxpr", None), "eqns"):
            found.append(value)
    return found
