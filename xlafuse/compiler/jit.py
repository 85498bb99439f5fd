"""`xlafuse.compile(fn, variant=...)`: jax.jit under a fusion variant, with the optimized HLO analyzed.

The pipeline is JAX's own (Traced -> Lowered -> Compiled, `jax.stages`); xlafuse adds the variant's
compiler options, honest lower/compile timings, and the fusion report of the optimized HLO.
Each compilation lowers afresh: a `Lowered` object caches its compile, so reusing one would time
a cache hit, not a compile. A compile that a cache served all the same (the persistent cache of
`xlafuse.compiler.cache`, or JAX's in-memory cache of a program compiled earlier in this process)
is marked `compile_cached`, counted from JAX's own events: its seconds are no compile time.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import jax

from xlafuse.compiler import cache, child, static
from xlafuse.compiler.variants import Variant
from xlafuse.compiler.variants import get as get_variant
from xlafuse.hlo import analyze_hlo
from xlafuse.hlo.collectives import collectives_of_text
from xlafuse.kinds import Framework

if TYPE_CHECKING:
    from xlafuse.hlo.collectives import CollectiveReport
    from xlafuse.hlo.fusion import FusionReport

# What an analysis XLA cannot make raises past `jax.stages.Compiled`, which itself returns None
# for UNIMPLEMENTED ("Returns None if unavailable"): NotImplementedError (older jax), or another
# runtime error of a backend that cannot analyze this program. Anything else is a bug to see.
UNAVAILABLE_ANALYSIS = (NotImplementedError, jax.errors.JaxRuntimeError)

REJECTED_OPTION_SIGNS = ("No such compile option", "While setting option")
"""How XLA says that it rejects a compile option (`compile_lowered`).

No error type tells a rejected option apart (a `JaxRuntimeError`, INVALID_ARGUMENT, as other
failures are), so its message does: an unknown key is `INVALID_ARGUMENT: No such compile option:
'xla_bogus'`, a value of the wrong kind `INVALID_ARGUMENT: While setting option
xla_cpu_enable_fast_math, 'maybe' is not a valid bool value.` (XLA's compile-option parsing, as
jaxlib 0.10 has it).
"""


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class CompiledVariant:
    """One function compiled under one variant for one input signature.

    Attributes:
      variant: the Variant it was compiled under.
      backend: the backend it was compiled for.
      compiled: the `jax.stages.Compiled`, or None when compiled in a child process.
      hlo_text: the optimized HLO text.
      lower_s: seconds to trace and lower (a fresh lowering).
      compile_s: seconds of the compile: XLA's, or a cache's read where `compile_cached`.
      runner: what a call runs (a child process per call for a variant compiled in one; the
        program with its static leaves put back, `calling_through`); None: `compiled`.
      measured: for a variant compiled in a child process, what the child measured there
        (first outputs, timing, device profile); None in-process.
      lowered: the `jax.stages.Lowered` it was compiled from (in-process only), kept so that the
        program before optimization is not lowered a second time (`unoptimized_hlo`).
      compile_cached: whether a cache served the executable instead of XLA compiling it (a
        persistent-cache hit, or no compile reaching the backend: `cache.from_cache`); then
        `compile_s` is no compile time. False for a variant compiled in a child process.
    """

    variant: Variant
    backend: str
    compiled: jax.stages.Compiled | None
    hlo_text: str
    lower_s: float
    compile_s: float
    runner: Callable[..., Any] | None = None
    measured: ChildMeasurement | None = None
    lowered: jax.stages.Lowered | None = None
    compile_cached: bool = False

    def __call__(self, *args, **kwargs):
        return self._call(*args, **kwargs)

    @property
    def _call(self) -> Callable[..., Any]:
        return self.runner if self.runner is not None else self.compiled

    def calling_through(
        self, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]
    ) -> CompiledVariant:
        """The same program, each call going through `wrap(the call it makes now)`.

        Returns:
          A new CompiledVariant; this one is unchanged.
        """
        return dataclasses.replace(self, runner=wrap(self._call))

    def unoptimized_hlo(self) -> str | None:
        """The program before XLA's optimizations, with source locations (as the module-level
        `unoptimized_hlo` writes it); None when compiled in a child process."""
        if self.lowered is None:
            return None
        return self.lowered.as_text(dialect="hlo", debug_info=True)

    @functools.cached_property
    def report(self) -> FusionReport:
        """The FusionReport of the optimized HLO (kernels, fusions, modeled bytes, ...)."""
        return analyze_hlo(self.hlo_text)

    @functools.cached_property
    def collectives(self) -> CollectiveReport:
        """The CollectiveReport of the optimized HLO (`xlafuse.hlo.collectives`)."""
        return collectives_of_text(self.hlo_text)

    def cost_analysis(self) -> dict[str, float] | None:
        """XLA's cost analysis (flops, bytes accessed); None if unavailable.

        Note: it does not count library calls (cuBLAS, cuDNN): `report.modeled_bytes` does.
        """
        if self.compiled is None:
            return None
        try:
            cost = self.compiled.cost_analysis()
        except UNAVAILABLE_ANALYSIS:
            return None
        if isinstance(cost, list):  # older JAX returned one dict per device
            cost = cost[0] if cost else None
        return dict(cost) if cost else None

    def memory_analysis(self) -> Any | None:
        """XLA's memory analysis (argument, output, temp bytes); None if unavailable."""
        if self.compiled is None:
            return None
        try:
            return self.compiled.memory_analysis()
        except UNAVAILABLE_ANALYSIS:
            return None

    def __repr__(self) -> str:
        compile_s = "cached" if self.compile_cached else f"{self.compile_s:.3f}"
        return (
            f"CompiledVariant(variant={self.variant.name!r}, backend={self.backend!r}, "
            f"lower_s={self.lower_s:.3f}, compile_s={compile_s})"
        )


