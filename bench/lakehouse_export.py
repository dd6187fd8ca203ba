"""The lakehouse export contender: `harvest export --format delta|iceberg` against the Parquet increment export.

A job's output directory is made without the service (1M records of `short_video_videos` would take the
sandbox minutes and measure paging, not the export): run A lands N rows in the catalog's schema (raw JSON and
all, ~300 bytes a record as the service sends them), run B lands 10k more, new keys but for a tenth that are
fetched again with new counters, keys from the newest tenth of run A (a nightly rerun's mix: the `latest` pages
a job pages again hold the items it found most recently). Then, per format, each as its own `harvest export`
process (`measure.run_measured`: wall, CPU, peak RSS of the process tree):
- `first`: run A into an empty destination (Delta/Iceberg: the tables created; Parquet: the files copied);
- `merge`: run B merged into it (Delta/Iceberg: one MERGE commit; Parquet: one more file and a manifest).
Recorded beside: what the merge wrote (files added and removed by the Delta commit, rows of rewritten files
copied, bytes at the destination).

    python bench/run.py --lakehouse-only [--rows 1000000]    # writes bench/results/lakehouse.json
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import shutil
from pathlib import Path
from typing import Any

import duckdb
from measure import Measured, run_measured
from run import HARVEST, ROOT

TABLE = "short_video_videos"
MERGE_ROWS = 10_000
UPDATED_SHARE = 10
"""One in this many of the merged rows is a key run A has (fetched again, counters grown)."""
FORMATS = ("parquet", "delta", "iceberg")


def _land(out: Path, run_id: str, started: dt.datetime, rows: int, first_key: int, updated: int) -> None:
    """One loaded run's manifest and Parquet file (DuckDB writes it: zstd, as the sink does)."""
    import sys

    sys.path.insert(0, str(ROOT))
    from harvest.tasks.output.layout import OutputLayout
    from harvest.tasks.output.manifest import RunManifest, write_manifest
    from harvest.tasks.output.parquet_sink import ROW_GROUP_ROWS

    layout = OutputLayout(out)
    path = layout.parquet_file(TABLE, started.date(), run_id, "0000")
    path.parent.mkdir(parents=True, exist_ok=True)
    at = started.isoformat()
    duckdb.sql(f"""
        COPY (
            SELECT CASE WHEN i < {updated} THEN {first_key} - 1 - (i * 7) % {max(first_key // 10, 1)} ELSE {first_key} + i END::VARCHAR
                       AS aweme_id,
                   'caption of video ' || i AS caption,
                   TIMESTAMPTZ '2026-01-01 00:00:00+00' + to_seconds(i) AS created_at,
                   (i * 31 + {len(run_id)}) % 1000003 AS play_count, i % 5003 AS like_count, i % 101 AS comment_count,
                   i % 53 AS share_count, i % 29 AS save_count, 15000 + i % 45000 AS duration_ms,
                   'https://cdn.example/cover/' || i || '.jpg' AS cover_url,
                   'https://cdn.example/play/' || i || '.mp4' AS play_url,
                   'uid' || (i % 5000) AS author_uid, 'creator_' || (i % 5000) AS author_unique_id,
                   '{{"aweme_id":"' || i || '","desc":"caption of video ' || i || '","statistics":{{"play_count":'
                       || i || ',"digg_count":' || (i % 5003) || '}},"video":{{"duration":15000,"cover":'
                       || '"https://cdn.example/cover/' || i || '.jpg"}},"author":{{"uid":"uid' || (i % 5000)
                       || '","unique_id":"creator_' || (i % 5000) || '"}}}}' AS raw,
                   '/v3/short-video/profile/videos' AS _endpoint, 'videos' AS _query_id,
                   '{run_id}' AS _run_id, TIMESTAMPTZ '{at}' AS _fetched_at
            FROM range({rows}) t(i)
        ) TO '{path}' (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE {ROW_GROUP_ROWS})
    """)
    manifest = RunManifest(
        run_id=run_id, job="bench", spec_hash="bench", service="bench", started=at, finished=at,
        status="complete", budget=0, credits_spent=0, loaded=True, files=[(TABLE, layout.relative(path), rows)],
    )  # fmt: skip
    write_manifest(layout, manifest)


