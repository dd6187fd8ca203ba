"""The bookkeeping tables: `runs` (one row per run), `requests` (one per HTTP attempt) and `query_state` (one per
query of a run: status, pages, next cursor, what the pages held vs what was kept).

`requests` is derived from `connectors.paging.page_request.Attempt`, the one description of an attempt; `runs` and
`query_state` gained columns over time and are extended in place on the next load of an older database.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import duckdb
import pyarrow as pa

from harvest.connectors.paging.page_request import ATTEMPT_SCHEMA
from harvest.connectors.reading.extraction import ExtractionReport
from harvest.tasks.database.bookkeeping_comments import BOOKKEEPING_COMMENTS, EXPORTS
from harvest.tasks.database.catalog_snapshot import CatalogSnapshot
from harvest.tasks.database.column_comments import describe_table
from harvest.tasks.database.connection import json_text, quote_ident
from harvest.tasks.output.attempt_log import iter_attempts
from harvest.tasks.output.raw_store import redact_params

log = logging.getLogger(__name__)

_REQUESTS_CHUNK = 10_000
_STATES_CHUNK = 500

RUNS_DDL = """
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR PRIMARY KEY,
    job VARCHAR,
    spec_hash VARCHAR,
    service VARCHAR,
    started TIMESTAMPTZ,
    finished TIMESTAMPTZ,
    status VARCHAR,
    credits_spent BIGINT,
    records BIGINT
)"""
EXTRACTION_COLUMNS = (
    ("items_seen", "BIGINT"),
    ("records_without_key", "BIGINT"),
    ("values_misfit", "BIGINT"),
    ("values_repaired", "BIGINT"),
    ("lists_missing", "BIGINT"),
    ("new_fields", "VARCHAR"),
    ("columns_empty", "BIGINT"),
    ("items_dropped", "BIGINT"),
)
"""What the pages held vs what was kept (`connectors.reading.extraction`), in `query_state` and `runs`."""
RUNS_ADDED_COLUMNS = (
    ("budget", "BIGINT"),
    ("resumes", "INTEGER"),
    ("continues", "VARCHAR"),
    ("error", "VARCHAR"),
    ("balance_before", "BIGINT"),
    ("balance_after", "BIGINT"),
    ("service_billed", "BIGINT"),
    *EXTRACTION_COLUMNS,
    ("budget_before", "BIGINT"),
)
"""Columns `runs` gained after its first release: added to existing databases when they are next loaded."""
QUERY_STATE_DDL = """
CREATE TABLE IF NOT EXISTS query_state (
    run_id VARCHAR NOT NULL,
    query_id VARCHAR NOT NULL,
    endpoint VARCHAR,
    status VARCHAR,
    pages BIGINT,
    records BIGINT,
    next_cursor VARCHAR,
    credits BIGINT,
    error VARCHAR,
    PRIMARY KEY (run_id, query_id)
)"""

RUN_FIELDS = (
    "run_id",
    "job",
    "spec_hash",
    "service",
    "started",
    "finished",
    "status",
    "credits_spent",
    "records",
    *(name for name, _ in RUNS_ADDED_COLUMNS),
)
QUERY_STATE_ADDED_COLUMNS = (
    *EXTRACTION_COLUMNS,
    ("extraction", "VARCHAR"),
    ("history", "VARCHAR"),
    ("backfill_cursor", "VARCHAR"),
    ("cursor_unread", "VARCHAR"),
    ("follow_ups", "BIGINT"),
)
"""`history` and `backfill_cursor`: an incremental query's history after the run (`flows.run.coverage`);
`cursor_unread`: the field that looked like a cursor where paging ended (`connectors.reading.unread_cursors`);
`follow_ups`: the follow-up requests it paid (`connectors.paging.follow_ups`)."""
QUERY_STATE_FIELDS = (
    "query_id",
    "endpoint",
    "status",
    "pages",
    "records",
    "next_cursor",
    "credits",
    "error",
    *(name for name, _ in QUERY_STATE_ADDED_COLUMNS),
)
_SQL_TYPES = {
    pa.string(): "VARCHAR",
    pa.int32(): "INTEGER",
    pa.int64(): "BIGINT",
    pa.float64(): "DOUBLE",
    pa.timestamp("us", tz="UTC"): "TIMESTAMPTZ",
}
REQUESTS_DDL = (
    "CREATE TABLE IF NOT EXISTS requests (\n    run_id VARCHAR NOT NULL,\n"
    + ",\n".join(
        f"    {f.name} {_SQL_TYPES[f.type]}{'' if f.nullable else ' NOT NULL'}" for f in ATTEMPT_SCHEMA
    )
    + "\n)"
)
_TIMESTAMPS = [f.name for f in ATTEMPT_SCHEMA if pa.types.is_timestamp(f.type)]
_LOG_SCHEMA = pa.schema(
    [pa.field("run_id", pa.string())]
    + [pa.field(f.name, pa.string()) if f.name in _TIMESTAMPS else f for f in ATTEMPT_SCHEMA]
)
"""An attempt log's rows as registered: timestamps stay ISO text until DuckDB casts them."""
_REQUEST_COLUMNS = ", ".join(["run_id", *ATTEMPT_SCHEMA.names])
_SELECT_LOG = ", ".join(
    ["run_id"] + [f"CAST({n} AS TIMESTAMPTZ)" if n in _TIMESTAMPS else n for n in ATTEMPT_SCHEMA.names]
)