@dataclasses.dataclass(frozen=True)
class MeasureRequest:
    """What a child process measures after compiling a process-flag variant.

    Attributes:
      settings: the timing settings (`xlafuse.measurement.timing.TimingSettings`).
      train: whether each call's first output is the next call's first argument (a train step).
      profile_calls: calls to trace for device time (0: none; GPU only).
      trace_dir: where the child writes its trace (None: a temporary folder).
    """

    settings: Any
    _: dataclasses.KW_ONLY
    train: bool = False
    profile_calls: int = 0
    trace_dir: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChildMeasurement:
    """What a child process measured.

    Attributes:
      outputs: the first call's outputs (host arrays, in the function's output tree).
      timing: the fields of `xlafuse.measurement.timing.Timing` (samples included).
      profile: the fields of `xlafuse.measurement.profile.DeviceProfile`, or None.
    """

    outputs: Any
    timing: dict[str, Any]
    profile: dict[str, Any] | None = None


def lower_workload(workload: Any) -> jax.stages.Lowered:
    """The one lowering of a workload, which every entry point compiles, traces or caches.

    `jax.jit(workload.fn, **workload.jit_kwargs())`: the train state donated and, for a sharded
    workload, its output layout pinned; the input shardings travel with the arguments. A fresh
    `Lowered` each call (a `Lowered` caches its compile, so reusing one would time a cache hit).
    """
    return _lower(workload.fn, workload.args, {}, workload.jit_kwargs())


def hlo_before_optimization(lowered: jax.stages.Lowered) -> str:
    """A lowering's HLO text with source locations: what `xlafuse.inspect.explain` traces."""
    return lowered.as_text(dialect="hlo", debug_info=True)


def compile_workload(
    workload: Any, variant: str | Variant | dict, *, measure: MeasureRequest | None = None
) -> CompiledVariant:
    """The one compile path for workloads: `run`, `compare`, `inspect`, `diff`, `warmup` use it.

    The train state is donated (`workload.donate_argnums`), as a real training loop does: the
    program differs from an undonated one (buffers are updated in place, copies disappear).
    Call the result with `workload.fresh_args()` (or a train step's new state), never twice
    with the same donated arguments.

    Args:
      workload: an `xlafuse.models.Workload`; compiled by the implementation the variant names
        (`Workload.with_implementation`), its own program when it names none.
      variant: a preset name, a Variant or a dict of XLA options.
      measure: for a variant with process flags (compiled in a child process), what the child
        measures too, so the cell costs one child; ignored in-process.

    Raises:
      UnknownPassError, ValueError: as `compile_variant`; XlafuseError: the workload has no
        implementation of the variant's name.
    """
    # The implementation the variant names (`impl=NAME`, issue 46): the same arguments, its fn.
    variant = get_variant(variant)
    workload = workload.with_implementation(variant.implementation)
    # Donation, and for a sharded workload its output layout (`Workload.jit_kwargs`); the input
    # shardings travel with the arguments (committed, sharded arrays).
    return compile_variant(
        workload.fn, workload.args, {}, variant, jit_kwargs=workload.jit_kwargs(), measure=measure
    )


