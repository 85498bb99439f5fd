"""Warm-up: compile a model's functions into a persistent-cache folder before serving traffic.

A server runs this step once (at image build or before it takes traffic); every later process that
points `jax_compilation_cache_dir` at the same folder, with the same JAX, XLA flags and variant
options, gets its executables from disk instead of compiling them (see
`xlafuse.measurement.coldstart` for the measured effect).

The compile happens in this process: a workload through the runner's own lowering
(`xlafuse.compiler.jit.lower_workload`: donated and sharded as `xlafuse run` compiles it), a
function through `jax.jit(fn, **jit_kwargs).lower(*args)`, then `compile_lowered` under the
variant's options, so the cache keys match.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax

from xlafuse.compiler.cache import CACHE_HITS, cache_entry_count, cache_events, persistent_cache
from xlafuse.compiler.jit import compile_lowered, lower_workload
from xlafuse.compiler.variants import get
from xlafuse.errors import XlafuseError
from xlafuse.kinds import Framework
from xlafuse.measurement.coldstart import build_workload, check_cache_dir, workload_spec
from xlafuse.models.names import Cell
from xlafuse.models.workload import Workload


@dataclasses.dataclass(frozen=True)
class WarmupSummary:
    """What a warm-up compiled and wrote.

    Attributes:
      cache_dir: the cache folder.
      compiled: one label per compilation, e.g. "gpt2/tiny/train @ default".
      entries_before: cache entries in the folder before.
      entries_after: cache entries in the folder after (building the inputs also compiles small
        helper functions, which are cached too).
      compile_s: seconds spent in the compiles (zero-ish for entries already in the folder).
      cache_hits: the labels of `compiled` whose executable came from the folder (counted from
        JAX's persistent-cache hit events, not guessed from times).
    """

    cache_dir: str
    compiled: tuple[str, ...]
    entries_before: int
    entries_after: int
    compile_s: float
    cache_hits: tuple[str, ...] = ()

    @property
    def entries_written(self) -> int:
        """New entries in the folder."""
        return self.entries_after - self.entries_before

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, with `entries_written`."""
        out = dataclasses.asdict(self)
        out["compiled"] = list(self.compiled)
        out["cache_hits"] = list(self.cache_hits)
        out["entries_written"] = self.entries_written
        return out


def warmup(
    fn_or_workloads: Callable | Any | Iterable[Any],
    *args: Any,
    cache_dir: str | os.PathLike,
    variants: Sequence[Any] = ("default",),
    on_step: Callable[[str], None] | None = None,
    **jit_kwargs: Any,
) -> WarmupSummary:
    """Compile functions under each variant with the persistent cache pointed at `cache_dir`.

    Args:
      fn_or_workloads: a jit-able function (then `*args` are its example arguments), a built
        `Workload`, a cell (a `Cell`, a name or its dict), or a list of Workloads/cells.
      *args: example arguments when a function is given.
      cache_dir: the cache folder (created if missing).
      variants: preset names, "a+b", Variants or dicts of XLA options.
      on_step: called with a line ("compiling mlp/tiny/forward @ default") before each compile.
      **jit_kwargs: passed to `jax.jit` when a function is given (donate_argnums, ...).

    Returns:
      The WarmupSummary (entries written, what was compiled, compile seconds).

    Raises:
      ValueError: a variant that needs process-wide XLA flags (it cannot be compiled here), or
        one that does not apply to this backend.
      XlafuseError: `cache_dir` cannot serve as a cache folder (a file, or not writable).
    """
    check_cache_dir(cache_dir)
    resolved = _in_process_variants(variants)
    before = cache_entry_count(cache_dir)
    labels: list[str] = []
    hits: list[str] = []
    compile_s = 0.0
    with persistent_cache(cache_dir) as folder, cache_events() as counted:
        for label, lower in _targets(fn_or_workloads, args, jit_kwargs):
            for variant in resolved:
                labels.append(f"{label} @ {variant.name}")
                if on_step is not None:
                    on_step(f"compiling {labels[-1]}")
                hits_before = counted[CACHE_HITS]
                compile_s += _compile(lower, variant)
                if counted[CACHE_HITS] > hits_before:
                    hits.append(labels[-1])
    after = cache_entry_count(folder)
    return WarmupSummary(str(folder), tuple(labels), before, after, compile_s, tuple(hits))


def warmup_config(
    config: Any, cache_dir: str | os.PathLike, *, on_step: Callable[[str], None] | None = None
) -> WarmupSummary:
    """Pre-compile every cell (workload x variant) of an experiment config into `cache_dir`.

    Variants that do not apply to this backend are skipped, as the runner skips them, and so
    are torch variants (Inductor has its own cache; XLA compiles nothing for them).

    Args:
      config: an `ExperimentConfig` (`xlafuse.experiment.config.load_config`).
      cache_dir: the cache folder.
      on_step: as for `warmup`.
    """
    variants = _config_variants(config)
    cells = [w.cell for w in config.workloads]
    return warmup(cells, cache_dir=cache_dir, variants=variants, on_step=on_step)


def warmup_cells(config: Any) -> int:
    """The compiles `warmup_config` makes of `config`: its workloads x the variants it compiles."""
    return len(config.workloads) * len(_config_variants(config))


def _config_variants(config: Any) -> list:
    """The variants of `config` that compile here, in this process (see `warmup_config`)."""
    backend = jax.default_backend()
    variants = [v.resolve() for v in config.variants]
    return [
        v
        for v in variants
        if v.applies_to(backend) and not v.process_flags and v.framework == Framework.JAX
    ]


def _in_process_variants(variants: Sequence[Any]) -> list:
    """The variants resolved; a ValueError for one that needs process-wide XLA flags."""
    resolved = [get(v) for v in variants]
    for variant in resolved:
        if variant.process_flags:
            raise ValueError(
                f"variant {variant.name!r} needs XLA_FLAGS {list(variant.process_flags)} at "
                "process start: run the warm-up in a process started with them"
            )
    return resolved


def _targets(fn_or_workloads, args, jit_kwargs):
    """Yield (label, lower) for each function to compile: `lower(implementation)` gives a fresh
    Lowered of it by that implementation (None: its own program)."""
    if callable(fn_or_workloads) and not isinstance(fn_or_workloads, Workload):
        name = getattr(fn_or_workloads, "__name__", "function")

        def lower_function(implementation: str | None = None):
            if implementation is not None:
                raise XlafuseError(
                    f"variant impl={implementation} names an implementation, which a function "
                    "has none of: warm up a workload (or a config) that declares it"
                )
            return jax.jit(fn_or_workloads, **jit_kwargs).lower(*args)

        yield name, lower_function
        return
    if args:
        raise TypeError("example arguments are only accepted with a function, not with workloads")
    items = fn_or_workloads
    if isinstance(items, Workload | Cell | str | dict):
        items = [items]
    for item in items:
        if isinstance(
            item, Workload
        ):  # built: which of its configuration were overrides is not known
            workload, label = item, Cell.of(item).label
        else:
            spec = workload_spec(item)
            workload = build_workload(spec)
            label = dataclasses.replace(Cell.from_dict(spec), name=spec["label"]).label
        yield (
            label,
            lambda implementation=None, workload=workload: lower_workload(
                workload.with_implementation(implementation)
            ),
        )


def _compile(lower: Callable[[str | None], Any], variant) -> float:
    """Lower afresh, by the implementation the variant names (`impl=NAME`; None: the program's
    own), and compile (the cache stores it); returns the compile seconds."""
    options = variant.compiler_options(backend=jax.default_backend())
    lowered = lower(variant.implementation)
    start = time.perf_counter()
    compile_lowered(lowered, variant, options)
    return time.perf_counter() - start