EXPORTS_DDL = """
CREATE TABLE IF NOT EXISTS exports (
    destination VARCHAR NOT NULL,
    run_id VARCHAR NOT NULL,
    export_id VARCHAR NOT NULL,
    kind VARCHAR NOT NULL,
    exported_at TIMESTAMP WITH TIME ZONE NOT NULL,
    files BIGINT NOT NULL,
    rows BIGINT NOT NULL,
    content VARCHAR,
    PRIMARY KEY (destination, run_id, export_id)
)"""
"""Written by `harvest export` (`flows.handoff.export_ledger`). Not among `BOOKKEEPING_DDL`: a database whose
`exports` an older `harvest rebuild` copied without its key is not refused (the ledger deletes, then inserts)."""
EXPORTS_ADDED = (("content", "VARCHAR"),)
"""Columns `exports` may lack in an older database: the next export adds them (`export_ledger.record`)."""

BOOKKEEPING_DDL = {"runs": RUNS_DDL, "requests": REQUESTS_DDL, "query_state": QUERY_STATE_DDL}
ADDED_COLUMNS = {
    "runs": RUNS_ADDED_COLUMNS,
    "query_state": QUERY_STATE_ADDED_COLUMNS,
    "requests": tuple((f.name, _SQL_TYPES[f.type]) for f in ATTEMPT_SCHEMA if f.nullable),
}
"""Columns each bookkeeping table may lack in an older database: the next load adds them. Any other column of
its DDL must be there (`tasks.database.table_check` refuses a database without them before a run pays)."""


def ensure_bookkeeping(con: duckdb.DuckDBPyConnection) -> None:
    for ddl in BOOKKEEPING_DDL.values():
        con.execute(ddl)
    for table, added in ADDED_COLUMNS.items():
        for name, sql_type in added:
            con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {name} {sql_type}")
    catalog = CatalogSnapshot(con)
    for table, (about, columns) in BOOKKEEPING_COMMENTS.items():
        describe_table(con, table, about, columns, catalog=catalog)
    if catalog.get("exports") is None:  # empty until the first export; a user's own `exports` is left alone
        con.execute(EXPORTS_DDL)
        describe_table(con, "exports", *EXPORTS)


def as_fields(obj: Any, names: Sequence[str]) -> dict[str, Any]:
    """Pick the named fields from a mapping, a dataclass or any object; absent ones are left out."""
    if isinstance(obj, Mapping):
        source: Mapping[str, Any] = obj
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        source = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    else:
        source = {n: getattr(obj, n) for n in names if hasattr(obj, n)}
    return {n: source[n] for n in names if n in source}


