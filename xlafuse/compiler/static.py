"""Non-array leaves as static, as `equinox.filter_jit` has them.

`jax.jit` traces every leaf of its arguments, so an argument that holds something other than
an array (a module holding `jax.nn.relu` or `jnp.ravel`, a string, an int that sizes a loop) is
refused: it "cannot be traced". Here, as `eqx.filter_jit` does, array leaves (`jax.Array`,
`numpy.ndarray`, NumPy scalars) are traced and every other leaf is static: part of the program,
fixed when it is traced. Python numbers and bools are static too (Equinox's rule: a module's
`inference: bool` or `depth: int` is configuration, branched on or sized with); to trace a
number, pass it as an array (`jnp.asarray(0.5)`). A program whose leaves are all arrays is
unchanged.

`split(fn, args, kwargs)` is the program that jax.jit traces instead: each argument (and
keyword argument) that holds a static leaf is passed as the list of its array leaves, and the
program puts it back together around its static leaves before calling `fn`; an argument of
arrays only is passed as it is, so argument positions (`donate_argnums`) keep their meaning.
Outputs are treated alike: the output, or each element of a returned tuple or list, that holds
a static leaf comes back as the list of its array leaves (a step's new state is then passed
back in the form of its state), and `Split.restore` puts its static leaves back.

Static leaves are compared by value where they are hashable and by identity where not
(`static_key`): `xlafuse.compile` compiles again for another value, as `eqx.filter_jit` does.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

_TRACED = object()  # in a skeleton: an array leaf, passed to the program
_NAME_CHARS = 24  # a static leaf's value is shown up to this many characters


def is_array(leaf: Any) -> bool:
    """Whether a leaf is traced: a JAX array (a tracer too), a NumPy array or a NumPy scalar,
    or a `jax.ShapeDtypeStruct` standing for one (lowered without data)."""
    return isinstance(leaf, jax.Array | np.ndarray | np.generic | jax.ShapeDtypeStruct)


def static_key(value: Any) -> Any:
    """What a static leaf is compared by: its type and value where it is hashable, else its
    identity (a new object is a new program)."""
    try:
        hash(value)
    except TypeError:
        return ("id", id(value))
    return (type(value), value)


def describe(value: Any) -> str:
    """A static leaf in a few characters: a function by its name (`relu`), a string or number
    by its repr (`'same'`, `3`), another object by its type's name."""
    name = getattr(value, "__name__", None)
    if callable(value) and isinstance(name, str):
        return name
    if isinstance(value, str | bytes | int | float | complex | bool | type(None)):
        text = repr(value)
        return text if len(text) <= _NAME_CHARS else text[: _NAME_CHARS - 3] + "..."
    return type(value).__name__


@dataclasses.dataclass(frozen=True)
class StaticLeaf:
    """One leaf of a program's arguments made static.

    Attributes:
      path: where it is in the arguments, as `jax.tree_util.keystr` writes it after the
        argument's position or keyword (`[0].activation`, `[1]`, `['mode']`).
      name: the leaf in a few characters (`describe`): `relu`, `'same'`, `3`.
    """

    path: str
    name: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "name": self.name}


@dataclasses.dataclass(frozen=True, eq=False)
class _Skeleton:
    """A value with its array leaves taken out: its tree, and per leaf its static value (or
    `_TRACED` where an array goes back in)."""

    treedef: Any
    leaves: tuple[Any, ...]

    def rebuild(self, arrays: Sequence[Any]) -> Any:
        """The value again, its array leaves being `arrays` in order."""
        given = iter(arrays)
        return self.treedef.unflatten([next(given) if x is _TRACED else x for x in self.leaves])

    def same_as(self, other: _Skeleton | None) -> bool:
        """Whether `other` has the same tree and the same static leaves (`static_key`)."""
        if other is None or other.treedef != self.treedef:
            return False
        return all(
            (a is _TRACED) == (b is _TRACED) and (a is _TRACED or static_key(a) == static_key(b))
            for a, b in zip(self.leaves, other.leaves, strict=True)
        )


def _take_apart(value: Any, where: str) -> tuple[Any, _Skeleton | None, tuple[StaticLeaf, ...]]:
    """(what the program is passed, its skeleton or None, its static leaves) of one value."""
    pairs, treedef = jax.tree_util.tree_flatten_with_path(value)
    if all(is_array(leaf) for _, leaf in pairs):
        return value, None, ()
    skeleton = _Skeleton(treedef, tuple(_TRACED if is_array(x) else x for _, x in pairs))
    found = tuple(
        StaticLeaf(where + jax.tree_util.keystr(path), describe(leaf))
        for path, leaf in pairs
        if not is_array(leaf)
    )
    return [x for _, x in pairs if is_array(x)], skeleton, found


def _arrays_of(value: Any, skeleton: _Skeleton | None) -> Any:
    """What the program is passed for `value`, which has the form `skeleton` was taken from."""
    if skeleton is None:
        return value
    return [x for x in jax.tree.leaves(value) if is_array(x)]


@dataclasses.dataclass(eq=False)
class _Outputs:
    """The skeletons of the traced program's outputs (set each time it is traced)."""

    container: type | None = None  # tuple or list when each element was taken apart
    skeletons: tuple[_Skeleton | None, ...] = ()


