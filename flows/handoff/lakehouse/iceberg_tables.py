"""Iceberg tables merged on the primary key: `harvest export --format iceberg`.

A merge is one snapshot in one catalog commit, with the schema change it needs in the same commit. Not
`Table.upsert`: it holds the incoming rows and the table's matching rows in memory and joins them in Python
(slow at scale, apache/iceberg-python #2159), and compares whole rows rather than `_fetched_at`. Instead:

1. the incoming rows are read once for their keys and `_fetched_at` (memory: the keys, not the rows);
2. the table's key and `_fetched_at` columns are read file by file (a projection: the other columns are not
   read) and matched: an incoming row beats the table's when its `_fetched_at` is at least the table's
   (bookkeeping tables: always), so an older export never overwrites newer rows;
3. only the data files holding replaced rows are rewritten without them (copy-on-write: pyiceberg writes no
   delete files), streamed with the incoming rows that won into new files (`iceberg_files.py`);
4. one overwrite snapshot deletes the old files and adds the new ones (an append snapshot when nothing was
   replaced), validated by pyiceberg against commits that landed meanwhile (serializable: another writer's
   new files make it fail rather than duplicate a key).

A commit that collides with another export is tried again from step 1 against the new table, up to
`ATTEMPTS` times; then the merge fails naming the table, which is left as the other writer made it. Tables are
unpartitioned: harvest's keys are ids without an order a partition could follow, so a partition would not
keep a rerun's rows together; files are rolled small instead (`iceberg_files.ROLL_BYTES`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NoSuchTableError,
    TableAlreadyExistsError,
    ValidationException,
)
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.table import DataScan, FileScanTask, Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _OverwriteFiles

from harvest.connectors.retries import Backoff, retried
from harvest.flows.handoff.lakehouse.iceberg_catalog import (
    CATALOG_ENV,
    NAMESPACE_ENV,
    describe,
    elsewhere,
    namespace,
    open_catalog,
)
from harvest.flows.handoff.lakehouse.iceberg_files import DataFileWriter, read_batches
from harvest.flows.handoff.lakehouse.table_format import (
    UTC_MICROS,
    KeyMatches,
    MergeResult,
    TableLoad,
    matched_rows,
    say_kept_types,
    without_rows_of,
)
from harvest.flows.spec import UsageError
from harvest.tasks.output.layout import OutputLayout

log = logging.getLogger(__name__)
ATTEMPTS = 3
"""Whole merges tried against a table another export keeps changing (pyiceberg retries each commit too)."""


class IcebergCommitConflict(RuntimeError):
    """Other exports kept committing to the table: this merge gave up, leaving the table as they made it."""


def iceberg_arrow_schema(schema: pa.Schema, key: tuple[str, ...]) -> pa.Schema:
    """`schema` as Iceberg takes it: timestamps with a zone become `timestamptz` in microseconds (Iceberg's only
    zone is UTC; DuckDB hands over its session's zone), key columns required (the table's identifier)."""
    fields = []
    for f in schema:
        kind = f.type
        if pa.types.is_timestamp(kind):
            kind = UTC_MICROS if kind.tz else pa.timestamp("us")
        fields.append(pa.field(f.name, kind, nullable=f.name not in key, metadata=f.metadata))
    return pa.schema(fields)


def table_target(table_schema: Schema, load: TableLoad) -> tuple[pa.Schema, list[str]]:
    """What the load writes into an existing table: the catalog's schema, but a column the table has in another
    type keeps the table's (Iceberg changes no column's type in place: a table an older catalog made keeps a
    published time as text, a price as a double), the incoming values cast to it, as the Delta export does.
    Returns the schema and the columns kept in the table's type."""
    target = iceberg_arrow_schema(load.schema, load.primary_key)
    wanted = {f.name: f.field_type for f in Catalog._convert_schema_if_needed(target).fields}
    have = {f.name: f for f in table_schema.fields}
    older = [n for n in target.names if n in have and str(have[n].field_type) != str(wanted[n])]  # ids aside
    if not older:
        return target, []
    fields = [
        f.with_type(schema_to_pyarrow(Schema(have[f.name])).field(0).type) if f.name in older else f
        for f in target
    ]
    return pa.schema(fields), older


