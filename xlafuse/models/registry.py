"""The workload registry: names -> builders, and `build` / `param_count` / `available`.

Family modules register a builder with `@register(name, sizes=...)`. A builder takes the resolved
configuration (the size's table with overrides applied) and a `BuildContext`, and returns a
`Recipe`; `build` turns that into a `Workload` for the forward or the train mode.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import sys
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from xlafuse.errors import UnknownNameError, XlafuseError, unknown_name
from xlafuse.kinds import Backend, Mode
from xlafuse.models import implementations, memory, sharding, train, user
from xlafuse.models.implementations import Implementation
from xlafuse.models.labels import workload_label
from xlafuse.models.workload import BuildContext, Recipe, Workload

SIZES = ("tiny", "small", "full")
MODES = tuple(Mode)  # ("forward", "train"), in order
DTYPES = ("float32", "bfloat16", "float16")
DEFAULT_LEARNING_RATE = 1e-3
TRAIN_FLOPS_FACTOR = 3  # forward + backward (two matmuls per forward matmul)

Builder = Callable[[Mapping[str, Any], BuildContext], Recipe]


@dataclasses.dataclass(frozen=True)
class WorkloadSpec:
    """A registered workload: its builder, size tables, options and what modes it supports."""

    name: str
    builder: Builder
    sizes: Mapping[str, Mapping[str, Any]]
    options: Mapping[str, Any]
    has_params: bool
    default_dtype: str | None
    op: str | None = None

    @property
    def modes(self) -> tuple[str, ...]:
        """The modes this workload accepts: train needs parameters."""
        return MODES if self.has_params else ("forward",)

    def config(self, size: str) -> dict[str, Any]:
        """The default configuration at `size`: its table, the options, the train settings."""
        extra = {"learning_rate": DEFAULT_LEARNING_RATE} if self.has_params else {}
        return {**self.sizes[size], **self.options, **extra}


_REGISTRY: dict[str, WorkloadSpec] = {}
# The modules that register the zoo's workloads when imported (`_load_families`).
_FAMILIES = ("attention", "loops", "mlp", "pointwise", "reductions", "resnet", "transformer")
_FAMILY_MODULES = tuple(f"xlafuse.models.{family}" for family in _FAMILIES)


def register(
    name: str,
    *,
    sizes: Mapping[str, Mapping[str, Any]],
    options: Mapping[str, Any] | None = None,
    has_params: bool = True,
    default_dtype: str | None = None,
    op: str | None = None,
) -> Callable[[Builder], Builder]:
    """Registers a workload builder under `name` (a decorator).

    Args:
        name: the workload name (part of the public interface).
        sizes: for each of `SIZES`, the configuration table (same keys in every size).
        options: extra overrides and their defaults, the same at every size.
        has_params: False for parameter-free workloads (forward mode only).
        default_dtype: dtype used when `build` gets dtype=None; None picks by backend.
        op: the operation of `xlafuse.models.implementations.OPS` its program routes to the
            implementation a variant chooses (`impl=NAME`); None: it has only its own.

    Returns:
        The decorator, which returns the builder unchanged.
    """
    if set(sizes) != set(SIZES):
        raise ValueError(f"workload {name!r} must define sizes {SIZES}, got {tuple(sizes)}")

    def decorate(builder: Builder) -> Builder:
        if builder.__module__ not in _FAMILY_MODULES:
            _load_families()  # a workload of the user's: the zoo's names are taken first
        if name in _REGISTRY:
            raise ValueError(f"workload {name!r} is already registered")
        if op is not None and op not in implementations.OPS:
            accepted = ", ".join(implementations.OPS)
            raise ValueError(f"workload {name!r}: unknown op {op!r}; accepted: {accepted}")
        spec = WorkloadSpec(
            name, builder, sizes, dict(options or {}), has_params, default_dtype, op
        )
        _REGISTRY[name] = spec
        return builder

    return decorate


def available(*, mode: str | None = None) -> list[str]:
    """Returns the registered workload names, sorted.

    Args:
        mode: if given ("forward" or "train"), only the workloads that support that mode.

    Raises:
        UnknownNameError: `mode` is not one of `MODES`.
    """
    if mode is not None:
        choose("mode", mode, MODES)
    _load_families()
    return sorted(n for n, spec in _REGISTRY.items() if mode is None or mode in spec.modes)


def _load_families() -> None:
    """Imports the family modules, which register their workloads (at once after the first).

    Not from a family's own `register`: the others would then import while it is half done."""
    for module in _FAMILY_MODULES:
        importlib.import_module(module)


