"""Reads, from the job's DuckDB file, the keys an incremental query landed in earlier runs.

Only the query's own rows are read (`_query_id`), so memory grows with what one query collected, not with the
table. When the database cannot be read (held for writing by another process, not created yet) the query simply
pages fully: an incremental run may pay more than needed, never miss an item.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

import duckdb

from connectors.known import Key, KnownKeys
from tasks.layout import KindLike

log = logging.getLogger(__name__)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def load_known_keys(db: Path, kinds: Iterable[KindLike], query_id: str) -> KnownKeys | None:
    """Keys per table, or None when nothing can be known (no database yet, or it could not be read)."""
    if not db.exists():
        return None
    try:
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.Error as exc:
        log.warning("incremental query %s pages fully: cannot read %s (%s)", query_id, db, exc)
        return None
    try:
        tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        by_table: dict[str, set[Key]] = {}
        for kind in kinds:
            if kind.table not in tables:
                continue
            cols = ", ".join(f"CAST({_quote(c)} AS VARCHAR)" for c in kind.primary_key)
            rows = con.execute(f"SELECT {cols} FROM {_quote(kind.table)} WHERE _query_id = ?", [query_id])
            by_table[kind.table] = {tuple(row) for row in rows.fetchall()}
        return KnownKeys(by_table)
    finally:
        con.close()
