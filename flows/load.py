"""The load step: a run's manifest -> DuckDB, in one short write transaction.

The manifest (written atomically before the load) lists what a run landed: its Parquet files, query states and
totals. Loading from it is idempotent, so when DuckDB is held by another process the run still succeeds, its
data stays safe in Parquet, and `harvest load OUTPUT` finishes the job later.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from connectors.catalog import all_kinds
from tasks.duckdb_load import (
    insert_requests,
    merge_batches,
    transaction,
    upsert_query_states,
    upsert_run,
    write_connection,
)
from tasks.layout import OutputLayout


@dataclass
class RunManifest:
    run_id: str
    job: str
    spec_hash: str
    service: str
    started: str
    finished: str
    status: str
    budget: int
    credits_spent: int
    queries: list[dict[str, Any]] = field(default_factory=list)
    loaded: bool = False

    @property
    def records(self) -> int:
        return sum(int(q["records"]) for q in self.queries)

    def files_by_table(self) -> dict[str, list[Path]]:
        out: dict[str, list[Path]] = defaultdict(list)
        for q in self.queries:
            for table, path, _rows in q.get("files", []):
                out[table].append(Path(path))
        return dict(out)

    def summary(self, tables: dict[str, int] | None) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "job": self.job,
            "status": self.status,
            "service": self.service,
            "budget": self.budget,
            "credits_spent": self.credits_spent,
            "records": self.records,
            "queries": self.queries,
            "tables": tables or {},
            "loaded": tables is not None,
        }


def write_manifest(layout: OutputLayout, manifest: RunManifest) -> Path:
    path = layout.manifest_file(manifest.run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_bytes(orjson.dumps(asdict(manifest), option=orjson.OPT_INDENT_2))
    os.replace(tmp, path)
    return path


def read_manifest(path: Path) -> RunManifest:
    return RunManifest(**orjson.loads(path.read_bytes()))


def pending_manifests(layout: OutputLayout) -> list[RunManifest]:
    """Runs whose load did not happen (DuckDB was busy), oldest first."""
    return [m for m in all_manifests(layout) if not m.loaded]


def all_manifests(layout: OutputLayout) -> list[RunManifest]:
    """Every run under an output directory, oldest first."""
    found = [read_manifest(p) for p in layout.raw_root.glob("*/manifest.json")]
    return sorted(found, key=lambda m: m.started)


def load_manifest_into_duckdb(layout: OutputLayout, manifest: RunManifest) -> dict[str, int]:
    """Merge the run's tables and bookkeeping in one transaction; raises DatabaseBusy when the file is held."""
    kinds = all_kinds()
    batches = [(kinds[table], files) for table, files in sorted(manifest.files_by_table().items())]
    requests = [Path(q["requests_file"]) for q in manifest.queries if q.get("requests_file")]
    with write_connection(
        layout.db, data_dir=layout.parquet_root, rerun=f"harvest load {layout.root}"
    ) as con:
        with transaction(con):
            result = merge_batches(con, batches)
            insert_requests(con, manifest.run_id, [p for p in requests if p.exists()])
            upsert_query_states(con, manifest.run_id, manifest.queries)  # picks the query_state fields
            upsert_run(con, {**asdict(manifest), "records": manifest.records})  # picks the runs fields
        tables = dict(result)  # rows per table after the merge
    manifest.loaded = True
    write_manifest(layout, manifest)
    return tables
