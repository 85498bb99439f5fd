"""The check that keeps one results file to one set of settings.

Every record carries the `settings` it was measured under (experiment, reference, backend and
device, timing and measure tables, XLA_FLAGS, jax/jaxlib/xlafuse versions, and the cell's
variant resolved to its XLA options: read by `xlafuse.experiment.environment`, given here as
data); `check_resumable` refuses to add cells to a file written under other settings, so cells
are never mixed or reused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xlafuse.errors import XlafuseError
from xlafuse.results.records import CellResult, parse_file, plain


def shown_differences(differences: Sequence[str], *, most: int = 3) -> str:
    """The first `most` differences, `; `-joined, and how many more there are."""
    more = f" and {len(differences) - most} more" if len(differences) > most else ""
    return "; ".join(differences[:most]) + more


def check_resumable(
    path: str | Path,
    settings: Mapping[str, Any],
    *,
    variants: Mapping[str, Any] | None = None,
    sources: Mapping[str, tuple[str | None, str | None]] | None = None,
) -> None:
    """Refuse to add cells to a results file that was written under other settings.

    Args:
      path: the results file (nothing to check when it does not exist).
      settings: this run's settings (`xlafuse.experiment.environment.run_settings`).
      variants: this run's variants by name, each resolved to what XLA gets (`variant_settings`
        there); a recorded variant of the same name must have resolved to the same.
      sources: this run's workloads by name: (entry, source_sha256) of a program of the user's
        (None, None for the zoo's); a recorded cell of the same workload must have the same:
        a changed model file is a changed cell.

    Raises:
      XlafuseError: one line naming what differs, with the two ways out (`--fresh`, `--out`).
    """
    path = Path(path)
    if not path.exists():
        return
    for record in parse_file(path)[0]:
        differences = _differences(record, settings, variants or {}, sources or {})
        if differences:
            raise XlafuseError(
                f"{path} holds results measured under other settings "
                f"({shown_differences(differences)}): "
                "resuming would mix them; pass --fresh to move that file aside and start over, "
                "or write to another --out"
            )


def _differences(
    record: CellResult,
    settings: Mapping[str, Any],
    variants: Mapping[str, Any],
    sources: Mapping[str, tuple[str | None, str | None]],
) -> list[str]:
    if not record.settings:
        return [f"cell {record.cell_id or record.workload!r} records no settings (older xlafuse)"]
    recorded = {k: v for k, v in record.settings.items() if k != "variant"}
    differences = [
        f"{key}: {_show(before)} in the file, {_show(after)} now"
        for key, before, after in _diff_flat(recorded, settings)
    ]
    if record.variant in variants and record.settings.get("variant") != variants[record.variant]:
        differences.append(
            f"variant {record.variant!r}: {_show(record.settings.get('variant'))} in the file, "
            f"{_show(variants[record.variant])} now"
        )
    if record.workload in sources:
        entry, sha = sources[record.workload]
        if record.entry != entry:
            differences.append(
                f"workload {record.workload!r}: entry {_show(record.entry)} in the file, "
                f"{_show(entry)} now"
            )
        elif record.source_sha256 != sha:
            differences.append(
                f"workload {record.workload!r}: its source file changed (sha256 "
                f"{_short(record.source_sha256)} in the file, {_short(sha)} now)"
            )
    return differences


def _short(sha: str | None) -> str:
    return sha[:12] if sha else "none"


def _diff_flat(before: Mapping[str, Any], after: Mapping[str, Any], prefix: str = ""):
    for key in dict.fromkeys([*before, *after]):
        a, b = before.get(key), after.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            yield from _diff_flat(a, b, f"{prefix}{key}.")
        elif plain(a) != plain(b):
            yield f"{prefix}{key}", a, b


def _show(value: Any) -> str:
    return json.dumps(plain(value), sort_keys=True, default=str)
