"""Named fusion variants and the XLA compiler options they stand for.

A variant is applied per compilation, through `Lowered.compile(compiler_options=...)`: XLA_FLAGS is
read once when the backend starts, so changing it later does nothing. Options that only take effect
at backend start go in `process_flags`; such a variant is compiled in a child process that gets them
in its XLA_FLAGS (see `xlafuse.compiler.child`).

Three XLA behaviours shape this module (measured on jax 0.10/0.11):
- `xla_disable_hlo_passes` given per compile REPLACES the list from XLA_FLAGS, so the
  environment's list is merged in here rather than silently dropped.
- An unknown pass name is silently ignored by XLA, so every name is checked against the passes
  the running XLA really has (`xlafuse.compiler.passes`) and `UnknownPassError` is raised otherwise.
- An unknown option key or a bad value fails at compile time with XLA's message; `compile`
  re-raises it as a ValueError that keeps that message.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import os
import shlex
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import jax
import jaxlib

from xlafuse.compiler.passes import fusion_passes, known_passes
from xlafuse.errors import UnknownNameError, UnknownPassError, did_you_mean
from xlafuse.kinds import Backend, Framework

DISABLE_PASSES = "xla_disable_hlo_passes"
BACKENDS = tuple(Backend)  # ("cpu", "gpu"), in order
TORCH_INSTALL = 'pip install -e ".[torch]" (docs/torch.md: the CPU-only wheel)'
IMPLEMENTATION_PREFIX = "impl="  # a variant part naming an implementation (docs/implementations.md)


@dataclasses.dataclass(frozen=True)
class Variant:
    """A named set of XLA options to compile with.

    Attributes:
      name: what results and reports call it.
      description: one line for humans.
      disable_passes: HLO pass or pipeline names to switch off.
      options: other per-compile XLA options (key -> value; booleans as bool).
      process_flags: XLA_FLAGS that must be set before the backend starts (child process).
      backends: the backends it applies to.
      backend_passes: more passes to switch off on one backend only (backend -> names).
      backend_options: more options for one backend only (backend -> key -> value).
      remains: what this variant cannot switch off, and why (for `xlafuse variants`, reports).
      framework: `Framework.JAX` (XLA, the options above) or `TORCH` (the workload's PyTorch twin,
        `xlafuse.torch`; no XLA options).
      torch_compile: for a torch variant, the keyword arguments of `torch.compile` (`{}`: the
        default Inductor), or None to run eagerly.
      implementation: the implementation of the workload's computation to compile (`impl=NAME`
        in a spec: a hand-fused kernel of tokamax's, or a function of the user's; issue 46,
        `xlafuse.models.implementations`), or None for the workload's own program.

    Making one with a field of the wrong type (`disable_passes="fusion"`, an option given a
    list: `option_problem`) raises ValueError naming the variant, the field and its value.
    """

    name: str
    description: str = ""
    disable_passes: tuple[str, ...] = ()
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    process_flags: tuple[str, ...] = ()
    backends: tuple[str, ...] = BACKENDS
    backend_passes: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    backend_options: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    remains: str = ""
    framework: Framework = Framework.JAX
    torch_compile: Mapping[str, Any] | None = None
    implementation: str | None = None

    def __post_init__(self):
        problem = _fields_problem(self)
        if problem:
            raise ValueError(f"variant {self.name!r}: {problem}")
        if self.framework not in list(Framework):
            raise ValueError(
                f"variant {self.name!r}: unknown framework {self.framework!r}; accepted: "
                f"{', '.join(Framework)}"
            )
        object.__setattr__(self, "framework", Framework(self.framework))
        if self.torch_compile is not None:
            object.__setattr__(self, "torch_compile", MappingProxyType(dict(self.torch_compile)))
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))
        passes = {b: tuple(p) for b, p in self.backend_passes.items()}
        options = {b: MappingProxyType(dict(o)) for b, o in self.backend_options.items()}
        object.__setattr__(self, "backend_passes", MappingProxyType(passes))
        object.__setattr__(self, "backend_options", MappingProxyType(options))

    def passes_for(self, backend: str) -> tuple[str, ...]:
        """The passes this variant switches off on `backend`."""
        return _merge(self.disable_passes, self.backend_passes.get(backend, ()))

    def options_for(self, backend: str) -> dict[str, Any]:
        """The options (besides disabled passes) this variant sets on `backend`."""
        return {**self.options, **self.backend_options.get(backend, {})}

    def applies_to(self, backend: str) -> bool:
        """Whether this variant makes sense on `backend` ("cpu" or "gpu")."""
        return backend in self.backends

    def check_framework(self) -> None:
        """Raise ValueError, in one line saying how to install it, when the framework is missing."""
        if self.framework == Framework.TORCH and importlib.util.find_spec("torch") is None:
            raise ValueError(
                f"variant {self.name!r} runs PyTorch, which is not installed: {TORCH_INSTALL}"
            )

    def framework_version(self) -> str | None:
        """The installed version of the variant's framework (None when it is not installed)."""
        if self.framework == Framework.JAX:
            return jax.__version__
        try:
            return importlib.metadata.version(self.framework)
        except importlib.metadata.PackageNotFoundError:
            return None

    def compiler_options(self, *, backend: str | None = None) -> dict[str, Any]:
        """The `compiler_options` dict for `Lowered.compile`, validated for `backend`.

        Passes disabled in the environment's XLA_FLAGS are merged in (XLA would drop them).
        A torch variant has no XLA options: `{}`.

        Raises:
          ValueError: the variant does not apply to `backend`.
          UnknownPassError: a pass name the running XLA does not have.
        """
        backend = backend or jax.default_backend()
        if not self.applies_to(backend):
            raise ValueError(
                f"variant {self.name!r} applies to {', '.join(self.backends)} only, "
                f"not to the {backend!r} backend"
            )
        if self.framework != Framework.JAX:
            return {}
        validate_passes(self.passes_for(backend), backend)
        options = self.options_for(backend)
        passes = _merge(env_disabled_passes(), self.passes_for(backend))
        if passes:
            options[DISABLE_PASSES] = ",".join(passes)
        return options

    def to_dict(self) -> dict[str, Any]:
        """JSON-able description."""
        return {
            "name": self.name,
            "description": self.description,
            "disable_passes": list(self.disable_passes),
            "options": dict(self.options),
            "process_flags": list(self.process_flags),
            "backends": list(self.backends),
            "backend_passes": {b: list(p) for b, p in self.backend_passes.items()},
            "backend_options": {b: dict(o) for b, o in self.backend_options.items()},
            "remains": self.remains,
            "framework": self.framework,
            "torch_compile": None if self.torch_compile is None else dict(self.torch_compile),
            **({"implementation": self.implementation} if self.implementation else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Variant:
        """The Variant that `to_dict` described (unknown keys are an error)."""
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - fields)
        if unknown:
            raise ValueError(f"unknown Variant keys {unknown}; accepted: {sorted(fields)}")
        data = dict(data)
        for key in ("disable_passes", "process_flags", "backends"):
            if key in data:
                data[key] = tuple(data[key])
        return cls(**data)


def option_problem(key: str, value: Any) -> str | None:
    """Why `value` cannot be given to the XLA option `key` (None: its type is right).

    The pass list (`xla_disable_hlo_passes`) takes a string of comma-separated pass names or a
    list of them; every other option takes one string, boolean or number (its value is XLA's
    to judge when it compiles: `xlafuse.experiment.config.xla_rejects`).
    """
    if key == DISABLE_PASSES:
        if isinstance(value, str) or _strings(value):
            return None
        return f'must be a string of pass names ("a,b") or an array of them, not {_shown(value)}'
    if isinstance(value, str | bool | int | float):
        return None
    return (
        f"must be a string, a boolean or a number, not {_shown(value)} (an XLA option takes "
        f'one value; several passes go in {DISABLE_PASSES} = "a,b")'
    )


def _fields_problem(variant: Variant) -> str | None:
    """What is wrong with the types of a Variant's fields (None: nothing), so that a wrong one
    is refused where it is made, not as a TypeError where it is used."""
    for field in ("disable_passes", "process_flags", "backends"):
        value = getattr(variant, field)
        if not _strings(value):
            return f"{field} must be a tuple of strings, not {_shown(value)}"
    for field in ("options", "backend_options", "backend_passes"):
        if not isinstance(getattr(variant, field), Mapping):
            return f"{field} must be a dict, not {_shown(getattr(variant, field))}"
    tables = [variant.options, *variant.backend_options.values()]
    if not all(isinstance(table, Mapping) for table in tables):
        return f"backend_options must map backends to dicts, not {_shown(variant.backend_options)}"
    for key, value in (item for table in tables for item in table.items()):
        problem = option_problem(key, value)
        if problem:
            return f"{key} {problem}"
    for backend, passes in variant.backend_passes.items():
        if not _strings(passes):
            return f"backend_passes[{backend!r}] must be a tuple of strings, not {_shown(passes)}"
    if variant.implementation is not None:
        return implementation_problem(variant.implementation)
    return None


def _strings(value: Any) -> bool:
    """A list or tuple of strings (a lone string is not: it would be read letter by letter)."""
    return isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)


