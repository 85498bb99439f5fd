"""What `xlafuse tune` searches: XLA option families and the target's own knobs, combined.

The families are options of XLA's GPU compiler, and on a CPU whether XLA fuses at all (the
`no-fusion` variant's passes): the decisions that matter for fusion and launches there.

A family is one kind of decision XLA makes about fusion or launches, with its choices; the
first choice of each is XLA's default. A knob is an override of a zoo workload or a keyword
of a user's FUNCTION, with the values to try. The space is the product of the chosen
families' choices and the knobs' values: combinations, not one knob at a time. The default
program (no override, every family at its first choice) is always in it, first. `SpaceGrid`
is the same space as coordinates, one axis per knob and per family, for a search that moves
one coordinate at a time.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from xlafuse.compiler import variants
from xlafuse.errors import UnknownNameError, unknown_name
from xlafuse.models import implementations


@dataclasses.dataclass(frozen=True)
class Family:
    """One kind of XLA decision and its choices (label -> XLA options; the first: the default).

    Attributes:
      name: what the space and the results call it.
      description: one line for humans.
      choices: label -> the per-compile XLA options it sets.
      backends: the backends where it applies.
      default: searched when no family is named (the implementation family is searched only
        when named: `--space implementation`).
    """

    name: str
    description: str
    choices: Mapping[str, Mapping[str, Any]]
    backends: tuple[str, ...] = ("gpu",)
    default: bool = True  # searched when no family is named


_UNROLL = "xla_gpu_enable_while_loop_unrolling"
IMPLEMENTATION = "implementation"
_IMPLEMENTATION_KEY = "impl"  # an implementation choice's pseudo-option: not an XLA option
ALL_IMPLEMENTATIONS = tuple(
    dict.fromkeys(n for op in implementations.OPS for n in implementations.names(op))
)


def _implementation_choice(name: str) -> Mapping[str, Any]:
    """What choosing implementation `name` sets: nothing for the workload's own program."""
    return {} if name == implementations.OWN else {_IMPLEMENTATION_KEY: name}


FAMILIES: Mapping[str, Family] = MappingProxyType({f.name: f for f in (
    Family("gemm-fusion", "matmuls as Triton GEMM fusions (on) or cuBLAS calls (off, and off "
           "with cuBLASLt's fused epilogues)",
           {"on": {}, "off": {"xla_gpu_enable_triton_gemm": False},
            "off-cublaslt": {"xla_gpu_enable_triton_gemm": False,
                             "xla_gpu_enable_cublaslt": True}}),
    Family("autotune", "how hard XLA searches GEMM tilings",
           {"default": {}, "exhaustive": {"xla_gpu_exhaustive_tiling_search": True},
            "off": {"xla_gpu_autotune_level": 0}}),
    Family("while-loop-double-buffering", "a loop's next iteration's buffers set up early",
           {"off": {}, "on": {"xla_gpu_enable_while_loop_double_buffering": True}}),
    Family("while-loop-unrolling", "XLA unrolls loops itself",
           {"default": {}, "auto": {_UNROLL: "WHILE_LOOP_UNROLLING_AUTO_UNROLL"},
            "full": {_UNROLL: "WHILE_LOOP_UNROLLING_FULL_UNROLL"}}),
    Family("command-buffers", "kernels launched as CUDA graphs (on) or one by one (off)",
           {"on": {}, "off": {"xla_gpu_enable_command_buffer": ""},
            "min-graph-1": {"xla_gpu_graph_min_graph_size": 1}}),
    Family("multi-output-fusion", "sibling and producer-consumer multi-output fusion",
           {"on": {}, "off": {"xla_disable_hlo_passes": "multi_output_fusion"}}),
    Family("fusion", "XLA's CPU fusion (on) or every op its own loop (off: the no-fusion "
           "variant's passes)",
           {"on": {}, "off": {variants.DISABLE_PASSES: ",".join(
               variants.get("no-fusion").passes_for("cpu"))}}, backends=("cpu",)),
    Family(IMPLEMENTATION, "the workload's implementations (impl=NAME): its own program or "
           "tokamax's hand-fused kernels (docs/implementations.md)",
           {name: _implementation_choice(name) for name in ALL_IMPLEMENTATIONS},
           backends=("cpu", "gpu"), default=False),
)})  # fmt: skip


