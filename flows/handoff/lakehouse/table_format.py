"""The seam between what harvest hands over (`TableLoad`) and a table format that merges it (`TableFormat`).

A format sees one table at a time: its name, key, the catalog's schema and a stream of rows already reduced to
the newest fetch per key. It owns nothing else (which runs are due, the `exports` ledger, the CLI), so Iceberg
and Delta differ only in how they merge and commit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc

KEY_SEPARATOR = "\x1f"
"""Joins a composite key's parts into one string to match on (a unit separator: no id holds one)."""
UTC_MICROS = pa.timestamp("us", tz="UTC")


def key_strings(batch: pa.RecordBatch, key: tuple[str, ...]) -> pa.Array:
    """One string per row naming its key, comparable between incoming rows and a table's."""
    parts = [pc.cast(batch.column(k), pa.large_string()) for k in key]
    joined = (
        parts[0]
        if len(parts) == 1
        else pc.binary_join_element_wise(*parts, pa.scalar(KEY_SEPARATOR, pa.large_string()))
    )
    return joined.combine_chunks() if isinstance(joined, pa.ChunkedArray) else joined


def incoming_keys(load: TableLoad) -> tuple[pa.Array, pa.Array | None]:
    """The load's keys (`key_strings`) and, when it has a time to decide by, its `newest_by` times in UTC
    microseconds, in stream order: what a copy-on-write merge holds in memory (not the rows).

    Each batch's keys are copied out of it: a batch DuckDB exported stays in memory, every column of it, while
    any of its buffers is referenced, and a key column cast without a copy is such a buffer. Holding them held
    the rows: a first Iceberg export of 3M records peaked at 1.9 GB reading its keys; copied, 320 MB."""
    keys, newest = [], []
    for batch in load.open():
        keys.append(pa.concat_arrays([key_strings(batch, load.primary_key)]))
        if load.newest_by:
            newest.append(pa.concat_arrays([pc.cast(batch.column(load.newest_by), UTC_MICROS)]))
    all_keys = pa.concat_arrays(keys) if keys else pa.array([], pa.large_string())
    if not load.newest_by:
        return all_keys, None
    return all_keys, pa.concat_arrays(newest) if newest else pa.array([], UTC_MICROS)


@dataclass(frozen=True)
class TableLoad:
    """One table's rows to merge: one row per primary key, in `schema`, streamed (memory stays at a few batches).

    `newest_by`: the column that decides between the incoming row and the table's row for a key (the incoming
    row wins when its value is at least the table's: a rerun of the same run changes nothing); None: the incoming
    row always wins (bookkeeping tables, whose newest state is harvest's own)."""

    name: str
    primary_key: tuple[str, ...]
    schema: pa.Schema
    open: Callable[[], pa.RecordBatchReader]
    """A new reader over the rows each call (a format may read them more than once, e.g. keys first)."""
    newest_by: str | None = "_fetched_at"
    runs: tuple[str, ...] = ()


@dataclass
class MergeResult:
    """What one table's commit did, for the export report."""

    table: str
    rows_in: int = 0
    inserted: int = 0
    updated: int = 0
    columns_added: list[str] = field(default_factory=list)
    version: str = ""
    """The table's snapshot id (Iceberg) or version (Delta) after the commit."""


class TableFormat(Protocol):
    """Iceberg or Delta at one destination. `merge` is one atomic commit of one table (created when missing,
    its schema grown to `load.schema`); running it again with the same rows leaves the table as it was."""

    name: str

    def merge(self, load: TableLoad) -> MergeResult: ...

    def close(self) -> None: ...
