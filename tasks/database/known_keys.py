"""Reads, from the job's DuckDB file, the keys an incremental query landed in earlier runs, and which of them
are trusted to end paging (landed up to the run where the query's history last became complete).

Only the query's own rows are read (`_query_id`), so memory grows with what one query collected, not with the
table: the table's rows of the query, and its fetches of keys another query fetched since, as the load recorded
them (`tasks.database.replaced_fetches`: a feed's post that its thread fetched again; the table's row is the
thread's now, and without them the feed would forget the post and pay for it, and its thread, every night). A
key whose newest fetch by the query was in an unfinished pass counts as untrusted: that can cost a page, never
an item. Trust follows the `runs` table's start times, so a lost or
rebuilt-without-that-run database trusts nothing and the query pages until the end. When the database cannot
be read (held for writing by another process, not created yet) the query simply pages fully: an incremental
run may pay more than needed, never miss an item.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import duckdb

from harvest.connectors.paging.known_items import Key, KnownKeys
from harvest.connectors.paging.pager import QuerySpec
from harvest.tasks.database import replaced_fetches
from harvest.tasks.database.connection import quote_ident, quote_literal
from harvest.tasks.database.record_tables import primary_keys
from harvest.tasks.output.layout import PARQUET_SUFFIX, KindLike, OutputLayout

log = logging.getLogger(__name__)

_TRUSTED_RUNS = """
SELECT run_id FROM runs WHERE started <= (SELECT started FROM runs WHERE run_id = ?)
"""


def query_known_keys(
    db: Path, spec: QuerySpec, kinds: Iterable[KindLike], incremental: bool
) -> KnownKeys | None:
    """The keys an incremental query stops at, as both runners decide them; None when it pages fully (not
    incremental, the run's `--full`, or nothing can be known)."""
    if not (spec.incremental and incremental):
        return None
    return load_known_keys(db, kinds, spec.query_id, spec.trusted_until)


def load_known_keys(
    db: Path, kinds: Iterable[KindLike], query_id: str, trusted_until: str | None = None
) -> KnownKeys | None:
    """Keys per table, or None when nothing can be known (no database yet, or it could not be read).

    `trusted_until`: the run in which the query's history last became complete; None trusts no key."""
    if not db.exists():
        return None
    try:
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.Error as exc:
        log.warning("incremental query %s pages fully: cannot read %s (%s)", query_id, db, exc)
        return None
    try:
        tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        trusting = trusted_until is not None and "runs" in tables
        trusted_runs: set[str] = set()
        if trusting:
            trusted_runs = {r[0] for r in con.execute(_TRUSTED_RUNS, [trusted_until]).fetchall()}
        by_table: dict[str, set[Key]] = {}
        untrusted: dict[str, set[Key]] = {}
        for kind in kinds:
            if kind.table not in tables:
                continue
            cols = ", ".join(f"CAST({quote_ident(c)} AS VARCHAR)" for c in kind.primary_key)
            keys, late = by_table.setdefault(kind.table, set()), untrusted.setdefault(kind.table, set())
            for _, run_id, *key in _fetched(con, db, kind.table, cols, [query_id], kind.primary_key):
                keys.add(tuple(key))
                if trusting and run_id not in trusted_runs:
                    late.add(tuple(key))
        return KnownKeys(by_table, untrusted if trusting else None)
    finally:
        con.close()


def _fetched(
    con: duckdb.DuckDBPyConnection,
    db: Path,
    table: str,
    columns: str,
    query_ids: Sequence[str],
    key: Sequence[str] | None = None,
) -> list[tuple[Any, ...]]:
    """`_query_id`, `_run_id` and `columns` of the rows the queries `query_ids` fetched: the table's, and those
    another query's fetch of the key replaced (`tasks.database.replaced_fetches`, read from the table's row of
    the key). A database whose load has not made that record yet reads the Parquet history instead, this once.
    Several queries in one read: the dependents of a fan-out's thousand queries are one statement, not a
    thousand."""
    ids = list(query_ids)
    found = con.execute(
        f"SELECT _query_id, _run_id, {columns} FROM {quote_ident(table)} "
        "WHERE _query_id IN (SELECT unnest(?::VARCHAR[]))",
        [ids],
    ).fetchall()
    key = key or primary_keys(con).get(table)  # the kind's, where the caller has it: no catalog read a query
    if key and replaced_fetches.exists(con):
        mine = (
            f"SELECT key, run_id, query_id FROM {replaced_fetches.TABLE} "
            "WHERE table_name = ? AND query_id IN (SELECT unnest(?::VARCHAR[]))"
        )
        sql = (
            f"SELECT r._harvest_query, r._harvest_run, {columns} FROM {quote_ident(table)} "
            f"JOIN (SELECT key AS _harvest_key, run_id AS _harvest_run, query_id AS _harvest_query "
            f"FROM ({mine})) AS r ON r._harvest_key = {replaced_fetches.key_text(quote_ident(table), key)}"
        )
        return found + con.execute(sql, [table, ids]).fetchall()
    history = OutputLayout(db.parent).parquet_table_dir(table)
    if history.is_dir() and any(history.glob(f"*/*{PARQUET_SUFFIX}")):
        files = quote_literal(str(history / "*" / f"*{PARQUET_SUFFIX}"))
        sql = (
            f"SELECT _query_id, _run_id, {columns} FROM read_parquet({files}, union_by_name = true) "
            "WHERE _query_id IN (SELECT unnest(?::VARCHAR[]))"
        )
        try:
            found += con.execute(sql, [ids]).fetchall()
        except duckdb.Error as exc:  # a file another process is replacing, a column older files lack
            log.warning("queries %s: their Parquet history not read (%s)", ", ".join(ids[:3]), exc)
    return found


def parent_values(db: Path, table: str, column: str, query_ids: Sequence[str]) -> dict[str, list[Any]]:
    """The distinct values of `column` in the rows each of `query_ids` landed (its fetches a dependent query
    fetched again too: `_fetched`), by query: what their dependent queries start from. Empty when the database,
    the table or the column is not there or cannot be read."""
    if not db.exists() or not query_ids:
        return {}
    try:
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.Error as exc:
        log.warning("dependents of %s: cannot read %s (%s)", ", ".join(list(query_ids)[:3]), db, exc)
        return {}
    try:
        found = _fetched(con, db, table, quote_ident(column), query_ids)
    except duckdb.Error:
        return {}  # no such table or column yet
    finally:
        con.close()
    values: dict[str, dict[Any, None]] = {}
    for query_id, _, value in found:
        if value not in (None, ""):
            values.setdefault(str(query_id), {})[value] = None
    return {query_id: list(kept) for query_id, kept in values.items()}
