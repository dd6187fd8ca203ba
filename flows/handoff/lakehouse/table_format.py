"""The seam between what harvest hands over (`TableLoad`) and a table format that merges it (`TableFormat`).

A format sees one table at a time: its name, key, the catalog's schema and a stream of rows already reduced to
the newest fetch per key. It owns nothing else (which runs are due, the `exports` ledger, the CLI), so Iceberg
and Delta differ only in how they merge and commit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc

KEY_SEPARATOR = "\x1f"
"""Joins a composite key's parts into one string to match on (a unit separator: no id holds one)."""
UTC_MICROS = pa.timestamp("us", tz="UTC")


def say_kept_types(log: logging.Logger, fmt: str, table: str, columns: list[str]) -> None:
    """A table an older catalog made keeps a column's type (neither Delta nor Iceberg changes one in place; rows
    are cast to it): said once per merge, so the user knows a new table would have today's types."""
    if columns:
        log.warning(
            "%s table %s keeps %s in the type it was made with (a %s column's type cannot change in place); "
            "harvest's catalog types them otherwise now: export to a new table to have its types",
            fmt.lower(), table, ", ".join(columns), fmt,
        )  # fmt: skip


def key_strings(batch: pa.RecordBatch, key: tuple[str, ...]) -> pa.Array:
    """One string per row naming its key, comparable between incoming rows and a table's."""
    parts = [pc.cast(batch.column(k), pa.large_string()) for k in key]
    joined = (
        parts[0]
        if len(parts) == 1
        else pc.binary_join_element_wise(*parts, pa.scalar(KEY_SEPARATOR, pa.large_string()))
    )
    return joined.combine_chunks() if isinstance(joined, pa.ChunkedArray) else joined


def rows_of_keys(batch_keys: pa.Array, keys: pa.Array) -> pa.Array:
    """For each of `keys`, its row in the batch (null where the batch lacks it); a batch names a key once.

    The lookup set is built from the batch, not from `keys`: `keys` are the incoming rows' (a million when a
    rebuilt run is exported again), and building a set of them for every 16k-row batch took ~0.3 s a batch (a
    1M-row Delta re-merge: 42 s); probing them against the batch's set is ~20 ms."""
    return pc.index_in(keys, value_set=batch_keys)


def batch_mask(num_rows: int, rows: pa.Array) -> pa.Array:
    """True at `rows` (positions in a batch)."""
    return pc.is_in(pa.array(range(num_rows), pa.int32()), value_set=pc.cast(rows, pa.int32()))


def without_keys(batch: pa.RecordBatch, key: tuple[str, ...], drop: pa.Array) -> pa.RecordBatch:
    """The batch without its rows whose key is one of `drop`."""
    if len(drop) == 0:
        return batch
    gone = rows_of_keys(key_strings(batch, key), drop).drop_null()
    return batch.filter(pc.invert(batch_mask(batch.num_rows, gone))) if len(gone) else batch


def without_rows_of(batch: pa.RecordBatch, load: TableLoad, drop: pa.Array) -> pa.RecordBatch:
    """The batch without its rows `drop` names: by key, or for a child table by parent (every row of each)."""
    if not load.group_by:
        return without_keys(batch, load.primary_key, drop)
    if len(drop) == 0:
        return batch
    return batch.filter(pc.invert(pc.is_in(key_strings(batch, load.group_by), value_set=drop)))


def matched_rows(batch: pa.RecordBatch, load: TableLoad, keys: pa.Array) -> tuple[pa.Array, pa.Array] | None:
    """(incoming rows, batch rows) of each pair that match, aligned; None when none does. A record table's batch
    names a key once (`rows_of_keys`); a child table's names a parent once per item, so each batch row is matched
    to its parent among the incoming ones (which name each parent once)."""
    if not load.group_by:
        at = rows_of_keys(key_strings(batch, load.primary_key), keys)
        hit = pc.is_valid(at)
        return (pc.indices_nonzero(hit), at.filter(hit)) if pc.any(hit).as_py() else None
    at = pc.index_in(key_strings(batch, load.group_by), value_set=keys)
    hit = pc.is_valid(at)
    return (at.filter(hit), pc.indices_nonzero(hit)) if pc.any(hit).as_py() else None


@dataclass
class KeyMatches:
    """The incoming rows' keys and `newest_by` times (not their other columns), and what matching them with a
    table's files found: the state of a copy-on-write merge (Delta's and Iceberg's)."""

    keys: pa.Array
    newest: pa.Array | None
    matched: int = 0
    """Incoming rows whose key the table has (a table holds each key once)."""
    kept: list[pa.Array] = field(default_factory=list)
    """Keys whose table row stays (newer, or the same): their incoming rows are not written."""
    replaced: dict[str, list[pa.Array]] = field(default_factory=dict)
    """Data file -> keys of its rows an incoming row replaces (the file is rewritten without them)."""
    ties: dict[str, list[pa.Array]] = field(default_factory=dict)
    """Data file -> keys whose incoming row is as new: replaced only when some column differs (Delta)."""
    copied: int = 0
    """Rows of rewritten files written again."""
    written: int = 0
    """Incoming rows written."""

    @classmethod
    def of(cls, load: TableLoad) -> KeyMatches:
        """The load's keys and times, in stream order.

        Each batch's keys are copied out of it: a batch DuckDB exported stays in memory, every column of it,
        while any of its buffers is referenced, and a key column cast without a copy is such a buffer. Holding
        them held the rows: a first Iceberg export of 3M records peaked at 1.9 GB reading its keys; copied,
        320 MB."""
        keys, newest = [], []
        for batch in load.open_groups() if load.open_groups else load.open():
            keys.append(pa.concat_arrays([key_strings(batch, load.group_by or load.primary_key)]))
            if load.newest_by:
                newest.append(pa.concat_arrays([pc.cast(batch.column(load.newest_by), UTC_MICROS)]))
        all_keys = pa.concat_arrays(keys) if keys else pa.array([], pa.large_string())
        if not load.newest_by:
            return cls(all_keys, None)
        return cls(all_keys, pa.concat_arrays(newest) if newest else pa.array([], UTC_MICROS))

    @property
    def updated(self) -> int:
        """Table rows an incoming row replaced."""
        return self.matched - sum(len(k) for k in self.kept)


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
    group_by: tuple[str, ...] = ()
    """A child table's parent key columns: each incoming parent replaces all its rows in the table (a list that
    shrank or emptied leaves none behind), or none when the table's fetch of it is newer."""
    open_groups: Callable[[], pa.RecordBatchReader] | None = None
    """A child table's incoming parents (`group_by` and `newest_by`, one row each, those with no items too):
    what is matched against the table, instead of the rows."""


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

    def count_child_rows(self, matches: KeyMatches) -> None:
        """A child table's merge counted in rows, not in its incoming parents: the rows written, the table's rows
        they replaced, and the rows added beyond them."""
        self.rows_in, self.updated = matches.written, matches.updated
        self.inserted = max(0, matches.written - matches.updated)


class TableFormat(Protocol):
    """Iceberg or Delta at one destination. `merge` is one atomic commit of one table (created when missing,
    its schema grown to `load.schema`); running it again with the same rows leaves the table as it was."""

    name: str

    def merge(self, load: TableLoad) -> MergeResult: ...

    def holds_runs(self) -> bool:
        """Whether the destination has its `runs` table: without it, what the `exports` table says was merged
        there is gone (the destination deleted, a bucket made anew) and is merged again."""
        ...

    def close(self) -> None: ...
