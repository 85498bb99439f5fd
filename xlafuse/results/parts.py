"""The parts of a `CellResult`: one small frozen record per source of its figures.

A cell's figures come from several sources: the built workload, the compile, the fusion report,
the timing, the speedup interval, a device profile, a kept trace, the rates derived from them,
the measured ceilings, the numerics check, the cold-start children, the collectives of a sharded
program and their communication time. In memory each source is one part (`record.timing.median_s`,
`record.device.time_s`); on disk a record stays one flat JSON object (`time_median_s`,
`device_time_s`), the form published in `experiments/`.

The mapping is declared once, on the fields: a part's field `name` is the flat key
`PREFIX + name`, or the key its `keyed(...)` names where the published key does not follow
the prefix. `Part.flat` and `Part.from_flat` are the one flatten and unflatten, for every part;
`xlafuse.results.records.CellResult` joins them.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Self

from xlafuse.kinds import Verdict, member

KEY = "key"  # the field metadata that names a flat key not made of PREFIX + name
PAIR = "pair"  # the field metadata of a list of two numbers (an interval, a range), or None


def keyed(key: str, *, default: Any = None) -> Any:
    """A field whose flat key is `key` (instead of PREFIX + its name)."""
    return dataclasses.field(default=default, metadata={KEY: key})


def pair(*, key: str | None = None) -> Any:
    """A field holding two numbers, (low, high), or None; its flat key `key` where given."""
    return dataclasses.field(default=None, metadata={PAIR: True, **({KEY: key} if key else {})})


def mapping() -> Any:
    """A field holding a mapping, empty by default."""
    return dataclasses.field(default_factory=dict)


def plain(value: Any) -> Any:
    """JSON's form of a value: mappings become dicts with str keys, tuples become lists."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def has_type(value: Any, hint: Any) -> bool:
    """Whether a value read from JSON has the type a field is annotated with.

    A float takes any number, an int an integer (a bool is neither), a `StrEnum` a string (its
    member is checked when the record is made), a Mapping an object and a Sequence a list, their
    items checked against the item type; `Any` takes anything.
    """
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(has_type(value, arg) for arg in args)
    if origin is not None and issubclass(origin, Mapping):
        return isinstance(value, Mapping) and all(has_type(v, args[1]) for v in value.values())
    if origin is not None and issubclass(origin, Sequence):
        return isinstance(value, list | tuple) and all(has_type(v, args[0]) for v in value)
    if hint is type(None):
        return value is None
    if isinstance(value, bool):
        return hint is bool
    if hint is float:
        return isinstance(value, int | float)
    if isinstance(hint, type) and issubclass(hint, enum.StrEnum):
        return isinstance(value, str)
    return isinstance(value, hint)


def wrong_type(key: str, value: Any, hint: Any) -> str:
    """`KEY is VALUE, not WHAT` for a value that `has_type` refuses (VALUE as JSON writes it)."""
    return f"{key} is {_shown(value)}, not {_described(hint)}"


def wrong_pair(key: str, value: Any) -> str | None:
    """`KEY is VALUE, not two numbers (low, high) or null` for a `pair` field's list of another
    length; None for two numbers or None."""
    if value is None or len(value) == 2:
        return None
    return f"{key} is {_shown(value)}, not two numbers (low, high) or null"


def _shown(value: Any) -> str:
    shown = json.dumps(value, default=str)
    return shown if len(shown) <= 40 else f"{shown[:37]}..."