def restricted(families: Sequence[Family], implementations: Sequence[str]) -> list[Family]:
    """`families` with the implementation family's choices those of the target that run here
    (`implementations`, its own first), in that order; the other families as they are."""
    return [
        dataclasses.replace(f, choices={n: _implementation_choice(n) for n in implementations})
        if f.name == IMPLEMENTATION else f
        for f in families
    ]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One program of the space: the target's knob values and one choice per family.

    Attributes:
      knobs: (name, value) pairs given to the target (none: its defaults).
      choices: (family, label) pairs, in the families' order.
    """

    knobs: tuple[tuple[str, Any], ...] = ()
    choices: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        """`unroll=8 gemm-fusion=off`; "default" for the default program."""
        parts = [f"{k}={v}" for k, v in self.knobs]
        parts += [f"{family}={label}" for family, label in self.choices
                  if label != next(iter(FAMILIES[family].choices))]  # fmt: skip
        return " ".join(parts) or "default"

    @property
    def implementation(self) -> str | None:
        """The implementation its choices name (`impl=NAME`), None for the workload's own."""
        chosen = dict(self.choices).get(IMPLEMENTATION)
        return None if chosen in (None, implementations.OWN) else chosen

    def options(self) -> dict[str, Any]:
        """The XLA options of its choices, merged (passes to switch off joined)."""
        out: dict[str, Any] = {}
        passes: list[str] = []
        for family, label in self.choices:
            if family == IMPLEMENTATION:
                continue  # not an XLA option: `implementation`
            for key, value in FAMILIES[family].choices[label].items():
                if key == variants.DISABLE_PASSES:
                    passes += [p for p in str(value).split(",") if p]
                else:
                    out[key] = value
        if passes:
            out[variants.DISABLE_PASSES] = ",".join(passes)
        return out

    def variant(self) -> variants.Variant:
        """The candidate's XLA options, and its implementation, as a Variant (the compile
        path's input)."""
        variant = variants.from_options(self.options(), name=self.name)
        return dataclasses.replace(variant, implementation=self.implementation)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "knobs": dict(self.knobs), "choices": dict(self.choices)}


def families_for(backend: str, *, names: Sequence[str] | None = None) -> list[Family]:
    """The families to search on `backend`: `names` (all that apply when None), in the order
    given.

    Raises:
      UnknownNameError: a name that is not a family, or one that does not apply on `backend`.
    """
    if names is None:
        return [f for f in FAMILIES.values() if backend in f.backends and f.default]
    chosen = []
    for name in names:
        family = FAMILIES.get(name)
        if family is None:
            raise UnknownNameError(unknown_name("option family", name, FAMILIES))
        if backend not in family.backends:
            raise UnknownNameError(
                f"option family {name!r} applies on {', '.join(family.backends)} only, not on "
                f"this {backend}"
            )
        chosen.append(family)
    return chosen


def parse_knob(text: str) -> tuple[str, tuple[str, ...]]:
    """`unroll=1,2,4` -> ("unroll", ("1", "2", "4")): the knob's name and each value's text, to
    be read as an `--overrides` value is (the command line's one parser of them) and then typed
    against the target's own value (`typed_knobs`).

    Raises:
      ValueError: not NAME=V1[,V2...], or a value given twice.
    """
    name, sep, values = text.partition("=")
    if not sep or not name.strip() or not values.strip():
        raise ValueError(f"--knob {text!r}: expected NAME=V1,V2,... (e.g. unroll=1,2,4,8)")
    texts = tuple(v.strip() for v in values.split(",") if v.strip())
    if len(set(texts)) != len(texts):
        raise ValueError(f"--knob {text!r}: a value is given twice")
    return name.strip(), texts


def typed_knobs(
    knobs: Mapping[str, Sequence[Any]],
    defaults: Mapping[str, Any] | None,
    *,
    texts: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, tuple[Any, ...]]:
    """Each knob's values of the type of the target's own value where it has one
    (`as_default_type`).

    Args:
      knobs: name -> the values to try (read as `--overrides` values are, or from TOML).
      defaults: the target's own values (`Target.defaults`; None: not known, nothing typed).
      texts: name -> each value as given on the command line, where it was.

    Raises:
      ValueError: two values that are one once typed (`x=1,1.0` of a float).
    """
    out = {}
    for name, values in knobs.items():
        given = (texts or {}).get(name, (None,) * len(values))
        has_default = defaults is not None and name in defaults
        typed = tuple(
            as_default_type(v, defaults[name], text=text) if has_default else v
            for v, text in zip(values, given, strict=True)
        )
        if len(set(map(value_key, typed))) != len(typed):
            raise ValueError(
                f"knob {name!r}: a value is given twice ({', '.join(map(repr, typed))})"
            )
        out[name] = typed
    return out


