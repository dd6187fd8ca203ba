"""Record tables: a run's Parquet files merged into DuckDB on each kind's primary key.

Merge rule: the newest fetch of a key wins. Within a batch only the row with the latest ``_fetched_at`` per
primary key is kept (of a page holding a key twice, the later row: `connection.NEWEST_ORDER`); against the
table, a row is replaced only by a fetch at least as new, so a rerun never duplicates rows and reloading an old
run never overwrites newer data. Rows whose primary key is NULL cannot be
merged and are skipped; their count is reported in `LoadResult.skipped_null_pk` and logged.

Each step (up to 250k rows of one table, see `step_files.CHUNK_ROWS`) is its own transaction: the newest-row sort and the
insert's join grow with the rows of a step, so one step for a whole run would grow with the run (1M-row steps
ran out of a 64 MB limit). A load that fails half-way is still safe: the merge rule makes every step idempotent,
and the run counts as loaded only when its bookkeeping rows are written, in the final transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path

import duckdb
import pyarrow as pa

from harvest.connectors.catalog.child_kinds import ChildKind
from harvest.connectors.catalog.declarations import POSITION
from harvest.tasks.database import replaced_fetches as replaced
from harvest.tasks.database.catalog_snapshot import CatalogSnapshot
from harvest.tasks.database.column_comments import FETCHED_FOR, request_columns, table_comment, write_comments
from harvest.tasks.database.column_types import cast_older_files, rename, retype
from harvest.tasks.database.connection import (
    NEWEST_IN_FILES,
    count_rows,
    quote_ident,
    quote_literal,
    transaction,
    whole_key,
)
from harvest.tasks.database.step_files import CHUNK_ROWS, Step, chunks, step_source
from harvest.tasks.output.layout import KindLike

log = logging.getLogger(__name__)

FETCHED_AT = "_fetched_at"
ROW_NAMES = frozenset({"file_index", "file_row_number"})
"""The columns DuckDB's Parquet reader adds to name a row within a merge step (see `merge_files`)."""


class LoadResult(dict[str, int]):
    """Rows per table after the load; `skipped_null_pk` counts rows left out because their key was NULL."""

    def __init__(self) -> None:
        super().__init__()
        self.skipped_null_pk: dict[str, int] = {}


def duckdb_types(con: duckdb.DuckDBPyConnection, schema: pa.Schema) -> list[tuple[str, str]]:
    """DuckDB column types for an Arrow schema, as DuckDB itself maps them (nested types included)."""
    con.register("_harvest_empty", schema.empty_table())
    try:
        rows = con.execute("DESCRIBE SELECT * FROM _harvest_empty").fetchall()
    finally:
        con.unregister("_harvest_empty")
    return [(str(r[0]), str(r[1])) for r in rows]


KEY_COMMENT = "primary key: "
"""Record tables state their key in their comment (`duckdb_tables().comment`), not as a constraint: DuckDB keeps
a key constraint's index in memory, which grows with the table until a fixed memory limit fails the load (200k
rows did at 64 MB), and the merge enforces uniqueness itself. Tables made before this keep their constraint. The
columns a row's request value is in follow the key (`column_comments.table_comment`)."""


def stated_key(comment: str | None) -> tuple[str, ...]:
    """The key a record table's comment states (`KEY_COMMENT`), or () when it states none."""
    text = str(comment or "")
    if not text.startswith(KEY_COMMENT):
        return ()
    return tuple(text.removeprefix(KEY_COMMENT).split(FETCHED_FOR, 1)[0].split(", "))


def primary_keys(con: duckdb.DuckDBPyConnection, *, comments: bool = True) -> dict[str, tuple[str, ...]]:
    """The keys of the main schema's tables, by table name: a PRIMARY KEY constraint (bookkeeping tables, and
    record tables made before KEY_COMMENT), else, with `comments`, the key a record table's comment states.
    Tables without either are left out."""
    where = "database_name = current_database() AND schema_name = 'main'"
    keys: dict[str, tuple[str, ...]] = {}
    if comments:
        for name, comment in con.execute(
            f"SELECT table_name, comment FROM duckdb_tables() WHERE {where}"
        ).fetchall():
            if stated := stated_key(comment):
                keys[str(name)] = stated
    for name, columns in con.execute(
        f"SELECT table_name, constraint_column_names FROM duckdb_constraints() WHERE {where} "
        "AND constraint_type = 'PRIMARY KEY'"
    ).fetchall():
        keys[str(name)] = tuple(columns)
    return keys