def _shown(value: Any) -> str:
    """`an integer 5`: a value with its kind, as TOML names kinds (a list is an array)."""
    kinds = {str: "a string", bool: "a boolean", int: "an integer", float: "a number"}
    kinds.update({list: "an array", tuple: "an array", dict: "a table", type(None): "nothing"})
    kind = kinds.get(type(value), f"a {type(value).__name__}")
    return kind if value is None else f"{kind} {value!r}"


_PRESETS: dict[str, Variant] = {}


def register(variant: Variant) -> Variant:
    """Add a preset to the registry (used for the built-ins; open to users)."""
    _PRESETS[variant.name] = variant
    return variant


register(Variant("default", "XLA as shipped: every fusion pass on"))
# Every pass that makes a fusion, per backend. "fusion" is the backend's fusion pipeline;
# fusion-wrapper (single-op `wrapped_*` fusions, not real fusions) is mandatory and stays on.
# CPU: dot-library-rewriter makes the YNNPACK library fusions (kCustom __ynn_fusion).
# GPU (measured on the H200, jax 0.11.2): without these, the GPT-2 small train step kept 36 Triton
# GEMM fusions (triton-gemm-rewriter: switched off through xla_gpu_enable_triton_gemm) and 12
# Triton softmax fusions; cuDNN's fused convolutions, sort+iota and dynamic-slice fusions are
# made by rewriters outside the pipeline too.
NO_FUSION_PASSES = {
    "cpu": ("fusion", "dot-library-rewriter"),
    "gpu": (
        "fusion",
        "triton-softmax-rewriter",
        "cudnn-fused-convolution-rewriter",
        "sort-iota-fusion",
        "dynamic-slice-fusion-rewriter-v2",
    ),
}
NO_FUSION_OPTIONS = {"gpu": {"xla_gpu_enable_triton_gemm": False}}