def _described(hint: Any) -> str:
    """A type in JSON's words: "a number or null", "a list of numbers"."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_described(arg) for arg in args)
    if origin is not None and issubclass(origin, Mapping):
        return "an object" if args[1] is Any else f"an object of {_plural(args[1])}"
    if origin is not None and issubclass(origin, Sequence):
        return "a list" if args[0] is Any else f"a list of {_plural(args[0])}"
    if isinstance(hint, type) and issubclass(hint, enum.StrEnum):
        return f"one of {', '.join(m.value for m in hint)}"
    names = {float: "a number", int: "an integer", str: "a string", bool: "true or false"}
    return names.get(hint, "null" if hint is type(None) else getattr(hint, "__name__", str(hint)))


def _plural(hint: Any) -> str:
    """What a list or an object holds: "numbers", "numbers and nulls", "lists"."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " and ".join(_plural(arg) for arg in typing.get_args(hint))
    if origin is not None:
        return "objects" if issubclass(origin, Mapping) else "lists"
    names = {float: "numbers", int: "integers", str: "strings", bool: "booleans"}
    return names.get(hint, "nulls" if hint is type(None) else "values")


def _verdicts(part: Any, *names: str) -> None:
    """A part's verdict fields as `Verdict` members (the boundary of a record read)."""
    for name in names:
        object.__setattr__(part, name, member(Verdict, getattr(part, name), name))


class Part:
    """A part of a record: a frozen dataclass whose fields map to flat keys (see the module doc).

    Values are kept in JSON's form (`plain`), so a part read from a file equals the part it was
    written from.
    """

    PREFIX = ""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            object.__setattr__(self, field.name, plain(getattr(self, field.name)))

    @classmethod
    def flat_keys(cls) -> dict[str, str]:
        """Field name -> flat key."""
        return {f.name: f.metadata.get(KEY, cls.PREFIX + f.name) for f in dataclasses.fields(cls)}

    @classmethod
    def flat_pairs(cls) -> set[str]:
        """The flat keys of the fields that hold two numbers or None (`pair`)."""
        keys = cls.flat_keys()
        return {keys[f.name] for f in dataclasses.fields(cls) if f.metadata.get(PAIR)}

    def flat(self) -> dict[str, Any]:
        """The part as flat keys, every field included (None where not measured)."""
        return {key: getattr(self, name) for name, key in self.flat_keys().items()}

    @classmethod
    def from_flat(cls, data: Mapping[str, Any]) -> Self:
        """The part from a flat record; its keys missing from `data` get their defaults."""
        return cls(**{name: data[key] for name, key in cls.flat_keys().items() if key in data})

    # Fields that a source object may lack (another source fills them): `of` leaves them alone.
    NOT_FROM_SOURCE: tuple[str, ...] = ()

    @classmethod
    def of(cls, source: Any, **given: Any) -> Self:
        """The part from an object holding same-named attributes (a FusionReport, a
        CollectiveReport, a ColdStartResult, the Ceilings, a built workload); `given` values
        win. A `source` of None gives every default (not measured).

        Raises:
          AttributeError: the source lacks a field that is neither given nor in
            NOT_FROM_SOURCE (a renamed attribute must not become a silent None on disk).
        """
        if source is None:
            return cls(**given)
        names = [f.name for f in dataclasses.fields(cls) if f.name not in given]
        names = [n for n in names if n not in cls.NOT_FROM_SOURCE]
        missing = [n for n in names if not hasattr(source, n)]
        if missing:
            raise AttributeError(
                f"{type(source).__name__} has no {', '.join(missing)} for {cls.__name__}"
            )
        return cls(**{n: getattr(source, n) for n in names}, **given)


@dataclasses.dataclass(frozen=True)
class ModelRecord(Part):
    """The built workload: parameters, items per call ("tokens", "images"...), analytic FLOPs."""

    num_params: int | None = None
    items_per_call: int | None = None
    items_unit: str | None = None
    flops: float | None = None


@dataclasses.dataclass(frozen=True)
class CompileRecord(Part):
    """The compile (`CompiledVariant`): seconds to lower and compile, XLA's cost analysis
    (flops, bytes accessed) and memory analysis (argument + output + temp - alias bytes).
    compile_cached: a cache served the executable (`CompiledVariant.compile_cached`): then
    compile_s is None, no compile was timed (None: a record from before this field, or a torch
    cell)."""

    lower_s: float | None = None
    compile_s: float | None = None
    cost_flops: float | None = None
    cost_bytes_accessed: float | None = None
    peak_memory_bytes: int | None = None
    compile_cached: bool | None = None