def unoptimized_hlo(workload: Any) -> str:
    """The workload's program before XLA's optimizations, as `compile_workload` lowers it
    (`lower_workload`), with source locations."""
    return hlo_before_optimization(lower_workload(workload))


def _lower(fn: Callable, args: Sequence, kwargs: dict, jit_kwargs: dict) -> jax.stages.Lowered:
    return jax.jit(fn, **jit_kwargs).lower(*args, **kwargs)


@static.taking_static_leaves  # non-array leaves static, as eqx.filter_jit (compiler/static.py)
def compile_variant(
    fn: Callable,
    args: Sequence,
    kwargs: dict,
    variant: str | Variant | dict,
    *,
    jit_kwargs: dict | None = None,
    measure: MeasureRequest | None = None,
) -> CompiledVariant:
    """Lower `fn` afresh for `args` and compile it under `variant`.

    Raises:
      UnknownPassError: the variant names a pass this XLA does not have.
      ValueError: XLA rejected an option key or value (XLA's message is kept), or the variant
        runs PyTorch (`xlafuse.torch`), which has no XLA program.
    """
    variant, jit_kwargs = get_variant(variant), jit_kwargs or {}
    if variant.framework != Framework.JAX:
        raise ValueError(
            f"variant {variant.name!r} runs the workload's PyTorch twin, not an XLA program: "
            "use it in `xlafuse run` and `xlafuse compare`"
        )
    backend = jax.default_backend()
    options = variant.compiler_options(backend=backend)
    if variant.process_flags:
        if "out_shardings" in jit_kwargs or _is_sharded(args):
            raise ValueError(
                f"variant {variant.name!r} needs process flags (a child process), which "
                "sharded programs cannot use yet; run it on one device"
            )
        return _compile_in_child(fn, args, kwargs, variant, backend, options, jit_kwargs, measure)
    start = time.perf_counter()
    lowered = _lower(fn, args, kwargs, jit_kwargs)
    lower_s = time.perf_counter() - start
    compiled, compile_s, cached = timed_compile(lowered, variant, options)
    return CompiledVariant(
        variant=variant,
        backend=backend,
        compiled=compiled,
        hlo_text=compiled.as_text(),
        lower_s=lower_s,
        compile_s=compile_s,
        lowered=lowered,
        compile_cached=cached,
    )


def timed_compile(
    lowered: jax.stages.Lowered, variant: Variant, options: dict[str, Any]
) -> tuple[jax.stages.Compiled, float, bool]:
    """`compile_lowered`, timed, and whether a cache served it (`cache.from_cache`, from JAX's
    events during this compile only).

    Returns:
      (the Compiled, seconds of the call, whether it came from a cache).

    Raises:
      ValueError: as `compile_lowered`.
    """
    with cache.cache_events() as counted:
        start = time.perf_counter()
        compiled = compile_lowered(lowered, variant, options)
        seconds = time.perf_counter() - start
    return compiled, seconds, cache.from_cache(counted)


def compile_lowered(
    lowered: jax.stages.Lowered, variant: Variant, options: dict[str, Any]
) -> jax.stages.Compiled:
    """`lowered.compile` under `options` (the variant's, plus e.g. XLA's dump options: a dump
    does not change the program).

    Raises:
      ValueError: XLA rejected an option key or value (XLA's message is kept).
    """
    try:
        return lowered.compile(compiler_options=options)
    except jax.errors.JaxRuntimeError as err:
        message = str(err)
        if any(sign in message for sign in REJECTED_OPTION_SIGNS):
            raise ValueError(
                f"variant {variant.name!r}: XLA rejected its options: {message}"
            ) from err
        raise


def _is_sharded(args: Sequence) -> bool:
    """Whether any argument is spread over more than one device."""
    for leaf in jax.tree.leaves(tuple(args)):
        sharding = getattr(leaf, "sharding", None)
        if sharding is not None and len(sharding.device_set) > 1:
            return True
    return False