def as_default_type(value: Any, default: Any, *, text: str | None = None) -> Any:
    """`value` as the type of the target's own value `default` where that is unambiguous: an
    integer for a float as a float (2 -> 2.0), and for a string the text as given
    (`--knob mode=1`: "1", not 1). Anything else is kept as read (a program of the user's is
    handed it, a zoo workload checks it as its overrides)."""
    if isinstance(default, float) and type(value) is int:
        return float(value)
    if isinstance(default, str) and text is not None and not isinstance(value, str):
        return text
    return value


def value_key(value: Any) -> tuple[str, Any]:
    """A value with its type, so that True and 1 (equal in Python) are two knob values."""
    return (type(value).__name__, repr(value))


def enumerate_space(
    knobs: Mapping[str, Sequence[Any]],
    families: Sequence[Family],
    *,
    defaults: Mapping[str, Any] | None = None,
) -> list[Candidate]:
    """Every combination of the knobs' values and the families' choices, the default program
    first (its knobs unset: the target's own defaults).

    Args:
      knobs: name -> the values to try.
      families: the option families.
      defaults: the target's own value of each knob (`Target.defaults`): the combination of
        those values and every family's first choice is the default program again, and is left
        out (measuring it twice would only split the budget).
    """
    knob_values = [[(name, v) for v in values] for name, values in knobs.items()]
    choice_values = [[(f.name, label) for label in f.choices] for f in families]
    default = _default_program(families)
    out = [default]
    for ks in itertools.product(*knob_values):
        for cs in itertools.product(*choice_values):
            candidate = Candidate(tuple(ks), tuple(cs))
            if not _is_default_program(candidate, default, defaults):
                out.append(candidate)
    return out


def _default_program(families: Sequence[Family]) -> Candidate:
    """No knob set, every family at its first choice."""
    return Candidate((), tuple((f.name, next(iter(f.choices))) for f in families))


def _is_default_program(
    candidate: Candidate, default: Candidate, defaults: Mapping[str, Any] | None
) -> bool:
    """Whether `candidate` is the default program: itself, or every knob at the target's own
    value with every family at its first choice."""
    if candidate == default:
        return True
    same_knobs = defaults is not None and all(
        name in defaults and same_value(defaults[name], value) for name, value in candidate.knobs
    )
    return same_knobs and candidate.choices == default.choices


@dataclasses.dataclass(frozen=True)
class SpaceGrid:
    """The space of `enumerate_space` as coordinates: one axis per knob (its values), then one
    per family (its labels). Every point of the grid is a candidate of the space.

    Attributes:
      knobs: the knobs' names, in the order of their axes.
      families: the families' names, on the axes after the knobs'.
      axes: each axis's values.
      start: the default program's point; where a knob's own value is not among those listed
        (or is not known), that knob's first listed value instead (the default program is then
        not a point of the grid).
      default: the default program (the space's first candidate).
      defaults: the target's own knob values (None: not known).
    """

    knobs: tuple[str, ...]
    families: tuple[str, ...]
    axes: tuple[tuple[Any, ...], ...]
    start: tuple[Any, ...]
    default: Candidate
    defaults: Mapping[str, Any] | None = None

    def candidate(self, point: Sequence[Any]) -> Candidate:
        """The candidate at `point` (the default program where the point is that program)."""
        n = len(self.knobs)
        candidate = Candidate(
            tuple(zip(self.knobs, point[:n], strict=True)),
            tuple(zip(self.families, point[n:], strict=True)),
        )
        is_default = _is_default_program(candidate, self.default, self.defaults)
        return self.default if is_default else candidate


def space_grid(
    knobs: Mapping[str, Sequence[Any]],
    families: Sequence[Family],
    *,
    defaults: Mapping[str, Any] | None = None,
) -> SpaceGrid:
    """The grid of `enumerate_space(knobs, families, defaults)`'s space."""
    labels = [tuple(f.choices) for f in families]
    start = [_own_value_or_first(name, values, defaults) for name, values in knobs.items()]
    return SpaceGrid(
        knobs=tuple(knobs),
        families=tuple(f.name for f in families),
        axes=(*(tuple(values) for values in knobs.values()), *labels),
        start=(*start, *(choices[0] for choices in labels)),
        default=_default_program(families),
        defaults=None if defaults is None else dict(defaults),
    )


def same_value(a: Any, b: Any) -> bool:
    """Whether a knob value is the target's own: equal, and a bool only to a bool (True is 1 in
    Python, not to a program that branches on its type)."""
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def _own_value_or_first(name: str, values: Sequence[Any], defaults) -> Any:
    """The knob's value in the default program where it is listed, else its first value."""
    if defaults is not None and name in defaults:
        listed = [v for v in values if same_value(v, defaults[name])]
        if listed:
            return listed[0]
    return values[0]
