"""The load step: a run's manifest -> DuckDB, in short write transactions (one per merge step, then the run's
bookkeeping: the run is loaded when that last one commits).

The manifest (written atomically before the load) lists what a run landed: its Parquet files, query states and
totals. Loading from it is idempotent, so when DuckDB is held by another process the run still succeeds, its
data stays safe in Parquet, and `harvest load OUTPUT` finishes the job later.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

from harvest.connectors.reading.arrow_memory import system_allocator
from harvest.flows.console import harvest_line
from harvest.flows.orchestrator.prefect_settings import TOLD_AT_END
from harvest.flows.run.dask.round_files import drop_merged, merge_rounds, unpublish
from harvest.flows.run.interrupt import LoadInterrupted, StopOnSignal
from harvest.flows.run.memory import release_memory
from harvest.tasks.database.bookkeeping import record_run
from harvest.tasks.database.connection import DatabaseBusy, LoadOutOfMemory, transaction, write_connection
from harvest.tasks.database.history_views import refresh_history_views
from harvest.tasks.database.load_settings import lock_wait_seconds
from harvest.tasks.database.record_tables import merge_batches
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.machine_fault import as_machine_fault
from harvest.tasks.output.manifest import RunManifest, output_kinds, pending_manifests, write_manifest

log = logging.getLogger(__name__)


def load_manifest_into_duckdb(
    layout: OutputLayout, manifest: RunManifest, db: Path | None = None
) -> dict[str, int]:
    """Merge the run's tables step by step, then its bookkeeping in one transaction; raises DatabaseBusy when
    another process still holds the file after `lock_wait_seconds` of trying (or LoadOutOfMemory, its kind, when
    DuckDB's memory limit was too small): rerun the load.

    `db`: another database file than the output's (`harvest rebuild` builds a new one beside it); the manifest
    then says nothing of it: the run is loaded once that file replaces the output's, and the rebuild says so."""
    drop_merged(layout, manifest)  # round files a kill left beside their merged files: read once, not twice
    with system_allocator():  # the bookkeeping's Arrow tables, 500 queries each: mimalloc kept their pages
        return _load(layout, manifest, db)


def _load(layout: OutputLayout, manifest: RunManifest, db: Path | None) -> dict[str, int]:
    kinds = output_kinds(layout, manifest)
    batches = [(kinds[table], files) for table, files in sorted(manifest.files_by_table(layout).items())]
    listed = [layout.resolve(q["requests_file"]) for q in manifest.queries if q.get("requests_file")]
    requests = list(dict.fromkeys([*layout.requests_files(manifest.run_id), *listed]))  # a session's: once
    with write_connection(
        db or layout.db,
        data_dir=layout.parquet_root,
        rerun=harvest_line("load", layout.root),
        tables=len(batches),
        wait=lock_wait_seconds(),
    ) as con:
        result = merge_batches(
            con, batches, parquet_root=layout.parquet_root
        )  # a transaction per step: memory stays bounded, steps idempotent
        with transaction(con):  # the run is loaded when this commits
            # the query_state and runs fields are picked from the manifest's queries and row
            record_run(
                con,
                manifest.run_id,
                [p for p in requests if p.exists()],
                manifest.queries,
                manifest.bookkeeping_row(),
            )
            refresh_history_views(con, layout.parquet_root, kinds)
        tables = dict(result)  # rows per table after the merge
    if db is None:
        manifest.loaded = True
        write_manifest(layout, manifest)
    return tables


def refresh_views(layout: OutputLayout) -> list[str]:
    """Point the history views at this output directory's Parquet (after a move, or files added by hand)."""
    with write_connection(
        layout.db, data_dir=layout.parquet_root, rerun=harvest_line("load", layout.root)
    ) as con:
        return refresh_history_views(con, layout.parquet_root, output_kinds(layout))


def load_earlier_runs(
    layout: OutputLayout, job: str, skip: str, stop: StopOnSignal | None = None
) -> tuple[list[dict[str, object]], str | None]:
    """Load the job's runs that landed but never reached DuckDB (but run `skip`, about to be resumed), oldest
    first, before a new run starts: incremental queries then see their keys. Returns what was loaded (run id,
    status, rows) and, when DuckDB was busy or a second signal (`stop`) came meanwhile, why the rest was not.
    Raises `MachineFault` when this machine cannot write DuckDB (a full disk): nothing may be paid then."""
    loaded: list[dict[str, object]] = []
    try:
        with stop.loading_earlier() if stop is not None else contextlib.nullcontext():
            for manifest in pending_manifests(layout, job):
                if manifest.run_id == skip:
                    continue
                try:
                    load_manifest_into_duckdb(layout, manifest)
                except DatabaseBusy as exc:
                    return loaded, str(exc)
                except Exception as exc:  # this machine could not write DuckDB: nothing may be paid now
                    fault = as_machine_fault(exc, layout.db)
                    if fault is None:
                        raise
                    raise fault from None
                loaded.append(
                    {"run_id": manifest.run_id, "status": manifest.status, "records": manifest.records}
                )
    except LoadInterrupted as exc:  # the runs stay pending
        return (
            loaded,
            f"a second {exc} left them for later (`{harvest_line('load', layout.root)}`, or the next run)",
        )
    return loaded, None


def write_end_manifest(layout: OutputLayout, manifest: RunManifest) -> bool:
    """The run's end, on disk; False when this machine could not write it (the manifest on disk still says the
    run is going, so the next `harvest run` resumes it, and nothing is loaded now). A Dask run's round files
    are merged first, and go once the manifest names the merged ones (`flows.run.dask.round_files`)."""
    merged = merge_rounds(layout, manifest)
    try:
        write_manifest(layout, manifest)
    except OSError as exc:
        fault = as_machine_fault(exc, layout.manifest_file(manifest.run_id))
        if fault is None:
            raise
        manifest.machine_fault = manifest.machine_fault or str(fault)
        unpublish(layout, manifest.run_id, merged)
        return False
    if merged:
        drop_merged(layout, manifest)
    return True


def load_run(
    layout: OutputLayout, manifest: RunManifest, stop: StopOnSignal
) -> tuple[dict[str, int] | None, str | None, str | None]:
    """Rows per table after loading the run into DuckDB, or None when DuckDB is busy or refused the load (its
    memory limit), a second Ctrl-C abandoned the load, or this machine could not write it (a full disk): the run
    is then loaded by `harvest load`, or by the job's next run before it pays. Second: why DuckDB refused the
    load, with how to load it, when that is not a file another process holds (the run's last lines say it).
    Third: that another process still held the file after the load waited for it (the night exits 1)."""
    release_memory()
    try:
        with stop.load():
            return load_manifest_into_duckdb(layout, manifest), None, None
    except DatabaseBusy as exc:
        if isinstance(exc, LoadOutOfMemory):
            log.warning("%s", exc, extra=TOLD_AT_END)
            return None, str(exc), None
        log.warning("%s", exc)
        if exc.waited:
            return None, None, str(exc)
    except LoadInterrupted:
        pass
    except Exception as exc:
        fault = as_machine_fault(exc, layout.db)
        if fault is None:
            raise
        manifest.machine_fault = (
            manifest.machine_fault or f"{fault}; the run is landed, not loaded into DuckDB"
        )
    return None, None, None


def load_earlier(layout: OutputLayout, job: str, current: str, stop: StopOnSignal) -> list[dict[str, Any]]:
    """The job's runs that landed but never reached DuckDB (killed in the load step, DuckDB busy), loaded
    before this run pays: cheap (their Parquet is written) and incremental queries then see their keys."""
    # Prefect here, in the flow's functions: `harvest load` and `harvest rebuild` load without importing it (~2.5 s)
    from prefect import get_run_logger

    loaded, busy = load_earlier_runs(layout, job, current, stop)
    for run in loaded:
        get_run_logger().info(
            "loaded earlier run %s (%s) into DuckDB first: %s records",
            run["run_id"],
            run["status"],
            run["records"],
        )
    if busy is not None:
        log.warning("earlier runs not loaded yet: %s", busy)
    return loaded
