"""A config's `[tune]` table: what `xlafuse tune CONFIG.toml` (and `xlafuse run` of the same
file) searches, written down so that a tuning can be rerun and reviewed like an experiment::

    imports = ["my_models.py"]              # optional, as in any config

    [experiment]
    name = "tune-cartpole"
    output = "results/tune-cartpole"        # tune.jsonl and best.toml go here

    [tune]
    workload = { name = "cartpole", size = "small" }   # a [[workloads]] table: a zoo
                                            # workload or an entry, with size, mode, dtype,
                                            # overrides, devices, parallelism
    knobs = { unroll = [1, 2, 4, 8, 16, 32] }   # overrides (an entry: keywords) to combine
    space = ["while-loop-double-buffering"] # XLA option families; [] for the knobs alone;
                                            # left out: every family of the backend; those
                                            # that do not apply on it are left out (GPU ones
                                            # on a CPU), and the tune says so
    budget_s = 60                           # the search's seconds (descent, halving)
    search = "descent"                      # coordinate descent (the default); "halving":
                                            # successive halving; "grid": every candidate
                                            # alike, no budget
    rerun = true                            # prove the winner in a fresh process
    figure = "pipelined"                    # optional: the time tuned for, "latency" or
                                            # "pipelined" (left out: the one a cell of the
                                            # workload leads with)

The workload table is validated exactly as a `[[workloads]]` table is (`config.parse_config`);
every problem is reported at once, located under `tune.`.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xlafuse.errors import XlafuseError, did_you_mean
from xlafuse.experiment.config import WorkloadConfig, check_config_file, parse_config
from xlafuse.experiment.tune.evaluate import Target
from xlafuse.experiment.tune.space import (
    FAMILIES,
    IMPLEMENTATION,
    Family,
    families_for,
    restricted,
)
from xlafuse.experiment.tune.tuner import DEFAULT_SEARCH, FIGURES, SEARCHES
from xlafuse.models import user

TUNE_KEYS = ("workload", "knobs", "space", "budget_s", "search", "rerun", "figure")
TOP_KEYS = ("imports", "experiment", "tune")
EXPERIMENT_KEYS = ("name", "output")
DEFAULT_BUDGET_S = 60.0


@dataclasses.dataclass(frozen=True)
class TuneTable:
    """A validated `[tune]` table.

    Attributes:
      target: the workload tuned, with its fixed settings.
      knobs: override -> the values to try.
      families: the XLA option families searched (None: every family of the backend).
      budget_s: the search's seconds.
      search: "descent", "halving" or "grid" (`tuner.SEARCHES`).
      rerun: whether the winner is proved in a fresh process.
      output: where tune.jsonl and best.toml go.
      imports: the config's files of the user's (imported already).
    """

    target: Target
    knobs: Mapping[str, tuple[Any, ...]]
    families: tuple[str, ...] | None
    budget_s: float
    search: str
    rerun: bool
    output: Path
    imports: tuple[str, ...] = ()

    def option_families(self, backend: str) -> tuple[list[Family], list[str]]:
        """(the families searched on `backend`, the names listed that do not apply there): a
        table listing GPU families runs on a CPU with its knobs alone."""
        if self.families is None:
            return families_for(backend), []
        listed = [FAMILIES[name] for name in self.families]
        kept = [f for f in listed if backend in f.backends]
        if IMPLEMENTATION in self.families:  # the target's, that run here
            kept = restricted(kept, self.target.implementations())
        return kept, [f.name for f in listed if backend not in f.backends]


def has_tune_table(path: str | Path) -> bool:
    """Whether a config file holds a `[tune]` table (read as TOML; False when it is not)."""
    try:
        return "tune" in tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False


def load_tune_table(path: str | Path, backend: str) -> TuneTable:
    """Reads and validates a config's `[tune]` table.

    Raises:
      XlafuseError: no such file, not TOML, or every problem found, one per line.
    """
    path = check_config_file(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise XlafuseError(f"{path}: not a TOML config: {err}") from None
    return parse_tune_table(data, backend, source=path)


def parse_tune_table(
    data: Mapping[str, Any], backend: str, *, source: Path | None = None
) -> TuneTable:
    """`load_tune_table` of a config already parsed into a dict."""
    problems: list[str] = []
    _unknown_keys(problems, "", data, TOP_KEYS)
    experiment = data.get("experiment", {})
    if not isinstance(experiment, Mapping):
        problems.append("experiment: must be a table ([experiment])")
        experiment = {}
    _unknown_keys(problems, "experiment.", experiment, EXPERIMENT_KEYS)
    for key in EXPERIMENT_KEYS:
        if not isinstance(experiment.get(key, ""), str):
            problems.append(f"experiment.{key}: must be a string, not {experiment[key]!r}")
    table = data.get("tune")
    if not isinstance(table, Mapping):
        problems.append("tune: missing or not a table: add a [tune] table")
        table = {}
    _unknown_keys(problems, "tune.", table, TUNE_KEYS)
    workload = _workload(problems, data, table, backend, source)
    knobs = _knobs(problems, table.get("knobs", {}))
    families = _families(problems, table.get("space"))
    budget_s, search, rerun = _how(problems, table)
    figure = _figure(problems, table.get("figure"))
    if problems:
        head = f"{source}: " if source else ""
        count, lines = len(problems), "\n".join(f"  {p}" for p in problems)
        raise XlafuseError(
            f"{head}{count} problem{'s' if count > 1 else ''} in the config:\n{lines}"
        )
    name = experiment.get("name", "tune")
    output = Path(experiment.get("output", f"results/{name}"))
    imports = tuple(data.get("imports", ()))
    target = dataclasses.replace(_target(workload), figure=figure)
    return TuneTable(target, knobs, families, budget_s, search, rerun, output, imports)


def _how(problems: list[str], table: Mapping[str, Any]) -> tuple[float, str, bool]:
    """(budget_s, search, rerun), each checked."""
    budget_s = table.get("budget_s", DEFAULT_BUDGET_S)
    finite = isinstance(budget_s, int | float) and math.isfinite(budget_s)
    if isinstance(budget_s, bool) or not finite or not budget_s > 0:
        problems.append(f"tune.budget_s: need a finite number of seconds above 0, not {budget_s!r}")
        budget_s = DEFAULT_BUDGET_S
    search = table.get("search", DEFAULT_SEARCH)
    if search not in SEARCHES:
        accepted = ", ".join(SEARCHES)
        problems.append(
            f"tune.search: {search!r}{did_you_mean(search, SEARCHES)}; accepted: {accepted}"
        )
    rerun = table.get("rerun", True)
    if not isinstance(rerun, bool):
        problems.append(f"tune.rerun: must be true or false, not {rerun!r}")
    return float(budget_s), search, rerun


def _figure(problems: list[str], figure: Any) -> str | None:
    """The `figure` chosen (None where left out), checked."""
    if figure is None or figure in FIGURES:
        return figure
    problems.append(
        f"tune.figure: {figure!r}{did_you_mean(str(figure), FIGURES)}; accepted: "
        + ", ".join(FIGURES)
    )
    return None


def _unknown_keys(problems: list[str], prefix: str, table: Any, accepted: Sequence[str]) -> None:
    if not isinstance(table, Mapping):
        return
    for key in table:
        if key not in accepted:
            problems.append(
                f"{prefix}{key}: unknown key{did_you_mean(key, accepted)}; accepted: "
                f"{', '.join(accepted)}"
            )


def _workload(problems, data, table, backend, source) -> WorkloadConfig | None:
    """The `workload` table validated as a config's one `[[workloads]]` table."""
    item = table.get("workload")
    if item is None:
        problems.append('tune.workload: missing: e.g. workload = { name = "cartpole" }')
        return None
    config = {"workloads": [item], "experiment": {"variants": ["default"]}}
    if "imports" in data:
        config["imports"] = data["imports"]
    try:
        return parse_config(config, backend=backend, source=source).workloads[0]
    except XlafuseError as err:
        lines = str(err).splitlines()[1:]  # the head line counts them; each is located
        problems.extend(line.strip().replace("workloads[0]", "tune.workload", 1) for line in lines)
        return None


