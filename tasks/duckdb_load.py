"""Loads a run's Parquet files and bookkeeping into DuckDB in one short write transaction.

DuckDB allows one writing process per file, and users keep the database open in a notebook or the CLI. So the
database is opened only for the load step (open, load, close) and a lock conflict becomes `DatabaseBusy`
with instructions: nothing is lost, because the run's data is already durable in raw pages and Parquet, and
loading is idempotent, so rerunning the load later gives the same tables.

Merge rule for record tables: the newest fetch of a key wins. Within a batch only the row with the latest
``_fetched_at`` per primary key is kept; against the table, a row is replaced only by a fetch at least as new,
so a rerun never duplicates rows and reloading an old run never overwrites newer data. Rows whose primary key
is NULL cannot be merged and are skipped; their count is reported in `LoadResult.skipped_null_pk` and logged.

The ``*_con`` style functions take an open connection and do not manage transactions, so a later ``rebuild``
can compose them (e.g. re-create tables from raw pages) inside its own transaction.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import duckdb
import orjson
import pyarrow as pa

from connectors.extraction import ExtractionReport
from tasks.attemptlog import iter_attempts
from tasks.layout import KindLike
from tasks.rawstore import redact_params

log = logging.getLogger(__name__)

FETCHED_AT = "_fetched_at"
_REQUESTS_CHUNK = 10_000

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
    ("lists_missing", "BIGINT"),
    ("new_fields", "VARCHAR"),
)
"""What the pages held vs what was kept (`connectors.extraction`), in `query_state` and `runs`."""
RUNS_ADDED_COLUMNS = (
    ("budget", "BIGINT"),
    ("resumes", "INTEGER"),
    ("continues", "VARCHAR"),
    ("error", "VARCHAR"),
    ("balance_before", "BIGINT"),
    ("balance_after", "BIGINT"),
    ("service_billed", "BIGINT"),
    *EXTRACTION_COLUMNS,
)
"""Columns `runs` gained after its first release: added to existing databases when they are next loaded."""
REQUESTS_DDL = """
CREATE TABLE IF NOT EXISTS requests (
    run_id VARCHAR NOT NULL,
    query_id VARCHAR NOT NULL,
    endpoint VARCHAR,
    params VARCHAR,
    page INTEGER,
    attempt INTEGER,
    status_code INTEGER,
    credits BIGINT,
    duration_ms DOUBLE,
    error VARCHAR,
    started_at TIMESTAMPTZ
)"""
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
QUERY_STATE_ADDED_COLUMNS = (*EXTRACTION_COLUMNS, ("extraction", "VARCHAR"))
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
REQUEST_FIELDS = (
    "query_id",
    "endpoint",
    "params",
    "page",
    "attempt",
    "status_code",
    "credits",
    "duration_ms",
    "error",
    "started_at",
)
_REQUESTS_ARROW = pa.schema(
    [
        ("run_id", pa.string()),
        ("query_id", pa.string()),
        ("endpoint", pa.string()),
        ("params", pa.string()),
        ("page", pa.int32()),
        ("attempt", pa.int32()),
        ("status_code", pa.int32()),
        ("credits", pa.int64()),
        ("duration_ms", pa.float64()),
        ("error", pa.string()),
        ("started_at", pa.string()),
    ]
)


LOAD_MEMORY_LIMIT = os.environ.get("HARVEST_DUCKDB_MEMORY_LIMIT", "1GB")
"""DuckDB's memory cap for the load step; beyond it DuckDB spills to disk, so loading a run's rows does not make
the process grow with the size of the run. Raise it (HARVEST_DUCKDB_MEMORY_LIMIT) for faster loads of huge runs."""


class DatabaseBusy(RuntimeError):
    """The database file is locked by another process; the landed data is safe and the load can be rerun."""

    def __init__(self, db_path: Path, data_dir: Path, rerun: str = "harvest load ...") -> None:
        self.db_path = db_path
        self.data_dir = data_dir
        super().__init__(
            f"{db_path} is open in another process (close your DuckDB session); "
            f"the data is safe in Parquet at {data_dir}; rerun `{rerun}`"
        )


class LoadResult(dict[str, int]):
    """Rows per table after the load; `skipped_null_pk` counts rows left out because their key was NULL."""

    def __init__(self) -> None:
        super().__init__()
        self.skipped_null_pk: dict[str, int] = {}


def _is_lock_error(exc: BaseException) -> bool:
    return "lock" in str(exc).lower()


@contextmanager
def write_connection(
    db_path: Path | str, *, data_dir: Path | None = None, rerun: str = "harvest load ..."
) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open the database for a short write and always close it, turning a lock conflict into DatabaseBusy.

    DuckDB 2.0 reports a conflict as ``duckdb.IOException`` ("Could not set lock on file ...").
    """
    path = Path(db_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        con = duckdb.connect(
            str(path), config={"memory_limit": LOAD_MEMORY_LIMIT, "preserve_insertion_order": False}
        )
    except duckdb.IOException as exc:
        if _is_lock_error(exc):
            raise DatabaseBusy(path, data_dir or path.parent / "parquet", rerun) from exc
        raise
    try:
        yield con
    finally:
        con.close()


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """All-or-nothing: a load that fails half-way leaves the database as it was, so it can be rerun."""
    con.begin()
    try:
        yield
    except BaseException:
        con.rollback()
        raise
    con.commit()


_transaction = transaction  # early name, kept for callers written against it


def _count(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> int:
    """Scalar count via fetchall: DuckDB 2.0 treats a result read with fetchone() as unfinished and refuses
    further work (register, ...) on the connection until it is drained."""
    rows = con.execute(sql, params).fetchall()
    return int(rows[0][0]) if rows else 0


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# --- record tables ------------------------------------------------------------------------------------------


def duckdb_types(con: duckdb.DuckDBPyConnection, schema: pa.Schema) -> list[tuple[str, str]]:
    """DuckDB column types for an Arrow schema, as DuckDB itself maps them (nested types included)."""
    con.register("_harvest_empty", schema.empty_table())
    try:
        rows = con.execute("DESCRIBE SELECT * FROM _harvest_empty").fetchall()
    finally:
        con.unregister("_harvest_empty")
    return [(str(r[0]), str(r[1])) for r in rows]


def _table_columns(con: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    rows = con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND table_name = ? ORDER BY column_index",
        [table],
    ).fetchall()
    return [str(r[0]) for r in rows]


def _table_primary_key(con: duckdb.DuckDBPyConnection, table: str) -> tuple[str, ...]:
    rows = con.execute(
        "SELECT constraint_column_names FROM duckdb_constraints() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND table_name = ? AND constraint_type = 'PRIMARY KEY'",
        [table],
    ).fetchall()
    return tuple(rows[0][0]) if rows else ()


def ensure_table(con: duckdb.DuckDBPyConnection, kind: KindLike) -> list[str]:
    """Create the kind's table, or add the columns its schema gained; returns the table's columns.

    Columns are never dropped or retyped here: old rows keep them, and a changed key needs a rebuild.
    """
    if not kind.primary_key:
        raise ValueError(f"table {kind.table}: a record kind needs a primary key")
    missing_key = [c for c in kind.primary_key if c not in kind.schema.names]
    if missing_key or FETCHED_AT not in kind.schema.names:
        raise ValueError(f"table {kind.table}: schema lacks {missing_key or [FETCHED_AT]}")
    types = duckdb_types(con, kind.schema)
    existing = _table_columns(con, kind.table)
    table = quote_ident(kind.table)
    if not existing:
        cols = ", ".join(f"{quote_ident(n)} {t}" for n, t in types)
        key = ", ".join(quote_ident(c) for c in kind.primary_key)
        con.execute(f"CREATE TABLE {table} ({cols}, PRIMARY KEY ({key}))")
        return [n for n, _ in types]
    current_key = _table_primary_key(con, kind.table)
    if tuple(c.lower() for c in current_key) != tuple(c.lower() for c in kind.primary_key):
        raise ValueError(
            f"table {kind.table}: primary key changed from {current_key} to {kind.primary_key}; "
            "rebuild the table"
        )
    known = {c.lower() for c in existing}
    for name, typ in types:
        if name.lower() not in known:
            log.info("table %s: adding column %s %s", kind.table, name, typ)
            con.execute(f"ALTER TABLE {table} ADD COLUMN {quote_ident(name)} {typ}")
            existing.append(name)
    return existing


def merge_files(con: duckdb.DuckDBPyConnection, kind: KindLike, files: Sequence[Path]) -> tuple[int, int]:
    """Merge Parquet files into the kind's table with one MERGE; returns (rows after, rows skipped: null key).

    Ties on ``_fetched_at`` inside a batch go to the later file name / later row, so the choice is stable.
    Columns the table has but this schema lacks are set NULL on replace: a replaced row is the newer fetch.
    """
    columns = ensure_table(con, kind)
    table = quote_ident(kind.table)
    fetched = quote_ident(FETCHED_AT)
    skipped = 0
    if files:
        paths = [str(p) for p in files]
        source = (
            "read_parquet(?, hive_partitioning = false, union_by_name = true, "
            "filename = '_harvest_file', file_row_number = true)"
        )
        key = [quote_ident(c) for c in kind.primary_key]
        null_key = " OR ".join(f"{k} IS NULL" for k in key)
        skipped = _count(con, f"SELECT count(*) FROM {source} WHERE {null_key}", [paths])
        if skipped:
            log.warning(
                "table %s: skipped %d rows with a NULL primary key %s", kind.table, skipped, kind.primary_key
            )
        names = [quote_ident(n) for n in kind.schema.names]
        in_schema = {n.lower() for n in kind.schema.names}
        extra = [quote_ident(c) for c in columns if c.lower() not in in_schema]
        key_set = set(key)
        updates = [f"{n} = s.{n}" for n in names if n not in key_set] + [f"{c} = NULL" for c in extra]
        con.execute(
            f"""
            MERGE INTO {table} AS t
            USING (
                SELECT {", ".join(names)} FROM {source}
                WHERE NOT ({null_key})
                QUALIFY row_number() OVER (
                    PARTITION BY {", ".join(key)}
                    ORDER BY {fetched} DESC NULLS LAST, _harvest_file DESC, file_row_number DESC
                ) = 1
            ) AS s
            ON {" AND ".join(f"t.{k} = s.{k}" for k in key)}
            WHEN MATCHED AND (t.{fetched} IS NULL OR s.{fetched} >= t.{fetched})
                THEN UPDATE SET {", ".join(updates)}
            WHEN NOT MATCHED THEN INSERT ({", ".join(names)}) VALUES ({", ".join(f"s.{n}" for n in names)})
            """,
            [paths],
        )
    return _count(con, f"SELECT count(*) FROM {table}"), skipped


def merge_batches(
    con: duckdb.DuckDBPyConnection, batches: Iterable[tuple[KindLike, Sequence[Path]]]
) -> LoadResult:
    """Merge several kinds' files on an open connection (no transaction handling; see module docstring)."""
    result = LoadResult()
    for kind, files in batches:
        rows, skipped = merge_files(con, kind, files)
        result[kind.table] = rows
        result.skipped_null_pk[kind.table] = result.skipped_null_pk.get(kind.table, 0) + skipped
    return result


def load_tables(
    db_path: Path | str,
    batches: Sequence[tuple[KindLike, Sequence[Path]]],
    *,
    data_dir: Path | None = None,
    rerun: str = "harvest load ...",
) -> LoadResult:
    """Merge a run's Parquet files into DuckDB in one transaction; returns rows per table after the load.

    Either every table is merged or none is, so a failed load can simply be rerun.
    """
    with write_connection(db_path, data_dir=data_dir, rerun=rerun) as con, transaction(con):
        return merge_batches(con, batches)


# --- bookkeeping --------------------------------------------------------------------------------------------


def ensure_bookkeeping(con: duckdb.DuckDBPyConnection) -> None:
    for ddl in (RUNS_DDL, REQUESTS_DDL, QUERY_STATE_DDL):
        con.execute(ddl)
    for table, added in (("runs", RUNS_ADDED_COLUMNS), ("query_state", QUERY_STATE_ADDED_COLUMNS)):
        for name, sql_type in added:
            con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {name} {sql_type}")


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


def _json_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


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
        row["new_fields"] = _json_text(row["new_fields"])
    return row


def upsert_run(con: duckdb.DuckDBPyConnection, run: Any, run_id: str | None = None) -> None:
    """Insert or update the given fields of a run row; fields not given keep their stored values."""
    ensure_bookkeeping(con)
    _upsert(con, "runs", ["run_id"], _run_row(run, run_id))


def record_run_start(db_path: Path | str, run: Any = None, **fields: Any) -> None:
    """Record a run as started (status 'running').

    ``run`` is a mapping or dataclass with run_id, job, spec_hash, service, started; keyword fields override
    it. Restarting a finished run id (a resume) clears its finish time.
    """
    row = {**(as_fields(run, RUN_FIELDS) if run is not None else {}), **fields}
    row.setdefault("status", "running")
    row.setdefault("finished", None)
    with write_connection(db_path) as con, transaction(con):
        upsert_run(con, row)


def record_run_end(db_path: Path | str, run: Any = None, **fields: Any) -> None:
    """Record a run's end: run_id, finished, status, credits_spent, records (plus any start field)."""
    row = {**(as_fields(run, RUN_FIELDS) if run is not None else {}), **fields}
    with write_connection(db_path) as con, transaction(con):
        upsert_run(con, row)


def _request_rows(run_id: str, path: Path) -> Iterator[dict[str, Any]]:
    for rec in iter_attempts(path):
        row = {name: rec.get(name) for name in REQUEST_FIELDS}
        row["run_id"] = run_id
        params = rec.get("params")
        row["params"] = _json_text(redact_params(params) if isinstance(params, Mapping) else params)
        yield row


def insert_requests(con: duckdb.DuckDBPyConnection, run_id: str, attempt_log_paths: Iterable[Path]) -> int:
    """Replace the run's request rows of the queries found in the logs; returns rows inserted.

    Logs are read in chunks, so memory does not grow with the number of attempts.
    """
    ensure_bookkeeping(con)
    replaced: set[str] = set()
    total = 0

    def flush(rows: list[dict[str, Any]]) -> None:
        fresh = sorted({str(r["query_id"]) for r in rows} - replaced)
        if fresh:
            con.execute(
                "DELETE FROM requests WHERE run_id = ? AND query_id IN (SELECT unnest(?))", [run_id, fresh]
            )
            replaced.update(fresh)
        con.register("_harvest_requests", pa.Table.from_pylist(rows, schema=_REQUESTS_ARROW))
        try:
            con.execute(
                "INSERT INTO requests SELECT run_id, query_id, endpoint, params, page, attempt, status_code, "
                "credits, duration_ms, error, CAST(started_at AS TIMESTAMPTZ) FROM _harvest_requests"
            )
        finally:
            con.unregister("_harvest_requests")

    for path in attempt_log_paths:
        rows: list[dict[str, Any]] = []
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


def load_requests(db_path: Path | str, run_id: str, attempt_log_paths: Iterable[Path]) -> int:
    """Load attempt logs into `requests`; idempotent per (run, query), so reloading never duplicates rows."""
    with write_connection(db_path) as con, transaction(con):
        return insert_requests(con, run_id, attempt_log_paths)


def upsert_query_states(con: duckdb.DuckDBPyConnection, run_id: str, states: Iterable[Any]) -> int:
    """Insert or replace query_state rows; next_cursor may be a dict (stored as JSON text) or None."""
    ensure_bookkeeping(con)
    rows = []
    for state in states:
        fields = as_fields(state, QUERY_STATE_FIELDS)
        if not fields.get("query_id"):
            raise ValueError("every query state needs a query_id")
        fields["next_cursor"] = _json_text(fields.get("next_cursor"))
        extraction = ExtractionReport.from_dict(fields.get("extraction"))
        fields.update(extraction.totals(), extraction=_json_text(extraction.as_dict()))
        fields["new_fields"] = _json_text(fields["new_fields"])
        rows.append([run_id, *(fields.get(n) for n in QUERY_STATE_FIELDS)])
    if rows:
        cols = ("run_id", *QUERY_STATE_FIELDS)
        con.executemany(
            f"INSERT OR REPLACE INTO query_state ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
            rows,
        )
    return len(rows)


def save_query_states(db_path: Path | str, run_id: str, states: Iterable[Any]) -> int:
    """Store each query's progress (mappings or dataclasses) so a later run can see where queries stopped."""
    with write_connection(db_path) as con, transaction(con):
        return upsert_query_states(con, run_id, states)