@dataclasses.dataclass(frozen=True, eq=False)
class Split:
    """A program with its static leaves taken out of its arguments (`split`).

    Attributes:
      fn: the program jax.jit traces: `fn(*args, **kwargs)`, its outputs' static leaves out.
      args, kwargs: its arguments: the arrays of each argument that held a static leaf.
      static: the static leaves, in argument order.
    """

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    static: tuple[StaticLeaf, ...]
    _skeletons: tuple[_Skeleton | None, ...]
    _kw_skeletons: Mapping[str, _Skeleton | None]
    _outputs: _Outputs

    def arguments(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[tuple, dict]:
        """The program's arguments for a call with `args` and `kwargs` of the form split."""
        dynamic = tuple(_arrays_of(a, s) for a, s in zip(args, self._skeletons, strict=True))
        named = {k: _arrays_of(v, self._kw_skeletons.get(k)) for k, v in kwargs.items()}
        return dynamic, named

    def restore(self, out: Any) -> Any:
        """The outputs of the user's function from the program's (its static leaves back)."""
        box = self._outputs
        if box.container is None:
            (skeleton,) = box.skeletons or (None,)
            return out if skeleton is None else skeleton.rebuild(out)
        return box.container(
            v if s is None else s.rebuild(v) for v, s in zip(out, box.skeletons, strict=True)
        )

    def call(self, program: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`program` (the compiled `fn`) called as the user's function is: with the original
        arguments, returning the original outputs."""
        dynamic, named = self.arguments(args, kwargs)
        return self.restore(program(*dynamic, **named))

    def state_kept(self) -> bool:
        """After tracing: whether the first output (a step's new state) has the tree and the
        static leaves of the first argument (its state), so that it can be passed back."""
        state = self._skeletons[0] if self._skeletons else None
        box = self._outputs
        new = box.skeletons[0] if box.container is not None and box.skeletons else None
        return new is None if state is None else state.same_as(new)


def split(
    fn: Callable[..., Any], args: Sequence[Any], *, kwargs: Mapping[str, Any] | None = None
) -> Split:
    """`fn` and its arguments with every non-array leaf static (see the module docstring).

    Nothing is traced here. Without a static leaf, `fn`, `args` and `kwargs` are returned as
    they are (`static` is empty).
    """
    kwargs = dict(kwargs or {})
    parts = [_take_apart(a, f"[{i}]") for i, a in enumerate(args)]
    named = {k: _take_apart(v, f"[{k!r}]") for k, v in kwargs.items()}
    static = tuple(leaf for _, _, found in (*parts, *named.values()) for leaf in found)
    outputs = _Outputs()
    if not static:
        return Split(fn, tuple(args), kwargs, (), (None,) * len(parts), {}, outputs)
    skeletons = tuple(s for _, s, _ in parts)
    kw_skeletons = {k: s for k, (_, s, _) in named.items()}
    program = _program(fn, skeletons, kw_skeletons, outputs)
    return Split(
        program,
        tuple(d for d, _, _ in parts),
        {k: d for k, (d, _, _) in named.items()},
        static,
        skeletons,
        kw_skeletons,
        outputs,
    )


def _program(fn, skeletons, kw_skeletons, outputs: _Outputs) -> Callable[..., Any]:
    """The function jax.jit traces: the arguments put back together, the outputs taken apart
    (their skeletons kept in `outputs`)."""

    @functools.wraps(fn)  # the same name in the HLO module (`jit_<name>`) as jax.jit gives
    def program(*args, **kwargs):
        args = [a if s is None else s.rebuild(a) for a, s in zip(args, skeletons, strict=True)]
        kwargs = {k: v if kw_skeletons.get(k) is None else kw_skeletons[k].rebuild(v)
                  for k, v in kwargs.items()}  # fmt: skip
        return _outputs_apart(fn(*args, **kwargs), outputs)

    return program


def _outputs_apart(out: Any, outputs: _Outputs) -> Any:
    """The program's outputs: `out`, or each element of a tuple or list, as `split` passes
    arguments; the skeletons kept in `outputs`."""
    if type(out) in (tuple, list):
        parts = [_take_apart(v, "")[:2] for v in out]
        outputs.container, outputs.skeletons = type(out), tuple(s for _, s in parts)
        return type(out)(d for d, _ in parts)
    dynamic, skeleton, _ = _take_apart(out, "")
    outputs.container, outputs.skeletons = None, (skeleton,)
    return dynamic


def taking_static_leaves(compile_variant: Callable[..., Any]) -> Callable[..., Any]:
    """`compile_variant(fn, args, kwargs, variant, *, jit_kwargs, measure)` for a function whose
    arguments may hold static leaves: `split`'s program is compiled, and the compiled variant
    is called with the original arguments and returns the original outputs.

    With `static_argnums` or `static_argnames` in `jit_kwargs`, jax.jit's own rule applies and
    nothing else is made static.
    """

    @functools.wraps(compile_variant)
    def compile_split(fn, args, kwargs, variant, *, jit_kwargs=None, measure=None):
        options = {"jit_kwargs": jit_kwargs, "measure": measure}
        if _jit_static(jit_kwargs or {}):
            return compile_variant(fn, args, kwargs, variant, **options)
        parts = split(fn, tuple(args), kwargs=kwargs)
        if not parts.static:
            return compile_variant(fn, args, kwargs, variant, **options)
        compiled = compile_variant(parts.fn, parts.args, parts.kwargs, variant, **options)
        # Called with the original arguments: `parts.call` runs the split program on them.
        return compiled.calling_through(lambda call: functools.partial(parts.call, call))

    return compile_split


def _jit_static(jit_kwargs: Mapping[str, Any]) -> bool:
    return any(
        jit_kwargs.get(k) not in (None, (), []) for k in ("static_argnums", "static_argnames")
    )
