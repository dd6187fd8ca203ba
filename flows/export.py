"""`harvest export`: landed Parquet handed to a warehouse's storage, with a commit marker a loader can trust.

Any filesystem pyarrow knows: a local path, `s3://bucket/prefix` (the standard AWS variables, `AWS_ENDPOINT_URL`
included, so MinIO, R2 and moto work), `gs://...`. Files keep their Hive layout (`<table>/date=.../<file>`).
An export is incremental: it copies the runs not yet exported to that destination (tracked in DuckDB's
`exports` table), then writes `_exports/<export_id>/_manifest.json` (relative keys, rows, schemas, run ids and
primary keys per table, so a warehouse can merge) and last `_SUCCESS`: a loader takes an export only once its
`_SUCCESS` exists. A failed export leaves no `_SUCCESS` and records nothing; running it again sends the same
runs to the same keys. `snapshot` exports the merged tables instead (`<table>/snapshot.parquet`, replaced each
time), with `_manifest.json` and `_SUCCESS` at the destination's root.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from connectors.catalog import all_kinds
from flows.manifest import RunManifest, all_manifests
from flows.spec import UsageError
from flows.spec.job_options import BadDestination, check_destination
from tasks.database import quote_ident, transaction, write_connection
from tasks.layout import OutputLayout

EXPORTS_DDL = """
CREATE TABLE IF NOT EXISTS exports (
    destination VARCHAR NOT NULL,
    run_id VARCHAR NOT NULL,
    export_id VARCHAR NOT NULL,
    kind VARCHAR NOT NULL,
    exported_at TIMESTAMP WITH TIME ZONE NOT NULL,
    files BIGINT NOT NULL,
    rows BIGINT NOT NULL,
    PRIMARY KEY (destination, run_id, export_id)
)"""


@dataclass
class ExportReport:
    destination: str
    export_id: str
    kind: str
    runs: list[str] = field(default_factory=list)
    files: int = 0
    rows: int = 0
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)


def _destination(url: str) -> str:
    try:
        return check_destination(url)
    except BadDestination as exc:
        raise UsageError(f"--to: {exc}") from None


def open_destination(destination: str) -> tuple[pafs.FileSystem, str]:
    if "://" not in destination:
        Path(destination).mkdir(parents=True, exist_ok=True)
        return pafs.LocalFileSystem(), destination
    return pafs.FileSystem.from_uri(destination)


def _export_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")


def _exported_runs(layout: OutputLayout, destination: str) -> set[str]:
    if not layout.db.exists():
        return set()
    con = duckdb.connect(str(layout.db), read_only=True)
    try:
        have = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'exports'").fetchone()
        if not have or not have[0]:
            return set()
        found = con.execute(
            "SELECT DISTINCT run_id FROM exports WHERE destination = ? AND kind = 'increment'", [destination]
        ).fetchall()
        return {r[0] for r in found}
    finally:
        con.close()


def _schema(path_or_schema: Any) -> list[dict[str, str]]:
    schema = pq.read_schema(path_or_schema) if isinstance(path_or_schema, Path) else path_or_schema
    return [{"name": f.name, "type": str(f.type)} for f in schema]


def _table_entry(report: ExportReport, table: str, schema: list[dict[str, str]]) -> dict[str, Any]:
    kinds = all_kinds()
    key = list(kinds[table].primary_key) if table in kinds else []
    return report.tables.setdefault(
        table, {"primary_key": key, "newest_by": "_fetched_at", "rows": 0, "schema": schema, "files": []}
    )


def _copy_run(
    layout: OutputLayout, run: RunManifest, fs: pafs.FileSystem, base: str, report: ExportReport
) -> None:
    local = pafs.LocalFileSystem()
    for table, paths in sorted(run.files_by_table(layout).items()):
        for path in paths:
            key = path.relative_to(layout.parquet_root).as_posix()
            rows = pq.read_metadata(path).num_rows
            fs.create_dir(f"{base}/{Path(key).parent.as_posix()}", recursive=True)
            pafs.copy_files(str(path), f"{base}/{key}", source_filesystem=local, destination_filesystem=fs)
            entry = _table_entry(report, table, _schema(path))
            entry["files"].append({"key": key, "rows": rows, "run_id": run.run_id})
            entry["rows"] += rows
            report.files += 1
            report.rows += rows


def _commit(fs: pafs.FileSystem, folder: str, report: ExportReport, jobs: list[str]) -> None:
    """`_manifest.json`, then `_SUCCESS`: the marker exists only once everything it vouches for does."""
    manifest = {
        "format": "harvest-export/1",
        "export_id": report.export_id,
        "kind": report.kind,
        "created_at": datetime.now(UTC).isoformat(),
        "jobs": jobs,
        "runs": report.runs,
        "tables": report.tables,
    }
    fs.create_dir(folder, recursive=True)
    with fs.open_output_stream(f"{folder}/_manifest.json") as out:
        out.write(json.dumps(manifest, indent=2, sort_keys=True).encode())
    with fs.open_output_stream(f"{folder}/_SUCCESS") as out:
        out.write(b"")


def _record(layout: OutputLayout, report: ExportReport, per_run: dict[str, tuple[int, int]]) -> None:
    now = datetime.now(UTC)
    rerun = "harvest export ... (sends the same runs to the same keys)"
    with write_connection(layout.db, data_dir=layout.parquet_root, rerun=rerun) as con, transaction(con):
        con.execute(EXPORTS_DDL)
        for run_id, (files, rows) in per_run.items():
            con.execute(
                "INSERT OR REPLACE INTO exports VALUES (?, ?, ?, ?, ?, ?, ?)",
                [report.destination, run_id, report.export_id, report.kind, now, files, rows],
            )


def export_increment(layout: OutputLayout, url: str) -> ExportReport:
    """Copy the loaded runs not yet exported to `url`, then commit the export; nothing new: nothing written."""
    destination = _destination(url)
    report = ExportReport(destination, _export_id(), "increment")
    done = _exported_runs(layout, destination)
    runs = [m for m in all_manifests(layout) if m.loaded and m.run_id not in done]
    if not runs:
        return report
    fs, base = open_destination(destination)
    per_run: dict[str, tuple[int, int]] = {}
    for run in runs:
        files, rows = report.files, report.rows
        _copy_run(layout, run, fs, base, report)
        report.runs.append(run.run_id)
        per_run[run.run_id] = (report.files - files, report.rows - rows)
    _commit(fs, f"{base}/_exports/{report.export_id}", report, sorted({m.job for m in runs}))
    _record(layout, report, per_run)
    return report


def export_snapshot(layout: OutputLayout, url: str) -> ExportReport:
    """The merged tables as they are now, one Parquet file each, replacing the destination's last snapshot."""
    destination = _destination(url)
    report = ExportReport(destination, _export_id(), "snapshot")
    if not layout.db.exists():
        raise UsageError(f"{layout.db} does not exist: nothing to export (run a job, or `harvest rebuild`)")
    fs, base = open_destination(destination)
    if fs.get_file_info(f"{base}/_SUCCESS").is_file:
        fs.delete_file(f"{base}/_SUCCESS")  # the old snapshot is being replaced: no longer vouched for
    con = duckdb.connect(str(layout.db), read_only=True)
    try:
        tables = [t for t in sorted(all_kinds()) if _has_table(con, t)]
        for table in tables:
            _snapshot_table(con, table, fs, base, report)
        report.runs = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY started").fetchall()]
    finally:
        con.close()
    _commit(fs, base, report, sorted({m.job for m in all_manifests(layout)}))
    _record(layout, report, {run_id: (0, 0) for run_id in report.runs})
    return report


def _has_table(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    found = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [table]).fetchone()
    return bool(found and found[0])


def _snapshot_table(
    con: duckdb.DuckDBPyConnection, table: str, fs: pafs.FileSystem, base: str, report: ExportReport
) -> None:
    key = f"{table}/snapshot.parquet"
    reader = con.execute(f"FROM {quote_ident(table)}").to_arrow_reader(65_536)
    assert reader is not None  # a query's result always has one
    fs.create_dir(f"{base}/{table}", recursive=True)
    rows = 0
    with (
        fs.open_output_stream(f"{base}/{key}") as out,
        pq.ParquetWriter(out, reader.schema, compression="zstd") as w,
    ):
        for batch in reader:
            w.write_batch(batch)
            rows += batch.num_rows
    entry = _table_entry(report, table, _schema(reader.schema))
    entry["files"].append({"key": key, "rows": rows})
    entry["rows"] = rows
    report.files += 1
    report.rows += rows
