"""`harvest export`: landed Parquet handed to a warehouse's storage, with a commit marker a loader can trust.

Any filesystem pyarrow knows: a local path, `s3://bucket/prefix` (the standard AWS variables, `AWS_ENDPOINT_URL`
included, so MinIO, R2 and moto work), `gs://...`. Files keep their Hive layout (`<table>/date=.../<file>`).
An export is incremental: it copies the runs not yet at that destination, and runs `harvest rebuild` changed
since (to the same keys: rebuilt files keep their names), then writes `_exports/<export_id>/_manifest.json`
(relative keys, rows, the schema, run ids and primary key per table, so a warehouse can merge) and last
`_SUCCESS`: a loader takes an export only once its `_SUCCESS` exists. Which runs a destination has is recorded
in DuckDB's `exports` table after the commit, and checked against the destination's committed exports
(`flows/handoff/export_ledger.py`). A failed export leaves no `_SUCCESS` and records nothing; running it again sends the
same runs to the same keys. `snapshot` exports the merged tables instead (`<table>/snapshot.parquet`, replaced
each time, streamed), with `_manifest.json` and `_SUCCESS` at the destination's root.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from harvest.connectors.catalog.child_kinds import ChildKind, TableKind
from harvest.flows.handoff.export_ledger import (
    ExportRow,
    find_committed,
    record,
    recorded,
    run_content,
    runs_due,
)
from harvest.flows.spec import UsageError
from harvest.flows.spec.job_options import BadDestination, check_destination
from harvest.tasks.database.connection import has_table, quote_ident
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import RunManifest, output_kinds, run_heads
from harvest.tasks.output.parquet_sink import UnreadableParquet

__all__ = ["ExportReport", "export_increment", "export_snapshot"]
SNAPSHOT_BATCH = 65_536
"""Rows per Arrow batch a snapshot streams from DuckDB to the destination: memory stays at a few batches."""
PARTITIONING = [{"name": "date", "type": "date32", "source": "hive"}]
"""The Hive partition column of increment keys (`<table>/date=YYYY-MM-DD/...`), not stored in the files."""


@dataclass
class ExportReport:
    destination: str
    export_id: str
    kind: str
    runs: list[str] = field(default_factory=list)
    files: int = 0
    rows: int = 0
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    recovered: int = 0
    """Runs the destination had (committed exports) that the `exports` table did not know: recorded now."""
    gone: int = 0
    """Runs the `exports` table says were sent whose export the destination no longer holds: sent again."""
    resent: bool = False
    """A run of this increment went to the destination before (rebuilt or resumed since): a loader that appends
    history deletes its rows first."""
    kinds: dict[str, TableKind] = field(default_factory=dict, repr=False)
    """The output directory's record kinds (built-in and declared: `tasks.output.manifest.output_kinds`)."""
    of_runs: dict[str, tuple[int, int]] = field(default_factory=dict, repr=False)
    """A snapshot's files and rows of each run (`_run_id`: the run that fetched the row), for `exports`."""


def checked_destination(url: str, layout: OutputLayout) -> str:
    """`--to` as stored, or a usage error naming why not (also outside the job's output: `check_destination`)."""
    try:
        destination = check_destination(url, layout.root)
    except BadDestination as exc:
        raise UsageError(f"--to: {exc}") from None
    path = Path(destination.removeprefix("file://"))
    local = "://" not in destination or destination.startswith("file://")
    if local and path.exists() and not path.is_dir():  # errno 17, or delta-rs's NotADirectory
        raise UsageError(f"--to: {destination} is a file; an export writes a directory there (another --to)")
    return destination


def open_destination(destination: str) -> tuple[pafs.FileSystem, str]:
    if "://" not in destination:
        Path(destination).mkdir(parents=True, exist_ok=True)
        return pafs.LocalFileSystem(), destination
    return pafs.FileSystem.from_uri(destination)


def make_dir(fs: pafs.FileSystem, path: str) -> None:
    """A directory where directories exist. On object storage a key needs no parent, and pyarrow's `create_dir`
    writes a zero-byte `<dir>/` marker object, which loaders listing a prefix take for a file."""
    if isinstance(fs, pafs.LocalFileSystem):
        fs.create_dir(path, recursive=True)


def _refuse_mixed(layout: OutputLayout, destination: str, kind: str) -> None:
    problem = recorded(layout, destination, kind).mixed(destination)
    if problem:
        raise UsageError(problem)


