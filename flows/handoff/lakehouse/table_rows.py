"""What a lakehouse export hands a table format: the due runs' Parquet, one row per key, streamed.

DuckDB reads the runs' files (union by name: files landed under an older catalog lack its newer columns) and
keeps the newest row of each key, the same rule the DuckDB load applies (`NEWEST_ORDER`); it spills to disk past its memory
limit, so a table of any size streams through a few Arrow batches. Rows are cast to the catalog's schema (what
`harvest rebuild` would write today), so the exported table grows with the catalog, not with whichever file
came first; a column an older catalog typed otherwise (a published time as text) is cast value by value,
and what does not convert is NULL, as the DuckDB load does. Rows without a full primary key cannot be merged
and are left out (counted, as the load does).
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from harvest.connectors.catalog.child_kinds import ChildKind
from harvest.flows.handoff.lakehouse.table_format import TableLoad
from harvest.tasks.database.connection import (
    NEWEST_IN_FILES,
    ROW_NUMBER,
    has_table,
    quote_ident,
    quote_literal,
    whole_key,
)
from harvest.tasks.database.load_settings import memory_limit
from harvest.tasks.database.record_tables import duckdb_types
from harvest.tasks.database.step_files import SameSchema, one_schema, union_by_name
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import RunManifest, output_kinds

BATCH_ROWS = 16_384
"""Rows per Arrow batch handed to a format: memory stays at a few batches whatever the table's size (a record
carries its `raw` JSON: 16k rows of 1 KB are 16 MB)."""
BUCKET_ROWS = 500_000
"""Rows per newest-per-key step: past it, the files are read once per bucket of keys (a hash of the key), so
DuckDB's window never holds much more than this many rows. One window over 3M rows of harvest's Parquet ran out
of the load's default 64 MB memory limit ("failed to pin block"); over 1M it did not (221 MB RSS)."""
NEWEST_BY = "_fetched_at"
BOOKKEEPING_KEYS: dict[str, tuple[str, ...]] = {"runs": ("run_id",), "query_state": ("run_id", "query_id")}
"""Harvest's own tables that travel with the records: merged on their key, harvest's latest state wins."""


@contextmanager
def one_database() -> Iterator[duckdb.DuckDBPyConnection]:
    """One DuckDB database for every table an export reads, each reader on a cursor of its own: starting a
    database costs ~0.05 s of CPU, paid per table (twice for a child table) it was most of the time of an export
    of many small tables (the demo's 161). It spills past its memory limit into a folder of the system's
    temporary folder: named, not made (DuckDB makes it only when it spills), removed with the database when the
    export ends however."""
    spill = Path(tempfile.gettempdir()) / f"harvest-export-{uuid.uuid4().hex}"
    con = duckdb.connect(
        config={
            "memory_limit": memory_limit(),
            "temp_directory": str(spill),
            "preserve_insertion_order": False,
        }
    )
    try:
        yield con
    finally:
        con.close()
        shutil.rmtree(spill, ignore_errors=True)


def _file_facts(paths: Sequence[Path]) -> tuple[dict[str, set[pa.DataType]], int, bool]:
    """The columns any of the files has with their types, their rows, and whether they share one schema (from
    the footers: no data is read)."""
    types: dict[str, set[pa.DataType]] = {}
    rows = 0
    same = SameSchema()
    for path in paths:
        meta = pq.read_metadata(path)
        for fld in meta.schema.to_arrow_schema():
            types.setdefault(fld.name, set()).add(fld.type)
        rows += meta.num_rows
        same.see(meta)
    return types, rows, same.holds


def _column(fld: pa.Field, found: set[pa.DataType] | None, sql_type: str, of: str = "") -> str:
    """How a column is read (`of`: the relation's alias and a dot): as it is, NULL where no file has it, or cast
    value by value where a file an older catalog wrote types it otherwise (a published time as text): what does
    not convert is NULL, as at the load."""
    name = quote_ident(fld.name)
    if not found:
        return f"NULL AS {name}"
    return of + name if found == {fld.type} else f"TRY_CAST({of}{name} AS {sql_type}) AS {name}"