def public_service_url(url: str) -> str:
    """Keep scheme, host and path of the service URL; credentials in user info or query never reach the DB."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _upsert(con: duckdb.DuckDBPyConnection, table: str, keys: Sequence[str], row: Mapping[str, Any]) -> None:
    cols = list(row)
    updates = [c for c in cols if c not in keys]
    conflict = (
        f"DO UPDATE SET {', '.join(f'{quote_ident(c)} = excluded.{quote_ident(c)}' for c in updates)}"
        if updates
        else "DO NOTHING"
    )
    con.execute(
        f"INSERT INTO {table} ({', '.join(quote_ident(c) for c in cols)}) "
        f"VALUES ({', '.join('?' for _ in cols)}) "
        f"ON CONFLICT ({', '.join(quote_ident(k) for k in keys)}) {conflict}",
        [row[c] for c in cols],
    )


def _run_row(run: Any, run_id: str | None) -> dict[str, Any]:
    row = as_fields(run, RUN_FIELDS) if run is not None else {}
    if run_id is not None:
        row["run_id"] = run_id
    if "run_id" not in row:
        raise ValueError("run_id is required")
    if row.get("service"):
        row["service"] = public_service_url(str(row["service"]))
    if isinstance(row.get("new_fields"), list):
        row["new_fields"] = json_text(row["new_fields"])
    return row


def record_run(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    attempt_log_paths: Iterable[Path],
    states: Sequence[Any],
    run: Any,
) -> None:
    """A run's bookkeeping as its load's last step writes it: its requests, its query states, its row. The
    bookkeeping tables are made and described once (each time reads the database's catalog, 0.1-0.2 s at 161
    tables)."""
    ensure_bookkeeping(con)
    _insert_requests(con, run_id, attempt_log_paths)
    _upsert_query_states(con, run_id, states)
    _upsert(con, "runs", ["run_id"], _run_row(run, None))


def upsert_run(con: duckdb.DuckDBPyConnection, run: Any, run_id: str | None = None) -> None:
    """Insert or update the given fields of a run row; fields not given keep their stored values."""
    ensure_bookkeeping(con)
    _upsert(con, "runs", ["run_id"], _run_row(run, run_id))


def _request_rows(run_id: str, path: Path) -> Iterator[dict[str, Any]]:
    for rec in iter_attempts(path):
        row = {name: rec.get(name) for name in ATTEMPT_SCHEMA.names}
        row["run_id"] = run_id
        params = rec.get("params")
        row["params"] = json_text(redact_params(params) if isinstance(params, Mapping) else params)
        yield row


def insert_requests(con: duckdb.DuckDBPyConnection, run_id: str, attempt_log_paths: Iterable[Path]) -> int:
    """Replace the run's request rows of the queries found in the logs; returns rows inserted.

    Logs are read in chunks, so memory does not grow with the number of attempts.
    """
    ensure_bookkeeping(con)
    return _insert_requests(con, run_id, attempt_log_paths)


def _insert_requests(con: duckdb.DuckDBPyConnection, run_id: str, attempt_log_paths: Iterable[Path]) -> int:
    replaced: set[str] = set()
    total = 0

    def flush(rows: list[dict[str, Any]]) -> None:
        fresh = sorted({str(r["query_id"]) for r in rows} - replaced)
        if fresh:
            con.execute(
                "DELETE FROM requests WHERE run_id = ? AND query_id IN (SELECT unnest(?))", [run_id, fresh]
            )
            replaced.update(fresh)
        con.register("_harvest_requests", pa.Table.from_pylist(rows, schema=_LOG_SCHEMA))
        try:
            con.execute(
                f"INSERT INTO requests ({_REQUEST_COLUMNS}) SELECT {_SELECT_LOG} FROM _harvest_requests"
            )
        finally:
            con.unregister("_harvest_requests")

    rows: list[dict[str, Any]] = []  # across files: a run of 2,000 one-page queries is one insert, not 2,000
    for path in attempt_log_paths:
        for row in _request_rows(run_id, Path(path)):
            if row["query_id"] is None:
                log.warning("attempt log %s: skipping a line without query_id", path)
                continue
            rows.append(row)
            if len(rows) >= _REQUESTS_CHUNK:
                flush(rows)
                total += len(rows)
                rows = []
    if rows:
        flush(rows)
        total += len(rows)
    return total


def upsert_query_states(con: duckdb.DuckDBPyConnection, run_id: str, states: Sequence[Any]) -> int:
    """Insert or replace query_state rows; next_cursor may be a dict (stored as JSON text) or None.

    One statement over a registered Arrow table: `executemany` ran one statement per row (40 ms each on a busy
    machine; a run with 800 dependent queries spent half a minute here)."""
    ensure_bookkeeping(con)
    return _upsert_query_states(con, run_id, states)


def _upsert_query_states(con: duckdb.DuckDBPyConnection, run_id: str, states: Sequence[Any]) -> int:
    """In statements of `_STATES_CHUNK` queries: a row here is ~3 KB of Python objects before Arrow has it, and
    a night of 20,000 dependent queries built them all at once (~60 MB at the run's end, over the load's peak).
    A query listed twice keeps its later state: read last first, its earlier states are skipped, so no statement
    replaces a row an earlier one of the same transaction wrote (DuckDB 1.2 then drops the statement's others)."""
    rows: list[list[Any]] = []
    seen: set[str] = set()
    total = 0
    for state in reversed(states):
        fields = as_fields(state, QUERY_STATE_FIELDS)
        if not fields.get("query_id"):
            raise ValueError("every query state needs a query_id")
        if fields["query_id"] in seen:
            continue
        seen.add(fields["query_id"])
        fields["next_cursor"] = json_text(fields.get("next_cursor"))
        fields["backfill_cursor"] = json_text(fields.get("backfill_cursor"))
        extraction = ExtractionReport.from_dict(fields.get("extraction"))
        fields.update(extraction.totals(), extraction=json_text(extraction.as_dict()))
        fields["cursor_unread"] = (extraction.unread_cursor or {}).get("field")
        fields["new_fields"] = json_text(fields["new_fields"])
        rows.append([run_id, *(fields.get(n) for n in QUERY_STATE_FIELDS)])
        if len(rows) >= _STATES_CHUNK:
            total += _insert_query_states(con, rows)
            rows = []
    return total + _insert_query_states(con, rows)


def _insert_query_states(con: duckdb.DuckDBPyConnection, rows: Collection[list[Any]]) -> int:
    if not rows:
        return 0
    cols = ("run_id", *QUERY_STATE_FIELDS)
    table = pa.Table.from_pylist([dict(zip(cols, row, strict=True)) for row in rows])
    con.register("_harvest_query_state", table)
    try:
        names = ", ".join(cols)
        con.execute(f"INSERT OR REPLACE INTO query_state ({names}) SELECT {names} FROM _harvest_query_state")
    finally:
        con.unregister("_harvest_query_state")
    return len(rows)