def _export_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")


def _schema(schema: pa.Schema) -> list[dict[str, str]]:
    """A schema as `_manifest.json` says it: each column's type as a reader of the files gets it."""
    return [{"name": f.name, "type": str(_as_read(f.type))} for f in schema]


def _as_read(type_: pa.DataType) -> pa.DataType:
    """A type as harvest's Parquet files hold it and Arrow reads it back: a timestamp with a zone in UTC, a list's
    item named `element` (Parquet's name; the catalog's schemas say Arrow's `item`, DuckDB's `l`), nested ones too.
    DuckDB hands a TIMESTAMPTZ over in its session's zone (`Etc/UTC` here, the machine's elsewhere): the instant
    is the same, the type is not, and a loader taking a snapshot and then increments would see two tables."""
    if pa.types.is_timestamp(type_) and type_.tz is not None:
        return pa.timestamp(type_.unit, "UTC")
    if pa.types.is_list(type_):
        return pa.list_(_field_as_read(type_.value_field, "element"))
    if pa.types.is_large_list(type_):
        return pa.large_list(_field_as_read(type_.value_field, "element"))
    if pa.types.is_map(type_):
        return pa.map_(_as_read(type_.key_type), _field_as_read(type_.item_field), type_.keys_sorted)
    if pa.types.is_struct(type_):
        return pa.struct([_field_as_read(f) for f in type_])
    return type_


def _field_as_read(f: pa.Field, name: str | None = None) -> pa.Field:
    return pa.field(name or f.name, _as_read(f.type), f.nullable, f.metadata)


def _snapshot_schema(found: pa.Schema, kind: TableKind | None) -> pa.Schema:
    """The schema a table's snapshot file is written with: the one its increments' files have (the catalog's
    columns, descriptions included), whatever DuckDB's session says; a column the catalog does not have (an
    older harvest's, kept by the table) as DuckDB has it, read the same way."""
    catalog = {f.name: f for f in kind.schema} if kind is not None else {}
    fields = []
    for f in found:
        own = _field_as_read(f)
        known = catalog.get(f.name)
        fields.append(
            _field_as_read(known) if known is not None and _as_read(known.type) == own.type else own
        )
    return pa.schema(fields)


def _snapshot_select(con: duckdb.DuckDBPyConnection, table: str, kind: TableKind | None) -> str:
    """The table's columns in its increments' order (the catalog's), then any the catalog lacks. DuckDB's order
    is its history's: a load adds a column the catalog gained at the end, a rebuild makes it in its place; a
    loader matching a snapshot's columns by position would see them move between one night and the next."""
    have = con.sql(f"FROM {quote_ident(table)}").columns
    order = [f.name for f in kind.schema if f.name in have] if kind is not None else []
    order += [c for c in have if c not in order]
    return f"SELECT {', '.join(quote_ident(c) for c in order)} FROM {quote_ident(table)}"


