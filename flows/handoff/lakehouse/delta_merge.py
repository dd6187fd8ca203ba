"""A Delta table merged by copy-on-write of only the files holding incoming keys: memory is the incoming keys
and a row group, however large the table.

delta-rs 1.6's MERGE joins the source with a scan of the whole target, and its `MergeBarrier` holds every row of
a file it has not yet seen a change in until the scan ends, so it holds the table (1,019 MB merging 10k rows
into 1M, 2,458 MB into 3M). Its file skipping needs min/max statistics that prune, which string ids in arrival
order never do.
Instead, as the Iceberg merge does (`iceberg_tables.py`):

1. the incoming rows are read for their keys and `_fetched_at` (memory: the keys, not the rows);
2. the table's key and `_fetched_at` columns are read from each data file a row group at a time and matched: the
   incoming row replaces the table's when it is newer; as new (or a bookkeeping table, which has no time) it
   replaces it only when some column differs (a hash of each side's row, streamed), so re-merging what a table
   holds writes nothing;
3. the files holding replaced rows are streamed without them, and the incoming rows that won, by delta-rs's
   writer into new files under `harvest-<uuid>/` in the table (delta-rs writes them as a table of their own,
   whose log gives their `add` actions with delta-rs's statistics; that log is deleted);
4. one commit removes the rewritten files and adds the new ones, with no automatic conflict resolution
   (`max_commit_retries=0`): a version another writer committed meanwhile fails it, and the merge runs again
   on the new version, so a key another writer added cannot land twice.

A column the catalog gained is added first (`alter.add_columns`, a schema-only version), then the rows. A table
this cannot read as plain Parquet (partitioned, deletion vectors, column mapping, change data feed, generated
columns or constraints: written by another engine) is merged by delta-rs's MERGE instead (`delta_tables.py`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, WriterProperties, write_deltalake
from deltalake.transaction import AddAction, RemoveAction

from harvest.flows.handoff.lakehouse.table_format import (
    UTC_MICROS,
    KeyMatches,
    TableLoad,
    batch_mask,
    key_strings,
    matched_rows,
    rows_of_keys,
    without_rows_of,
)

READ_ROWS = 16_384
"""Rows per batch read from a data file (delta-rs writes 16k-row groups: a row group at a time)."""
STAGING = "harvest-"
"""Directory (in the table) of a merge's new files; not `_`-prefixed, so `vacuum` removes them once unreferenced."""
PLAIN_FEATURES = {"appendOnly", "invariants", "timestampNtz", "vacuumProtocolCheck", "v2Checkpoint"}
"""Table features under which a table's data files are its rows and new files need nothing but statistics."""


def copy_on_write_fits(table: DeltaTable) -> bool:
    """Whether the table's files are plain Parquet of its rows that this merge may read and replace."""
    protocol = table.protocol()
    if table.metadata().partition_columns:
        return False
    if protocol.reader_features is None and protocol.writer_features is None:
        return protocol.min_reader_version == 1 and protocol.min_writer_version <= 2
    features = {*(protocol.reader_features or ()), *(protocol.writer_features or ())}
    return features <= PLAIN_FEATURES