def source_sha256(name: str) -> str | None:
    """SHA-256 of the source of the user's that registered workload `name` (the file imported
    with `--import` or a config's `imports`, and the modules of the user's it imports:
    `source_files`, one hash by `user.sources_sha256`); None for the zoo's own."""
    files = source_files(name)
    return user.sources_sha256(files) if files else None


def source_files(name: str) -> dict[str, str]:
    """The source files of the user's that registered workload `name` (`user.source_files`:
    path -> SHA-256); empty for the zoo's own.

    Raises:
      UnknownNameError: no workload has that name.
    """
    module = sys.modules.get(spec(name).builder.__module__)
    path = getattr(module, "__file__", None)
    if module is None or module.__name__.startswith("xlafuse.") or path is None:
        return {}
    return user.source_files(path)


def choose(kind: str, value: Any, accepted: tuple[str, ...] | list[str], *, where: str = "") -> Any:
    """Returns `value` if it is in `accepted`, else raises a "did you mean" error.

    Args:
        kind: what is looked up, for the message ("workload", "size", ...).
        value: the name given.
        accepted: the names accepted.
        where: context for the message, e.g. " for workload 'gpt2'".

    Raises:
        UnknownNameError: `value` is not in `accepted`; the message lists them.
    """
    if value in accepted:
        return value
    raise UnknownNameError(unknown_name(kind, value, accepted, where=where))


def spec(name: str) -> WorkloadSpec:
    """Returns the registered spec of workload `name`.

    Raises:
        UnknownNameError: no workload has that name.
    """
    return _REGISTRY[choose("workload", name, available())]


def build(
    name: str,
    *,
    size: str = "tiny",
    mode: str = "forward",
    dtype: Any = None,
    seed: int = 0,
    devices: int = 1,
    parallelism: str = "data",
    **overrides: Any,
) -> Workload:
    """Builds a workload: a pure function and example arguments, on the default device or a mesh.

    Args:
        name: a name from `available()`, or a program of the user's, `FILE.py:FUNCTION` or
            `MODULE:FUNCTION` (`xlafuse.models.user`: size, mode and seed are then not used).
        size: "tiny" (CI, a 2-core CPU), "small" (reference architectures, modest batch) or
            "full" (sized for an H200).
        mode: "forward" (inference) or "train" (loss + grad + AdamW update in one step).
        dtype: compute dtype; None picks bfloat16 on GPU and float32 elsewhere (pointwise
            workloads always default to float32, so "full" is exactly 1 GiB per input array).
        seed: seeds the parameters and the inputs.
        devices: devices of a one-axis mesh to shard the workload over (1: the default device).
        parallelism: with devices > 1, "data" (batch split, parameters replicated) or "model"
            (Megatron column/row sharding of the Dense layers); see `xlafuse.models.sharding`.
        **overrides: replace entries of the size table (e.g. `batch=4`) or options (e.g.
            `implementation="cudnn"`, `ops=16`, `learning_rate=3e-4`).

    Returns:
        The Workload; `fn(*args)` runs it.

    Raises:
        UnknownNameError: unknown name, size, mode, dtype or override; the message lists what
            is accepted. Also for mode "train" on a workload without parameters.
        ValueError: an override value that the workload cannot use.
        XlafuseError: an override of the wrong kind or sign (`check_override`), an unknown
            parallelism, more devices than the backend has, a batch or layer dimension that
            `devices` does not divide, or arrays that cannot fit in the devices' memory
            (`xlafuse.models.memory.check_fits`: checked before any array is made); a user's
            program that cannot be loaded, called or traced, or on more than one device.
    """
    if user.is_entry(name):
        _check_entry_devices(name, devices)
        return user.build_entry(name, overrides=overrides, dtype=dtype)
    sharding.check_parallelism(parallelism, workload=name)
    if devices != 1:
        sharding.check_device_count(devices)
    cfg, ctx, recipe, abstract = _prepare(name, size, mode, dtype, devices, overrides, seed)
    workload = _workload(name, size, mode, cfg, ctx, recipe, seed, abstract)
    return sharding.shard(workload, devices, parallelism=parallelism)


