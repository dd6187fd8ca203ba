"""`harvest rebuild`: the Parquet files and DuckDB tables derived again from the stored raw pages, no request sent.

The raw pages are the receipt of every paid answer; everything else in an output directory is derived from them
and the run manifests. So a catalog fix after a shape change, a new column or a type change reaches old data by
rebuilding, and a lost or corrupted `harvest.duckdb` or `parquet/` comes back without paying again (the service
may be gone).

Order keeps what was landed safe at every step: a run's queries are landed again one by one (a run's own files,
or each query's, are replaced by new ones); the database is built in a new file beside the old one and moved
over it only when complete. An interrupted rebuild is finished by running it again.

Rebuilt files keep their names (a run's own files roll over at the same size; a query's part id is taken from the
files its manifest lists), so what an export sent before is replaced key for key. A run whose Parquet rows changed (a catalog fix) is marked
`rebuilt` in its manifest: the next export sends it again to every destination that got other rows than its
files hold now (`export_ledger.run_content`, recorded with each export).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from errno import ENOSPC
from pathlib import Path
from typing import Any

import duckdb

from harvest.connectors.catalog.job_catalog import for_job
from harvest.connectors.catalog.shape_overrides import shapes_data, shapes_of
from harvest.connectors.paging.pager import QuerySpec
from harvest.connectors.plurals import counted
from harvest.flows.console import harvest_line
from harvest.flows.handoff.export_ledger import fingerprints
from harvest.flows.handoff.users_objects import carry_users_objects
from harvest.flows.run.dask.round_files import own_part
from harvest.flows.run.load_step import load_manifest_into_duckdb
from harvest.flows.run.run_again import resume_hint
from harvest.flows.spec import JobSpec, UsageError
from harvest.tasks.database.bookkeeping import EXPORTS_DDL
from harvest.tasks.database.connection import (
    DatabaseBusy,
    is_lock_error,
    lock_holder,
    quote_ident,
    quote_literal,
    write_connection,
)
from harvest.tasks.landing import fresh_parts, land_raw_pages, open_run_sink, open_sink
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.machine_fault import MachineFault, as_machine_fault
from harvest.tasks.output.manifest import RunManifest, run_heads, write_manifest
from harvest.tasks.output.raw_store import RawIndex

KEPT_TABLES = {"exports": EXPORTS_DDL}
"""Tables that record what happened outside the output directory (where runs were exported), with their
definition: carried over from the old database when it is readable, since raw pages cannot say it."""


@dataclass
class RebuildReport:
    runs: list[str] = field(default_factory=list)
    """Runs whose Parquet was landed again from raw pages."""
    loaded: list[str] = field(default_factory=list)
    """Runs loaded into the new database (every finished run)."""
    skipped: list[str] = field(default_factory=list)
    """Runs left alone, with why (a killed run still to resume)."""
    kept: str = ""
    """What the user made in the old database, carried into the new one, by kind (`users_objects`)."""
    lost: list[str] = field(default_factory=list)
    """Tables and views of the old database the new one lacks, with why: said as warnings."""
    lacking: list[str] = field(default_factory=list)
    """Runs not rebuilt whole, with what is missing: pages their manifest counts are gone from `raw/` (their
    Parquet kept as landed, or, that gone too, landed from the pages left). Said as warnings: the user would
    otherwise take the rebuild for whole."""
    pages: int = 0
    records: int = 0
    tables: dict[str, int] = field(default_factory=dict)


def rebuild(layout: OutputLayout, run_id: str | None = None, spec: JobSpec | None = None) -> RebuildReport:
    """Land the stored raw pages of one run (or all) again, then build DuckDB anew from every finished run.

    With `spec`, its `shapes` read the pages of the job's runs (and are recorded in their manifests, so a later
    rebuild reads them the same way); without, each run's own."""
    # `harvest rebuild` refuses such a directory first (`flows.commands.output_arg.landed_output`)
    if not layout.raw_root.is_dir():
        raise UsageError(f"{layout.root}: no raw pages (no raw/)")
    # each run's whole manifest is read at its turn below (held all at once, a year of nights was gigabytes)
    heads = run_heads(layout)
    if run_id is not None and run_id not in {h.run_id for h in heads}:
        known = ", ".join(h.run_id for h in heads) or "none"
        raise UsageError(f"--run: no run {run_id!r} in {layout.root}; runs there: {known}")
    if spec is not None and spec.name not in {h.job for h in heads}:
        jobs = ", ".join(sorted({h.job for h in heads})) or "none"
        raise UsageError(f"--spec: the spec is job {spec.name!r}; jobs in {layout.root}: {jobs}")
    report = RebuildReport()
    with ExitStack() as locks:
        for job in sorted({h.job for h in heads}):
            locks.enter_context(_job_lock(layout, job))
        held = _runs_held(layout)
        with _fresh_database(layout, report) as fresh:
            for head in heads:
                m = head.manifest()
                if m.unfinished and not m.loaded:
                    if m.run_id in held:
                        raise UsageError(_would_drop(m, layout))
                    report.skipped.append(
                        f"{m.run_id}: unfinished ({m.status}); {resume_hint(m, layout.root)}"
                    )
                    continue
                if run_id is None or m.run_id == run_id:
                    m = _rebuild_run(layout, m, report, spec)
                report.tables.update(load_manifest_into_duckdb(layout, m, db=fresh))
                report.loaded.append(m.run_id)
        _mark_loaded(layout, set(report.loaded))
    return report


