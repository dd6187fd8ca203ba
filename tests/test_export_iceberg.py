"""Iceberg tables from real harvest output, read back by readers that are not harvest: a fresh pyiceberg catalog
object scanning the table, and DuckDB over that scan's Arrow. Locally and on S3 (moto on 127.0.0.1).

Two nights of the nightly job share one output directory (module-scoped); each test merges their runs' loads
into its own warehouse, in the order it needs.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from harvest.flows.handoff.lakehouse import iceberg_tables
from harvest.flows.handoff.lakehouse.iceberg_catalog import SQLITE_FILE, file_io_properties, sqlite_path
from harvest.flows.handoff.lakehouse.iceberg_tables import IcebergCommitConflict, IcebergFormat
from harvest.flows.handoff.lakehouse.table_format import TableLoad
from harvest.flows.handoff.lakehouse.table_rows import bookkeeping_loads, one_database, record_loads
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import RunManifest, all_manifests
from tests.flow_helpers import rows
from tests.nightly_helpers import night
from tests.test_export import BUCKET, s3_endpoint  # noqa: F401  (moto in server mode, shared)

BOOKKEEPING = ("runs", "query_state")


@dataclasses.dataclass
class Nights:
    layout: OutputLayout
    first: RunManifest
    second: RunManifest
    db: duckdb.DuckDBPyConnection
    """The database the records are read in, as `harvest export` reads them (`table_rows.one_database`)."""

    def records(self, run: RunManifest) -> list[TableLoad]:
        return record_loads(self.layout, [run], self.db)

    def loads(self, run: RunManifest) -> list[TableLoad]:
        return [*self.records(run), *bookkeeping_loads(self.layout, [run])]


@pytest.fixture(scope="module")
def nights(prefect_harness: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nights]:
    """Two complete runs; the second's engagement counters grew (a rerun with newer values)."""
    tmp = tmp_path_factory.mktemp("iceberg")
    output = tmp / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("HARVEST_BASE_URL", raising=False)
        night(tmp, output, 0, mp)
        night(tmp, output, 1, mp)
    layout = OutputLayout(output)
    first, second = all_manifests(layout)
    with one_database() as db:
        yield Nights(layout, first, second, db)