def table_primary_key(catalog: CatalogSnapshot, table: str) -> tuple[str, ...]:
    """A record table's key: its constraint (tables made before KEY_COMMENT), else its comment, else ()."""
    found = catalog.get(table)
    if found is None:
        return ()
    return found.constraint_key or stated_key(found.comment)


def same_columns(a: Sequence[str], b: Sequence[str]) -> bool:
    """Column lists compared as DuckDB compares identifiers: case-insensitively, in order."""
    return [c.lower() for c in a] == [c.lower() for c in b]


RAW = "raw"
"""The record's own JSON: the widest column by far. DuckDB's default choice for text (FSST or dictionary, analysed
per segment) took ~1.8 s of a 200k-row load for it; zstd took ~1 s and stored it in less than half the space."""


def _compression(column: str, zstd: bool) -> str:
    """zstd for `raw` where the file's storage format has it (v1.2.0's and later: `tasks.database.storage_format`)."""
    return " USING COMPRESSION zstd" if column == RAW and zstd else ""


def ensure_table(
    con: duckdb.DuckDBPyConnection, kind: KindLike, catalog: CatalogSnapshot | None = None
) -> dict[str, str]:
    """Create the kind's table, or bring it to the kind's schema: columns it gained are added, columns the catalog
    types otherwise now are retyped without losing a value (`tasks.database.column_types`), and every column
    carries the catalog's comment (`tasks.database.column_comments`). Returns lower-case column -> type.
    `catalog`: the load's snapshot of the database's catalog (one is read when none is given).

    Columns are never dropped here: old rows keep them, and a changed key needs a rebuild.
    """
    if not kind.primary_key:
        raise ValueError(f"table {kind.table}: a record kind needs a primary key")
    shadowing = sorted(ROW_NAMES & set(kind.schema.names))
    if shadowing:  # a record column of that name would hide the reader's own and mix up which row wins
        raise ValueError(f"table {kind.table}: columns {shadowing} are reserved for the load step")
    missing_key = [c for c in kind.primary_key if c not in kind.schema.names]
    if missing_key or FETCHED_AT not in kind.schema.names:
        raise ValueError(f"table {kind.table}: schema lacks {missing_key or [FETCHED_AT]}")
    catalog = catalog or CatalogSnapshot(con)
    types = duckdb_types(con, kind.schema)
    existing = catalog.columns(kind.table)
    table = quote_ident(kind.table)
    if not existing:
        zstd = catalog.zstd_allowed()
        cols = ", ".join(f"{quote_ident(n)} {t}{_compression(n, zstd)}" for n, t in types)
        con.execute(f"CREATE TABLE {table} ({cols})")
        catalog.made(kind.table, types)
        _comment_table(con, kind, catalog)
        write_comments(con, kind.table, kind.schema, kind.primary_key, catalog)
        return {n.lower(): t for n, t in types}
    current_key = table_primary_key(catalog, kind.table)
    if not same_columns(current_key, kind.primary_key):
        raise ValueError(
            f"table {kind.table}: primary key changed from {current_key} to {kind.primary_key}; "
            "rebuild the table"
        )
    have = {n.lower(): t for n, t, _ in existing}
    changed = rename(con, kind.table, kind.schema, have)
    changed = changed or any(have.get(n.lower(), t).upper() != t.upper() for n, t in types)
    retype(con, kind.table, types, have)
    requested = dict(request_columns(kind.schema))
    for name, typ in types:
        if name.lower() not in have:
            log.info("table %s: adding column %s %s", kind.table, name, typ)
            con.execute(f"ALTER TABLE {table} ADD COLUMN {quote_ident(name)} {typ}")
            changed = True
            if name in requested:
                log.warning(
                    "table %s gained column %s (the request's %s): its rows landed before hold NULL there "
                    "until `harvest rebuild` lands them again from the raw pages (no request is sent)",
                    kind.table, name, requested[name],
                )  # fmt: skip
    if changed:
        catalog.forget(kind.table)
        existing = catalog.columns(kind.table)
    _comment_table(con, kind, catalog)
    write_comments(con, kind.table, kind.schema, kind.primary_key, catalog)
    return {n.lower(): t for n, t, _ in existing}


def _comment_table(con: duckdb.DuckDBPyConnection, kind: KindLike, catalog: CatalogSnapshot) -> None:
    """State the table's key (and the columns its rows' request values are in) in its comment, where it differs."""
    wanted = table_comment(KEY_COMMENT + ", ".join(kind.primary_key), kind.schema)
    found = catalog.get(kind.table)
    if found is None or found.comment != wanted:
        con.execute(f"COMMENT ON TABLE {quote_ident(kind.table)} IS {quote_literal(wanted)}")
        catalog.commented(kind.table, wanted)