def _runs_held(layout: OutputLayout) -> set[str]:
    """The runs the current database holds; none where it cannot be read (a damaged file is why one rebuilds)."""
    if not layout.db.is_file():
        return set()
    try:
        with duckdb.connect(str(layout.db), read_only=True) as con:
            return {r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()}
    except duckdb.Error as exc:
        _refuse_held(layout, exc)
        return set()


def _refuse_held(layout: OutputLayout, exc: duckdb.Error) -> None:
    """Another process holds the file: replaced under it, the `exports` record could not be carried over
    (it went with exit 0) and the holder would write into a file no longer the output's."""
    if is_lock_error(exc):
        rerun = harvest_line("rebuild", layout.root)
        raise DatabaseBusy(layout.db, layout.parquet_root, rerun, holder=lock_holder(exc))


def _would_drop(m: RunManifest, layout: OutputLayout) -> str:
    """A run the database holds whose manifest now says unfinished (a manifest damaged and made again from the
    run's journal): the new database would lack its rows, and the swap would exit 0 with them gone."""
    return (
        f"{m.run_id}: its manifest says unfinished ({m.status}), but {layout.db} holds the run; a rebuild now "
        f"would drop its rows, so nothing was changed. {resume_hint(m, layout.root)}; then rebuild"
    )


def _mark_loaded(layout: OutputLayout, loaded: set[str]) -> None:
    """The runs the new file holds are loaded, now that it is the output's: marked before, a rebuild that failed
    later left runs that were waiting for `harvest load` marked loaded in a file that never held them."""
    for head in run_heads(layout):
        if head.run_id in loaded and not head.loaded:
            write_manifest(layout, replace(head.manifest(), loaded=True))


def _rebuild_run(
    layout: OutputLayout, run: RunManifest, report: RebuildReport, spec: JobSpec | None
) -> RunManifest:
    """One run landed again, or kept as landed when pages its manifest counts are gone from `raw/`.

    Its raw pages are its only receipt: when some are gone (deleted to save space, lost by a disk) while its
    Parquet files are all there, landing it again would replace those files with fewer rows, drop the rows from
    the new database, and have the next export delete them at the destination. A run whose files are gone too is
    landed from what is left: there is nothing more to lose, but the user is told which records no table holds."""
    index = RawIndex(layout.raw_files(run.run_id)) if _own_files(run) else None
    lacking, paid = _lacking(layout, run, index)
    where = layout.run_dir(run.run_id)
    if lacking and all(layout.resolve(path).exists() for _, path, _ in run.all_files()):
        report.lacking.append(
            f"{run.run_id}: not rebuilt: {lacking} of its {paid} pages are not in {where} (deleted, or lost by "
            "the disk): its Parquet files are kept as landed and loaded, not derived again (put the raw pages "
            "back to rebuild it)"
        )
        return run
    if spec is not None and run.job == spec.name:
        declared = {**run.declared, **spec.declared()}
        run = replace(run, shapes=shapes_data(spec.shape_overrides()), declared=declared)
    run = reland_run(layout, run, report, index)
    report.runs.append(run.run_id)
    if lacking:
        report.lacking.append(
            f"{run.run_id}: rebuilt without {counted(lacking, 'page')} of its {paid}, not in {where} (deleted, "
            "or lost by the disk): its Parquet files were gone too, and the records of the pages lost are in no "
            "table now (put the raw pages back and rebuild to have them)"
        )
    return run