@dataclasses.dataclass(frozen=True)
class FusionRecord(Part):
    """The fusion report of the optimized program (`xlafuse.hlo.FusionReport`).

    A torch cell (`xlafuse.torch`) fills kernels and modeled_bytes its own way and says how:
    kernels_basis, modeled_bytes_basis, generated_kernels (Inductor's, at compile).
    missed_fusions: for the "default" variant, the largest kernel boundaries of its program
    (`xlafuse.inspect.explain.missed_fusions`: top 5 by modeled bytes).
    kernel_table: a cell whose trace keeps no kernel table (untraced: a CPU run, or no profile)
    keeps every kernel of its program from the HLO alone, without times
    (`xlafuse.measurement.kernels.hlo_kernel_table`; flat key `hlo_kernel_table`).
    kernels and modeled_bytes count each kernel of the program text once; launches_per_call,
    modeled_bytes_per_call and flops_per_call count each as often as it runs in one call (a
    loop body by its trip count), as `per_call_basis` says (None: a record from before these
    fields, or a torch cell, whose counts are per call already).
    """

    NOT_FROM_SOURCE = ("kernels_basis", "modeled_bytes_basis", "generated_kernels", "kernel_table")
    kernels: int | None = None
    fusions: int | None = None
    real_fusions: int | None = None
    custom_calls: int | None = None
    custom_call_targets: Mapping[str, int] = mapping()
    kinds: Mapping[str, int] = mapping()
    modeled_bytes: int | None = None
    kernels_basis: str | None = None
    modeled_bytes_basis: str | None = None
    generated_kernels: int | None = None
    missed_fusions: Mapping[str, Any] | None = None
    launches_per_call: int | None = None
    modeled_bytes_per_call: int | None = None
    flops_per_call: int | None = None
    per_call_basis: str | None = None
    kernel_table: Mapping[str, Any] | None = keyed("hlo_kernel_table")

    @property
    def bytes_per_call(self) -> int | None:
        """The modeled bytes of one call, what bandwidth divides: `modeled_bytes_per_call`
        (None where a trip count is unknown); `modeled_bytes` where the record has no
        per-call basis (a torch cell, or a record written before it)."""
        if self.per_call_basis is None:
            return self.modeled_bytes
        return self.modeled_bytes_per_call


@dataclasses.dataclass(frozen=True)
class TimingRecord(Part):
    """The wall-clock timing (`xlafuse.measurement.timing.Timing`, without its samples): seconds per
    synchronized call (median, p10, p90, min) over `iters` calls; the pipelined time per call of
    bursts of `pipelined_iters` calls, and the host's share of it (host_s_per_call)."""

    PREFIX = "time_"
    median_s: float | None = None
    p10_s: float | None = None
    p90_s: float | None = None
    min_s: float | None = None
    iters: int | None = keyed("iters")
    pipelined_s_per_call: float | None = keyed("pipelined_s_per_call")
    pipelined_iters: int | None = keyed("pipelined_iters")
    warmup_iters: int | None = keyed("warmup_iters")
    host_s_per_call: float | None = keyed("host_s_per_call")