class DataFiles:
    """A Delta table's data files, read with pyarrow's filesystem: a stream delta-rs's writer pulls from must
    not call back into delta-rs's runtime, and delta-rs's filesystem handler holds the GIL while it waits for
    the store (which hangs a store served from the same process, as `is_deltatable` does)."""

    def __init__(self, table: DeltaTable, uri: str) -> None:
        self.table = table
        if "://" in uri:
            self.fs, self.base = pafs.FileSystem.from_uri(uri)
        else:
            self.fs, self.base = pafs.LocalFileSystem(), str(Path(uri).resolve())
        actions = pa.table(table.get_add_actions(flatten=True))
        self.sizes: dict[str, int] = dict(
            zip(actions.column("path").to_pylist(), actions.column("size_bytes").to_pylist(), strict=True)
        )

    def batches(self, path: str, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """`path`'s rows in `schema`, a row group at a time (columns the file predates are null)."""
        with self.fs.open_input_file(f"{self.base}/{unquote(path)}") as stream:
            parquet = pq.ParquetFile(stream)
            present = [n for n in schema.names if n in set(parquet.schema_arrow.names)]
            for batch in parquet.iter_batches(batch_size=READ_ROWS, columns=present):
                yield conform(batch, schema)


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """The batch's columns by name in `schema`'s types; a column it lacks is null."""
    names = set(batch.schema.names)
    columns = [
        batch.column(f.name).cast(f.type) if f.name in names else pa.nulls(batch.num_rows, f.type)
        for f in schema
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _verdicts(m: KeyMatches, load: TableLoad, theirs: pa.Array | None, rows: pa.Array) -> tuple[Any, Any]:
    """(newer, as new) per matched row: the incoming row (`rows`: its positions) is newer than the table's
    (`theirs`: the table's times, aligned; a table row without a time loses to a timed one), or as new (both
    times equal or both missing; every row of a table without a time)."""
    if m.newest is None or theirs is None:
        return pa.array([False] * len(rows)), pa.array([True] * len(rows))
    mine = m.newest.take(rows)
    theirs = pc.cast(theirs, UTC_MICROS)
    newer = pc.or_(
        pc.fill_null(pc.greater(mine, theirs), False), pc.and_(pc.is_null(theirs), pc.is_valid(mine))
    )
    tie = pc.or_(pc.fill_null(pc.equal(mine, theirs), False), pc.and_(pc.is_null(theirs), pc.is_null(mine)))
    return newer, tie


def match(files: DataFiles, load: TableLoad, m: KeyMatches, grown: bool) -> None:
    """Which incoming keys the table has, and per data file which of its rows are replaced or tied. With columns
    the table lacks (`grown`), an as-new row replaces the table's: it fills them."""
    wanted = [*load.primary_key, *([load.newest_by] if load.newest_by else [])]
    schema = pa.schema([load.schema.field(name) for name in wanted])
    for path in files.sizes:
        for batch in files.batches(path, schema):
            pairs = matched_rows(batch, load, m.keys)
            if pairs is None:
                continue
            rows, in_batch = pairs
            hit_keys = m.keys.take(rows)
            theirs = batch.column(load.newest_by).take(in_batch) if load.newest_by else None
            newer, tie = _verdicts(m, load, theirs, rows)
            if grown or load.group_by:  # a child table's parent fetched as new is that fetch: its rows again
                newer, tie = pc.or_(newer, tie), pa.array([False] * len(rows))
            m.matched += len(rows)
            m.kept.append(m.keys.take(rows.filter(pc.invert(pc.or_(newer, tie)))))
            for verdict, into in ((newer, m.replaced), (tie, m.ties)):
                if pc.any(verdict).as_py():
                    into.setdefault(path, []).append(hit_keys.filter(verdict))


def _row_hashes(batches: Iterator[pa.RecordBatch], load: TableLoad, keys: pa.Array) -> pa.Table:
    """(`__key`, `__hash`) of the rows of `batches` whose key is one of `keys`: DuckDB's hash of all their
    columns, a batch at a time, so memory is 16 bytes and a key per row, not the rows."""
    found = []
    con = duckdb.connect()
    try:
        for batch in batches:
            names = key_strings(batch, load.primary_key)
            in_batch = rows_of_keys(names, keys).drop_null()
            if not len(in_batch):
                continue
            rows = batch.take(in_batch)
            columns = ", ".join('"' + n.replace('"', '""') + '"' for n in rows.schema.names)
            con.register("rows", rows)
            hashed = con.sql(f"SELECT hash({columns}) AS __hash FROM rows").to_arrow_table()
            con.unregister("rows")
            found.append(pa.table({"__key": names.take(in_batch), "__hash": hashed.column(0)}))
    finally:
        con.close()
    if not found:
        return pa.table({"__key": pa.array([], pa.large_string()), "__hash": pa.array([], pa.uint64())})
    return pa.concat_tables(found)


def settle_ties(files: DataFiles, load: TableLoad, m: KeyMatches, schema: pa.Schema) -> None:
    """As-new incoming rows replace the table's only when some column the two share differs; the others are
    kept. Both sides' tied rows are compared by a 64-bit hash of their columns in one schema (DuckDB's `hash`:
    lists, structs and timestamps hash as values, NULL as itself), streamed: a re-export of 1M rows the table
    already holds, all tied, held both sides' rows (1,502 MB; with hashes 608 MB)."""
    if not m.ties:
        return
    tied = pa.concat_arrays([a for arrays in m.ties.values() for a in arrays])
    common = pa.schema([f for f in schema if f.name in set(load.schema.names)])
    theirs = _row_hashes((b for path in m.ties for b in files.batches(path, common)), load, tied)
    mine = _row_hashes((conform(b, common) for b in load.open()), load, tied)
    both = mine.join(theirs, "__key", join_type="inner", right_suffix="_t")
    changed = both.filter(pc.not_equal(both["__hash"], both["__hash_t"])).column("__key").combine_chunks()
    for path, arrays in m.ties.items():
        keys = pa.concat_arrays(arrays)
        differ = batch_mask(len(keys), rows_of_keys(keys, changed).drop_null())
        if pc.any(differ).as_py():
            m.replaced.setdefault(path, []).append(keys.filter(differ))
        m.kept.append(keys.filter(pc.invert(differ)))
    m.ties.clear()


def merged_rows(files: DataFiles, load: TableLoad, m: KeyMatches, schema: pa.Schema) -> pa.RecordBatchReader:
    """The kept rows of every rewritten file, then the incoming rows that won, streamed in `schema`."""

    def batches() -> Iterator[pa.RecordBatch]:
        for path, arrays in m.replaced.items():
            gone = pa.concat_arrays(arrays)
            for batch in files.batches(path, schema):
                kept = without_rows_of(batch, load, gone)
                m.copied += kept.num_rows
                yield kept
        skip = pa.concat_arrays(m.kept) if m.kept else pa.array([], pa.large_string())
        for batch in load.open():
            written = conform(without_rows_of(batch, load, skip), schema)
            m.written += written.num_rows
            yield written

    return pa.RecordBatchReader.from_batches(schema, batches())


def write_files(
    rows: pa.RecordBatchReader, files: DataFiles, writer: WriterProperties, file_bytes: int
) -> list[AddAction]:
    """`rows` written by delta-rs into new files, moved to `harvest-<uuid>/` in the table; their add actions
    (delta-rs's statistics) with paths relative to the table. delta-rs writes them as a table of their own in a
    local temporary directory, whose log gives the actions and is then deleted: on object storage, a log written
    there could not be deleted without leaving a directory marker (pyarrow) or hanging an in-process store
    (delta-rs's filesystem handler)."""
    folder = f"{STAGING}{uuid.uuid4().hex}"
    staged = Path(tempfile.mkdtemp(prefix="harvest-delta-"))
    try:
        write_deltalake(staged, rows, mode="error", writer_properties=writer, target_file_size=file_bytes)
        lines = (staged / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
        adds = [action["add"] for action in map(json.loads, lines) if "add" in action]
        for add in adds:
            source, target = staged / unquote(add["path"]), f"{files.base}/{folder}/{unquote(add['path'])}"
            if isinstance(files.fs, pafs.LocalFileSystem):
                Path(target).parent.mkdir(exist_ok=True)
                shutil.move(source, target)
            else:
                pafs.copy_files(str(source), target, destination_filesystem=files.fs)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return [
        AddAction(
            f"{folder}/{a['path']}", a["size"], a["partitionValues"], a["modificationTime"], True, a["stats"]
        )
        for a in adds
    ]


def commit(files: DataFiles, added: list[AddAction], removed: list[str], meta: dict[str, str]) -> None:
    """One version removing the rewritten files and adding the new ones; any commit since the table was read
    fails it (`CommitFailedError`), to be merged again."""
    now = int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = [*added]
    actions += [RemoveAction(path, True, now, files.sizes[path], {}) for path in removed]
    files.table.create_write_transaction(
        actions, "append", files.table.schema(),
        commit_properties=CommitProperties(custom_metadata=meta, max_commit_retries=0),
    )  # fmt: skip