def _lacking(layout: OutputLayout, run: RunManifest, index: RawIndex | None) -> tuple[int, int]:
    """Pages the manifest counts that its raw pages no longer hold, and the pages it counts. Kept answers are
    counted as a query's `pages` counts them (`RawIndex.counted`: no 5xx receipt, no answer damaged on the
    wire), as the resume's power cut check does: counting every frame, a kept receipt made up for a lost good
    page, and the run was landed again with fewer rows without a word. `index`: where the pages of a run with
    files of its own are; without, each query's own raw file."""

    def found(q: dict[str, Any]) -> int:
        if index is not None:
            return index.counted.get(q["query_id"], 0)
        return sum(RawIndex([_raw_of(layout, run, q)]).counted.values())  # the query's own file

    paid = sum(int(q.get("pages", 0)) for q in run.queries)
    return sum(max(0, int(q.get("pages", 0)) - found(q)) for q in run.queries), paid


@contextmanager
def _job_lock(layout: OutputLayout, job: str) -> Iterator[None]:
    from harvest.tasks.output.job_lock import JobLocked, acquire

    try:
        lock = acquire(layout.lock_file(job))
    except JobLocked as exc:
        raise UsageError(f"cannot rebuild while a run is going: {exc}") from None
    try:
        lock.describe(job=job, command="harvest rebuild")
        yield
    finally:
        lock.release()


def reland_run(
    layout: OutputLayout, run: RunManifest, report: RebuildReport, index: RawIndex | None = None
) -> RunManifest:
    """Land every query's raw pages again with today's catalog, under the part ids its files had; the manifest
    then lists the new files, and says whether they changed (`rebuilt`) and which old parts are gone. `index`:
    the run's pages, when already found."""
    before = fingerprints(layout, run)
    own = _own_files(run)
    relanded = _reland_own(layout, run, report, index) if own else _reland_queries(layout, run, report)
    after = fingerprints(layout, relanded)
    if after != before:
        retired = (set(run.retired_files) | set(before)) - set(after)
        relanded = replace(relanded, rebuilt=datetime.now(UTC).isoformat(), retired_files=sorted(retired))
    write_manifest(layout, relanded)
    return relanded


def _own_files(run: RunManifest) -> bool:
    """The run wrote files of its own (every query's rows together), not a query's each (Dask rounds, older
    runs); a run with no file yet (all drift) is relanded whole, as its own, and so is a run with both (a flow
    retry of a merged Dask run whose own rounds were too few to merge): every query lands into one writer."""
    return bool(run.files) or not any(q.get("files") for q in run.queries)


def _raw_of(layout: OutputLayout, run: RunManifest, q: dict[str, Any]) -> Path:
    return layout.resolve(q["raw_file"]) if q.get("raw_file") else layout.raw_file(run.run_id, q["query_id"])


def _reland_own(
    layout: OutputLayout, run: RunManifest, report: RebuildReport, index: RawIndex | None = None
) -> RunManifest:
    """A run that wrote its own files: every query's pages into one writer again, its files replaced."""
    started = datetime.fromisoformat(run.started)
    endpoints = for_job(run.declared).overridden(None, shapes_of(run.shapes))
    fresh_parts(layout, run.run_id, started)
    index = RawIndex(layout.raw_files(run.run_id)) if index is None else index
    sink = open_run_sink(layout, run.run_id, started, own_part(run))
    queries = []
    try:
        for q in run.queries:
            endpoint = endpoints.get(q["endpoint"])
            if endpoint is None or not index.has(q["query_id"]):
                queries.append(q)  # no page was paid (or the endpoint left the catalog): nothing to land
                continue
            spec = QuerySpec(query_id=q["query_id"], endpoint=q["endpoint"], params={})
            point = land_raw_pages(layout, run.run_id, started, spec, endpoint, sink, None, False, index)
            report.pages += point.pages
            report.records += point.records
            queries.append(
                {**q, "records": point.records, "extraction": point.extraction.as_dict(), "files": []}
            )
    finally:
        files = sink.close()
    own = layout.listed(files)
    return replace(run, queries=queries, files=own)