def _bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def _delta_commit(dest: Path) -> dict[str, Any]:
    """What the last commit did: harvest's copy-on-write merge writes its counts in the commit info
    (`harvest.files_added`, ...), delta-rs's MERGE in its operation metrics."""
    from deltalake import DeltaTable

    table = DeltaTable(str(dest / TABLE))
    last = table.history(1)[0]
    metrics = last.get("operationMetrics", {})
    keep = ("files_added", "files_removed", "rows_copied")
    return {
        "version": table.version(),
        "files": len(table.file_uris()),
        **{k: last.get(f"harvest.{k}", metrics.get(f"num_target_{k}")) for k in keep},
    }


def _step(out: Path, dest: Path, fmt: str, env: dict[str, str]) -> dict[str, Any]:
    m: Measured = run_measured([HARVEST, "export", str(out), "--to", str(dest), "--format", fmt], env=env)
    if m.returncode != 0:
        raise RuntimeError(f"harvest export --format {fmt} failed: {m.stderr[-2000:]}")
    step: dict[str, Any] = {
        "wall_s": round(m.wall_s, 2), "cpu_s": round(m.cpu_s, 2), "rss_mb": round(m.peak_rss_mb, 1),
        "destination_mb": round(_bytes(dest) / 2**20, 1),
    }  # fmt: skip
    if fmt == "delta":
        step["commit"] = _delta_commit(dest)
    return step


def lakehouse_export(work: Path, rows: int, env: dict[str, str]) -> dict[str, Any]:
    """Each format's `first` and `merge` step on the same two runs, each format in a fresh output copy."""
    source = work / "lakehouse-source"
    shutil.rmtree(source, ignore_errors=True)
    started = dt.datetime(2026, 11, 24, 3, 0, tzinfo=dt.UTC)
    _land(source, "20261124T030000Z-aaaaaa", started, rows, 0, 0)
    results: dict[str, Any] = {
        "rows": rows,
        "merge_rows": MERGE_ROWS,
        "merge_updated": MERGE_ROWS // UPDATED_SHARE,
    }
    for fmt in FORMATS:
        if (
            fmt != "parquet"
            and importlib.util.find_spec({"delta": "deltalake", "iceberg": "pyiceberg"}[fmt]) is None
        ):
            results[fmt] = {"skipped": f"harvest[{fmt}] is not installed"}
            continue
        out, dest = work / f"lakehouse-{fmt}", work / f"lakehouse-{fmt}-dest"
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(source, out)
        first = _step(out, dest, fmt, {**env, "PYICEBERG_HOME": str(work / f"pyiceberg-{fmt}")})
        _land(
            out,
            "20261125T030000Z-bbbbbb",
            started + dt.timedelta(days=1),
            MERGE_ROWS,
            rows,
            MERGE_ROWS // UPDATED_SHARE,
        )
        merge = _step(out, dest, fmt, {**env, "PYICEBERG_HOME": str(work / f"pyiceberg-{fmt}")})
        results[fmt] = {"first": first, "merge": merge}
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(dest, ignore_errors=True)
    shutil.rmtree(source, ignore_errors=True)
    return results


def print_lakehouse(res: dict[str, Any]) -> None:
    print(
        f"\nlakehouse export: {res['rows']:,} rows, then {res['merge_rows']:,} more ({res['merge_updated']:,} of them known keys)"
    )
    print("  format    step    wall s   cpu s  peak RSS MB  destination MB")
    for fmt in FORMATS:
        entry = res.get(fmt, {})
        if "skipped" in entry:
            print(f"  {fmt:<8}  {entry['skipped']}")
            continue
        for step in ("first", "merge"):
            s = entry[step]
            print(
                f"  {fmt:<8}  {step:<6}  {s['wall_s']:>6}  {s['cpu_s']:>6}  {s['rss_mb']:>11}  {s['destination_mb']:>14}"
            )
            if "commit" in s:
                print(f"            delta commit: {s['commit']}")