def _keyed_schema(load: TableLoad) -> Schema:
    """The table's first schema, its primary key as Iceberg's identifier fields (engines that upsert read it)."""
    schema = assign_fresh_schema_ids(
        Catalog._convert_schema_if_needed(iceberg_arrow_schema(load.schema, load.primary_key))
    )
    ids = [schema.find_field(k).field_id for k in load.primary_key]
    return Schema(*schema.fields, identifier_field_ids=ids)


def _incoming_wins(incoming: pa.Array, table: pa.Array) -> pa.Array:
    """Newest wins, a tie to the incoming row (the same fetch again, perhaps read by a newer catalog); a table's
    row without a time loses, an incoming row without one loses to a timed row."""
    at_least = pc.fill_null(pc.greater_equal(incoming, table), False)
    return pc.or_(at_least, pc.is_null(table))


def _match(
    metadata: TableMetadata, io: FileIO, tasks: list[FileScanTask], load: TableLoad, inc: KeyMatches
) -> None:
    """Which incoming rows the table has, which of them the table's newer rows beat, and which of the table's
    rows are replaced (by file)."""
    columns = [*load.primary_key, *([load.newest_by] if load.newest_by else [])]
    projection = metadata.schema().select(*columns)
    for task in tasks:
        for batch in read_batches(metadata, io, task, projection):
            pairs = matched_rows(batch, load, inc.keys)
            if pairs is None:
                continue
            rows, in_batch = pairs
            if inc.newest is not None and load.newest_by:
                table_stamps = pc.cast(batch.column(load.newest_by).take(in_batch), UTC_MICROS)
                wins = _incoming_wins(inc.newest.take(rows), table_stamps)
            else:
                wins = pa.array([True] * len(rows))
            inc.matched += len(rows)
            inc.kept.append(inc.keys.take(rows.filter(pc.invert(wins))))
            if pc.any(wins).as_py():
                inc.replaced.setdefault(task.file.file_path, []).append(inc.keys.take(rows.filter(wins)))


@dataclass
class Written:
    deleted: list[DataFile]
    added: list[DataFile]


def _write(
    metadata: TableMetadata,
    io: FileIO,
    tasks: list[FileScanTask],
    load: TableLoad,
    inc: KeyMatches,
    target: pa.Schema,
) -> Written:
    """The kept rows of each file with replaced rows, then the incoming rows that won (cast to `target`, the
    table's `table_target`), into new files."""
    writer = DataFileWriter(metadata, io)
    deleted = []
    for task in tasks:
        if task.file.file_path not in inc.replaced:
            continue
        gone = pa.concat_arrays(inc.replaced[task.file.file_path])
        for batch in read_batches(metadata, io, task, metadata.schema()):
            writer.write(without_rows_of(batch, load, gone))
        deleted.append(task.file)
    skip = pa.concat_arrays(inc.kept) if inc.kept else pa.array([], pa.large_string())
    reader = load.open()
    for batch in reader:
        written = without_rows_of(batch.cast(target), load, skip)
        inc.written += written.num_rows
        writer.write(written)
    return Written(deleted, writer.close())


def _evolve(tx: Transaction, target: pa.Schema) -> list[str]:
    """Columns the catalog gained since the table was made (`target`: the table's `table_target`), added (their
    values null in older rows)."""
    have = set(tx.table_metadata.schema().column_names)
    added = [name for name in target.names if name not in have]
    if added:
        with tx.update_schema() as update:
            update.union_by_name(target)
    return added