def _reland_queries(layout: OutputLayout, run: RunManifest, report: RebuildReport) -> RunManifest:
    """A run whose queries wrote their own files (Dask rounds, older runs): query by query, names kept."""
    started = datetime.fromisoformat(run.started)
    endpoints = for_job(run.declared).overridden(None, shapes_of(run.shapes))
    queries = []
    for n, q in enumerate(run.queries):
        endpoint = endpoints.get(q["endpoint"])
        if endpoint is None or not _raw_of(layout, run, q).exists():
            queries.append(q)  # no page was paid (or the endpoint left the catalog): nothing to land
            continue
        spec = QuerySpec(query_id=q["query_id"], endpoint=q["endpoint"], params={})
        sink = open_sink(layout, run.run_id, started, _part(run, q, n), spec.query_id)
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
                "files": layout.listed(files),
            }
        )
    return replace(run, queries=queries)


def _part(run: RunManifest, query: dict[str, Any], n: int) -> int | str:
    """The part id the query's files carry, so rebuilt files keep their names; the first when Dask rounds wrote
    several (the others are retired). A query without files gets a new one (stable: the manifest's order)."""
    parts = sorted(
        p
        for _, path, _ in query.get("files", [])
        if (p := OutputLayout.part_of(path, run.run_id)) is not None
    )
    return parts[0] if parts else n


@contextmanager
def _fresh_database(layout: OutputLayout, report: RebuildReport) -> Iterator[Path]:
    """A new `harvest.duckdb` beside the old one, each run loaded into it at its turn, moved over the old one
    when all are in; on a failure the old one stays and the new one goes."""
    fresh = layout.root / ".harvest.duckdb.rebuild"
    leftovers = (fresh, Path(f"{fresh}.wal"))
    for leftover in leftovers:
        leftover.unlink(missing_ok=True)
    try:
        yield fresh
        if not fresh.exists():  # no run: an empty file, in the configured storage format
            with write_connection(fresh):
                pass
        _carry_over(layout, fresh, report)
        with write_connection(fresh) as con:
            con.execute("CHECKPOINT")  # raises where the close's own would fail quietly (a full disk)
        if Path(f"{fresh}.wal").exists():  # what was committed is only in the log, which the move leaves
            raise MachineFault(f"{fresh}.wal", "its log could not be written into the database file", ENOSPC)
        Path(f"{layout.db}.wal").unlink(
            missing_ok=True
        )  # the old file's log would be replayed onto the new file
        os.replace(fresh, layout.db)
    except BaseException:
        for leftover in leftovers:
            leftover.unlink(missing_ok=True)
        raise


def _carry_over(layout: OutputLayout, fresh: Path, report: RebuildReport) -> None:
    old = layout.db
    if not old.exists():
        return
    try:
        con = duckdb.connect(str(fresh))
    except duckdb.Error as exc:
        if as_machine_fault(exc, fresh) is not None:
            raise
        return
    try:
        con.execute(f"ATTACH {quote_literal(str(old))} AS old (READ_ONLY)")
        have = {
            r[0]
            for r in con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = 'old'"
            ).fetchall()
        }
        for table, ddl in KEPT_TABLES.items():
            if table in have:  # its definition (the key `INSERT OR REPLACE` needs), then its rows
                con.execute(ddl)
                con.execute(  # by name: an older harvest's table may lack a column added since (`content`)
                    f"INSERT OR REPLACE INTO {quote_ident(table)} BY NAME "
                    f"SELECT DISTINCT * FROM old.{quote_ident(table)}"
                )
        carried = carry_users_objects(con)
        report.kept, report.lost = carried.said(), carried.lost
    except (
        duckdb.Error
    ) as exc:  # the old database is unreadable (that may be why we rebuild): nothing carried
        if as_machine_fault(exc, fresh) is not None:  # but a full disk would drop the exports' record
            raise
        _refuse_held(layout, exc)  # and so would a file another process took meanwhile
        report.lost.append(  # said: a user's work in a file that reads in part goes with it
            f"nothing carried from the old {layout.db.name} ({str(exc).splitlines()[0]}): the record of what "
            "was exported, and any table, view or macro you made in it"
        )
    finally:
        con.close()
