"""How many times each computation of a module runs in one call: its loops' trip counts.

The kernel counts of a report are per program text (a while body that runs 500 times counts
once, see `fusion`). Work per call, FLOPs above all, needs the other count: how often each
computation runs. XLA writes the trip count it proved into the while's `backend_config`
(`"known_trip_count":{"n":"500"}`; `lax.scan` and `fori_loop` get one). The ENTRY computation
runs once; a while body runs its loop's trip count times its caller's runs, and the condition
not at all: given a trip count, XLA's while thunk (GPU and CPU) runs the body that many times
without evaluating the condition (the recorded cart-pole trace, tests/data/trace-cartpole-full:
5,006 launches a call, none of them the condition's `loop_compare_fusion`). A `call` or
`async-start` target runs as often as its caller. A loop whose trip count XLA did not find has
no count (None), nor has what it calls, its condition included. A conditional runs one of its branches,
which the text cannot tell: `runs_per_call` gives its branches no count, and
`runs_per_call(module, branches_taken=True)` counts every branch as taken each time (an upper
bound, which `per_call_basis` says).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping

from xlafuse.hlo.ir import HloModule, Instruction

_TRIP_COUNT = re.compile(r'"known_trip_count":\{"n":"(\d+)"')
_NAME = re.compile(r"%?([^\s,{}%]+)")


def trip_count(instr: Instruction) -> int | None:
    """The trip count XLA proved for a `while` (its backend_config), else None."""
    match = _TRIP_COUNT.search(instr.attributes.get("backend_config") or "")
    return int(match.group(1)) if match else None


PER_CALL = "per call"
PER_ITERATION = "per iteration, trip count unknown"


def per_call_basis(
    module: HloModule, runs: Mapping[str, int | None], launching: Iterable[str]
) -> str:
    """What a module's per-call figures count, in words: `PER_CALL`, the same with how many
    conditionals had every branch counted as taken, or `PER_ITERATION` where a computation
    that launches work runs an unknown number of times (then there are no per-call figures).

    Args:
        module: the parsed module.
        runs: `runs_per_call(module, branches_taken=True)`.
        launching: the computations that hold kernels.
    """
    if any(runs.get(name) is None for name in launching):
        return PER_ITERATION
    conditionals = sum(
        1 for name in runs for i in module.computation(name).instructions
        if i.opcode == "conditional"
    )  # fmt: skip
    if not conditionals:
        return PER_CALL
    which = "a conditional" if conditionals == 1 else f"{conditionals} conditionals"
    return f"{PER_CALL}, every branch of {which} counted as taken (an upper bound)"


def runs_per_call(module: HloModule, *, branches_taken: bool = False) -> dict[str, int | None]:
    """Computation name -> times it runs in one call of the module (None: not known).

    Only computations that run as computations are listed (ENTRY, and what its whiles,
    conditionals, calls and async-starts run, transitively); fused computations and reducers
    run as part of their caller's kernel. A computation called from several places runs the
    sum of their runs.

    Args:
        module: the parsed module.
        branches_taken: count each branch of a conditional as run every time the conditional
            runs (an upper bound); False: a branch's runs are not known (None).
    """
    entry = module.entry.name
    callers: dict[str, list[tuple[str, int | None]]] = {entry: []}
    order = [module.entry]
    for comp in order:  # grows while iterating: a breadth-first walk from ENTRY
        for instr in comp.instructions:
            for name, factor in _called(instr, branches_taken):
                callee = _lookup(module, name)
                if callee is None:
                    continue
                if callee.name not in callers:
                    callers[callee.name] = []
                    order.append(callee)
                callers[callee.name].append((comp.name, factor))
    runs: dict[str, int | None] = {entry: 1}
    for comp in order:
        _runs(comp.name, callers, runs, ())
    return {comp.name: runs[comp.name] for comp in order}


def _runs(name, callers, runs, calling: tuple[str, ...]) -> int | None:
    """`name`'s runs from its callers' (memoized in `runs`); a cycle (XLA rejects one): None."""
    if name in runs:
        return runs[name]
    if name in calling:
        return None
    total: int | None = 0
    for caller, factor in callers[name]:
        caller_runs = _runs(caller, callers, runs, (*calling, name))
        if total is None or caller_runs is None or factor is None:
            total = None
        else:
            total += caller_runs * factor
    runs[name] = total
    return total


def _lookup(module: HloModule, name: str):
    try:
        return module.computation(name)
    except KeyError:
        return None


def _called(instr: Instruction, branches_taken: bool) -> Iterator[tuple[str, int | None]]:
    """(computation, runs per run of `instr`'s computation) of what `instr` runs."""
    opcode, attributes = instr.opcode, instr.attributes
    if opcode == "while":
        n = trip_count(instr)
        yield _name(attributes.get("body")), n
        yield _name(attributes.get("condition")), None if n is None else 0
    elif opcode == "conditional":
        for name in instr.called_computations:
            yield name, 1 if branches_taken else None
    elif opcode in ("call", "async-start"):
        for name in instr.called_computations:
            yield name, 1


def _name(value: str | None) -> str:
    match = _NAME.search(value or "")
    return match.group(1) if match else ""