def _workload(name, size, mode, cfg, ctx, recipe: Recipe, seed, abstract) -> Workload:
    """The Workload of a prepared configuration, on the default device (`build`)."""
    fn, args, num_params, state_tree = _assemble(recipe, mode, cfg, seed, abstract)
    flops = recipe.flops
    if flops is not None and mode == Mode.TRAIN:
        flops *= TRAIN_FLOPS_FACTOR
    return Workload(
        name=name,
        size=size,
        mode=mode,
        dtype=jnp.dtype(ctx.dtype).name,
        fn=fn,
        args=args,
        num_params=num_params,
        items_per_call=recipe.items_per_call,
        items_unit=recipe.items_unit,
        flops=flops,
        config=MappingProxyType(cfg),
        donate_argnums=(0,) if mode == Mode.TRAIN else (),
        state_tree=state_tree,
        implementations=_implementations(fn, spec(name).op, mode),
    )


def _implementations(fn, op: str | None, mode: str) -> dict[str, Implementation]:
    """A zoo workload's other implementations: `fn` with each of its op's chosen
    (`implementations.routed`); none without an op, or in a mode the op does not apply to."""
    if op is None or mode not in implementations.OPS[op].modes:
        return {}
    return {
        n: Implementation(implementations.routed(fn, op, n), op=op)
        for n in implementations.names(op)[1:]
    }


def implementation_names(name: str) -> tuple[str, ...]:
    """The implementations workload `name` declares: its own ("xla") first, then those of its
    op (`xlafuse.models.implementations.names`); a program of the user's: its own only here
    (its others come with it: a config's `implementations`, `xlafuse.measure`'s functions).

    Raises:
        UnknownNameError: no workload has that name.
    """
    if user.is_entry(name):
        return (implementations.OWN,)
    return implementations.names(spec(name).op)


def implementation_problem(
    name: str,
    implementation: str,
    *,
    mode: str = "forward",
    dtype: Any = None,
    devices: int = 1,
    backend: str | None = None,
) -> str | None:
    """Why zoo workload `name` cannot run `implementation` here (one line saying what is
    accepted; `xlafuse.models.implementations.problem`), None when it can. Nothing is built.

    Args:
        name: a registered workload.
        implementation: what an `impl=NAME` part names.
        mode, devices: the cell's.
        dtype: the cell's dtype (None: the workload's default on `backend`).
        backend: the backend the cell runs on (None: JAX's).

    Raises:
        UnknownNameError: no workload has that name.
    """
    workload_spec = spec(name)
    if dtype is None:
        dtype = workload_spec.default_dtype or _backend_dtype(backend)
    dtype = jnp.dtype(dtype).name if _is_dtype(dtype) else dtype
    return implementations.problem(
        name, workload_spec.op, implementation,
        mode=mode, dtype=dtype, devices=devices, backend=backend,
    )  # fmt: skip


def check_build(
    name: str,
    *,
    size: str = "tiny",
    mode: str = "forward",
    dtype: Any = None,
    devices: int = 1,
    parallelism: str = "data",
    **overrides: Any,
) -> None:
    """Every check of `build` that needs no array and no device count: fail before any work.

    The look-ups, the override values, the builder's own checks, and whether the arrays can fit
    in the memory of `devices` devices (judged from their shapes). A command calls it before
    it starts a child process or a progress line; `build` makes the same checks itself.

    A user entry is imported, its function found and its overrides checked against its
    parameters (FUNCTION itself is not called: it makes the arrays).

    Raises:
        UnknownNameError, ValueError, XlafuseError: as for `build`.
    """
    if user.is_entry(name):
        _check_entry_devices(name, devices)
        user.check_overrides(user.parse_entry(name), overrides)
        return
    sharding.check_parallelism(parallelism, workload=name)
    _prepare(name, size, mode, dtype, devices, overrides)


def _check_entry_devices(name: str, devices: int) -> None:
    if devices != 1:
        raise user.EntryError(
            f"entry {name!r}: a program of the user's runs on one device here (devices="
            f"{devices}); shard it inside FUNCTION, or register it as a workload"
        )


