"""Delta Lake tables through delta-rs (`deltalake`): one table per record kind at `<destination>/<table>`, and
harvest's `runs` and `query_state` beside them under the names they have in DuckDB.

A table is created by its first export (a streamed write) and merged into afterwards, on the primary key, in
one commit: by copy-on-write of only the files holding keys it replaces (`delta_merge.py`: the table's key and
`_fetched_at` columns are matched file by file, so memory is the incoming keys and a row group, however large
the table; delta-rs's own MERGE held the whole table, ~1 GB for 1M rows). New keys are new files, and an
unchanged re-merge writes nothing. A matched row is replaced only when the incoming one is newer, or as new but
different (a rebuild read it again): re-merging what the table has is no rewrite and no new version. Columns the
catalog gained are added first (a schema-only version). A table another engine gave features the copy-on-write
merge cannot read (deletion vectors, column mapping, partitions) is merged by delta-rs's MERGE (`streamed_exec`,
`merge_schema`).

Commits are conditional writes of the next log entry (S3's `If-None-Match`, a rename elsewhere): two writers at
once never both win, and a copy-on-write merge fails on any version committed since it read the table. The
loser's merge is run again on the new version (newest-wins makes that right), a few
times, then it fails with a clear error; the table is never left half-written.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from urllib.parse import urlsplit

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, WriterProperties, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError
from deltalake.schema import Schema as DeltaSchema

from harvest.connectors.retries import Backoff, retried
from harvest.flows.handoff.lakehouse.delta_merge import (
    DataFiles,
    commit,
    copy_on_write_fits,
    match,
    merged_rows,
    settle_ties,
    write_files,
)
from harvest.flows.handoff.lakehouse.table_format import (
    UTC_MICROS,
    KeyMatches,
    MergeResult,
    TableLoad,
    say_kept_types,
)
from harvest.tasks.output.layout import OutputLayout

log = logging.getLogger(__name__)
COMMIT_ATTEMPTS = 4
"""A merge that lost its commit to another writer is run again on the new version, at most this often (0.2 s,
then twice as long each time)."""
TARGET_FILE_BYTES = 8 * 1024 * 1024
"""Data files of about 8 MB (the table's `delta.targetFileSize`): a merge that updates a key rewrites the whole
file holding it (measured with delta-rs's MERGE; the copy-on-write merge rewrites the same files). 1M bench rows
with 1,000 recent keys fetched again: in one 36 MB file the merge copied 999,000 rows; in 4 MB files it rewrote
one file of 22 (31,320 rows), with the same time and memory (docs/performance.md)."""
WRITER = WriterProperties(compression="ZSTD", max_row_group_size=16_384)
"""Row groups of the load's size (`tasks.database.load_settings`): a reader decodes a group at a time."""


class ConcurrentWriters(RuntimeError):
    """Another writer kept committing to the table first: nothing of this merge is in it."""


def storage_options(destination: str) -> dict[str, str] | None:
    """What delta-rs needs beyond the standard variables it reads itself (AWS_*, GOOGLE_*): a plain-HTTP
    endpoint (MinIO, moto) is allowed when the user named one in AWS_ENDPOINT_URL, as pyarrow allows it for the
    Parquet export."""
    import os

    if urlsplit(destination).scheme != "s3":
        return None
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or ""
    return {"allow_http": "true"} if endpoint.startswith("http://") else None


def _peek(reader: pa.RecordBatchReader) -> pa.RecordBatchReader | None:
    """The same rows, or None when there are none (no commit for an empty load)."""
    for batch in reader:
        if batch.num_rows:

            def rest(first: pa.RecordBatch = batch) -> Iterator[pa.RecordBatch]:
                yield first
                yield from reader

            return pa.RecordBatchReader.from_batches(reader.schema, rest())
    return None


def _say_older_types(table: DeltaTable, load: TableLoad) -> None:
    """A column the table has in another type than the catalog's keeps the table's (rows are cast to it: Delta
    changes no column's type in place), said once per merge: a table an older catalog made."""
    have = {f.name: str(f.type) for f in table.schema().fields}
    arrow = [pa.field(f.name, UTC_MICROS if pa.types.is_timestamp(f.type) else f.type) for f in load.schema]
    wanted = DeltaSchema.from_arrow(pa.schema(arrow)).fields  # DuckDB's zone ("Etc/UTC") is Delta's UTC
    older = [f.name for f in wanted if f.name in have and have[f.name] != str(f.type)]
    say_kept_types(log, "Delta", load.name, older)


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _matched_predicate(load: TableLoad, table_columns: set[str]) -> str | None:
    """When a table's row for a key is replaced: the incoming row is newer, or as new and different. A column
    the table lacks makes every as-new row different (it fills the new column)."""
    common = [f.name for f in load.schema if f.name in table_columns]
    differs = " OR ".join(f"(s.{_ident(c)} IS DISTINCT FROM t.{_ident(c)})" for c in common)
    grown = any(f.name not in table_columns for f in load.schema)
    if load.newest_by is None:
        return None if grown else differs
    newest = _ident(load.newest_by)
    if grown:
        return f"s.{newest} >= t.{newest}"
    return f"s.{newest} > t.{newest} OR (s.{newest} = t.{newest} AND ({differs}))"


class DeltaFormat:
    """Delta tables under one destination (a directory, `s3://`, `gs://`)."""

    name = "delta"

    def __init__(self, destination: str, layout: OutputLayout | None = None) -> None:
        self.destination = destination.rstrip("/")
        self.options = storage_options(destination)

    def uri(self, table: str) -> str:
        return f"{self.destination}/{table}"

    def merge(self, load: TableLoad) -> MergeResult:
        lost = Backoff(attempts=COMMIT_ATTEMPTS, initial=0.2, max_wait=0.2 * 2 ** (COMMIT_ATTEMPTS - 2))
        try:
            return retried(lost, _lost_commit, lambda: self._merge_once(load))
        except CommitFailedError as exc:
            raise ConcurrentWriters(
                f"{self.uri(load.name)}: another writer committed first {COMMIT_ATTEMPTS} times ({exc}); "
                "this merge is not in the table: run the export again"
            ) from exc

    def holds_runs(self) -> bool:
        return self._open(self.uri("runs")) is not None

    def close(self) -> None:
        """Nothing held open: every merge opens its table at the newest version."""

    def _commit(self, load: TableLoad, operation: str) -> CommitProperties:
        """Which harvest runs a version holds, readable in the table's history (`DeltaTable.history()`)."""
        meta = {
            "harvest.table": load.name,
            "harvest.operation": operation,
            "harvest.runs": ",".join(load.runs),
        }
        return CommitProperties(custom_metadata=meta)

    def _open(self, uri: str) -> DeltaTable | None:
        """The table at its newest version, or None when there is none yet. (Not `is_deltatable`: it holds the
        GIL while it waits for the store, which starves a store served from the same process.)"""
        try:
            return DeltaTable(uri, storage_options=self.options)
        except TableNotFoundError:
            return None

    def _merge_once(self, load: TableLoad) -> MergeResult:
        uri = self.uri(load.name)
        table = self._open(uri)
        if table is None:
            return self._create(uri, load, _peek(load.open()), MergeResult(load.name))
        if copy_on_write_fits(table):
            return self._copy_on_write(uri, table, load)
        return self._delta_rs_merge(table, load)

    def _copy_on_write(self, uri: str, table: DeltaTable, load: TableLoad) -> MergeResult:
        """Only the files holding replaced rows rewritten, in one commit (`delta_merge.py`)."""
        result = MergeResult(load.name, version=str(table.version()))
        found = KeyMatches.of(load)
        if len(found.keys) == 0:
            return result
        have = set(pa.schema(table.schema().to_arrow()).names)
        grown = [f for f in load.schema if f.name not in have]
        if grown:  # a schema-only version first: delta-rs commits a schema change only with its own writes
            fields = DeltaSchema.from_arrow(pa.schema(grown)).fields
            table.alter.add_columns(fields, commit_properties=self._commit(load, "add columns"))
            table = DeltaTable(uri, storage_options=self.options)
        files = DataFiles(table, uri)
        schema = pa.schema(table.schema().to_arrow())
        _say_older_types(table, load)
        match(files, load, found, grown=bool(grown))
        settle_ties(files, load, found, schema)
        result.rows_in = len(found.keys)
        result.inserted = len(found.keys) - found.matched
        result.updated = found.updated
        result.columns_added = [f.name for f in grown]
        result.version = str(table.version())
        if load.group_by:  # a child table: counted in rows once written, not in parents
            result.rows_in = result.inserted = result.updated = 0
            kept = set(pa.concat_arrays(found.kept).to_pylist()) if found.kept else set()
            if not found.replaced and len(kept) == len(found.keys):
                return result
        elif result.inserted + result.updated == 0:
            return result
        rows = merged_rows(files, load, found, schema)
        added = write_files(rows, files, WRITER, TARGET_FILE_BYTES)
        if load.group_by:
            result.count_child_rows(found)
        meta = self._commit(load, "merge").custom_metadata or {}
        meta |= {"harvest.files_added": str(len(added)), "harvest.files_removed": str(len(found.replaced)),
                 "harvest.rows_copied": str(found.copied)}  # fmt: skip
        commit(files, added, list(found.replaced), meta)
        result.version = str(table.version() + 1)
        return result

    def _delta_rs_merge(self, table: DeltaTable, load: TableLoad) -> MergeResult:
        """delta-rs's MERGE, for a table another engine gave features the copy-on-write merge cannot read:
        it reads the whole table (its memory grows with it)."""
        if load.group_by:
            raise ValueError(
                f"{load.name} is a child table, and its Delta table has features (deletion vectors, column "
                "mapping, partitions, ...) harvest's merge cannot rewrite; its parents' rows cannot be replaced "
                "without them: export it to a table harvest made"
            )
        source = _peek(load.open())
        result = MergeResult(load.name, version=str(table.version()))
        if source is None:
            return result
        before = set(table.schema().to_arrow().names)
        merger = table.merge(
            source, " AND ".join(f"t.{_ident(k)} = s.{_ident(k)}" for k in load.primary_key),
            source_alias="s", target_alias="t", merge_schema=True, streamed_exec=True,
            writer_properties=WRITER, commit_properties=self._commit(load, "merge"),
        )  # fmt: skip
        metrics = (
            merger.when_matched_update_all(predicate=_matched_predicate(load, before))
            .when_not_matched_insert_all()
            .execute()
        )
        result.rows_in = int(metrics["num_source_rows"])
        result.inserted = int(metrics["num_target_rows_inserted"])
        result.updated = int(metrics["num_target_rows_updated"])
        result.columns_added = [f.name for f in load.schema if f.name not in before]
        result.version = str(table.version())
        return result

    def _create(
        self, uri: str, load: TableLoad, source: pa.RecordBatchReader | None, result: MergeResult
    ) -> MergeResult:
        """The table's first version: the rows streamed into new files (an empty load makes an empty table, so
        a reader finds every table the export named). Another writer creating it first fails this commit, and
        the retry merges instead."""
        counted = 0

        def batches() -> Iterator[pa.RecordBatch]:
            nonlocal counted
            for batch in source if source is not None else ():
                counted += batch.num_rows
                yield batch

        try:
            write_deltalake(
                uri, pa.RecordBatchReader.from_batches(load.schema, batches()), mode="error",
                storage_options=self.options, writer_properties=WRITER, target_file_size=TARGET_FILE_BYTES,
                commit_properties=self._commit(load, "create"),
                configuration={"delta.targetFileSize": str(TARGET_FILE_BYTES)},
            )  # fmt: skip
        except Exception as exc:
            if self._open(uri) is not None:  # created meanwhile by another writer: merge into it
                raise CommitFailedError(f"{uri} was created by another writer meanwhile") from exc
            raise
        result.rows_in = result.inserted = counted
        result.version = str(DeltaTable(uri, storage_options=self.options).version())
        return result


def _lost_commit(exc: Exception) -> bool:
    return isinstance(exc, CommitFailedError)