def _choose_newest(
    con: duckdb.DuckDBPyConnection, key: Sequence[str], source: str, has_key: str, paths: list[str]
) -> None:
    """`_harvest_newest`: the newest row of each key in the files (`NEWEST_IN_FILES`: of one page, its last), as
    narrow rows. Whole rows are read once,
    straight into the table, after it: a window sort over them ran out of 64 MB at 50k rows."""
    fetched = quote_ident(FETCHED_AT)
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _harvest_newest AS
        SELECT {", ".join(key)}, {fetched}, file_index, file_row_number FROM {source}
        WHERE {has_key}
        QUALIFY row_number() OVER (
            PARTITION BY {", ".join(key)}
            ORDER BY {NEWEST_IN_FILES}
        ) = 1
        """,
        [paths],
    )


def merge_files(
    con: duckdb.DuckDBPyConnection,
    kind: KindLike,
    files: Sequence[Path] | Step,
    catalog: CatalogSnapshot | None = None,
) -> tuple[int, int]:
    """Merge Parquet files into the kind's table (`catalog`: as `ensure_table` takes it); returns (rows after,
    rows skipped: null key). The newest row per key is chosen on narrow rows, then rows it replaces are deleted
    and the rest inserted from the files: on 300k existing rows this took ~4 s where one MERGE took ~11 s, and a
    first load (an empty table) is a plain insert. Ties on ``_fetched_at`` inside a batch (a page holding a key
    twice) go to the later file name, then the later row (`NEWEST_IN_FILES`), so the choice is stable and the one
    the history views, the printed query and the exports make. Columns the table has but this schema lacks stay NULL in
    replaced rows: they are the newer fetch.

    Rows are named by (`file_index`, `file_row_number`), two integers: with each row's file name instead, the
    narrow rows were wide enough that the newest-row sort of a 250k-row step ran out of a 64 MB limit.
    """
    table_types = ensure_table(con, kind, catalog)
    table = quote_ident(kind.table)
    if not files:
        return count_rows(con, f"SELECT count(*) FROM {table}"), 0
    paths = sorted(str(p) for p in files)  # `file_index` is a file's place here: ties go to the later name
    source = step_source(files, paths)
    key = [quote_ident(c) for c in kind.primary_key]
    has_key = whole_key(key)
    counts = f"SELECT count(*), count(*) FILTER (WHERE NOT ({has_key})) FROM {source}"
    ((total, skipped),) = con.execute(counts, [paths]).fetchall()  # said once per table (`merge_batches`)
    names = ", ".join(quote_ident(n) for n in kind.schema.names)
    read = ", ".join(cast_older_files(con, kind.table, kind.schema, table_types, source, paths))
    fetched = quote_ident(FETCHED_AT)
    same_key = " AND ".join(f"t.{k} = s.{k}" for k in key)
    _choose_newest(con, key, source, has_key, paths)
    replacing = _names_fetches(kind, paths)
    if replacing:  # the rows it deletes, for the record of which query fetched what (`replaced_fetches`)
        twice = count_rows(con, "SELECT count(*) FROM _harvest_newest") < total - skipped
        replaced.ensure_record(con, {}, None)  # made (and filled) by `merge_batches`, unless called alone
        replaced.note_replaced(con, kind.table, kind.primary_key, "_harvest_newest")
    con.execute(
        f"DELETE FROM {table} AS t USING _harvest_newest AS s "
        f"WHERE {same_key} AND (t.{fetched} IS NULL OR s.{fetched} >= t.{fetched})"
    )
    # What is still in the table after the delete is newer than this batch's row: that key is not inserted.
    con.execute(
        f"DELETE FROM _harvest_newest AS s WHERE EXISTS (SELECT 1 FROM {table} AS t WHERE {same_key})"
    )
    every_row = count_rows(con, "SELECT count(*) FROM _harvest_newest") == total
    # no key twice, none NULL, none newer in the table: the usual night of new items, inserted as read
    con.execute(
        f"INSERT INTO {table} ({names}) SELECT {read} FROM {source}"
        + ("" if every_row else " SEMI JOIN _harvest_newest USING (file_index, file_row_number)"),
        [paths],
    )
    if replacing:
        replaced.keep_replaced(con, kind.table, kind.primary_key, (source, paths), twice)
    con.execute("DROP TABLE _harvest_newest")  # on failure it goes with the rolled-back transaction
    return count_rows(con, f"SELECT count(*) FROM {table}"), skipped


def _names_fetches(kind: KindLike, paths: list[str]) -> bool:
    """Whether the step's rows say which query and run fetched them (files of an older harvest may not)."""
    import pyarrow.parquet as pq

    named = {replaced.QUERY_ID, replaced.RUN_ID}
    return named <= set(kind.schema.names) and any(named <= set(pq.read_schema(p).names) for p in paths)