def _commit_files(tx: Transaction, io: FileIO, written: Written, load: TableLoad) -> None:
    """One snapshot: an overwrite when rows were replaced, else an append; validated either way, so a key
    another writer added meanwhile fails this commit instead of landing twice."""
    if not written.deleted and not written.added:
        return
    summary = {"harvest.table": load.name, "harvest.runs": str(len(load.runs))}
    if load.runs:
        summary["harvest.last-run"] = max(load.runs)
    operation = Operation.OVERWRITE if written.deleted else Operation.APPEND
    with _OverwriteFiles(operation, tx, io, snapshot_properties=summary) as snapshot:
        for old in written.deleted:
            snapshot.delete_data_file(old)
        for new in written.added:
            snapshot.append_data_file(new)


class IcebergFormat:
    """Iceberg tables at `destination`, one per record kind, in a catalog (`iceberg_catalog.py`)."""

    name = "iceberg"

    def __init__(self, destination: str, layout: OutputLayout) -> None:
        self.destination = destination
        self.catalog: Catalog = open_catalog(destination, layout)
        self.namespace = namespace()
        self.catalog.create_namespace_if_not_exists(self.namespace)
        if (found := elsewhere(self.catalog, self.namespace, destination)) is not None:
            self.close()
            raise UsageError(
                f"{found}, not under --to {destination}: merged, this export's rows would land there. Give --to "
                f"that warehouse, or another namespace ({NAMESPACE_ENV}) or catalog ({CATALOG_ENV}) for {destination}"
            )

    def merge(self, load: TableLoad) -> MergeResult:
        try:
            return retried(Backoff(ATTEMPTS), _conflict, lambda: self._merge_once(self._table(load), load))
        except (CommitFailedException, ValidationException) as conflict:
            raise IcebergCommitConflict(
                f"{self.namespace}.{load.name} in {describe(self.catalog)}: other writers committed to it "
                f"{ATTEMPTS} times while this export merged ({type(conflict).__name__}); the table is as they "
                "left it; run the export again"
            ) from conflict

    def _merge_once(self, table: Table, load: TableLoad) -> MergeResult:
        tx = table.transaction()
        target, kept = table_target(tx.table_metadata.schema(), load)  # `_evolve` adds; it changes no type
        say_kept_types(log, "Iceberg", load.name, kept)
        result = MergeResult(load.name, columns_added=_evolve(tx, target))
        metadata = tx.table_metadata
        tasks = list(DataScan(table_metadata=metadata, io=table.io).plan_files())
        inc = KeyMatches.of(load)
        _match(metadata, table.io, tasks, load, inc)
        written = _write(metadata, table.io, tasks, load, inc, target)
        _commit_files(tx, table.io, written, load)
        committed = tx.commit_transaction()
        result.rows_in = len(inc.keys)
        result.inserted = len(inc.keys) - inc.matched
        result.updated = inc.updated
        if load.group_by:
            result.count_child_rows(inc)
        snapshot = committed.current_snapshot()
        result.version = str(snapshot.snapshot_id) if snapshot else ""
        return result

    def _table(self, load: TableLoad) -> Table:
        """The load's table, made from its schema when missing (another export making it meanwhile is fine)."""
        identifier = (self.namespace, load.name)
        try:
            return self.catalog.load_table(identifier)
        except NoSuchTableError:
            pass
        properties = {
            "harvest.primary-key": ",".join(load.primary_key),
            "harvest.newest-by": load.newest_by or "",
        }
        try:
            return self.catalog.create_table(identifier, schema=_keyed_schema(load), properties=properties)
        except TableAlreadyExistsError:
            return self.catalog.load_table(identifier)

    def holds_runs(self) -> bool:
        return bool(self.catalog.table_exists((self.namespace, "runs")))

    def close(self) -> None:
        if isinstance(self.catalog, SqlCatalog):
            self.catalog.engine.dispose()


def _conflict(exc: Exception) -> bool:
    """Another writer committed first: the merge is run again on the table as it is now."""
    return isinstance(exc, (CommitFailedException, ValidationException))