def _table_schema(schemas: list[pa.Schema], table: str, kinds: dict[str, TableKind]) -> pa.Schema:
    """A table's schema is the catalog's (what `harvest rebuild` would write today), not whichever file came
    first; a table the catalog no longer has is described by the union of its files'."""
    if table in kinds:
        return kinds[table].schema
    try:
        return pa.unify_schemas(schemas, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return schemas[-1]


def _table_entry(report: ExportReport, table: str) -> dict[str, Any]:
    """A table's entry in `_manifest.json`. A child table's names its parent: for each parent row the export
    brings whose fetch is newer than the loader's, the loader replaces that parent's rows (`replace_by` holds
    its key) with the export's rows of that fetch, none when its list emptied: a list that shrank or emptied
    leaves no rows behind (the incoming child rows alone cannot say so: an emptied list has none)."""
    kinds = report.kinds
    kind = kinds.get(table)
    key = list(kind.primary_key) if kind is not None else []
    entry: dict[str, Any] = {
        "primary_key": key,
        "newest_by": "_fetched_at",
        "then_by": "file_row_number",  # a page holding a key twice: its later row (`connection.NEWEST_ORDER`)
        "rows": 0,
        "schema": [],
        "files": [],
    }
    if isinstance(kind, ChildKind):
        entry["parent"] = {
            "table": kind.parent,
            "key": dict(zip(kind.parent_columns, (f.name for f in kind.parent_key), strict=True)),
            "replace_by": list(kind.parent_columns),
        }
    return report.tables.setdefault(table, entry)


def _describe_schemas(report: ExportReport, schemas: dict[str, list[pa.Schema]]) -> None:
    """Each table's schema from the catalog; a file whose own schema differs (landed under an older catalog and
    not rebuilt since) carries its own too. A child table whose parent's rows the export brings is described
    even without a row of its own: those parents' lists emptied, and a loader replaces their rows with none."""
    for table, kind in report.kinds.items():
        if isinstance(kind, ChildKind) and kind.parent in report.tables and table not in report.tables:
            _table_entry(report, table)["schema"] = _schema(kind.schema)
    for table, found in schemas.items():
        entry = report.tables[table]
        unified = _table_schema(found, table, report.kinds)
        entry["schema"] = _schema(unified)
        for file, own in zip(entry["files"], found, strict=True):
            if not own.equals(unified):
                file["schema"] = _schema(own)


def _copy_run(
    layout: OutputLayout,
    run: RunManifest,
    fs: pafs.FileSystem,
    base: str,
    report: ExportReport,
    schemas: dict[str, list[pa.Schema]],
) -> None:
    local = pafs.LocalFileSystem()
    for table, paths in sorted(run.files_by_table(layout).items()):
        for path in paths:
            key = path.relative_to(layout.parquet_root).as_posix()
            try:
                meta = pq.read_metadata(path)
            except pa.ArrowException as exc:  # before anything of it is sent
                raise UnreadableParquet(path, layout.root, str(exc)) from None
            make_dir(fs, f"{base}/{Path(key).parent.as_posix()}")
            pafs.copy_files(str(path), f"{base}/{key}", source_filesystem=local, destination_filesystem=fs)
            entry = _table_entry(report, table)
            entry["files"].append({"key": key, "rows": meta.num_rows, "run_id": run.run_id})
            entry["rows"] += meta.num_rows
            schemas.setdefault(table, []).append(meta.schema.to_arrow_schema())
            report.files += 1
            report.rows += meta.num_rows


def _retire(
    layout: OutputLayout, run: RunManifest, fs: pafs.FileSystem, base: str, report: ExportReport
) -> None:
    """Parts a rebuild merged away (Dask rounds): deleted at the destination and named in the manifest, so
    neither a lake read as files nor a loader keeping files holds their rows twice. A name the run uses again
    (a merge after a flow retry takes the part id its first merge had) is not one: it was just sent."""
    current = {path for _, path, _ in run.all_files()}
    for stored in run.retired_files:
        if stored in current:
            continue
        key = layout.resolve(stored).relative_to(layout.parquet_root).as_posix()
        if fs.get_file_info(f"{base}/{key}").is_file:
            fs.delete_file(f"{base}/{key}")
        entry = _table_entry(report, key.split("/", 1)[0])
        entry.setdefault("retired", []).append({"key": key, "run_id": run.run_id})


def _commit(
    fs: pafs.FileSystem,
    folder: str,
    report: ExportReport,
    jobs: list[str],
    held: dict[str, str] | None = None,
) -> datetime:
    """`_manifest.json`, then `_SUCCESS`: the marker exists only once everything it vouches for does. `held`: what
    each run's Parquet held (`run_content`), so an output that lost its `exports` table and was rebuilt finds
    the run sent with the same rows, not due again."""
    created = datetime.now(UTC)
    manifest: dict[str, Any] = {
        "format": "harvest-export/1",
        "export_id": report.export_id,
        "kind": report.kind,
        "created_at": created.isoformat(),
        "jobs": jobs,
        "runs": report.runs,
        "partitioning": PARTITIONING if report.kind == "increment" else [],
        "tables": report.tables,
    }
    if report.kind == "increment":
        manifest["resent"] = report.resent
        manifest["content"] = held or {}
    make_dir(fs, folder)
    with fs.open_output_stream(f"{folder}/_manifest.json") as out:
        out.write(json.dumps(manifest, indent=2, sort_keys=True).encode())
    with fs.open_output_stream(f"{folder}/_SUCCESS") as out:
        out.write(b"")
    return created


def export_increment(layout: OutputLayout, url: str) -> ExportReport:
    """Copy the loaded runs not yet at `url` (or rebuilt since), then commit the export and record it.

    Nothing new: nothing written (committed exports the table did not know are recorded)."""
    destination = checked_destination(url, layout)
    report = ExportReport(destination, _export_id(), "increment", kinds=output_kinds(layout))
    fs, base = open_destination(destination)
    sent = recorded(layout, destination)
    problem = sent.mixed(destination)
    if problem:
        raise UsageError(problem)
    find_committed(fs, base, sent, (h.run_id for h in run_heads(layout) if h.loaded))
    runs = runs_due(layout, sent)
    report.recovered = len({r.run_id for r in sent.found})
    report.gone = len({r.run_id for r in sent.gone})
    report.resent = any(m.run_id in sent.latest for m in runs)
    if not runs:
        record(layout, destination, sent.found, sent.gone)
        return report
    per_run: dict[str, tuple[int, int]] = {}
    schemas: dict[str, list[pa.Schema]] = {}
    for run in runs:
        files, rows = report.files, report.rows
        _copy_run(layout, run, fs, base, report, schemas)
        _retire(layout, run, fs, base, report)
        report.runs.append(run.run_id)
        per_run[run.run_id] = (report.files - files, report.rows - rows)
    _describe_schemas(report, schemas)
    held = {m.run_id: run_content(layout, m) for m in runs}  # what a rebuild since must change to resend it
    at = _commit(fs, f"{base}/_exports/{report.export_id}", report, sorted({m.job for m in runs}), held)
    rows_ = [
        ExportRow(r, report.export_id, "increment", at, *counts, content=held[r])
        for r, counts in per_run.items()
    ]
    record(layout, destination, sent.found + rows_, sent.gone)
    return report


def export_snapshot(layout: OutputLayout, url: str) -> ExportReport:
    """The merged tables as they are now, one Parquet file each, replacing the destination's last snapshot."""
    destination = checked_destination(url, layout)
    report = ExportReport(destination, _export_id(), "snapshot", kinds=output_kinds(layout))
    if not layout.db.exists():
        raise UsageError(f"{layout.db} does not exist: nothing to export (run a job, or `harvest rebuild`)")
    _refuse_mixed(layout, destination, "snapshot")
    fs, base = open_destination(destination)
    if fs.get_file_info(f"{base}/_SUCCESS").is_file:
        fs.delete_file(f"{base}/_SUCCESS")  # the old snapshot is being replaced: no longer vouched for
    con = duckdb.connect(str(layout.db), read_only=True)
    try:
        tables = [t for t in sorted(report.kinds) if has_table(con, t)]
        for table in tables:
            _snapshot_table(con, table, fs, base, report)
        report.runs = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY started").fetchall()]
    finally:
        con.close()
    at = _commit(fs, base, report, sorted({h.job for h in run_heads(layout)}))
    record(
        layout,
        destination,
        [ExportRow(r, report.export_id, "snapshot", at, *report.of_runs.get(r, (0, 0))) for r in report.runs],
    )
    return report


def _snapshot_table(
    con: duckdb.DuckDBPyConnection, table: str, fs: pafs.FileSystem, base: str, report: ExportReport
) -> None:
    """One table streamed batch by batch (a relation's reader: DuckDB does not materialise the result)."""
    key = f"{table}/snapshot.parquet"
    kind = report.kinds.get(table)
    reader = con.sql(_snapshot_select(con, table, kind)).to_arrow_reader(SNAPSHOT_BATCH)
    schema = _snapshot_schema(reader.schema, kind)
    make_dir(fs, f"{base}/{table}")
    rows = 0
    of_runs: dict[str, int] = {}
    with (
        fs.open_output_stream(f"{base}/{key}") as out,
        pq.ParquetWriter(out, schema, compression="zstd") as w,
    ):
        for batch in reader:
            w.write_batch(batch.cast(schema))
            rows += batch.num_rows
            if "_run_id" in batch.schema.names:
                for counted in pc.value_counts(batch.column("_run_id")).to_pylist():
                    of_runs[counted["values"]] = of_runs.get(counted["values"], 0) + counted["counts"]
    for run_id, n in of_runs.items():
        files, before = report.of_runs.get(run_id, (0, 0))
        report.of_runs[run_id] = (files + 1, before + n)
    entry = _table_entry(report, table)
    entry["schema"] = _schema(schema)
    entry["files"].append({"key": key, "rows": rows})
    entry["rows"] = rows
    report.files += 1
    report.rows += rows