def _knobs(problems, value) -> dict[str, tuple[Any, ...]]:
    if not isinstance(value, Mapping):
        problems.append("tune.knobs: must be a table of lists, e.g. { unroll = [1, 2, 4] }")
        return {}
    knobs = {}
    for name, values in value.items():
        if not isinstance(values, list) or not values:
            problems.append(f"tune.knobs.{name}: must be a non-empty list of values")
        elif len(set(map(repr, values))) != len(values):
            problems.append(f"tune.knobs.{name}: a value is given twice")
        else:
            knobs[name] = tuple(values)
    return knobs


def _families(problems, value) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        problems.append(f"tune.space: must be a list of family names ({', '.join(FAMILIES)})")
        return None
    for name in value:
        if name not in FAMILIES:
            problems.append(
                f"tune.space: unknown option family {name!r}{did_you_mean(name, FAMILIES)}; "
                f"accepted: {', '.join(FAMILIES)}"
            )
    return tuple(value)


def _target(workload: WorkloadConfig | None) -> Target:
    if workload is None:
        return Target("")
    if workload.entry is not None:
        name = user.parse_entry(workload.entry, base=workload.base).resolved
        settings = {"mode": workload.mode}
    else:
        name = workload.name
        settings = {"size": workload.size, "mode": workload.mode, "dtype": workload.dtype}
        if workload.devices > 1:
            settings.update(devices=workload.devices, parallelism=workload.parallelism)
    settings = {k: v for k, v in settings.items() if v is not None}
    return Target(name, settings, dict(workload.overrides))