register(
    Variant(
        "no-fusion",
        "every fusion-making pass off, library fusions included (fusion-wrapper, which is "
        "mandatory, stays on: its single-op wrapped_* fusions are not real fusions)",
        backend_passes=NO_FUSION_PASSES,
        backend_options=NO_FUSION_OPTIONS,
        remains=(
            "library calls stay library calls: a cuBLAS GEMM (gpu) or an Eigen/oneDNN dot (cpu) "
            "is one kernel however it is called, and cuBLASLt may still apply a bias or "
            "activation epilogue inside its own kernel (gpu)"
        ),
    )
)
register(
    Variant(
        "no-gemm-fusion",
        "Triton GEMM fusion off: matmuls go to cuBLAS/cuBLASLt (which may take a bias or "
        "activation epilogue)",
        options={"xla_gpu_enable_triton_gemm": False},
        backends=("gpu",),
    )
)
register(
    Variant(
        "no-norm-fusion",
        "Triton normalization/softmax fusion off (triton-softmax-rewriter)",
        disable_passes=("triton-softmax-rewriter",),
        backends=("gpu",),
    )
)
register(
    Variant(
        "no-cuda-graphs",
        "command buffers (CUDA graphs) off: every kernel launched one by one",
        options={"xla_gpu_enable_command_buffer": ""},
        backends=("gpu",),
    )
)


def available(*, backend: str | None = None) -> list[str]:
    """Preset names, all of them or only those that apply to `backend`."""
    return [n for n, v in _PRESETS.items() if backend is None or v.applies_to(backend)]