@dataclasses.dataclass(frozen=True)
class SpeedupRecord(Part):
    """The speedup over the reference (`xlafuse.measurement.timing.Comparison`; 1.0 for the
    reference itself) on two figures: latency (median synchronized call) and pipelined time per
    call. Each is the reference's figure over this cell's, with its 95% bootstrap interval and
    verdict ("faster", "slower", "same"); `lead` names the figure that leads ("latency" for a
    forward call on a GPU, "pipelined" for a train step and on a CPU), and `vs_reference`, `ci`, `verdict` repeat its
    values; `basis` says which figure and how the two were timed (paired: in alternating
    rounds; or apart). The reference's figures are over the same rounds (paired) or its own.
    Records written before `lead` existed have a latency-like speedup of their own basis."""

    PREFIX = "speedup_"
    vs_reference: float | None = None
    ci: Sequence[float] | None = pair()
    verdict: Verdict | None = None
    basis: str | None = None
    lead: str | None = None
    reference_median_s: float | None = keyed("reference_time_median_s")
    reference_pipelined_s: float | None = keyed("reference_pipelined_s_per_call")
    latency: float | None = None
    latency_ci: Sequence[float] | None = pair()
    latency_verdict: Verdict | None = None
    pipelined: float | None = None
    pipelined_ci: Sequence[float] | None = pair()
    pipelined_verdict: Verdict | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _verdicts(self, "verdict", "latency_verdict", "pipelined_verdict")


@dataclasses.dataclass(frozen=True)
class DeviceRecord(Part):
    """The device profile (`xlafuse.measurement.profile.DeviceProfile`, GPU with profiling): kernel
    seconds and kernels per call, the longest kernels ((name, seconds per call)), and the
    speedup over the reference from per-call kernel time (interval and verdict). A torch twin
    under CUDA graphs also counts the launches that copy its inputs into the graph's buffers
    before each replay, and their seconds per call (`xlafuse.torch.measure.input_copy_fields`)."""

    PREFIX = "device_"
    time_s: float | None = None
    kernels_per_call: float | None = None
    speedup: float | None = None
    speedup_ci: Sequence[float] | None = pair()
    speedup_verdict: Verdict | None = None
    top_kernels: Sequence[Sequence[Any]] | None = keyed("top_kernels")
    input_copy_kernels_per_call: float | None = keyed("input_copy_kernels_per_call")
    input_copy_time_s: float | None = keyed("input_copy_time_s")

    def __post_init__(self) -> None:
        super().__post_init__()
        _verdicts(self, "speedup_verdict")


@dataclasses.dataclass(frozen=True)
class TraceRecord(Part):
    """A traced cell (`xlafuse.measurement.cell_kernels`): its kept trace folder (relative to the
    results folder; None when not kept), every kernel's time joined to its HLO kernel
    (`KernelTimes.summary()`), against the reference the kernel groups of `xlafuse diff`
    with both sides' times, top savings first (`kernel_diff.kernel_diff_record`), and on a GPU
    XLA's cost model against the measured kernels (`cost_model`: `costmodel.cost_model_record`,
    with `decisions` against a reference, `decisions.decisions_record`)."""

    PREFIX = "trace_"
    path: str | None = None
    kernel_times: Mapping[str, Any] | None = keyed("kernel_times")
    kernel_diff: Mapping[str, Any] | None = keyed("kernel_diff")
    cost_model: Mapping[str, Any] | None = keyed("cost_model")


@dataclasses.dataclass(frozen=True)
class RatesRecord(Part):
    """Rates derived from the measured times (`xlafuse.experiment.fields.rates_record`).

    items_per_s per wall median; achieved_bytes_per_s and tflops: modeled bytes or analytic
    flops per second of `basis` (the device time where profiled, else the pipelined time per
    call on a GPU, else the wall median); pct_of_copy_ceiling; host_bound: the pipelined time
    above 1.15 x the device time (the host sets the pace); trace_perturbed: the traced kernel
    time per call above 1.05 x the untraced pipelined time (the traced program is not the one
    that runs: the rates then divide the pipelined time); cache_resident: the cell's memory
    (XLA's memory analysis) fits in the last-level cache, so no % of the copy ceiling is given.
    """

    items_per_s: float | None = None
    basis: str | None = keyed("rate_basis")
    achieved_bytes_per_s: float | None = None
    pct_of_copy_ceiling: float | None = None
    tflops: float | None = None
    host_bound: bool | None = None
    cache_resident: bool | None = None
    trace_perturbed: bool | None = None