def _prepare(name, size, mode, dtype, devices, overrides, seed=0):
    """(cfg, context, recipe, abstract model) of a checked configuration whose arrays fit."""
    workload_spec, cfg = _resolve(name, size, mode, overrides)
    ctx = _context(workload_spec, mode, dtype)
    recipe = workload_spec.builder(cfg, ctx)
    abstract = _abstract_model(recipe, seed)
    _check_fits(
        workload_label(name, size=size, mode=mode, overrides=overrides),
        recipe,
        abstract,
        mode,
        devices,
    )
    return cfg, ctx, recipe, abstract


def recipe(
    name: str, *, size: str = "tiny", mode: str = "forward", dtype: Any = None, **overrides: Any
) -> Recipe:
    """Returns the workload's Recipe without making any array: checks a configuration cheaply.

    Raises:
        UnknownNameError: as for `build`.
        ValueError: an override value that the workload cannot use (the builder's message).
    """
    workload_spec, cfg = _resolve(name, size, mode, overrides)
    return workload_spec.builder(cfg, _context(workload_spec, mode, dtype))


def param_count(name: str, *, size: str = "tiny", **overrides: Any) -> int:
    """Returns the exact number of parameters of a workload, without allocating them.

    The model is traced with `nnx.eval_shape`; `Workload.num_params` counts the same way.

    Args:
        name: a name from `available()`.
        size: "tiny", "small" or "full".
        **overrides: as for `build`.

    Raises:
        UnknownNameError: unknown name, size or override.
    """
    workload_spec, cfg = _resolve(name, size, "forward", overrides)
    ctx = _context(workload_spec, "forward", jnp.float32)
    recipe = workload_spec.builder(cfg, ctx)
    if recipe.make_model is None:
        return 0
    make_model = recipe.make_model
    return count_params(nnx.eval_shape(lambda: make_model(nnx.Rngs(0))))


def count_params(model: nnx.Module) -> int:
    """Returns the number of scalars in the module's `nnx.Param` variables (abstract or not)."""
    leaves = jax.tree.leaves(nnx.state(model, nnx.Param))
    return sum(math.prod(leaf.shape) for leaf in leaves)


def problems(
    name: str,
    *,
    size: str = "tiny",
    mode: str = "forward",
    dtype: Any = None,
    overrides: Mapping[str, Any] | None = None,
    build: bool = False,
) -> list[tuple[str, str]]:
    """Everything wrong with a workload configuration, found without making any array.

    Args:
        name, size, mode, dtype, overrides: as for `build` (dtype None: not checked).
        build: also run the builder on the configuration (it may reject override values, and
            may ask the running backend: `implementation="cudnn"` needs a GPU).

    Returns:
        (field, message) pairs, field being "name", "size", "mode", "dtype", "overrides.KEY"
        or "overrides"; [] when the configuration is good. An unknown name is the only problem
        reported for it.
    """
    overrides = dict(overrides or {})
    found = [(field, str(err)) for field, err in _errors(name, size, mode, dtype, overrides)]
    if build and not found:
        try:
            recipe(name, size=size, mode=mode, dtype=dtype, **overrides)
        except ValueError as err:
            at = f"overrides.{next(iter(overrides))}" if len(overrides) == 1 else "overrides"
            found.append((at if overrides else "name", str(err).strip().splitlines()[0]))
    return found


def check(
    name: str,
    *,
    size: str = "tiny",
    mode: str = "forward",
    dtype: Any = None,
    overrides: Mapping[str, Any] | None = None,
) -> None:
    """Raise the first of `problems(...)` (look-ups and override values, nothing built).

    Raises:
        UnknownNameError: an unknown name, size, mode, dtype or override; the message lists
            what is accepted.
        XlafuseError: an override value of the wrong kind or sign (`check_override`).
    """
    found = _errors(name, size, mode, dtype, dict(overrides or {}))
    if found:
        raise found[0][1]