def compose(*parts: str | Variant, name: str | None = None) -> Variant:
    """One variant that applies every part: passes and options united, later parts win.

    Example: `compose("no-fusion", "no-cuda-graphs")`.
    """
    variants = [get(p) for p in parts]
    torch_parts = [v.name for v in variants if v.framework != Framework.JAX]
    if torch_parts:
        raise ValueError(
            f"variants {', '.join(torch_parts)} run PyTorch and cannot be composed with others; "
            "list them as variants of their own"
        )
    implementation = _one_implementation(variants, name)
    options: dict[str, Any] = {}
    backend_options: dict[str, dict[str, Any]] = {}
    for v in variants:
        options.update(v.options)
        for b, opts in v.backend_options.items():
            backend_options.setdefault(b, {}).update(opts)
    backends = tuple(b for b in BACKENDS if all(v.applies_to(b) for v in variants))
    return Variant(
        name=name or "+".join(v.name for v in variants),
        description="; ".join(v.description for v in variants if v.description),
        disable_passes=_merge(*(v.disable_passes for v in variants)),
        options=options,
        process_flags=tuple(f for v in variants for f in v.process_flags),
        backends=backends,
        backend_passes={
            b: _merge(*(v.backend_passes.get(b, ()) for v in variants)) for b in BACKENDS
        },
        backend_options=backend_options,
        remains="; ".join(v.remains for v in variants if v.remains),
        implementation=implementation,
    )


def _one_implementation(variants: list[Variant], name: str | None) -> str | None:
    """The one implementation the composed variants name (None: none names one).

    Raises:
      ValueError: two parts name different implementations (a cell runs one program).
    """
    named = list(dict.fromkeys(v.implementation for v in variants if v.implementation))
    if len(named) > 1:
        shown = name or "+".join(v.name for v in variants)
        raise ValueError(
            f"variant {shown!r} names {len(named)} implementations ({', '.join(named)}); a cell "
            f"runs one: compose XLA options with one {IMPLEMENTATION_PREFIX}NAME"
        )
    return named[0] if named else None


def implementation_variant(spec: str) -> Variant:
    """The variant of a spec `impl=NAME`: XLA as shipped, compiling the workload's
    implementation NAME (`xlafuse.models.implementations` says which a workload has).

    Raises:
      ValueError: NAME is empty or not a name (letters, digits, '_', '-', '.').
    """
    name = spec.removeprefix(IMPLEMENTATION_PREFIX)
    return Variant(
        spec,
        f"the workload's implementation {name!r}, under XLA's default options",
        implementation=name,
    )


def implementation_problem(name: Any) -> str | None:
    """Why `name` cannot name an implementation (None: it can)."""
    if isinstance(name, str) and name and all(c.isalnum() or c in "_-." for c in name):
        return None
    return (
        f"implementation {name!r} is not a name; accepted: letters, digits, '_', '-', '.' "
        f"(e.g. {IMPLEMENTATION_PREFIX}cudnn)"
    )


def from_options(options: Mapping[str, Any], *, name: str = "custom") -> Variant:
    """A variant from a dict of XLA options, e.g. `{"xla_disable_hlo_passes": "fusion"}`.

    The pass list may be a comma-separated string or a list of names.

    Raises:
      ValueError: an option of the wrong type (`option_problem`), naming the variant, the
        option, its value and what is accepted.
    """
    options = dict(options)
    for key, value in options.items():
        problem = option_problem(key, value)
        if problem:
            raise ValueError(f"variant {name!r}: {key} {problem}")
    passes = options.pop(DISABLE_PASSES, ())
    if isinstance(passes, str):
        passes = passes.split(",")
    return Variant(
        name=name,
        description="user-defined XLA options",
        disable_passes=tuple(p.strip() for p in passes if p.strip()),
        options=options,
    )