@pytest.fixture(autouse=True)
def no_catalog_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The default SQLite catalog unless a test configures one (a developer's ~/.pyiceberg.yaml stays out)."""
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in os.environ:
        if name.startswith(("PYICEBERG_CATALOG__", "HARVEST_ICEBERG_")):
            monkeypatch.delenv(name)


def reader(sqlite: Path, warehouse: str, **props: str) -> SqlCatalog:
    """A catalog object of the reader's own, on the SQLite file harvest left."""
    assert sqlite.is_file(), sqlite
    return SqlCatalog("harvest", uri=f"sqlite:///{sqlite}", warehouse=warehouse, **props)


def scanned(catalog: SqlCatalog, table: str) -> pa.Table:
    return catalog.load_table(("harvest", table)).scan().to_arrow()


def keyed(load: TableLoad, data: pa.Table, *columns: str) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """Key -> `columns` of each row, read by DuckDB over the scan's Arrow; a key twice fails here."""
    key = ", ".join(f'"{k}"' for k in load.primary_key)
    cols = ", ".join(f'"{c}"' for c in columns)
    con = duckdb.connect()
    con.register("scanned", data)
    total, distinct = con.execute(f"SELECT count(*), count(DISTINCT ({key})) FROM scanned").fetchone() or (
        0,
        0,
    )
    assert total == distinct, f"{load.name}: {total} rows for {distinct} keys"
    found = con.execute(f"SELECT {key}, {cols} FROM scanned").fetchall()
    n = len(load.primary_key)
    return {row[:n]: row[n:] for row in found}


def harvest_rows(nights: Nights, load: TableLoad, *columns: str) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """The same table in the job's own DuckDB file (its load keeps the newest fetch per key as well)."""
    key = ", ".join(f'"{k}"' for k in load.primary_key)
    cols = ", ".join(f'"{c}"' for c in columns)
    n = len(load.primary_key)
    return {r[:n]: r[n:] for r in rows(nights.layout.db, f'SELECT {key}, {cols} FROM "{load.name}"')}


def snapshots(table: Table) -> int:
    return len(table.snapshots())


def test_a_rerun_leaves_each_key_once_with_the_newest_values(nights: Nights, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    fmt = IcebergFormat(str(lake), nights.layout)
    first = {load.name: fmt.merge(load) for load in nights.loads(nights.first)}
    second = {load.name: fmt.merge(load) for load in nights.loads(nights.second)}
    fmt.close()
    assert {"short_video_videos", "pinboard_pins", *BOOKKEEPING} <= set(first) == set(second)
    assert second["short_video_videos"].updated > 0, "the second night fetched the same videos again"

    catalog = reader(lake / SQLITE_FILE, lake.as_uri())
    for load in nights.loads(nights.second):
        data = scanned(catalog, load.name)
        if load.name in BOOKKEEPING:
            runs = {r["run_id"] for r in data.to_pylist()}
            assert runs == {nights.first.run_id, nights.second.run_id}, load.name
            continue
        exported = keyed(load, data, "_fetched_at", "_run_id")
        assert exported == harvest_rows(nights, load, "_fetched_at", "_run_id"), load.name
        assert snapshots(catalog.load_table(("harvest", load.name))) == 2, "one snapshot per merge"
    videos = next(lo for lo in nights.loads(nights.second) if lo.name == "short_video_videos")
    plays = keyed(videos, scanned(catalog, "short_video_videos"), "play_count")
    assert plays == harvest_rows(nights, videos, "play_count")
    assert {r[0] for r in rows(nights.layout.db, "SELECT _run_id FROM short_video_videos")} == {
        nights.second.run_id
    }, "the second night's rows are the newest for every video"


def test_an_older_export_never_overwrites_newer_rows(nights: Nights, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    fmt = IcebergFormat(str(lake), nights.layout)
    newer = {load.name: fmt.merge(load) for load in nights.records(nights.second)}
    older = {load.name: fmt.merge(load) for load in nights.records(nights.first)}
    fmt.close()
    catalog = reader(lake / SQLITE_FILE, lake.as_uri())
    for load in nights.records(nights.second):
        exported = keyed(load, scanned(catalog, load.name), "_fetched_at", "_run_id")
        assert exported == harvest_rows(nights, load, "_fetched_at", "_run_id"), load.name
        assert older[load.name].updated == 0 and newer[load.name].inserted == newer[load.name].rows_in
        if older[load.name].inserted == 0:
            assert snapshots(catalog.load_table(("harvest", load.name))) == 1, "nothing won: no snapshot"


def test_merging_the_same_load_twice_leaves_the_same_rows(nights: Nights, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    fmt = IcebergFormat(str(lake), nights.layout)
    loads = nights.loads(nights.first)
    once = {load.name: fmt.merge(load) for load in loads}
    catalog = reader(lake / SQLITE_FILE, lake.as_uri())
    before = {
        load.name: scanned(catalog, load.name).sort_by([(k, "ascending") for k in load.primary_key])
        for load in loads
    }
    twice = {load.name: fmt.merge(load) for load in loads}
    fmt.close()
    for load in loads:
        after = scanned(catalog, load.name).sort_by([(k, "ascending") for k in load.primary_key])
        assert after.equals(before[load.name]), load.name
        assert twice[load.name].inserted == 0 and twice[load.name].updated == once[load.name].rows_in > 0
        assert twice[load.name].version != once[load.name].version, "a second commit, the same rows"


def test_a_column_the_catalog_gained_appears_in_the_table(nights: Nights, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    fmt = IcebergFormat(str(lake), nights.layout)
    videos = next(lo for lo in nights.records(nights.first) if lo.name == "short_video_videos")
    fmt.merge(videos)
    # a column the catalog does not have (the videos have `region`, not this)
    assert "audience_region" not in videos.schema.names
    grown = videos.schema.append(pa.field("audience_region", pa.string()))

    def open_grown() -> pa.RecordBatchReader:
        def batches() -> Iterator[pa.RecordBatch]:
            for batch in videos.open():
                yield pa.RecordBatch.from_arrays(
                    [*batch.columns, pa.array(["EU"] * batch.num_rows)], schema=grown
                )

        return pa.RecordBatchReader.from_batches(grown, batches())

    later = dataclasses.replace(videos, schema=grown, open=open_grown)
    result = fmt.merge(later)
    fmt.close()
    assert result.columns_added == ["audience_region"]
    table = reader(lake / SQLITE_FILE, lake.as_uri()).load_table(("harvest", "short_video_videos"))
    assert table.schema().find_field("audience_region").required is False
    assert table.schema().identifier_field_ids == [table.schema().find_field("aweme_id").field_id]
    data = table.scan().to_arrow()
    assert data.num_rows == result.rows_in and set(data.column("audience_region").to_pylist()) == {"EU"}


def test_a_commit_that_collides_is_merged_again_and_gives_up_loudly(
    nights: Nights, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lake = tmp_path / "lake"
    pins = next(lo for lo in nights.records(nights.first) if lo.name == "pinboard_pins")
    ours, theirs = IcebergFormat(str(lake), nights.layout), IcebergFormat(str(lake), nights.layout)
    ours.merge(pins)
    opened: list[int] = []

    def open_while_another_commits() -> pa.RecordBatchReader:
        """Between our transaction's start and its commit, another export commits the same rows."""
        opened.append(1)
        if len(opened) == 1:
            theirs.merge(pins)
        return pins.open()

    result = ours.merge(dataclasses.replace(pins, open=open_while_another_commits))
    assert len(opened) > 2, "the collided merge read its rows again"
    table = ours.catalog.load_table(("harvest", "pinboard_pins"))
    assert len(table.snapshots()) == 3 and str(table.current_snapshot().snapshot_id) == result.version  # type: ignore[union-attr]
    assert len(keyed(pins, table.scan().to_arrow(), "_fetched_at")) == result.rows_in

    def always_collides() -> pa.RecordBatchReader:
        theirs.merge(pins)
        return pins.open()

    monkeypatch.setattr(iceberg_tables, "ATTEMPTS", 2)
    with pytest.raises(
        IcebergCommitConflict, match=r"harvest\.pinboard_pins .* other writers committed to it 2 times"
    ):
        ours.merge(dataclasses.replace(pins, open=always_collides))
    table = ours.catalog.load_table(("harvest", "pinboard_pins"))
    assert len(keyed(pins, table.scan().to_arrow(), "_fetched_at")) == result.rows_in, "the table is whole"
    ours.close()
    theirs.close()


def test_a_catalog_configured_for_pyiceberg_is_used(
    nights: Nights, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyiceberg's own variables name the catalog (here a SQL one elsewhere; a REST one is configured alike)."""
    shared = tmp_path / "shared.db"
    monkeypatch.setenv("HARVEST_ICEBERG_CATALOG", "team")
    monkeypatch.setenv("PYICEBERG_CATALOG__TEAM__URI", f"sqlite:///{shared}")
    monkeypatch.setenv("HARVEST_ICEBERG_NAMESPACE", "social")
    lake = tmp_path / "lake"
    fmt = IcebergFormat(str(lake), nights.layout)
    runs = next(lo for lo in bookkeeping_loads(nights.layout, [nights.first]) if lo.name == "runs")
    fmt.merge(runs)
    fmt.close()
    assert not (lake / SQLITE_FILE).exists() and shared.is_file()
    catalog = SqlCatalog("team", uri=f"sqlite:///{shared}", warehouse=lake.as_uri())
    table = catalog.load_table(("social", "runs"))
    assert table.location().startswith(lake.as_uri()) and table.scan().to_arrow().num_rows == 1


def test_s3_tables_read_back_and_only_data_and_metadata_objects(
    nights: Nights,
    s3_endpoint: str,  # noqa: F811  (the fixture imported above)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import boto3

    aws = {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": s3_endpoint, "AWS_EC2_METADATA_DISABLED": "true",
    }  # fmt: skip
    for name, value in aws.items():
        monkeypatch.setenv(name, value)
    s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    bucket = f"{BUCKET}-iceberg"
    s3.create_bucket(Bucket=bucket)
    destination = f"s3://{bucket}/tables"
    fmt = IcebergFormat(destination, nights.layout)
    for run in (nights.first, nights.second):
        for load in nights.loads(run):
            fmt.merge(load)
    fmt.close()

    sqlite = sqlite_path(destination, nights.layout)
    assert sqlite.parent == nights.layout.root / "iceberg", (
        "the catalog of an object-store warehouse stays with the job"
    )
    catalog = reader(sqlite, destination, **file_io_properties())
    for load in nights.records(nights.second):
        exported = keyed(load, scanned(catalog, load.name), "_fetched_at", "_run_id")
        assert exported == harvest_rows(nights, load, "_fetched_at", "_run_id"), load.name
    assert scanned(catalog, "runs").num_rows == 2

    objects = [
        o
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        for o in page.get("Contents", [])
    ]
    assert objects and all(o["Key"].startswith("tables/harvest/") for o in objects)
    odd = [
        o["Key"]
        for o in objects
        if o["Size"] == 0 or not o["Key"].endswith((".parquet", ".avro", ".metadata.json"))
    ]
    assert odd == [], "only data and metadata objects: no directory markers"


def test_harvest_export_format_iceberg_end_to_end(nights: Nights, tmp_path: Path) -> None:
    """The command a user types: every loaded run merged once, then nothing new to send."""
    from typer.testing import CliRunner

    from harvest.flows.cli import app

    lake = tmp_path / "lake"
    output = str(nights.layout.root)
    result = CliRunner().invoke(app, ["export", output, "--to", str(lake), "--format", "iceberg"])
    assert result.exit_code == 0, result.output
    catalog = reader(lake / SQLITE_FILE, lake.as_uri())
    for load in nights.records(nights.second):
        exported = keyed(load, scanned(catalog, load.name), "_fetched_at", "_run_id")
        assert exported == harvest_rows(nights, load, "_fetched_at", "_run_id"), load.name
        assert snapshots(catalog.load_table(("harvest", load.name))) == 1, "both runs in one commit per table"
    assert sorted(r["run_id"] for r in scanned(catalog, "runs").to_pylist()) == sorted(
        [nights.first.run_id, nights.second.run_id]
    )
    again = CliRunner().invoke(app, ["export", output, "--to", str(lake), "--format", "iceberg"])
    assert again.exit_code == 0 and "nothing new" in again.output, again.output


def test_a_configured_catalog_s_tables_elsewhere_than_to_are_refused_not_merged_into(
    nights: Nights, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SQL catalog configured for pyiceberg without a warehouse: `--to` is its warehouse. An export to lake-a,
    then one to lake-b merged into lake-a's tables (the catalog knows a table by its name, not its place),
    said "at lake-b" and recorded lake-b, which was never made. Refused now (exit 2) naming where the table
    lives, nothing written; another namespace makes lake-b its own tables."""
    from typer.testing import CliRunner

    from harvest.flows.cli import app

    monkeypatch.setenv("PYICEBERG_CATALOG__HARVEST__URI", f"sqlite:///{tmp_path / 'shared.db'}")
    monkeypatch.setenv("PYICEBERG_CATALOG__HARVEST__TYPE", "sql")
    output = str(nights.layout.root)
    lake_a, lake_b = tmp_path / "lake-a", tmp_path / "lake-b"
    first = CliRunner().invoke(app, ["export", output, "--to", str(lake_a), "--format", "iceberg"])
    assert first.exit_code == 0, first.output
    refused = CliRunner().invoke(app, ["export", output, "--to", str(lake_b), "--format", "iceberg"])
    said = " ".join(refused.output.split())
    assert refused.exit_code == 2, refused.output
    assert f"lives at {lake_a.as_uri()}/harvest/" in said and f"not under --to {lake_b}" in said, said
    assert not lake_b.exists()
    monkeypatch.setenv("HARVEST_ICEBERG_NAMESPACE", "second")
    own = CliRunner().invoke(app, ["export", output, "--to", str(lake_b), "--format", "iceberg"])
    assert own.exit_code == 0, own.output
    assert (lake_b / "second" / "runs" / "metadata").is_dir()


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_a_table_destination_deleted_since_is_merged_again_not_nothing_new_for_ever(
    nights: Nights, tmp_path: Path, fmt: str
) -> None:
    """The lake deleted after an export: "nothing new: every loaded run is in its tables" for ever, from the
    `exports` table alone. The destination is the truth (its `runs` table is gone): merged again, said once."""
    from typer.testing import CliRunner

    from harvest.flows.cli import app

    lake, output = tmp_path / "lake", str(nights.layout.root)
    command = ["export", output, "--to", str(lake), "--format", fmt]
    assert CliRunner().invoke(app, command).exit_code == 0
    shutil.rmtree(lake)
    again = CliRunner().invoke(app, command)
    said = " ".join(again.output.split())
    assert again.exit_code == 0 and "2 runs recorded as merged into" in said and "merged 2 runs" in said, said
    if fmt == "iceberg":
        catalog = reader(lake / SQLITE_FILE, lake.as_uri())
        assert sorted(r["run_id"] for r in scanned(catalog, "runs").to_pylist()) == sorted(
            [nights.first.run_id, nights.second.run_id]
        )
    else:
        assert DeltaTable(str(lake / "runs")).to_pyarrow_table().num_rows == 2
    last = CliRunner().invoke(app, command)
    assert "nothing new" in last.output and "no longer there" not in last.output, last.output


def test_the_maintenance_snippet_of_the_docs_runs_as_pasted_on_the_catalog_harvest_made(
    nights: Nights, tmp_path: Path
) -> None:
    """docs/warehouse-tables.md's Iceberg maintenance, pasted with the user's destination and a table of theirs,
    run by Python as a user runs it: it opens the SQLite catalog the export made (`load_catalog("harvest")`
    alone found no catalog: "URI missing"), and the table reads the same after it."""
    import re
    import subprocess
    import sys

    from typer.testing import CliRunner

    from harvest.flows.cli import app
    from tests.flow_helpers import ROOT

    lake = tmp_path / "lake"
    result = CliRunner().invoke(
        app, ["export", str(nights.layout.root), "--to", str(lake), "--format", "iceberg"]
    )
    assert result.exit_code == 0, result.output
    load = nights.records(nights.second)[0]
    table = load.name
    docs = (ROOT / "docs" / "warehouse-tables.md").read_text()
    (snippet,) = [b for b in re.findall(r"```python\n(.*?)```", docs, re.S) if "SqlCatalog" in b]
    pasted = snippet.replace("/srv/lake", str(lake)).replace("harvest.short_video_videos", f"harvest.{table}")
    ran = subprocess.run([sys.executable, "-c", pasted], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    catalog = reader(lake / SQLITE_FILE, lake.as_uri())
    assert keyed(load, scanned(catalog, table), "_fetched_at") == harvest_rows(nights, load, "_fetched_at")
