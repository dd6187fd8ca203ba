"""The load step: a run's manifest -> DuckDB, in short write transactions (one per merge step, then the run's
bookkeeping: the run is loaded when that last one commits).

The manifest (written atomically before the load) lists what a run landed: its Parquet files, query states and
totals. Loading from it is idempotent, so when DuckDB is held by another process the run still succeeds, its
data stays safe in Parquet, and `harvest load OUTPUT` finishes the job later.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from connectors.catalog.endpoints import all_kinds
from flows.run.interrupt import LoadInterrupted, StopOnSignal
from tasks.database.bookkeeping import insert_requests, upsert_query_states, upsert_run
from tasks.database.connection import DatabaseBusy, transaction, write_connection
from tasks.database.history_views import refresh_history_views
from tasks.database.record_tables import merge_batches
from tasks.output.layout import OutputLayout
from tasks.output.machine_fault import as_machine_fault
from tasks.output.manifest import RunManifest, pending_manifests, write_manifest


def load_manifest_into_duckdb(
    layout: OutputLayout, manifest: RunManifest, db: Path | None = None
) -> dict[str, int]:
    """Merge the run's tables step by step, then its bookkeeping in one transaction; raises DatabaseBusy when the
    file is held (or LoadOutOfMemory, its kind, when DuckDB's memory limit was too small): rerun the load.

    `db`: another database file than the output's (`harvest rebuild` builds a new one beside it)."""
    kinds = all_kinds()
    batches = [(kinds[table], files) for table, files in sorted(manifest.files_by_table(layout).items())]
    requests = [layout.resolve(q["requests_file"]) for q in manifest.queries if q.get("requests_file")]
    with write_connection(
        db or layout.db, data_dir=layout.parquet_root, rerun=f"harvest load {layout.root}"
    ) as con:
        result = merge_batches(con, batches)  # a transaction per step: memory stays bounded, steps idempotent
        with transaction(con):  # the run is loaded when this commits
            insert_requests(con, manifest.run_id, [p for p in requests if p.exists()])
            upsert_query_states(con, manifest.run_id, manifest.queries)  # picks the query_state fields
            upsert_run(con, manifest.bookkeeping_row())  # picks the runs fields
            refresh_history_views(con, layout.parquet_root)
        tables = dict(result)  # rows per table after the merge
    manifest.loaded = True
    write_manifest(layout, manifest)
    return tables


def refresh_views(layout: OutputLayout) -> list[str]:
    """Point the history views at this output directory's Parquet (after a move, or files added by hand)."""
    with write_connection(
        layout.db, data_dir=layout.parquet_root, rerun=f"harvest load {layout.root}"
    ) as con:
        return refresh_history_views(con, layout.parquet_root)


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
                    tables = load_manifest_into_duckdb(layout, manifest)
                except DatabaseBusy as exc:
                    return loaded, str(exc)
                except Exception as exc:  # this machine could not write DuckDB: nothing may be paid now
                    fault = as_machine_fault(exc, layout.db)
                    if fault is None:
                        raise
                    raise fault from None
                rows = sum(tables.values())
                loaded.append({"run_id": manifest.run_id, "status": manifest.status, "rows": rows})
    except LoadInterrupted as exc:  # the runs stay pending
        return loaded, f"a second {exc} left them for later (`harvest load {layout.root}`, or the next run)"
    return loaded, None