def get(spec: str | Variant | Mapping[str, Any]) -> Variant:
    """Resolve a preset name, a "a+b" composition, an implementation (`impl=NAME`, composable:
    `no-fusion+impl=cudnn`), a Variant or a dict of XLA options.

    Raises:
      UnknownNameError: a name that is not a preset (with the presets and a "did you mean").
    """
    if isinstance(spec, Variant):
        return spec
    if isinstance(spec, Mapping):
        return from_options(spec)
    if not isinstance(spec, str):
        raise TypeError(
            f"a variant is a preset name, a Variant or a dict, not {type(spec).__name__}"
        )
    if "+" in spec and spec not in _PRESETS:
        return compose(*spec.split("+"))
    if spec.startswith(IMPLEMENTATION_PREFIX):
        return implementation_variant(spec)
    if spec not in _PRESETS:
        raise UnknownNameError(
            f"unknown variant {spec!r}{did_you_mean(spec, _PRESETS)}; presets: {', '.join(_PRESETS)}; "
            f"an implementation {IMPLEMENTATION_PREFIX}NAME; or pass a dict of XLA options"
        )
    return _PRESETS[spec]


def validate_passes(names: Iterable[str], backend: str) -> None:
    """Raise UnknownPassError for any name the running XLA does not have on `backend`."""
    names = list(names)
    if not names:
        return
    known = known_passes(backend=backend)
    for name in names:
        if name not in known:
            raise UnknownPassError(
                f"unknown HLO pass {name!r}{did_you_mean(name, known)} for backend {backend!r} with jaxlib "
                f"{jaxlib.__version__}: XLA would silently ignore it. Fusion passes here: "
                f"{', '.join(fusion_passes(backend=backend))}"
            )


def env_disabled_passes(*, xla_flags: str | None = None) -> tuple[str, ...]:
    """Pass names disabled through `--xla_disable_hlo_passes` in XLA_FLAGS (or the given string)."""
    flags = os.environ.get("XLA_FLAGS", "") if xla_flags is None else xla_flags
    passes: list[str] = []
    for token in shlex.split(flags):
        key, _, value = token.lstrip("-").partition("=")
        if key == DISABLE_PASSES:
            passes.extend(p for p in value.split(",") if p)
    return tuple(passes)


def _merge(*lists: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p for names in lists for p in names))


register(compose("no-fusion", "no-cuda-graphs", name="no-fusion-no-graphs"))


# Collective combining: XLA merges small collectives of one kind into one with many operands.
# The CPU has one combiner; the GPU one per kind (names from the pass list of jax 0.11.2 on the
# H200). Both lists are validated against the running XLA like every pass name.
COMBINER_PASSES = {
    "cpu": ("cpu-all-reduce-combiner",),
    "gpu": (
        "gpu-all-reduce-combiner",
        "gpu-all-gather-combiner",
        "gpu-reduce-scatter-combiner",
        "collective-permute-combiner",
    ),
}
register(
    Variant(
        "no-collective-combining",
        "every collective-combiner pass of the backend off: one collective per logical "
        "collective (e.g. one all-reduce per gradient)",
        backend_passes=COMBINER_PASSES,
    )
)
# XLA:GPU turns each collective into an async start/done pair (async-collective-creator) so the
# scheduler can overlap it with compute. Without that pass the collectives stay synchronous. The
# CPU backend emits synchronous collectives already, so there is nothing to switch off there.
register(
    Variant(
        "no-async-collectives",
        "collectives stay synchronous (async-collective-creator off): no overlap with compute",
        backend_passes={"gpu": ("async-collective-creator",)},
        backends=("gpu",),
        remains="collectives on the CPU are synchronous already",
    )
)


# PyTorch twins of the workloads (`xlafuse.torch`): the same models and weights, run by torch.
register(
    Variant(
        "torch-eager",
        "the PyTorch twin, eager (one kernel or library call per aten op)",
        framework=Framework.TORCH,
    )
)
register(
    Variant(
        "torch-inductor",
        "the PyTorch twin under torch.compile (Inductor, default mode)",
        framework=Framework.TORCH,
        torch_compile={},
    )
)
register(
    Variant(
        "torch-inductor-max-autotune",
        'the PyTorch twin under torch.compile(mode="max-autotune") (GEMM and kernel autotuning)',
        framework=Framework.TORCH,
        torch_compile={"mode": "max-autotune"},
    )
)
register(
    Variant(
        "torch-inductor-cudagraphs",
        'the PyTorch twin under torch.compile(mode="reduce-overhead") (CUDA graphs)',
        framework=Framework.TORCH,
        torch_compile={"mode": "reduce-overhead"},
        backends=("gpu",),
    )
)
