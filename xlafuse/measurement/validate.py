"""Judge xlafuse's kernel list and traffic model against Nsight Compute, kernel by kernel.

`compare_kernels` takes the HLO's kernels (`modeled_kernels`) and ncu's launches of ONE call
(`xlafuse.measurement.ncu.parse_ncu_csv`) and makes the per-kernel table; `validate_run` produces
both on a GPU. What is judged (`KernelRow.verdict`, `ValidationResult.ok`):

* counts: every HLO kernel paired with ncu's launches and every launch with an HLO kernel, and
  the counts equal once two known differences are taken out: a library call may launch several
  kernels (cuDNN's padding kernel before a convolution, cuBLAS's split-K reduction after a GEMM),
  and a plain `copy` runs as a memcpy, which ncu (kernels only) does not see (a while loop's body
  counts once in the HLO but launches once per iteration: such programs fail this check);
* bytes: DRAM bytes read + written within `BYTES_TOLERANCE` (10%) of the modeled bytes, judged
  only for kernels whose modeled bytes are at least `L2_FACTOR` (4) times the L2 size: a smaller
  kernel's data may stay in L2 (hits, or writes not yet evicted), so it is listed, not judged;
* time: ncu's duration within `TIME_TOLERANCE` (5%) of the profiler's, per judged kernel (their
  sum is reported); the whole call's figure is listed, not judged: ncu flushes the caches before
  each kernel, so a kernel whose data stays in L2 in the run is slower under ncu (GPT-2 small
  forward's call: experiments/README.md, "Figures behind the code").

A judged kernel that misses by at most one L2 of traffic, in the direction ncu's cache flush
gives, is explained, not failed (`KernelRow.explanation`): at the end of a kernel up to one L2 of
its writes are still in L2; under ncu nobody pays for them, while in the run the next kernel writes
them back. So ncu may see up to `l2_bytes` fewer DRAM bytes than the model, and a time shorter by
the time those bytes take at the kernel's rate.

The join (`join_kernels`), in four passes over ncu's launches (a profiler trace's join first
takes the launches whose `hlo_op` stat names an HLO kernel, `known`): (1) by name: XLA names a kernel
after its fusion, "." mangled to "_" (`wrapped_multiply.1` runs as `wrapped_multiply_1`);
(2) by name with a suffix (`gemm_fusion_dot_11_0` for `gemm_fusion_dot.11`, the longest name);
(3) reused kernels: XLA compiles identical fusions once and launches the first one's kernel, so
`wrapped_add.1` may run as `wrapped_add`: a launch whose name is taken pairs with the next
unmatched HLO kernel of the same base name (numeric suffix removed); (4) library kernels
(cuBLAS/cuDNN: `sm90_xmma_gemm_...`, `nvjet_...`, `cutlass...`) pair, in launch order, with the
library calls (custom-calls, cuDNN fusions) that lie between the neighbouring matched kernels; a
second library launch in the same gap (e.g. a split-K reduction) counts as another launch of the
same call. A memcpy launch (`memcpy32_post`: a plain `copy` run as a device-to-device memcpy,
which inside a CUDA graph is a kernel of the driver's) pairs the same way with the `copy`
instructions between its neighbours. What is left is reported as unmatched.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from xlafuse.hlo import analyze_hlo
from xlafuse.measurement.ncu import NcuKernel
from xlafuse.models.names import Cell

BYTES_TOLERANCE = 0.10
TIME_TOLERANCE = 0.05
L2_FACTOR = 4
ASSUMED_L2_BYTES = 60_000_000
"""The L2 size a result assumes when the device did not report one (the driver could not be
asked): the H200's, rounded down (its driver reports 60 MiB, 62,914,560 bytes). A result made
with it says so in its summary (`L2_ASSUMED`) and in validation.json (`l2_bytes` null,
`l2_assumed` true)."""
L2_ASSUMED = "L2 size assumed: 60 MB (the H200's, rounded down; the device did not report one)"
_SUFFIX = re.compile(r"(?:[._]\d+)+$")

# How a row's HLO kernel and ncu launch(es) were paired.
BY_NAME = "name"
BY_OP = "hlo_op"  # the trace's own word: the launch's `hlo_op` stat names the instruction
SUFFIXED = "name + suffix"
REUSED = "reused kernel"
LIBRARY = "library"
UNMATCHED = "-"

OK = "ok"
NOT_JUDGED = "L2, not judged"
MEMCPY = "memcpy, not a kernel"
_MEMCPY_OPS = frozenset({"slice"})  # a fusion of these may run as a memcpy
MEMCPY_LAUNCH = "memcpy"  # how a `copy` and its memcpy launch were paired
L2_CARRY_OVER = (
    "at most one L2 of this kernel's writes left in L2: ncu flushes it outside the kernel, "
    "in the run the next kernel writes it back"
)


@dataclasses.dataclass(frozen=True)
class ModeledKernel:
    """A kernel of the optimized HLO, as the join needs it.

    Attributes:
      name: the HLO instruction name (`loop_add_fusion`, `wrapped_broadcast.1`, `custom-call.0`).
      modeled_bytes: bytes the traffic model says it moves (inputs + outputs).
      library: True for library calls (custom-calls: cuBLAS, cuDNN, a Pallas or Triton
        kernel; cuDNN fusions), whose GPU kernels carry the library's or the kernel's names.
      kind: the kernel's kind (`kLoop`, `kInput`, `kCustom`, `custom-call`, ...), for the table.
      copy: True for a plain `copy`, or a fusion of only a slice (a contiguous one): it may run
        as a device-to-device memcpy, whose launch (a driver kernel inside a CUDA graph) is
        named `memcpy...`, not after it.
      computation: the HLO computation it is launched from (a loop body's, the entry's).
      in_loop: True for a kernel whose computation may run other than once a call (a loop
        body's, a branch's): its launches may repeat.
    """

    name: str
    modeled_bytes: int
    library: bool = False
    kind: str = ""
    copy: bool = False
    computation: str = ""
    in_loop: bool = False

    @classmethod
    def from_kernel_info(cls, info: Any, *, runs: int | None = 1) -> ModeledKernel:
        """From an `xlafuse.hlo.KernelInfo`, whose computation runs `runs` times a call (None:
        unknown, `FusionReport.runs_of`)."""
        sub_kind = info.sub_kind or ""
        # Every custom-call that launches is a library call, a Pallas kernel included
        # (`__gpu$xla.gpu.triton`, `mosaic_gpu*`, jax-triton's `triton_kernel_call`): its
        # launch carries the kernel's own name (`mha_forward`), not the instruction's.
        library = info.opcode == "custom-call" or "cudnn" in sub_kind
        copy = info.opcode == "copy" or (info.opcode == "fusion" and set(info.ops) <= _MEMCPY_OPS)
        return cls(
            info.name, info.bytes_in + info.bytes_out, library, info.kind, copy,
            info.computation, runs != 1,
        )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class KernelRow:
    """One HLO kernel and the ncu launch(es) paired with it (or one unpaired side).

    Attributes:
      name: the HLO kernel's name; None for an ncu launch that matched no HLO kernel.
      kind: the HLO kernel's kind ("" when unmatched).
      match: how the pair was made: "name", "name + suffix", "reused kernel", "library" or
        "-" (unmatched).
      ncu_names: kernel names of the paired launches (usually one).
      launch_ids: ncu launch IDs of the paired launches.
      modeled_bytes: the traffic model's bytes; None for an unmatched ncu launch.
      dram_read_bytes: ncu's DRAM bytes read (summed over the launches); None without a launch.
      dram_write_bytes: ncu's DRAM bytes written; None without a launch.
      ncu_time_s: ncu's duration in seconds (summed over the launches); None without a launch.
      profiler_time_s: the profiler's device time of these launches: its per-call time of the
        kernel name divided among that name's launches; None when not profiled.
      judged: whether the bytes (and this row's time) are judged: modeled bytes >= L2_FACTOR x L2.
      l2_bytes: the device's L2 size, which bounds the misses `explanation` accepts.
      detail: ncu's `DETAIL_METRICS` (`xlafuse.measurement.ncu`) by field, of the launch with the
        longest time when several are paired (a library call's GEMM, not its split-K reduction:
        what the row's time is mostly made of); empty without `--detail` or a launch.
    """

    name: str | None
    kind: str
    match: str
    ncu_names: tuple[str, ...]
    launch_ids: tuple[int, ...]
    modeled_bytes: int | None
    dram_read_bytes: int | None
    dram_write_bytes: int | None
    ncu_time_s: float | None
    profiler_time_s: float | None = None
    judged: bool = False
    l2_bytes: int = ASSUMED_L2_BYTES
    detail: Mapping[str, float] = dataclasses.field(default_factory=dict, hash=False)

    @property
    def dram_bytes(self) -> int | None:
        """DRAM bytes read plus written; None without a launch."""
        if self.dram_read_bytes is None or self.dram_write_bytes is None:
            return None
        return self.dram_read_bytes + self.dram_write_bytes

    @property
    def bytes_error(self) -> float | None:
        """dram_bytes / modeled_bytes - 1; None when either side is missing or zero."""
        if self.dram_bytes is None or not self.modeled_bytes:
            return None
        return self.dram_bytes / self.modeled_bytes - 1

    @property
    def time_error(self) -> float | None:
        """ncu_time_s / profiler_time_s - 1; None when either is missing or zero."""
        if self.ncu_time_s is None or not self.profiler_time_s:
            return None
        return self.ncu_time_s / self.profiler_time_s - 1

    @property
    def verdict(self) -> str:
        """ "ok", "L2, not judged", or what is wrong ("no ncu launch", "not in the HLO",
        "bytes off", "time off"; several joined by ", ")."""
        if self.name is None:
            return "not in the HLO"
        if not self.launch_ids:
            return MEMCPY if self.kind == "copy" else "no ncu launch"
        if not self.judged:
            return NOT_JUDGED
        wrong = []
        if self.bytes_error is not None and abs(self.bytes_error) > BYTES_TOLERANCE:
            wrong.append("bytes off")
        if self.time_error is not None and abs(self.time_error) > TIME_TOLERANCE:
            wrong.append("time off")
        return ", ".join(wrong) or OK

    @property
    def explanation(self) -> str | None:
        """Why a judged kernel's miss is expected (`L2_CARRY_OVER`), or None.

        Accepted only in the direction ncu's cache flush gives (fewer DRAM bytes than the model,
        less time than the profiler) and only up to one L2: `l2_bytes` fewer bytes, and a time
        shorter by at most the time `l2_bytes` take at the kernel's rate under ncu.
        """
        if self.verdict in (OK, NOT_JUDGED, MEMCPY) or not self.name or not self.launch_ids:
            return None
        bytes_short = (self.modeled_bytes or 0) - (self.dram_bytes or 0)
        bytes_off = self.bytes_error is not None and abs(self.bytes_error) > BYTES_TOLERANCE
        if bytes_off and not 0 < bytes_short <= self.l2_bytes:
            return None
        if self.time_error is not None and abs(self.time_error) > TIME_TOLERANCE:
            if not self.dram_bytes or not self.ncu_time_s or not self.profiler_time_s:
                return None
            l2_time_s = self.l2_bytes * self.ncu_time_s / self.dram_bytes
            if not 0 < self.profiler_time_s - self.ncu_time_s <= l2_time_s:
                return None
        return L2_CARRY_OVER

    @property
    def ok(self) -> bool:
        """True when the verdict is "ok", "L2, not judged" or a memcpy, or the miss is explained."""
        return self.verdict in (OK, NOT_JUDGED, MEMCPY) or self.explanation is not None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, with the derived fields."""
        out = dataclasses.asdict(self)
        out.update(
            ncu_names=list(self.ncu_names),
            launch_ids=list(self.launch_ids),
            dram_bytes=self.dram_bytes,
            bytes_error=self.bytes_error,
            time_error=self.time_error,
            verdict=self.verdict,
            explanation=self.explanation,
        )
        return out


@dataclasses.dataclass(frozen=True)
class ValidationResult:
    """One cell validated against ncu.

    Attributes:
      rows: in launch order, one KernelRow per HLO kernel that launches were paired with and one
        per unpaired launch; then the HLO kernels no launch was paired with, in program order.
      hlo_kernels: kernels in the optimized HLO.
      ncu_kernels: launches ncu profiled in the one call.
      l2_bytes: the device's L2 size; None when it did not report one (the threshold then
        assumes `ASSUMED_L2_BYTES`: `l2_size`, `l2_assumed`).
      profiler_time_s: the profiler's device time of one call; None when not profiled.
      workload: the workload spec (name, size, mode, dtype, seed, overrides); {} when not given.
      variant: the variant's name ("" when not given).
      compiled_under_ncu: True when the process under ncu missed the compilation cache (it then
        compiled, and autotuned, under ncu); None when unknown.
      same_kernels: whether the warm-up and the profiled process compiled the same kernels (names,
        kinds, modeled bytes; the HLO text differs in metadata numbering after a cache load);
        None when unknown.
      error: why the cell could not be validated (a child failed); None when it was.
    """

    rows: tuple[KernelRow, ...]
    hlo_kernels: int
    ncu_kernels: int
    l2_bytes: int | None = None
    profiler_time_s: float | None = None
    workload: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    variant: str = ""
    compiled_under_ncu: bool | None = None
    same_kernels: bool | None = None
    error: str | None = None

    @property
    def label(self) -> str:
        """`name[overrides]/size/mode` of the workload ("" when not given)."""
        w = self.workload
        if not w:
            return ""
        return Cell.from_dict(w).label

    @property
    def kernels_equal(self) -> bool:
        """Whether the HLO's kernel count equals ncu's launch count, as counted."""
        return self.hlo_kernels == self.ncu_kernels

    @property
    def extra_library_launches(self) -> dict[str, int]:
        """Library calls that launched more than one kernel: name -> launches beyond the first."""
        return {
            r.name: len(r.launch_ids) - 1
            for r in self.rows
            if r.name and r.match == LIBRARY and len(r.launch_ids) > 1
        }

    @property
    def memcpy_copies(self) -> tuple[str, ...]:
        """HLO copies that ran as memcpys (no kernel for ncu to see)."""
        return tuple(r.name for r in self.rows if r.name and r.verdict == MEMCPY)

    @property
    def kernels_explained(self) -> bool:
        """Every kernel paired, and the counts equal once library launches and memcpys are
        taken out."""
        expected = (
            self.hlo_kernels - len(self.memcpy_copies) + sum(self.extra_library_launches.values())
        )
        unmatched = any(
            r.name is None or (not r.launch_ids and r.verdict != MEMCPY) for r in self.rows
        )
        return expected == self.ncu_kernels and not unmatched

    @property
    def l2_size(self) -> int:
        """The L2 size the "judged" threshold uses: the device's, else `ASSUMED_L2_BYTES`."""
        return self.l2_bytes or ASSUMED_L2_BYTES

    @property
    def l2_assumed(self) -> bool:
        """Whether the device did not report its L2 size, so that `ASSUMED_L2_BYTES` is used."""
        return not self.l2_bytes

    @property
    def judged_min_bytes(self) -> int:
        """Modeled bytes from which a kernel's bytes are judged: L2_FACTOR x l2_size."""
        return L2_FACTOR * self.l2_size

    @property
    def ncu_time_s(self) -> float:
        """Sum of ncu's kernel durations: the device time of the one profiled call."""
        return sum(r.ncu_time_s or 0.0 for r in self.rows)

    @property
    def time_error(self) -> float | None:
        """ncu_time_s / profiler_time_s - 1; None when not profiled."""
        if not self.profiler_time_s:
            return None
        return self.ncu_time_s / self.profiler_time_s - 1

    @property
    def judged_times(self) -> tuple[float, float] | None:
        """(ncu, profiler) seconds summed over the judged kernels both timed; None without one."""
        timed = [r for r in self.rows if r.judged and r.ncu_time_s and r.profiler_time_s]
        if not timed:
            return None
        return sum(r.ncu_time_s for r in timed), sum(r.profiler_time_s for r in timed)

    @property
    def judged_time_error(self) -> float | None:
        """ncu's time over the profiler's, summed over the judged kernels, - 1; None without one."""
        times = self.judged_times
        return None if times is None else times[0] / times[1] - 1

    @property
    def unmatched_hlo(self) -> tuple[str, ...]:
        """HLO kernels that no ncu launch was paired with (memcpys are not kernels)."""
        return tuple(
            r.name
            for r in self.rows
            if r.name is not None and not r.launch_ids and r.verdict != MEMCPY
        )

    @property
    def unmatched_ncu(self) -> tuple[str, ...]:
        """ncu kernel names that were paired with no HLO kernel."""
        return tuple(n for r in self.rows if r.name is None for n in r.ncu_names)

    @property
    def judged(self) -> int:
        """Rows whose bytes are judged."""
        return sum(r.judged and bool(r.launch_ids) for r in self.rows)

    @property
    def judged_ok(self) -> int:
        """Judged rows whose DRAM bytes are within `BYTES_TOLERANCE` of the model."""
        return sum(
            r.judged and r.bytes_error is not None and abs(r.bytes_error) <= BYTES_TOLERANCE
            for r in self.rows
        )

    @property
    def ok(self) -> bool:
        """Counts explained, every row ok or explained (each judged kernel's time included: the
        judged kernels' summed time is then within the tolerance too, or explained)."""
        return self.error is None and self.kernels_explained and all(r.ok for r in self.rows)

    @property
    def verdict(self) -> str:
        """ "ok", or the failed checks joined by ", "."""
        if self.ok:
            return OK
        if self.error is not None:
            return f"failed: {self.error}"
        wrong = []
        if not self.kernels_explained:
            wrong.append(f"kernels {self.hlo_kernels} in HLO vs {self.ncu_kernels} in ncu")
        if self.unmatched_hlo or self.unmatched_ncu:
            wrong.append(f"{len(self.unmatched_hlo) + len(self.unmatched_ncu)} unmatched")
        off = Counter(r.verdict for r in self.rows if r.launch_ids and r.name and not r.ok)
        wrong.extend(f"{n} {verdict}" for verdict, n in off.items())
        return "; ".join(wrong)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, with the derived checks."""
        return {
            "workload": dict(self.workload),
            "label": self.label,
            "variant": self.variant,
            "ok": self.ok,
            "verdict": self.verdict,
            "hlo_kernels": self.hlo_kernels,
            "ncu_kernels": self.ncu_kernels,
            "kernels_equal": self.kernels_equal,
            "kernels_explained": self.kernels_explained,
            "extra_library_launches": self.extra_library_launches,
            "memcpy_copies": list(self.memcpy_copies),
            "unmatched_hlo": list(self.unmatched_hlo),
            "unmatched_ncu": list(self.unmatched_ncu),
            "l2_bytes": self.l2_bytes,
            "l2_assumed": self.l2_assumed,
            "judged_min_bytes": self.judged_min_bytes,
            "judged": self.judged,
            "judged_ok": self.judged_ok,
            "ncu_time_s": self.ncu_time_s,
            "profiler_time_s": self.profiler_time_s,
            "time_error": self.time_error,
            "judged_time_error": self.judged_time_error,
            "compiled_under_ncu": self.compiled_under_ncu,
            "same_kernels": self.same_kernels,
            "error": self.error,
            "tolerances": {
                "bytes": BYTES_TOLERANCE,
                "time": TIME_TOLERANCE,
                "l2_factor": L2_FACTOR,
            },
            "rows": [r.to_dict() for r in self.rows],
        }


def result_from_dict(cell: Mapping[str, Any]) -> ValidationResult:
    """A ValidationResult from its `to_dict` form (a cell of validation.json), judged by this
    version's rules: the measurements are kept, the derived checks are computed again. A row
    without `detail` (written without `--detail`, or by an older version) has an empty one.

    Raises:
      ValueError: not a cell of validation.json (the message says what is wrong with it).
    """
    if not isinstance(cell, Mapping):
        raise ValueError(f"not a cell of validation.json: a cell is an object, not {cell!r}")
    try:
        reported = int(cell["l2_bytes"]) if cell.get("l2_bytes") else None
        names = {f.name for f in dataclasses.fields(KernelRow)} - {"l2_bytes"}
        rows = tuple(
            KernelRow(
                **{k: v for k, v in row.items() if k in names},
                l2_bytes=reported or ASSUMED_L2_BYTES,
            )
            for row in cell["rows"]
        )
        rows = tuple(  # JSON gave lists where the row holds tuples
            dataclasses.replace(
                r,
                ncu_names=tuple(r.ncu_names),
                launch_ids=tuple(r.launch_ids),
                detail={str(k): float(v) for k, v in (r.detail or {}).items()},
            )
            for r in rows
        )
        return ValidationResult(
            rows=rows,
            hlo_kernels=int(cell["hlo_kernels"]),
            ncu_kernels=int(cell["ncu_kernels"]),
            l2_bytes=reported,
            profiler_time_s=cell.get("profiler_time_s"),
            workload=cell.get("workload") or {},
            variant=cell.get("variant", ""),
            compiled_under_ncu=cell.get("compiled_under_ncu"),
            same_kernels=cell.get("same_kernels"),
            error=cell.get("error"),
        )
    except (AttributeError, KeyError, TypeError, ValueError) as err:  # a row that is no object
        raise ValueError(f"not a cell of validation.json ({type(err).__name__}: {err})") from err


def modeled_kernels(hlo: Any) -> list[ModeledKernel]:
    """The kernels of optimized HLO (text, a path, or a FusionReport) as ModeledKernels."""
    report = hlo if hasattr(hlo, "kernel_details") else analyze_hlo(hlo)
    return [ModeledKernel.from_kernel_info(k) for k in report.kernel_details]


def mangle(name: str) -> str:
    """An HLO name as a GPU kernel name: "." is not allowed in PTX identifiers, XLA writes "_"."""
    return name.replace(".", "_").replace("-", "_")


def base_name(name: str) -> str:
    """A kernel name without its numeric suffixes: `wrapped_add.2`, `wrapped_add_2` -> `wrapped_add`."""
    return _SUFFIX.sub("", mangle(name))


def join_kernels(
    modeled: Sequence[ModeledKernel | tuple],
    measured: Sequence[NcuKernel],
    *,
    known: Mapping[int, int] | None = None,
) -> list[tuple[int | None, list[int], str]]:
    """Pair HLO kernels with ncu launches (see the module docstring for the four passes).

    Args:
      modeled: the HLO's kernels in program order: ModeledKernels, or tuples
        `(name, modeled_bytes[, library])`.
      measured: ncu's launches in launch order.
      known: launches already paired (launch index -> modeled index), before the passes: a
        profiler trace's `hlo_op` names the instruction outside command buffers.

    Returns:
      `(modeled index or None, [measured indices], match)` per pair, in launch order, then the
      unmatched HLO kernels as `(index, [], "-")` in program order.
    """
    kernels = [_modeled(k) for k in modeled]
    pair: dict[int, int] = dict(known or {})  # measured index -> modeled index
    how: dict[int, str] = dict.fromkeys(pair, BY_OP)
    taken: set[int] = set(pair.values())
    _pair_by_name(kernels, measured, pair, how, taken)
    for label, find in ((SUFFIXED, _prefixed), (REUSED, _same_base)):
        previous = -1  # the kernel the previous paired launch ran: launches follow the program
        for j, launch in enumerate(measured):
            if j in pair:
                previous = pair[j]
                continue
            free = [(i, k) for i, k in enumerate(kernels) if i not in taken]
            i = find(launch.name, free, previous)
            if i is not None:
                pair[j], how[j] = i, label
                taken.add(i)
                previous = i
    _pair_library(kernels, measured, pair, how, taken)
    out: list[tuple[int | None, list[int], str]] = []
    rows: dict[int, int] = {}  # modeled index -> position in out
    for j in range(len(measured)):
        i = pair.get(j)
        if i is None:
            out.append((None, [j], UNMATCHED))
        elif i in rows:
            out[rows[i]][1].append(j)
        else:
            rows[i] = len(out)
            out.append((i, [j], how[j]))
    out.extend((i, [], UNMATCHED) for i in range(len(kernels)) if i not in taken)
    return out


def _pair_by_name(kernels, measured, pair, how, taken) -> None:
    """Pass 1: each launch -> the first free HLO kernel, in program order, whose mangled name is
    the launch's (through a name index: a program of thousands of kernels would otherwise cost
    launches x kernels comparisons)."""
    by_name: dict[str, list[int]] = {}
    for i, k in reversed(list(enumerate(kernels))):
        if i not in taken:
            by_name.setdefault(mangle(k.name), []).append(i)
    for j, launch in enumerate(measured):
        if j in pair:
            continue
        free = by_name.get(launch.name)
        if free:
            i = free.pop()
            pair[j], how[j] = i, BY_NAME
            taken.add(i)


def _prefixed(name: str, free: list[tuple[int, ModeledKernel]], previous: int) -> int | None:
    """Pass 2: the HLO kernel whose mangled name, plus "_", starts the launch's name (the
    longest such): a kernel name with a suffix, e.g. `gemm_fusion_dot_11_0`; of those, the
    first after `previous` in program order (the kernel the previous launch ran), else the
    first."""
    found = [(len(k.name), i) for i, k in free if name.startswith(mangle(k.name) + "_")]
    if not found:
        return None
    longest = max(length for length, _ in found)
    return _next_after([i for length, i in found if length == longest], previous)


def _same_base(name: str, free: list[tuple[int, ModeledKernel]], previous: int) -> int | None:
    """Pass 3: an HLO kernel with the launch's base name: the first after `previous` in program
    order (launches follow the program; XLA launches a reused kernel where each of its twins
    stands), else the first."""
    base = base_name(name)
    return _next_after([i for i, k in free if base_name(k.name) == base], previous)


def _next_after(candidates: list[int], previous: int) -> int | None:
    """The first of `candidates` (in program order) after `previous`, else the first."""
    return next((i for i in candidates if i > previous), candidates[0] if candidates else None)


def _pair_library(kernels, measured, pair, how, taken) -> None:
    """Pass 4: each leftover launch, in launch order, pairs with a free library call (a memcpy
    launch: a free `copy`) of the computation of its neighbours, placed between them.

    Its previous launch (paired by any pass) ran kernel `before`, its next one paired by name
    runs `after`. The call is the first free one after `before` in `before`'s computation, and
    before `after` when `after` comes later (a loop body's back edge bounds nothing); at the
    start of a call, and with none left there (past a loop's exit into its caller, or a back
    edge), the first free one of `after`'s computation before it; with no `after` either, the
    first free one of another computation. With no free call left, a launch right after one
    this pass paired is another launch of the same call (a split-K reduction after its GEMM, a
    while loop's copy in each iteration).
    """
    following: list[int | None] = [None] * len(measured)  # `after` of each launch
    upcoming = None
    for j in range(len(measured) - 1, -1, -1):
        following[j] = upcoming
        if j in pair:
            upcoming = pair[j]
    before: int | None = None
    paired_here: int | None = None  # the launch before this one, when this pass paired it
    for j in range(len(measured)):
        if j in pair:
            before, paired_here = pair[j], None
            continue
        memcpy = is_memcpy(measured[j].name)
        i = _library_call(kernels, taken, memcpy, before, following[j])
        if i is None and paired_here is not None and kernels[paired_here].copy == memcpy:
            i = paired_here  # one more launch of the same call
        if i is None:
            paired_here = None
            continue
        taken.add(i)
        pair[j], how[j] = i, MEMCPY_LAUNCH if memcpy else LIBRARY
        before = paired_here = i


def _library_call(kernels, taken, memcpy: bool, before: int | None, after: int | None):
    """The free library call (a `copy` for a memcpy launch) between `before` and `after`
    (`_pair_library`), or None."""

    def free(i: int) -> bool:
        return i not in taken and (kernels[i].copy if memcpy else kernels[i].library)

    if before is None:
        if after is None:
            return next((i for i in range(len(kernels)) if free(i)), None)
        home = kernels[after].computation
        return next((i for i in range(after) if free(i) and kernels[i].computation == home), None)
    home = kernels[before].computation
    end = after if after is not None and after > before else len(kernels)
    here = next(
        (i for i in range(before + 1, end) if free(i) and kernels[i].computation == home), None
    )
    if here is not None or (after is not None and after > before):
        return here
    # none left there: a loop's exit into its caller (or a back edge), before the next paired
    # kernel in its computation; with none paired after it, the first free call elsewhere
    if after is not None:
        home = kernels[after].computation
        return next((i for i in range(after) if free(i) and kernels[i].computation == home), None)
    return next(
        (i for i in range(len(kernels)) if free(i) and kernels[i].computation != home), None
    )


def is_memcpy(launch_name: str) -> bool:
    """A memcpy's launch: `memcpy32_post` (in a CUDA graph), `Memcpy DtoD` (on a stream)."""
    return "memcpy" in launch_name.lower()


def compare_kernels(
    modeled: Sequence[ModeledKernel | tuple],
    measured: Sequence[NcuKernel],
    *,
    profiler_kernel_s: Mapping[str, float] | None = None,
    l2_bytes: int | None = None,
    **fields: Any,
) -> ValidationResult:
    """Join and judge: the per-kernel table of one profiled call.

    Args:
      modeled: the HLO's kernels in program order (ModeledKernels or `(name, bytes[, library])`).
      measured: ncu's launches of ONE call, in launch order.
      profiler_kernel_s: the profiler's device seconds per call for each GPU kernel name (as
        ncu names them); None when not profiled.
      l2_bytes: the device's L2 size; None when it did not report one: `ASSUMED_L2_BYTES` is
        used, and the result says so (`l2_assumed`).
      **fields: other ValidationResult fields (workload, variant, compiled_under_ncu, ...).

    Returns:
      The ValidationResult.
    """
    kernels = [_modeled(k) for k in modeled]
    l2 = int(l2_bytes or ASSUMED_L2_BYTES)
    launches_per_name = Counter(k.name for k in measured)
    rows = []
    for i, js, match in join_kernels(kernels, measured):
        kernel = kernels[i] if i is not None else None
        launches = [measured[j] for j in js]
        rows.append(_row(kernel, launches, match, profiler_kernel_s, launches_per_name, l2))
    profiler_time_s = sum(profiler_kernel_s.values()) if profiler_kernel_s else None
    return ValidationResult(
        rows=tuple(rows),
        hlo_kernels=len(kernels),
        ncu_kernels=len(measured),
        l2_bytes=int(l2_bytes) if l2_bytes else None,
        profiler_time_s=profiler_time_s,
        **fields,
    )


def _row(kernel, launches, match, profiler_kernel_s, launches_per_name, l2) -> KernelRow:
    profiler = None
    if profiler_kernel_s is not None and launches:
        profiler = sum(
            profiler_kernel_s.get(k.name, 0.0) / launches_per_name[k.name] for k in launches
        )
    return KernelRow(
        name=kernel.name if kernel else None,
        kind=kernel.kind if kernel else "",
        match=match,
        ncu_names=tuple(dict.fromkeys(k.name for k in launches)),
        launch_ids=tuple(k.launch_id for k in launches),
        modeled_bytes=kernel.modeled_bytes if kernel else None,
        dram_read_bytes=sum(k.dram_read_bytes for k in launches) if launches else None,
        dram_write_bytes=sum(k.dram_write_bytes for k in launches) if launches else None,
        ncu_time_s=sum(k.time_s for k in launches) if launches else None,
        profiler_time_s=profiler or None,
        judged=kernel is not None and kernel.modeled_bytes >= L2_FACTOR * l2,
        l2_bytes=l2,
        detail=dict(max(launches, key=lambda k: k.time_s).detail) if launches else {},
    )


def _modeled(kernel: ModeledKernel | tuple) -> ModeledKernel:
    if isinstance(kernel, ModeledKernel):
        return kernel
    if isinstance(kernel, tuple) and len(kernel) in (2, 3):
        return ModeledKernel(str(kernel[0]), int(kernel[1]), bool(kernel[2:] and kernel[2]))
    raise TypeError(
        f"a modeled kernel is a ModeledKernel or (name, modeled_bytes[, library]), not {kernel!r}"
    )