def check_override(name: str, key: str, value: Any, default: Any) -> None:
    """Raise unless `value` can replace `default`, the value of `key` in `name`'s table.

    Integers there are dimensions and counts (>= 1), floats are rates (> 0): a wrong kind or
    sign is refused here, before a builder hands it to JAX (whose message would not name the
    override) or XLA (a batch of 0 runs, and reports 0 bytes).

    Raises:
        XlafuseError: the message names the override, its value and what is accepted.
    """
    for default_is, accepts, accepted in _OVERRIDE_KINDS:
        if default_is(default):
            if not accepts(value):
                raise XlafuseError(
                    f"override {key}={value!r} for workload {name!r}: need {accepted}"
                )
            return


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_counts(value: Any) -> bool:
    return isinstance(value, tuple | list) and bool(value) and all(_is_count(v) for v in value)


def _is_count(value: Any) -> bool:
    return _is_int(value) and value >= 1


def _is_rate(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and 0 < value < math.inf


# (the default is of this kind, the override is accepted, what is accepted): the first match.
_OVERRIDE_KINDS: tuple[tuple[Callable[[Any], bool], Callable[[Any], bool], str], ...] = (
    (lambda d: isinstance(d, bool), lambda v: isinstance(v, bool), "true or false"),
    (_is_int, _is_count, "an integer >= 1"),
    (lambda d: isinstance(d, float), _is_rate, "a number > 0"),
    (lambda d: isinstance(d, str), lambda v: isinstance(v, str), "a string"),
    (lambda d: isinstance(d, tuple | list), _is_counts, "a non-empty list of integers >= 1"),
)


def _errors(name, size, mode, dtype, overrides: dict) -> list[tuple[str, ValueError]]:
    """(field, error) of every look-up and override value that fails (see `problems`)."""
    try:
        workload_spec = spec(name)
    except UnknownNameError as err:
        return [("name", err)]
    where = f" for workload {name!r}"
    checks = [
        ("size", lambda: choose("size", size, SIZES, where=where)),
        ("mode", lambda: _check_mode(workload_spec, mode)),
    ]
    if dtype is not None:
        checks.append(("dtype", lambda: _dtype_name(dtype)))
    defaults = workload_spec.config(size if size in SIZES else "tiny")
    for key, value in overrides.items():
        checks.append(
            (
                f"overrides.{key}",
                lambda key=key, value=value: _check_key(name, key, value, defaults),
            )
        )
    found = []
    for field, check_one in checks:
        try:
            check_one()
        except ValueError as err:
            found.append((field, err))
    return found


def _check_key(name: str, key: str, value: Any, defaults: Mapping[str, Any]) -> None:
    choose("override", key, sorted(defaults), where=f" for workload {name!r}")
    check_override(name, key, value, defaults[key])


def _resolve(
    name: str, size: str, mode: str, overrides: Mapping[str, Any]
) -> tuple[WorkloadSpec, dict[str, Any]]:
    """Validates the look-ups and returns the spec and the resolved configuration."""
    check(name, size=size, mode=mode, dtype=None, overrides=overrides)
    cfg = spec(name).config(size)
    cfg.update(overrides)
    return spec(name), cfg


def _check_mode(workload_spec: WorkloadSpec, mode: str) -> None:
    if mode in MODES and mode not in workload_spec.modes:
        trainable = ", ".join(available(mode="train"))
        raise UnknownNameError(
            f"mode {mode!r} needs parameters and workload {workload_spec.name!r} has none; "
            f"accepted modes for {workload_spec.name!r}: {', '.join(workload_spec.modes)}. "
            f"Workloads with a train mode: {trainable}"
        )
    choose("mode", mode, workload_spec.modes, where=f" for workload {workload_spec.name!r}")


def _context(workload_spec: WorkloadSpec, mode: str, dtype: Any) -> BuildContext:
    if dtype is None:
        dtype = workload_spec.default_dtype or _backend_dtype()
    compute = jnp.dtype(_dtype_name(dtype))
    param_dtype = jnp.dtype(jnp.float32) if mode == Mode.TRAIN else compute
    return BuildContext(dtype=compute, param_dtype=param_dtype, train=mode == Mode.TRAIN)


def _dtype_name(dtype: Any) -> str:
    """The accepted dtype name of `dtype` (a name or a NumPy/JAX dtype)."""
    return choose("dtype", jnp.dtype(dtype).name if _is_dtype(dtype) else dtype, DTYPES)


def _is_dtype(value: Any) -> bool:
    try:
        jnp.dtype(value)
    except TypeError:
        return False
    return True


def _backend_dtype(backend: str | None = None) -> str:
    return "bfloat16" if (backend or jax.default_backend()) == Backend.GPU else "float32"


def _abstract_model(recipe: Recipe, seed: int) -> nnx.Module | None:
    """The model with shapes in place of arrays (`nnx.eval_shape`); None without parameters."""
    make_model = recipe.make_model
    return None if make_model is None else nnx.eval_shape(lambda: make_model(nnx.Rngs(seed)))


def _check_fits(label: str, recipe: Recipe, abstract, mode: str, devices: int) -> None:
    """Refuse arrays that cannot fit in the devices' memory, from their shapes alone."""
    state = nnx.state(abstract) if abstract is not None else ()
    inputs = jax.eval_shape(lambda: recipe.make_inputs(_key(0, 1)))
    memory.check_fits(label, state, inputs, mode == Mode.TRAIN, devices=devices)


def _assemble(
    recipe: Recipe, mode: str, cfg: Mapping[str, Any], seed: int, abstract: nnx.Module | None
) -> tuple[Callable[..., Any], tuple[Any, ...], int, Any]:
    """Returns (fn, args, num_params, state_tree) for the recipe in the given mode.

    The model state (parameters; in train mode also the optimizer state and batch statistics)
    travels as a flat list of arrays, `state_tree` being its tree structure: jit flattens a list
    in C++, while an `nnx.State` pytree costs milliseconds of Python per call (the GPT-2 figures:
    experiments/README.md, "Figures behind the code"). That is what a lean training loop pays,
    so that is what is timed.
    """
    if recipe.make_model is None:
        inputs = _run_once(lambda: recipe.make_inputs(_key(seed, 1)))
        return recipe.apply, inputs, 0, None
    make_model = recipe.make_model
    num_params = count_params(abstract)
    if mode == Mode.FORWARD:
        graphdef = nnx.split(abstract)[0]

        def init_forward():
            return nnx.state(make_model(nnx.Rngs(seed))), recipe.make_inputs(_key(seed, 1))

        state, inputs = _run_once(init_forward)
        leaves, tree = jax.tree.flatten(state)
        fn = train.flat_state_fn(
            train.forward_fn(graphdef, recipe.apply), tree, returns_state=False
        )
        return fn, (leaves, *inputs), num_params, tree
    optimizer = optax.adamw(cfg["learning_rate"])
    graphdef = nnx.split(abstract, nnx.Param, nnx.BatchStat)[0]

    def init_train():
        _, train_state = train.init_train_state(make_model(nnx.Rngs(seed)), optimizer)
        inputs = recipe.make_inputs(_key(seed, 1))
        targets = _targets(recipe, graphdef, train_state, inputs, _key(seed, 2))
        return train_state, {"inputs": inputs, "targets": targets}

    step = train.train_step_fn(graphdef, recipe.apply, recipe.loss, optimizer)
    train_state, batch = _run_once(init_train)
    leaves, tree = jax.tree.flatten(train_state)
    fn = train.flat_state_fn(step, tree, returns_state=True)
    return fn, (leaves, batch), num_params, tree


def _key(seed: int, stream: int) -> jax.Array:
    """The key of one random stream (1: inputs, 2: targets; parameters use nnx.Rngs(seed))."""
    return jax.random.fold_in(jax.random.key(seed), stream)


def _run_once(init: Callable[[], Any]) -> Any:
    """Runs a zero-argument function of jax.random ops once, compiled, on the default device.

    One compiled program instead of one per op and shape. XLA:CPU spends seconds optimizing the
    threefry code of many initializers, for a program that runs once: compile it unoptimized there.
    """
    options = {"xla_backend_optimization_level": 0} if jax.default_backend() == Backend.CPU else {}
    return jax.jit(init).lower().compile(compiler_options=options)()


def _targets(recipe: Recipe, graphdef, train_state, inputs, key: jax.Array) -> jax.Array:
    """Returns the train targets: the recipe's, or standard-normal ones shaped like the output."""
    if recipe.make_targets is not None:
        return recipe.make_targets(key)

    def forward(params, batch_stats, *xs):
        return recipe.apply(nnx.merge(graphdef, params, batch_stats, copy=True), *xs)

    out = jax.eval_shape(forward, train_state["params"], train_state["batch_stats"], *inputs)
    return jax.random.normal(key, out.shape, out.dtype)
