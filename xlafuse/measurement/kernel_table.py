"""A record's kernel table read back: every kernel of a traced cell (`kernel_times`' table) or of
an untraced one (its HLO's), by column. Plain data, no JAX: the reports read it without a compiler
(`xlafuse.measurement.kernels` writes the tables).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SCHEMA = "xlafuse.kernel_times/2"
# What `read_kernel_table` reads: /1 records keep the top kernels only (no `kernel_table`).
READ_SCHEMAS = ("xlafuse.kernel_times/1", SCHEMA)
TABLE_SCHEMA = "xlafuse.kernel_table/1"
# A kernel table's columns, in order (`kernel_table`): `source` an index into the table's
# `sources`, `producers` row indices. `read_kernel_table` adds `pct_of_bound` and `headroom_s`,
# derived from `time_s` and `bound_s` as `KernelTime`'s are, to each row it reads.
TABLE_COLUMNS = (
    "name", "kind", "launches_per_call", "time_s", "modeled_bytes", "flops", "bound", "bound_s",
    "source", "match", "producers",
)  # fmt: skip


def read_kernel_table(kernel_times: Mapping[str, Any] | None) -> list[dict[str, Any]] | None:
    """The rows of a record's kernel table as mappings by column (`producers`: row indices);
    None where the record keeps none (a `kernel_times/1` record, or no kernel times).

    Raises:
      ValueError: a schema this xlafuse does not read (a newer record's), its own or its
        table's.
    """
    if not kernel_times:
        return None
    schema = kernel_times.get("schema", READ_SCHEMAS[0])
    if schema not in READ_SCHEMAS:
        raise ValueError(
            f"kernel_times schema {schema!r} is not one this xlafuse reads "
            f"({', '.join(READ_SCHEMAS)})"
        )
    return table_rows(kernel_times.get("kernel_table"))


def table_rows(table: Mapping[str, Any] | None) -> list[dict[str, Any]] | None:
    """A kernel table's rows as mappings by column, each `source` its line, with `pct_of_bound`
    and `headroom_s` (None without a time and a bound); None for no table.

    Raises:
      ValueError: a schema other than TABLE_SCHEMA.
    """
    if table is None:
        return None
    if table.get("schema") != TABLE_SCHEMA:
        raise ValueError(
            f"kernel table schema {table.get('schema')!r} is not {TABLE_SCHEMA!r}, the one "
            "this xlafuse reads"
        )
    columns, sources = table["columns"], table.get("sources") or []
    rows = []
    for values in table["rows"]:
        row = dict(zip(columns, values, strict=True))
        row["source"] = None if row.get("source") is None else sources[row["source"]]
        time_s, bound_s = row.get("time_s"), row.get("bound_s")
        known = time_s is not None and bound_s is not None
        row["pct_of_bound"] = 100.0 * bound_s / time_s if known and time_s else None
        row["headroom_s"] = max(0.0, time_s - bound_s) if known else None
        rows.append(row)
    return rows
