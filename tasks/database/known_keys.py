"""Reads, from the job's DuckDB file, the keys an incremental query landed in earlier runs, and which of them
are trusted to end paging (landed up to the run where the query's history last became complete).

Only the query's own rows are read (`_query_id`), so memory grows with what one query collected, not with the
table: the table's rows of the query, and its fetches of keys another query fetched since, as the load recorded
them (`tasks.database.replaced_fetches`: a feed's post that its thread fetched again; the table's row is the
thread's now, and without them the feed would forget the post and pay for it, and its thread, every night). A
key whose newest fetch by the query was in an unfinished pass counts as untrusted: that can cost a page, never
an item. Trust follows the `runs` table's start times, so a lost or
rebuilt-without-that-run database trusts nothing and the query pages until the end. No database (not made
yet, or lost) means a full pass. One another process holds for writing (an analyst's session left open) is not
read: the same rows come from the job's Parquet history, which holds every fetch the database does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
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
    """Keys per table, or None when nothing can be known (no database yet: a lost one means a full pass).

    `trusted_until`: the run in which the query's history last became complete; None trusts no key. A database
    another process holds for writing (an analyst's session left open overnight) is not read: the same keys
    come from the job's Parquet history, which holds every fetch the database does (before, such a night paid
    for every page of its incremental queries and every dependent again)."""
    if not db.exists():
        return None
    try:
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.Error as exc:
        log.warning(
            "incremental query %s: cannot read %s (%s); its keys come from the Parquet", query_id, db, exc
        )
        return _known_from_history(db, kinds, query_id, trusted_until)
    try:
        tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        trusted: set[str] | None = None
        if trusted_until is not None and "runs" in tables:
            trusted = {r[0] for r in con.execute(_TRUSTED_RUNS, [trusted_until]).fetchall()}
        return _known(
            kinds,
            lambda kind, cols: (
                _fetched(con, db, kind.table, cols, [query_id], kind.primary_key)
                if kind.table in tables
                else None
            ),
            trusted,
        )
    finally:
        con.close()


def _known_from_history(
    db: Path, kinds: Iterable[KindLike], query_id: str, trusted_until: str | None
) -> KnownKeys:
    """`load_known_keys` from the Parquet alone; trust follows the runs' manifests, as the `runs` table's."""
    from harvest.tasks.output.manifest import run_heads

    started = {head.run_id: head.started for head in run_heads(OutputLayout(db.parent))}
    trusted: set[str] | None = None
    if trusted_until is not None:
        trusted = {
            r for r, at in started.items() if trusted_until in started and at <= started[trusted_until]
        }
    con = duckdb.connect()
    try:
        return _known(kinds, lambda kind, cols: _history(con, db, kind.table, cols, [query_id]), trusted)
    finally:
        con.close()


def _known(
    kinds: Iterable[KindLike],
    fetched: Callable[[KindLike, str], list[tuple[Any, ...]] | None],
    trusted: set[str] | None,
) -> KnownKeys:
    """Keys per table from what the query fetched (`fetched`: None where its table is not there); a key whose
    fetch was in a run not `trusted` is untrusted (None: trust no key)."""
    by_table: dict[str, set[Key]] = {}
    untrusted: dict[str, set[Key]] = {}
    for kind in kinds:
        cols = ", ".join(f"CAST({quote_ident(c)} AS VARCHAR)" for c in kind.primary_key)
        found = fetched(kind, cols)
        if found is None:
            continue
        keys, late = by_table.setdefault(kind.table, set()), untrusted.setdefault(kind.table, set())
        for _, run_id, *key in found:
            keys.add(tuple(key))
            if trusted is not None and run_id not in trusted:
                late.add(tuple(key))
    return KnownKeys(by_table, untrusted if trusted is not None else None)


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
    return found + (_history(con, db, table, columns, ids) or [])


def _history(
    con: duckdb.DuckDBPyConnection, db: Path, table: str, columns: str, query_ids: Sequence[str]
) -> list[tuple[Any, ...]] | None:
    """`_query_id`, `_run_id` and `columns` of the rows the queries fetched, from the table's Parquet history
    (every fetch of every run landed); None when the table has none."""
    history = OutputLayout(db.parent).parquet_table_dir(table)
    if not (history.is_dir() and any(history.glob(f"*/*{PARQUET_SUFFIX}"))):
        return None
    ids = list(query_ids)
    files = quote_literal(str(history / "*" / f"*{PARQUET_SUFFIX}"))
    sql = (
        f"SELECT _query_id, _run_id, {columns} FROM read_parquet({files}, union_by_name = true) "
        "WHERE _query_id IN (SELECT unnest(?::VARCHAR[]))"
    )
    try:
        return con.execute(sql, [ids]).fetchall()
    except duckdb.Error as exc:  # a file another process is replacing, a column older files lack
        log.warning("queries %s: their Parquet history not read (%s)", ", ".join(ids[:3]), exc)
        return []


def parent_values(db: Path, table: str, column: str, query_ids: Sequence[str]) -> dict[str, list[Any]]:
    """The distinct values of `column` in the rows each of `query_ids` landed (its fetches a dependent query
    fetched again too: `_fetched`), by query: what their dependent queries start from. Empty when the database,
    the table or the column is not there or cannot be read."""
    if not db.exists() or not query_ids:
        return {}
    try:
        con = duckdb.connect(str(db), read_only=True)
        held = False
    except duckdb.Error as exc:
        # held for writing by another process: what the queries fetched is in the Parquet too
        log.warning(
            "dependents of %s: cannot read %s (%s); read from the Parquet", ", ".join(query_ids[:3]), db, exc
        )
        con, held = duckdb.connect(), True
    try:
        if held:
            found = _history(con, db, table, quote_ident(column), query_ids) or []
        else:
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