@dataclasses.dataclass(frozen=True)
class CeilingsRecord(Part):
    """The run's measured ceilings (`xlafuse.measurement.calibrate.Ceilings`): copy bandwidth, the
    time it was measured by, the array it copied, its range over bursts (slowest, fastest), a
    large square matmul's FLOP/s, and the device's last-level cache size. One calibration per
    results file: a resumed run reuses the file's."""

    copy_bytes_per_s: float | None = keyed("copy_ceiling_bytes_per_s")
    copy_basis: str | None = keyed("copy_ceiling_basis")
    matmul_flops_per_s: float | None = keyed("matmul_ceiling_flops_per_s")
    copy_array_bytes: int | None = keyed("copy_ceiling_array_bytes")
    copy_range: Sequence[float] | None = pair(key="copy_ceiling_range")
    cache_bytes: int | None = keyed("last_level_cache_bytes")


@dataclasses.dataclass(frozen=True)
class NumericsRecord(Part):
    """The outputs against the reference's (`xlafuse.measurement.numerics.NumericDiff`): forward
    outputs, or a train step's loss, gradient, batch statistics and updated parameters.
    reference_error: why the reference could not be compiled again on resume (then no check).
    precision: the precision whose tolerance judged them ("float32", "tf32", "bfloat16")."""

    max_abs_diff: float | None = None
    max_rel_diff: float | None = None
    within_tolerance: bool | None = None
    worst_part: str | None = keyed("numerics_worst_part")
    reference_error: str | None = None
    precision: str | None = keyed("numerics_precision")


@dataclasses.dataclass(frozen=True)
class ColdStartRecord(Part):
    """Cold start in fresh processes (`xlafuse.measurement.coldstart.ColdStartResult`): import,
    compile with an empty and a filled persistent cache, first and steady call, AOT export and
    load (deserialize + compile + first call)."""

    import_s: float | None = None
    cold_compile_s: float | None = None
    warm_compile_s: float | None = None
    first_call_s: float | None = None
    steady_call_s: float | None = None
    aot_export_s: float | None = None
    aot_load_s: float | None = None
    cache_hit: bool | None = None
    cache_entries: int | None = None
    cache_speedup: float | None = None


@dataclasses.dataclass(frozen=True)
class CollectivesRecord(Part):
    """The collectives of a sharded program's optimized HLO, per device per step
    (`xlafuse.hlo.collectives.CollectiveReport`): instructions, the logical collectives they
    carry, async pairs, operand bytes, ring-model bytes, counts per kind."""

    PREFIX = "collective_"
    count: int | None = keyed("collectives")
    logical: int | None = keyed("logical_collectives")
    async_pairs: int | None = None
    operand_bytes: int | None = None
    ring_bytes: int | None = None
    counts: Mapping[str, int] = mapping()


@dataclasses.dataclass(frozen=True)
class CommRecord(Part):
    """Communication kernels of one device's trace (`xlafuse.measurement.collectives`, GPU with
    profiling): seconds per call, the part compute kernels overlapped, its fraction, kernels."""

    PREFIX = "comm_"
    time_s: float | None = None
    overlap_s: float | None = None
    overlap_fraction: float | None = None
    kernels_per_call: float | None = None


@dataclasses.dataclass(frozen=True)
class ProcessesRecord(Part):
    """Each process's own figures, under `jax.distributed` (the record's timing is over the
    slowest process's samples of each round, `xlafuse.measurement.timing`): the figure the cell
    leads with ("pipelined" or "latency"), its value per process (by process index), the
    slowest and fastest process's and their spread (slowest / fastest - 1); each process's
    host seconds per call, and device seconds per call where a profile measured them."""

    PREFIX = "process_"
    figure: str | None = None
    times_s: Sequence[float] | None = None
    slowest_s: float | None = None
    fastest_s: float | None = None
    spread: float | None = None
    host_s_per_call: Sequence[float] | None = None
    device_time_s: Sequence[float | None] | None = None
