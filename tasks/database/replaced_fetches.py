"""Which query fetched a key before another query's fetch of it replaced that row: kept at load time, so an
incremental query reads what it fetched from DuckDB alone (`tasks.database.known_keys`).

A record table keeps a key's newest fetch, with that fetch's `_query_id`. A feed's post that the post's thread
query fetched again (the thread's answer includes the post, landing in the same table) becomes the thread's
row, and without a record of the feed's fetch the feed forgets the post and pays for it, and its thread, every
night. Reading the table's Parquet history for every incremental query costs O(nights) a query a night; this
table costs one row per fetch that lost its key's row to another query's, written by the merge step that
replaced it, in the same transaction (`record_tables.merge_files`). `harvest rebuild` replays the runs in order
through the same merge, so it makes the same rows.

It lives in `harvest_state` beside `history_view_files` (`tasks.database.view_checks`): harvest's memory, not
data. A database without it (made before it, or the schema dropped) is filled once, at its next load, from the
Parquet history; until then `known_keys` reads that history itself, so no night pays twice.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import duckdb

from harvest.tasks.database.connection import quote_ident, quote_literal
from harvest.tasks.database.view_checks import SCHEMA, make_state_table
from harvest.tasks.output.layout import PARQUET_SUFFIX

log = logging.getLogger(__name__)

NAME = "replaced_fetches"
TABLE = f"{SCHEMA}.{NAME}"
QUERY_ID, RUN_ID = "_query_id", "_run_id"
DDL = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    table_name VARCHAR NOT NULL,
    key VARCHAR[] NOT NULL,
    query_id VARCHAR NOT NULL,
    run_id VARCHAR
)"""
COMMENTS = (
    "Fetches whose row another query's fetch of the same key replaced: what an incremental query fetched that "
    "its table's row no longer says. harvest's own memory; deleting it costs one load reading the Parquet history.",
    {
        "table_name": "The record table (in schema main).",
        "key": "The row's primary key, each column as text, in the key's order.",
        "query_id": "The query whose fetch was replaced (`_query_id`).",
        "run_id": "The run of that fetch (`_run_id`).",
    },
)
REPLACED = "_harvest_replaced"
"""The temp table of the table's rows a merge step is about to replace (`note_replaced`)."""


def exists(con: duckdb.DuckDBPyConnection) -> bool:
    found = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = ? AND table_name = ?",
        [SCHEMA, NAME],
    ).fetchall()
    return bool(found[0][0])


def key_text(alias: str, key: Sequence[str]) -> str:
    """A row's key as the record keeps it: a list of its columns as text."""
    return "[" + ", ".join(f"CAST({alias}.{quote_ident(c)} AS VARCHAR)" for c in key) + "]"


def ensure_record(
    con: duckdb.DuckDBPyConnection, keys: Mapping[str, Sequence[str]], parquet_root: Path | None
) -> None:
    """Make the table the first time; in a database that has loaded runs before, fill it from the Parquet
    history of `keys`' tables (their primary keys), once. A new database (`harvest rebuild`'s) has nothing."""
    if exists(con):
        return
    had_runs = bool(
        con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
            "AND schema_name = 'main' AND table_name = 'runs'"
        ).fetchall()[0][0]
    )
    make_state_table(con, TABLE, DDL, COMMENTS)
    if had_runs and parquet_root is not None:
        for table, key in keys.items():
            _fill(con, table, key, parquet_root / table)


def _fill(con: duckdb.DuckDBPyConnection, table: str, key: Sequence[str], history: Path) -> None:
    if not history.is_dir() or not any(history.glob(f"*/*{PARQUET_SUFFIX}")):
        return
    files = quote_literal(str(history / "*" / f"*{PARQUET_SUFFIX}"))
    source = f"(SELECT * FROM read_parquet({files}, hive_partitioning = false, union_by_name = true))"
    try:
        _keep(con, table, key, source, [])
    except duckdb.Error as exc:  # files of an older harvest without `_query_id`: nothing to learn from them
        log.warning("table %s: replaced fetches not read from its Parquet history (%s)", table, exc)


def note_replaced(con: duckdb.DuckDBPyConnection, table: str, key: Sequence[str], newest: str) -> None:
    """Before a merge step deletes: the table's rows of the step's keys (`newest`, the step's temp table)."""
    same_key = " AND ".join(f"t.{quote_ident(c)} = s.{quote_ident(c)}" for c in key)
    picked = ", ".join(f"t.{quote_ident(c)}" for c in (*key, QUERY_ID, RUN_ID))
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {REPLACED} AS SELECT {picked} FROM {quote_ident(table)} AS t "
        f"WHERE t.{QUERY_ID} IS NOT NULL AND EXISTS (SELECT 1 FROM {newest} AS s WHERE {same_key})"
    )


def keep_replaced(
    con: duckdb.DuckDBPyConnection,
    table: str,
    key: Sequence[str],
    step: tuple[str, list[str]],
    twice: bool,
) -> None:
    """After the step's insert: keep the fetches, of the step's files (`step`: the reader and its paths) and of
    the rows it replaced, whose key's row is now another query's. A step with no key twice in its files and none
    already in the table (`twice` False, nothing noted), the usual night of new items, keeps nothing: the files
    are not read again."""
    noted = con.execute(f"SELECT count(*) FROM {REPLACED}").fetchall()[0][0]
    if twice or noted:
        source, paths = step
        cols = ", ".join(quote_ident(c) for c in (*key, QUERY_ID, RUN_ID))
        fetches = f"(SELECT {cols} FROM {source} UNION ALL SELECT {cols} FROM {REPLACED})"
        _keep(con, table, key, fetches, [paths])
    con.execute(f"DROP TABLE {REPLACED}")


def _keep(
    con: duckdb.DuckDBPyConnection, table: str, key: Sequence[str], fetches: str, params: list[object]
) -> None:
    same_key = " AND ".join(f"t.{quote_ident(c)} = f.{quote_ident(c)}" for c in key)
    con.execute(
        f"""
        INSERT INTO {TABLE}
        SELECT DISTINCT {quote_literal(table)}, {key_text("t", key)}, f.{QUERY_ID}, f.{RUN_ID}
        FROM {fetches} AS f JOIN {quote_ident(table)} AS t ON {same_key}
        WHERE f.{QUERY_ID} IS NOT NULL AND f.{QUERY_ID} IS DISTINCT FROM t.{QUERY_ID}
        AND NOT EXISTS (
            SELECT 1 FROM {TABLE} AS r WHERE r.table_name = {quote_literal(table)} AND r.key = {key_text("t", key)}
            AND r.query_id = f.{QUERY_ID} AND r.run_id IS NOT DISTINCT FROM f.{RUN_ID}
        )
        """,
        params,
    )