def _compile_in_child(fn, args, kwargs, variant, backend, options, jit_kwargs, measure):
    """`compile_variant` for a variant with process flags: one child compiles, runs, measures.

    Calling the result starts a new child per call (slow: for checking outputs, not timing);
    timings of such a variant come from `measured`, taken inside the one child.
    """
    exported, blob = child.export_function(fn, args, kwargs, jit_kwargs)
    donate = tuple(jit_kwargs.get("donate_argnums", ()) or ())
    request = None
    if measure is not None:
        request = {
            "settings": dataclasses.asdict(measure.settings),
            "train": measure.train,
            "profile_calls": measure.profile_calls,
            "trace_dir": measure.trace_dir,
        }

    def run(*call_args, **call_kwargs):
        leaves = jax.tree.leaves((call_args, call_kwargs))
        result = child.run_exported(
            blob, leaves, options, variant.process_flags, donate_argnums=donate
        )
        return jax.tree.unflatten(exported.out_tree, result["out_leaves"])

    leaves = jax.tree.leaves((tuple(args), kwargs))
    first = child.run_exported(
        blob, leaves, options, variant.process_flags, donate_argnums=donate, measure=request
    )
    outputs = jax.tree.unflatten(exported.out_tree, first["out_leaves"])
    measured = None
    if request is not None:
        measured = ChildMeasurement(
            outputs=outputs, timing=first["timing"], profile=first["profile"]
        )
    return CompiledVariant(
        variant=variant,
        backend=backend,
        compiled=None,
        hlo_text=first["hlo_text"],
        lower_s=first["lower_s"],
        compile_s=first["compile_s"],
        runner=run,
        measured=measured,
    )


def _signature(args: Sequence, kwargs: dict) -> tuple:
    """A hashable key for an input signature: tree structure plus shapes and dtypes."""
    leaves, tree = jax.tree.flatten((tuple(args), kwargs))
    key = []
    for leaf in leaves:
        if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
            key.append(
                (tuple(leaf.shape), str(leaf.dtype), bool(getattr(leaf, "weak_type", False)))
            )
        else:
            key.append(("static", static.static_key(leaf)))
    return (tree, tuple(key))


def _as_tuple(value) -> tuple:
    if value is None:
        return ()
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


class FusedFunction:
    """What `xlafuse.compile` returns: callable like `jax.jit(fn)`, compiled per input signature."""

    def __init__(
        self, fn: Callable, *, variant: str | Variant | dict = "default", **jit_kwargs: Any
    ):
        self.fn = fn
        self.variant = get_variant(variant)
        self.jit_kwargs = jit_kwargs
        self._compiled: dict[tuple, CompiledVariant] = {}
        functools.update_wrapper(self, fn)

    def compile(self, *args: Any, **kwargs: Any) -> CompiledVariant:
        """The compiled variant for these inputs (compiled on first use, then cached)."""
        key = _signature(args, kwargs)
        if key not in self._compiled:
            self._compiled[key] = compile_variant(
                self.fn, args, kwargs, self.variant, jit_kwargs=self.jit_kwargs
            )
        return self._compiled[key]

    def __call__(self, *args, **kwargs):
        compiled = self.compile(*args, **kwargs)
        # A Compiled takes only the dynamic arguments: the static ones are baked in.
        static_nums = (
            {n % len(args) for n in _as_tuple(self.jit_kwargs.get("static_argnums"))}
            if args
            else set()
        )
        static_names = set(_as_tuple(self.jit_kwargs.get("static_argnames")))
        dynamic_args = [a for i, a in enumerate(args) if i not in static_nums]
        dynamic_kwargs = {k: v for k, v in kwargs.items() if k not in static_names}
        return compiled(*dynamic_args, **dynamic_kwargs)

    def __repr__(self) -> str:
        name = getattr(self.fn, "__name__", repr(self.fn))
        return f"xlafuse.compile({name}, variant={self.variant.name!r})"


def compile(
    fn: Callable, *, variant: str | Variant | dict = "default", **jit_kwargs: Any
) -> FusedFunction:
    """Wrap `fn` like `jax.jit`, compiling it under a fusion variant.

    Args:
      fn: a JAX-traceable function.
      variant: a preset name ("default", "no-fusion", ...), "a+b" to compose presets, a Variant,
        or a dict of XLA options such as `{"xla_disable_hlo_passes": "fusion"}`.
      **jit_kwargs: passed to `jax.jit` (static_argnums, donate_argnums, ...).

    Returns:
      A FusedFunction: call it like the jitted function, or `.compile(*args)` for a
      CompiledVariant with `hlo_text`, `report`, `lower_s`, `compile_s`, `cost_analysis()`.

    Raises:
      UnknownNameError: an unknown preset name.
    """
    return FusedFunction(fn, variant=variant, **jit_kwargs)