def merge_children(
    con: duckdb.DuckDBPyConnection,
    child: ChildKind,
    files: Sequence[Path] | Step,
    catalog: CatalogSnapshot | None = None,
) -> int:
    """Make the child table hold exactly the rows of the fetch each parent row holds; returns its rows after.

    Run after the parent's merge: a child row belongs to the parent's fetch with its `_fetched_at`, so rows of
    any other fetch go (the parent was fetched again: a list that shrank or emptied leaves nothing behind, and a
    parent with an empty list has no rows in the files at all), and the files' rows of the parent's fetch come
    in unless the table has them (a run loaded again). Idempotent like the merge: a step cut off is done again
    by the next load. Files an older harvest wrote are read into the table's types (`cast_older_files`)."""
    table_types = ensure_table(con, child, catalog)
    table, parent = quote_ident(child.table), quote_ident(child.parent)
    fetched = quote_ident(FETCHED_AT)
    keys = [quote_ident(c) for c in child.parent_columns]
    of_parent = " AND ".join(
        f"p.{quote_ident(f.name)} = c.{k}" for f, k in zip(child.parent_key, keys, strict=True)
    )
    if not files:
        con.execute(
            f"DELETE FROM {table} AS c WHERE NOT EXISTS "
            f"(SELECT 1 FROM {parent} AS p WHERE {of_parent} AND p.{fetched} IS NOT DISTINCT FROM c.{fetched})"
        )
        return count_rows(con, f"SELECT count(*) FROM {table}")
    paths = sorted(str(p) for p in files)
    source = step_source(files, paths)
    item = [*keys, quote_ident(POSITION)]
    same_item = " AND ".join(f"t.{k} = c.{k}" for k in item)
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _harvest_items AS
        SELECT file_index, file_row_number FROM {source} AS c
        WHERE EXISTS (SELECT 1 FROM {parent} AS p WHERE {of_parent} AND p.{fetched} = c.{fetched})
        AND NOT EXISTS (SELECT 1 FROM {table} AS t WHERE {same_item})
        QUALIFY row_number() OVER (PARTITION BY {", ".join(item)} ORDER BY file_index DESC, file_row_number DESC) = 1
        """,
        [paths],
    )
    names = ", ".join(quote_ident(n) for n in child.schema.names)
    read = ", ".join(cast_older_files(con, child.table, child.schema, table_types, source, paths))
    con.execute(
        f"INSERT INTO {table} ({names}) SELECT {read} FROM {source} "
        "SEMI JOIN _harvest_items USING (file_index, file_row_number)",
        [paths],
    )
    con.execute("DROP TABLE _harvest_items")
    return count_rows(con, f"SELECT count(*) FROM {table}")


def merge_batches(
    con: duckdb.DuckDBPyConnection,
    batches: Iterable[tuple[KindLike, Sequence[Path]]],
    rows: int = CHUNK_ROWS,
    parquet_root: Path | None = None,
) -> LoadResult:
    """Merge several kinds' files on an open connection, one transaction per step of at most `rows` rows (see
    module docstring). Child tables come after every record table, each record table's children whether this
    load has files of theirs or not (`merge_children`: a parent fetched again with an empty list).
    `parquet_root`: the output's Parquet, read once to fill a database's first record of replaced fetches."""
    result = LoadResult()
    with transaction(con):
        replaced.ensure_record(con, primary_keys(con), parquet_root)
    catalog = CatalogSnapshot(con)
    children: dict[str, tuple[ChildKind, list[Path]]] = {}
    for kind, files in batches:
        if isinstance(kind, ChildKind):
            children.setdefault(kind.table, (kind, []))[1].extend(files)
            continue
        for child in getattr(kind, "children", ()):
            children.setdefault(child.table, (child, []))
        skipped = 0
        for chunk in (
            chunks(files, rows) if files else [Step([], True)]
        ):  # the table exists even with no files
            with transaction(con):
                result[kind.table], more = merge_files(con, kind, chunk, catalog)
            skipped += more
        if skipped:
            log.warning(
                "table %s: skipped %d rows with a NULL primary key %s", kind.table, skipped, kind.primary_key
            )
        result.skipped_null_pk[kind.table] = result.skipped_null_pk.get(kind.table, 0) + skipped
    for child, files in children.values():
        with transaction(con):  # the rows of fetches the parent rows no longer hold go first
            result[child.table] = merge_children(con, child, [], catalog)
        for chunk in chunks(files, rows):
            with transaction(con):
                result[child.table] = merge_children(con, child, chunk, catalog)
    return result
