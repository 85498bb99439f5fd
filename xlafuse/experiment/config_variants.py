"""A config's variants (`experiment.variants`) and its reference -> `VariantConfig`s, each
checked against the backend and the running XLA (`variant_problem`, `xla_rejects`), and each
variant's implementation (`impl=NAME`) against each workload."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp

from xlafuse.compiler import variants
from xlafuse.errors import did_you_mean
from xlafuse.experiment.config_problems import (
    type_name,
    typed_field,
)
from xlafuse.experiment.config_types import (
    INLINE_VARIANT_META,
    VariantConfig,
    WorkloadConfig,
)
from xlafuse.kinds import Framework
from xlafuse.models import implementations, registry

if TYPE_CHECKING:
    from xlafuse.experiment.config_problems import Problems


def check_implementations(
    problems: Problems,
    workloads: list[WorkloadConfig],
    listed: list[VariantConfig],
    backend: str,
) -> None:
    """Each variant naming an implementation (`impl=NAME`), against each workload: one it has
    and can run here (`registry.implementation_problem`; an entry: one of its table's)."""
    for i, variant in enumerate(listed):
        name = _implementation(variant)
        if name is None:
            continue
        for w in workloads:
            problem = _implementation_problem(w, name, backend)
            if problem:
                problems.add(f"experiment.variants[{i}]", f"{variant.name!r}: {problem}")


def _implementation(variant: VariantConfig) -> str | None:
    try:
        return variant.resolve().implementation
    except ValueError:
        return None


def _implementation_problem(w: WorkloadConfig, name: str, backend: str) -> str | None:
    """What keeps workload `w` from running implementation `name` (None: nothing)."""
    if w.entry is not None:
        accepted = (implementations.OWN, *w.implementations)
        if name in accepted:
            return None
        shown = ", ".join(f"impl={n}" for n in accepted)
        return (
            f"entry {w.entry!r} has no implementation {name!r}; accepted: {shown} (its "
            'workload table\'s implementations = {NAME = "FILE.py:FUNCTION"})'
        )
    check_on = backend if backend in w.backends or not w.backends else w.backends[0]
    return registry.implementation_problem(
        w.name, name, mode=w.mode, dtype=w.dtype, devices=w.devices, backend=check_on
    )


def parse_variants(problems: Problems, value: Any, backend: str) -> list[VariantConfig]:
    if not isinstance(value, list) or not value:
        problems.add("experiment.variants", "must be a non-empty array of names or tables")
        return []
    out: list[VariantConfig] = []
    for i, item in enumerate(value):
        where = f"experiment.variants[{i}]"
        variant = _parse_variant(problems, where, item, backend)
        if variant is None or not _check_variant_applies(problems, where, variant, backend):
            continue
        if any(v.name == variant.name for v in out):
            problems.add(where, f"variant {variant.name!r} is listed twice")
            continue
        out.append(variant)
    return out


def _parse_variant(problems, where, item, backend) -> VariantConfig | None:
    if isinstance(item, Mapping):
        return _parse_inline_variant(problems, where, item, backend)
    if not isinstance(item, str):
        problems.add(where, f"must be a preset name or a table, not {type_name(item)}")
        return None
    config = VariantConfig(item, item)
    try:
        config.resolve()  # kept: the run uses this resolution
    except ValueError as err:
        problems.add(where, str(err))
        return None
    return config


def _parse_inline_variant(problems, where, item, backend) -> VariantConfig | None:
    """An inline variant's table (`variants.option_problem` for each option's type). Its
    well-typed options are checked against XLA even when its name or another option has a
    problem: every problem comes out in one pass."""
    name = typed_field(problems, f"{where}.name", item.get("name"), str)
    typed_field(problems, f"{where}.description", item.get("description"), str, optional=True)
    implementation = _inline_implementation(problems, where, item)
    options = {k: v for k, v in item.items() if k not in INLINE_VARIANT_META}
    if not options and implementation is None:
        problems.add(where, "an inline variant needs at least one XLA option besides its name")
    typed = {}
    for key, value in options.items():
        problem = variants.option_problem(key, value)
        if problem:
            problems.add(f"{where}.{key}", problem)
        else:
            typed[key] = value
    if not typed and implementation is None:
        return None
    config = VariantConfig(name or "unnamed", None, typed, implementation)
    if name and typed == options:
        return config  # checked against the backend by the caller, as a preset is
    _check_variant_applies(problems, where, config, backend)
    return None


def _inline_implementation(problems, where, item) -> str | None:
    """An inline variant's `implementation` (what `impl=NAME` names), None without one."""
    name = typed_field(
        problems, f"{where}.implementation", item.get("implementation"), str, optional=True
    )
    problem = name is not None and variants.implementation_problem(name)
    if problem:
        problems.add(f"{where}.implementation", problem)
        return None
    return name


def parse_reference(
    problems: Problems, value: Any, variants: list[VariantConfig], listed: bool
) -> str:
    """The reference's name; a problem unless it names a variant (one listed that has its own
    problem, like a torch variant without torch, is not reported twice)."""
    reference = typed_field(problems, "experiment.reference", value, str, default="default")
    names = [v.name for v in variants]
    if variants and reference not in names + _listed_names(listed):
        problems.add(
            "experiment.reference",
            f"{reference!r} is not one of the variants{did_you_mean(reference, names)} "
            f"(variants: {', '.join(names)})",
        )
    chosen = [v for v in variants if v.name == reference]
    if chosen and _framework(chosen[0]) != Framework.JAX:
        problems.add(
            "experiment.reference",
            f"{reference!r} runs PyTorch; the reference must be an XLA variant (e.g. 'default'): "
            "torch cells are judged and timed against it",
        )
    return reference


def _listed_names(listed: Any) -> list[str]:
    """The names given in `experiment.variants`, valid or not: a preset's, or a table's name."""
    items = listed if isinstance(listed, list) else []
    named = [item.get("name") if isinstance(item, Mapping) else item for item in items]
    return [name for name in named if isinstance(name, str)]


def _framework(config: VariantConfig) -> Framework:
    try:
        return config.resolve().framework
    except ValueError:
        return Framework.JAX


def _check_variant_applies(problems, where, config: VariantConfig, backend) -> bool:
    """The variant applies to the backend and names only passes its XLA has."""
    problem = variant_problem(config, backend)
    if problem:
        problems.add(where, problem)
    return problem is None


def variant_problem(config: VariantConfig, backend: str) -> str | None:
    """What is wrong with running `config` on `backend` (None: nothing): a name that does not
    resolve, a variant for other backends, torch missing for a torch variant, a pass or an
    option the running XLA does not have (each variant's options compiled once)."""
    try:
        variant = config.resolve()
    except ValueError as err:
        return str(err)
    if not variant.applies_to(backend):
        return (
            f"variant {config.name!r} applies to {', '.join(variant.backends)} only; "
            f"the backend is {backend!r}"
        )
    if (
        variant.framework != Framework.JAX
    ):  # a PyTorch twin: no XLA options, but torch must be there
        try:
            variant.check_framework()
        except ValueError as err:
            return str(err)
        return None
    if backend != jax.default_backend():
        return None  # pass names can only be checked against the XLA that will run them
    try:
        options = variant.compiler_options(backend=backend)
    except ValueError as err:
        return str(err)
    rejected = xla_rejects(options)
    if rejected:
        return f"XLA rejects the options of variant {config.name!r}: {rejected}"
    return None


def xla_rejects(options: Mapping[str, Any]) -> str | None:
    """Why the running XLA rejects per-compile `options` (None if it takes them).

    Keys and values are checked the only sure way: by compiling a trivial function with them
    (about 20 ms; once per distinct set of options in a process).
    """
    if not options:
        return None
    return _xla_rejects(json.dumps(dict(options), sort_keys=True))


@functools.cache
def _xla_rejects(options_json: str) -> str | None:
    lowered = jax.jit(lambda x: x + 1).lower(jnp.ones((), jnp.float32))
    try:
        lowered.compile(compiler_options=json.loads(options_json))
    # XLA: JaxRuntimeError (INVALID_ARGUMENT) for a key or value it rejects; TypeError for a
    # value no option takes (a list, None)
    except (jax.errors.JaxRuntimeError, TypeError) as err:
        text = str(err).strip() or type(err).__name__
        return text.splitlines()[0].removeprefix("INVALID_ARGUMENT: ")
    return None