def record_reader(
    paths: Sequence[Path],
    schema: pa.Schema,
    key: tuple[str, ...],
    db: duckdb.DuckDBPyConnection,
) -> pa.RecordBatchReader:
    """The newest row per key of `paths` (`NEWEST_IN_FILES`, the load's choice: of a page holding a key twice, the
    later row), in `schema` (a column no file has is null), a bucket of keys at a time;
    read on a cursor of `db` (`one_database`), closed at the end of the stream."""
    con = db.cursor()
    present, rows, one = _file_facts(paths)
    buckets = max(1, -(-rows // BUCKET_ROWS))
    ordered = sorted(paths, key=str)  # as the load has them: `file_index` is a file's place in name order
    files = "[" + ", ".join(quote_literal(str(p)) for p in ordered) + "]"
    sql_types = dict(duckdb_types(con, schema))
    columns = ", ".join(_column(f, present.get(f.name), sql_types[f.name]) for f in schema)
    keys = ", ".join(quote_ident(k) for k in key)
    not_null = whole_key([quote_ident(k) for k in key])
    in_bucket = f" AND hash({keys}) % {buckets} = {{bucket}}" if buckets > 1 else ""
    source = f"read_parquet({files}, union_by_name = {union_by_name(one)}, {ROW_NUMBER} = true)"
    rows_of = f"WHERE {not_null}{in_bucket}"
    # The newest row of each key is chosen on narrow rows and the whole rows read after it, as the load does
    # (`record_tables._choose_newest`): DuckDB 2.0 reads late only a window ordered by one column; ordered by
    # three (`NEWEST_IN_FILES`) it sorted whole rows and ran out of the 64 MB cap at 150k rows.
    sql = (
        f"WITH newest AS (SELECT file_index, {ROW_NUMBER} FROM {source} {rows_of} "
        f"QUALIFY row_number() OVER (PARTITION BY {keys} ORDER BY {NEWEST_IN_FILES}) = 1) "
        f"SELECT {columns} FROM {source} SEMI JOIN newest USING (file_index, {ROW_NUMBER}) {rows_of}"
    )
    first = con.sql(sql.format(bucket=0)).to_arrow_reader(BATCH_ROWS)

    def batches() -> Iterator[pa.RecordBatch]:
        yield from first
        for bucket in range(1, buckets):
            yield from con.sql(sql.format(bucket=bucket)).to_arrow_reader(BATCH_ROWS)

    return _cast(con, pa.RecordBatchReader.from_batches(first.schema, batches()), schema)


def _cast(
    con: duckdb.DuckDBPyConnection, reader: pa.RecordBatchReader, schema: pa.Schema
) -> pa.RecordBatchReader:
    """DuckDB's Arrow types cast to the catalog's (e.g. its timestamps and strings), the connection (a reader's
    cursor or a database of its own) closed at the end of the stream, however it ends."""

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            for batch in reader:
                yield batch.cast(schema)
        finally:
            con.close()

    return pa.RecordBatchReader.from_batches(schema, batches())


def _parents_sql(child: ChildKind, parent_files: Sequence[Path]) -> str:
    """The newest fetch of each parent in `parent_files`, its key named as the child table names it."""
    files = "[" + ", ".join(quote_literal(str(p)) for p in parent_files) + "]"
    keys = [quote_ident(f.name) for f in child.parent_key]
    named = ", ".join(f"{k} AS {quote_ident(c)}" for k, c in zip(keys, child.parent_columns, strict=True))
    return (
        f"SELECT {named}, {quote_ident(NEWEST_BY)} "
        f"FROM read_parquet({files}, union_by_name = {union_by_name(one_schema(parent_files))}) "
        f"WHERE {whole_key(keys)} "
        f"QUALIFY row_number() OVER (PARTITION BY {', '.join(keys)} ORDER BY {quote_ident(NEWEST_BY)} DESC) = 1"
    )


def child_reader(
    child: ChildKind,
    files: Sequence[Path],
    parent_files: Sequence[Path],
    groups: bool,
    db: duckdb.DuckDBPyConnection,
) -> pa.RecordBatchReader:
    """A child table's rows of its parents' newest fetches in the due runs (`groups`: the parents themselves,
    those whose list was empty too), in the catalog's schema; read on a cursor of `db` (`one_database`)."""
    if not groups and not files:
        return pa.RecordBatchReader.from_batches(child.schema, iter(()))
    con = db.cursor()
    parents = _parents_sql(child, parent_files)
    if groups:
        schema = pa.schema([child.schema.field(c) for c in (*child.parent_columns, NEWEST_BY)])
        return _cast(con, con.sql(parents).to_arrow_reader(BATCH_ROWS), schema)
    present, _, one = _file_facts(files)
    sql_types = dict(duckdb_types(con, child.schema))
    columns = ", ".join(_column(f, present.get(f.name), sql_types[f.name], "c.") for f in child.schema)
    listed = "[" + ", ".join(quote_literal(str(p)) for p in files) + "]"
    same = " AND ".join(
        f"c.{quote_ident(k)} = p.{quote_ident(k)}" for k in (*child.parent_columns, NEWEST_BY)
    )
    item = ", ".join(f"c.{quote_ident(k)}" for k in child.primary_key)
    source = f"read_parquet({listed}, union_by_name = {union_by_name(one)}, {ROW_NUMBER} = true) AS c"
    # chosen on narrow rows, read whole after (as `record_reader`): a window over whole rows ran out of the cap
    sql = (
        f"WITH chosen AS (SELECT c.file_index, c.{ROW_NUMBER} FROM {source} "
        f"SEMI JOIN ({parents}) AS p ON {same} QUALIFY row_number() OVER (PARTITION BY {item}) = 1) "
        f"SELECT {columns} FROM {source} SEMI JOIN chosen USING (file_index, {ROW_NUMBER})"
    )
    return _cast(con, con.sql(sql).to_arrow_reader(BATCH_ROWS), child.schema)


def _child_load(
    child: ChildKind,
    files: tuple[Path, ...],
    parent_files: tuple[Path, ...],
    runs: tuple[str, ...],
    db: duckdb.DuckDBPyConnection,
) -> TableLoad:
    def rows() -> pa.RecordBatchReader:
        return child_reader(child, files, parent_files, groups=False, db=db)

    def groups() -> pa.RecordBatchReader:
        return child_reader(child, files, parent_files, groups=True, db=db)

    return TableLoad(
        child.table, child.primary_key, child.schema, rows, NEWEST_BY, runs, child.parent_columns, groups
    )


def record_loads(
    layout: OutputLayout, runs: Sequence[RunManifest], db: duckdb.DuckDBPyConnection
) -> list[TableLoad]:
    """One load per record table the runs landed rows in, in table order; and one per child table of those,
    whether its items landed or not (a parent fetched again with an empty list empties its rows). Each reads on
    a cursor of `db` (`one_database`)."""
    kinds = output_kinds(layout, *runs)
    paths: dict[str, list[Path]] = {}
    for run in runs:
        for table, found in run.files_by_table(layout).items():
            paths.setdefault(table, []).extend(p for p in found if p.exists())
    ids = tuple(r.run_id for r in runs)
    children = {
        c.table: c
        for t, found in paths.items()
        if found and t in kinds
        for c in getattr(kinds[t], "children", ())
    }
    loads = [
        _child_load(c, tuple(paths.get(c.table, ())), tuple(paths[c.parent]), ids, db)
        for c in children.values()
    ]
    for table in sorted(t for t, found in paths.items() if found and t in kinds and t not in children):
        kind = kinds[table]
        files = tuple(paths[table])

        def open_(files: tuple[Path, ...] = files, kind_schema: pa.Schema = kind.schema,
                  key: tuple[str, ...] = kind.primary_key) -> pa.RecordBatchReader:  # fmt: skip
            return record_reader(files, kind_schema, key, db)

        loads.append(TableLoad(table, kind.primary_key, kind.schema, open_, NEWEST_BY, ids))
    return sorted(loads, key=lambda load: load.name)


def bookkeeping_loads(layout: OutputLayout, runs: Sequence[RunManifest]) -> list[TableLoad]:
    """`runs` and `query_state` rows of the due runs, from the job's DuckDB file (read-only)."""
    if not layout.db.exists() or not runs:
        return []
    ids = [r.run_id for r in runs]
    loads = []
    con = duckdb.connect(str(layout.db), read_only=True)
    try:
        for table, key in BOOKKEEPING_KEYS.items():
            if not has_table(con, table):
                continue
            schema = con.sql(f"FROM {quote_ident(table)} LIMIT 0").arrow().schema

            def open_(table: str = table, schema: pa.Schema = schema) -> pa.RecordBatchReader:
                reader_con = duckdb.connect(str(layout.db), read_only=True)
                wanted = ", ".join(quote_literal(i) for i in ids)
                rel = reader_con.sql(f"FROM {quote_ident(table)} WHERE run_id IN ({wanted})")
                return _cast(reader_con, rel.to_arrow_reader(BATCH_ROWS), schema)

            loads.append(TableLoad(table, key, schema, open_, None, tuple(ids)))
    finally:
        con.close()
    return loads
