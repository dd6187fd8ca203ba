"""`harvest rebuild`: the Parquet files and DuckDB tables derived again from the stored raw pages, no request sent.

The raw pages are the receipt of every paid answer; everything else in an output directory is derived from them
and the run manifests. So a catalog fix after a shape change, a new column or a type change reaches old data by
rebuilding, and a lost or corrupted `harvest.duckdb` or `parquet/` comes back without paying again (the service
may be gone).

Order keeps what was landed safe at every step: a run's queries are landed again one by one (a query's old
Parquet parts are replaced by its new one); the database is built in a new file beside the old one and moved
over it only when complete. An interrupted rebuild is finished by running it again.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

import duckdb

from connectors import catalog
from connectors.pager import QuerySpec
from flows.load import load_manifest_into_duckdb
from flows.manifest import RunManifest, all_manifests, write_manifest
from flows.spec import UsageError
from tasks.collect import land_raw_pages, open_sink
from tasks.database import quote_ident
from tasks.layout import OutputLayout

KEPT_TABLES = ("exports",)
"""Tables that record what happened outside the output directory (where runs were exported): carried over from
the old database when it is readable, since raw pages cannot say it."""


@dataclass
class RebuildReport:
    runs: list[str] = field(default_factory=list)
    """Runs whose Parquet was landed again from raw pages."""
    loaded: list[str] = field(default_factory=list)
    """Runs loaded into the new database (every finished run)."""
    skipped: list[str] = field(default_factory=list)
    """Runs left alone, with why (a killed run still to resume)."""
    pages: int = 0
    records: int = 0
    tables: dict[str, int] = field(default_factory=dict)


def rebuild(layout: OutputLayout, run_id: str | None = None) -> RebuildReport:
    """Land the stored raw pages of one run (or all) again, then build DuckDB anew from every finished run."""
    if not layout.raw_root.is_dir():
        raise UsageError(
            f"{layout.root}: no raw pages here (raw/ is missing); allowed: a harvest output directory"
        )
    manifests = all_manifests(layout)
    if run_id is not None and run_id not in {m.run_id for m in manifests}:
        known = ", ".join(m.run_id for m in manifests) or "none"
        raise UsageError(f"--run: no run {run_id!r} in {layout.root}; runs there: {known}")
    report = RebuildReport()
    with ExitStack() as locks:
        for job in sorted({m.job for m in manifests}):
            locks.enter_context(_job_lock(layout, job))
        done = []
        for m in manifests:
            if m.unfinished and not m.loaded:
                report.skipped.append(f"{m.run_id}: unfinished ({m.status}); `harvest run SPEC` resumes it")
                continue
            if run_id is None or m.run_id == run_id:
                m = reland_run(layout, m, report)
                report.runs.append(m.run_id)
            done.append(m)
        report.tables = rebuild_database(layout, done)
        report.loaded = [m.run_id for m in done]
    return report


@contextmanager
def _job_lock(layout: OutputLayout, job: str) -> Iterator[None]:
    from flows.lock import JobLocked, acquire

    try:
        lock = acquire(layout.lock_file(job))
    except JobLocked as exc:
        raise UsageError(f"cannot rebuild while a run is going: {exc}") from None
    try:
        lock.describe(job=job, run_id="harvest rebuild")
        yield
    finally:
        lock.release()


def reland_run(layout: OutputLayout, run: RunManifest, report: RebuildReport) -> RunManifest:
    """Land every query's raw pages again with today's catalog; the manifest then lists the new files."""
    started = datetime.fromisoformat(run.started)
    endpoints = catalog.endpoints()
    queries = []
    for n, q in enumerate(run.queries):
        raw = (
            layout.resolve(q["raw_file"]) if q.get("raw_file") else layout.raw_file(run.run_id, q["query_id"])
        )
        endpoint = endpoints.get(q["endpoint"])
        if endpoint is None or not raw.exists():
            queries.append(q)  # no page was paid (or the endpoint left the catalog): nothing to land
            continue
        spec = QuerySpec(query_id=q["query_id"], endpoint=q["endpoint"], params={})
        sink = open_sink(layout, run.run_id, started, n, spec.query_id)
        try:
            point = land_raw_pages(layout, run.run_id, started, spec, endpoint, sink)
        finally:
            files = sink.close()
        report.pages += point.pages
        report.records += point.records
        queries.append(
            {
                **q,
                "records": point.records,
                "extraction": point.extraction.as_dict(),
                "files": [(table, layout.relative(path), rows) for table, path, rows in files],
            }
        )
    relanded = replace(run, queries=queries)
    write_manifest(layout, relanded)
    return relanded


def rebuild_database(layout: OutputLayout, runs: list[RunManifest]) -> dict[str, int]:
    """A new `harvest.duckdb` from the runs' Parquet and bookkeeping, moved over the old one when complete."""
    fresh = layout.root / ".harvest.duckdb.rebuild"
    for leftover in (fresh, Path(f"{fresh}.wal")):
        leftover.unlink(missing_ok=True)
    tables: dict[str, int] = {}
    for run in runs:
        tables.update(load_manifest_into_duckdb(layout, run, db=fresh))
    _carry_over(layout.db, fresh)
    if not runs:
        duckdb.connect(str(fresh)).close()
    Path(f"{layout.db}.wal").unlink(missing_ok=True)  # the old file's log would be replayed onto the new file
    os.replace(fresh, layout.db)
    return tables


def _carry_over(old: Path, fresh: Path) -> None:
    if not old.exists():
        return
    try:
        con = duckdb.connect(str(fresh))
    except duckdb.Error:
        return
    try:
        con.execute(f"ATTACH {_literal(str(old))} AS old (READ_ONLY)")
        have = {
            r[0]
            for r in con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = 'old'"
            ).fetchall()
        }
        for table in KEPT_TABLES:
            if table in have:
                con.execute(f"CREATE OR REPLACE TABLE {quote_ident(table)} AS FROM old.{quote_ident(table)}")
    except duckdb.Error:
        pass  # the old database is unreadable (that may be why we rebuild): nothing to carry over
    finally:
        con.close()


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
