"""`harvest export --format delta`: real nightly runs against the sandbox merged into Delta tables, on a local
directory and on a real S3 API (moto on 127.0.0.1), read back by delta-rs and DuckDB (not harvest's code)."""

from __future__ import annotations

import datetime as dt
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import duckdb
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake
from typer.testing import CliRunner

from harvest.connectors.catalog.endpoints import all_kinds
from harvest.flows.cli import app
from harvest.flows.handoff.lakehouse import table_rows
from harvest.flows.handoff.lakehouse.delta_tables import DeltaFormat
from harvest.flows.handoff.lakehouse.table_format import TableLoad
from tests.flow_helpers import SECRET_KEY, rows
from tests.nightly_helpers import night
from tests.test_export import BUCKET, s3, s3_endpoint  # noqa: F401  (fixtures)

runner = CliRunner()
VIDEOS = "short_video_videos"


def export(output: Path, to: str, *extra: str) -> Any:
    result = runner.invoke(app, ["export", str(output), "--to", to, "--format", "delta", *extra])
    return result


def delta(uri: str) -> DeltaTable:
    return DeltaTable(uri, storage_options={"allow_http": "true"} if uri.startswith("s3://") else None)


def key_values(arrow: pa.Table, key: str, value: str) -> dict[Any, Any]:
    """`key -> value` as DuckDB reads the Arrow table delta-rs returned."""
    return dict(duckdb.execute(f"SELECT {key}, {value} FROM arrow").fetchall())


def key_of(table: str) -> tuple[str, ...]:
    kinds = all_kinds()
    return kinds[table].primary_key if table in kinds else ()


def merged_tables(output: Path) -> list[str]:
    """Record tables the job's DuckDB holds: what the Delta destination must hold too."""
    kinds = all_kinds()
    return [
        t for (t,) in rows(output / "harvest.duckdb", "SELECT table_name FROM duckdb_tables()") if t in kinds
    ]


def assert_same_as_duckdb(output: Path, uri: str) -> None:
    """Each table holds each key once, with the values DuckDB's merge (newest fetch wins) holds."""
    db = output / "harvest.duckdb"
    for table in merged_tables(output):
        arrow = delta(f"{uri}/{table}").to_pyarrow_table()
        key = ", ".join(all_kinds()[table].primary_key)
        dupes = duckdb.execute(f"SELECT {key} FROM arrow GROUP BY ALL HAVING count(*) > 1").fetchall()
        assert dupes == [], table
        assert arrow.num_rows == rows(db, f'SELECT count(*) FROM "{table}"')[0][0], table
        fetched = duckdb.execute(f"SELECT {key}, _fetched_at, _run_id FROM arrow ORDER BY ALL").fetchall()
        assert fetched == rows(db, f'SELECT {key}, _fetched_at, _run_id FROM "{table}" ORDER BY ALL'), table


def test_delta_export_merges_newest_values_and_sends_nothing_twice(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output, lake = tmp_path / "out", tmp_path / "lake"
    first = night(tmp_path, output, 0, monkeypatch)
    result = export(output, str(lake))
    assert result.exit_code == 0, result.output
    assert_same_as_duckdb(output, str(lake))
    assert delta(f"{lake}/runs").to_pyarrow_table().column("run_id").to_pylist() == [first]
    first_plays = key_values(delta(f"{lake}/{VIDEOS}").to_pyarrow_table(), "aweme_id", "play_count")

    second = night(tmp_path, output, 1, monkeypatch)  # the counters grew overnight
    result = export(output, str(lake))
    assert result.exit_code == 0, result.output
    assert_same_as_duckdb(output, str(lake))
    videos = delta(f"{lake}/{VIDEOS}")
    plays = key_values(videos.to_pyarrow_table(), "aweme_id", "play_count")
    assert plays == dict(rows(output / "harvest.duckdb", f"SELECT aweme_id, play_count FROM {VIDEOS}"))
    assert any(plays[k] != v for k, v in first_plays.items()), (
        "the rerun changed values: the newest are there"
    )
    assert videos.version() == 1 and videos.history()[0]["harvest.runs"] == second
    state = delta(f"{lake}/query_state").to_pyarrow_table()
    assert sorted(set(state.column("run_id").to_pylist())) == sorted([first, second])
    assert state.num_rows == rows(output / "harvest.duckdb", "SELECT count(*) FROM query_state")[0][0]

    files = sorted(p.relative_to(lake) for p in lake.rglob("*") if p.is_file())
    versions = {t: delta(f"{lake}/{t}").version() for t in [*merged_tables(output), "runs", "query_state"]}
    again = export(output, str(lake))
    assert again.exit_code == 0 and "nothing new" in again.output, again.output
    assert sorted(p.relative_to(lake) for p in lake.rglob("*") if p.is_file()) == files
    assert {t: delta(f"{lake}/{t}").version() for t in versions} == versions
    recorded = rows(output / "harvest.duckdb", "SELECT run_id, kind FROM exports ORDER BY run_id")
    assert recorded == sorted([(first, "delta"), (second, "delta")])


def test_a_column_the_catalog_gained_appears_in_the_table(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """First exported by a catalog without `download_count`; the catalog gains it: the table grows the column,
    the next run's rows carry values, the rows it did not fetch again stay null."""
    output, lake = tmp_path / "out", tmp_path / "lake"
    kinds = all_kinds()
    older = kinds[VIDEOS].schema.remove(kinds[VIDEOS].schema.get_field_index("download_count"))
    patched = {**kinds, VIDEOS: SimpleNamespace(schema=older, primary_key=kinds[VIDEOS].primary_key)}
    night(tmp_path, output, 0, monkeypatch)
    with monkeypatch.context() as m:
        m.setattr(table_rows, "output_kinds", lambda *_: patched)
        assert export(output, str(lake)).exit_code == 0
    assert "download_count" not in delta(f"{lake}/{VIDEOS}").to_pyarrow_table().column_names

    night(tmp_path, output, 1, monkeypatch)
    result = export(output, str(lake))
    assert result.exit_code == 0, result.output
    assert "download_count" in result.output, "the report names the new column"
    got = key_values(delta(f"{lake}/{VIDEOS}").to_pyarrow_table(), "aweme_id", "download_count")
    expected = dict(rows(output / "harvest.duckdb", f"SELECT aweme_id, download_count FROM {VIDEOS}"))
    assert got == expected and any(v is not None for v in got.values())


@pytest.mark.scenario
def test_an_export_cut_off_between_tables_gives_the_same_tables_when_run_again(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output, lake, clean = tmp_path / "out", tmp_path / "lake", tmp_path / "clean"
    night(tmp_path, output, 0, monkeypatch)
    assert export(output, str(lake)).exit_code == 0
    night(tmp_path, output, 1, monkeypatch)
    real_merge, merged = DeltaFormat.merge, list[str]()

    def merge_then_die(self: DeltaFormat, load: TableLoad) -> Any:
        if len(merged) == 2:
            raise OSError("connection reset by the store")
        merged.append(load.name)
        return real_merge(self, load)

    with monkeypatch.context() as m:
        m.setattr(DeltaFormat, "merge", merge_then_die)
        cut = export(output, str(lake))
    assert cut.exit_code == 1, cut.output
    assert (
        "committed before it" in cut.output
        and merged[1] in cut.output
        and "running the export again" in cut.output
    )
    assert rows(output / "harvest.duckdb", "SELECT count(*) FROM exports")[0][0] == 1, (
        "the cut export: unrecorded"
    )
    assert export(output, str(lake)).exit_code == 0
    assert export(output, str(clean)).exit_code == 0, "the same runs in one go"
    for table in [*merged_tables(output), "runs", "query_state"]:
        ours, theirs = (delta(f"{d}/{table}").to_pyarrow_table() for d in (lake, clean))
        order = [(c, "ascending") for c in ours.column_names if c in ("run_id", "query_id", *key_of(table))]
        assert (
            ours.sort_by(order).to_pylist() == theirs.select(ours.column_names).sort_by(order).to_pylist()
        ), table
    assert_same_as_duckdb(output, str(lake))


def test_two_writers_at_once_neither_corrupts_nor_loses(tmp_path: Path) -> None:
    """Another writer commits while a merge streams its rows: the merge loses its commit, runs again on the new
    version, and the table holds both writers' rows, each key once."""
    at = pa.scalar(1_700_000_000_000_000, pa.timestamp("us", tz="UTC"))
    schema = pa.schema(
        [("id", pa.string()), ("v", pa.int64()), ("_fetched_at", pa.timestamp("us", tz="UTC"))]
    )

    def load(ids: range, value: int, other: threading.Event | None = None) -> TableLoad:
        def batches() -> Any:
            for chunk in (ids[: len(ids) // 2], ids[len(ids) // 2 :]):
                yield pa.record_batch(
                    [[str(i) for i in chunk], [value] * len(chunk), [at] * len(chunk)], schema
                )
                if other is not None and not other.is_set():  # the other writer commits mid-stream, once
                    other.set()
                    writer = threading.Thread(
                        target=DeltaFormat(str(tmp_path)).merge, args=(load(range(1000, 1010), 7),)
                    )
                    writer.start()  # its own thread, as another process would be: not inside delta-rs's runtime
                    writer.join()

        return TableLoad("t", ("id",), schema, lambda: pa.RecordBatchReader.from_batches(schema, batches()))

    fmt = DeltaFormat(str(tmp_path))
    fmt.merge(load(range(100), 1))
    result = fmt.merge(load(range(50, 150), 2, threading.Event()))
    table = DeltaTable(str(tmp_path / "t"))
    arrow = table.to_pyarrow_table()
    got = key_values(arrow, "id", "v")
    assert len(got) == arrow.num_rows == 160
    assert {got[str(i)] for i in range(50, 150)} == {2} and {got[str(i)] for i in range(1000, 1010)} == {7}
    assert table.version() == 2, "create, the other writer's merge, this merge: nothing half-written between"
    assert result.inserted == 50 and result.updated == 50 and result.version == "2"


def objects(endpoint: str, prefix: str) -> list[tuple[str, int]]:
    """Every object under the prefix, as S3 lists it (pyarrow's listing hides directory markers)."""
    s3_client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    pages = s3_client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return [(o["Key"], o["Size"]) for page in pages for o in page.get("Contents", [])]


@pytest.mark.scenario
@pytest.mark.usefixtures("s3")
def test_delta_and_parquet_exports_to_s3_write_only_data_and_metadata(
    prefect_harness: None,
    s3_endpoint: str,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ALLOW_HTTP", "false")  # harvest allows the http endpoint the user named itself
    output = tmp_path / "out"
    night(tmp_path, output, 0, monkeypatch)
    first = export(output, f"s3://{BUCKET}/delta")
    assert first.exit_code == 0, first.output
    plain = runner.invoke(app, ["export", str(output), "--to", f"s3://{BUCKET}/files"])
    assert plain.exit_code == 0, plain.output
    night(tmp_path, output, 1, monkeypatch)
    result = export(output, f"s3://{BUCKET}/delta/")
    assert result.exit_code == 0, result.output
    assert runner.invoke(app, ["export", str(output), "--to", f"s3://{BUCKET}/files"]).exit_code == 0
    assert_same_as_duckdb(output, f"s3://{BUCKET}/delta")

    for prefix in ("delta/", "files/"):
        found = objects(s3_endpoint, prefix)
        markers = [key for key, size in found if size == 0 and key.rsplit("/", 1)[-1] != "_SUCCESS"]
        assert found and markers == [] and not any(k.endswith("/") for k, _ in found), (prefix, markers)
    assert {k.split("/")[1] for k, _ in objects(s3_endpoint, "delta/")} == {
        *merged_tables(output),
        "runs",
        "query_state",
    }
    fs = pafs.S3FileSystem(endpoint_override=s3_endpoint, access_key="testing", secret_key="testing")
    for key, _ in objects(s3_endpoint, "delta/"):
        with fs.open_input_stream(f"{BUCKET}/{key}") as f:
            assert SECRET_KEY.encode() not in f.read(), key

    mixed = export(output, f"s3://{BUCKET}/files")
    assert mixed.exit_code == 2 and "parquet" in mixed.output.lower(), mixed.output
    back = runner.invoke(app, ["export", str(output), "--to", f"s3://{BUCKET}/delta"])
    assert back.exit_code == 2 and "delta export" in back.output, back.output


def test_export_format_is_checked_before_anything_is_sent(tmp_path: Path) -> None:
    (tmp_path / "out" / "raw").mkdir(parents=True)
    for args, why in [
        (["--format", "orc"], "not an export format"),
        (["--format", "delta", "--snapshot"], "snapshot needs format parquet"),
    ]:
        result = runner.invoke(app, ["export", str(tmp_path / "out"), "--to", str(tmp_path / "x"), *args])
        assert result.exit_code == 2 and why in result.output, (args, result.output)
    assert not (tmp_path / "x").exists()


def test_a_spec_merges_its_runs_into_delta_tables_after_each_load(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    from harvest.sandbox.wire.serving import running
    from tests.flow_helpers import run_flow, write_spec
    from tests.nightly_helpers import CONFIG, job

    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    output, lake = tmp_path / "out", tmp_path / "lake"
    with running(replace(CONFIG, observation=0)) as sb:
        spec = write_spec(tmp_path, {**job(output), "export": {"to": str(lake), "format": "delta"}})
        summary = run_flow(spec, base_url=sb.base_url)
    assert summary.status == "complete", summary
    tables = [*merged_tables(output), "runs", "query_state"]
    assert summary.export["kind"] == "delta" and summary.export["tables"] == len(tables), summary.export
    assert_same_as_duckdb(output, str(lake))
    assert rows(output / "harvest.duckdb", "SELECT kind FROM exports") == [("delta",)]


def test_a_spec_names_the_export_format_it_may_use(tmp_path: Path) -> None:
    from harvest.flows.spec import SpecError, parse_spec

    base = "name: j\nbudget: {credits: 5}\nqueries: [{endpoint: /v1/pinboard/search, params: {query: a}}]\n"
    for export_, field, why in [
        ("{to: lake, format: orc}", "export.format", "'parquet', 'iceberg' or 'delta'"),
        ("{to: lake, format: delta, snapshot: true}", "export.snapshot", "snapshot needs format parquet"),
    ]:
        with pytest.raises(SpecError) as bad:
            parse_spec(f"{base}export: {export_}\n", file="job.yaml")
        assert "job.yaml:4" in str(bad.value) and field in str(bad.value) and why in str(bad.value), str(
            bad.value
        )
    assert (
        parse_spec(f"{base}export: {{to: lake, format: delta}}\n", file="job.yaml").export.format == "delta"
    )


def test_a_format_whose_library_is_missing_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from harvest.flows.handoff.lakehouse.lakehouse_export import open_format
    from harvest.flows.spec import UsageError
    from harvest.flows.spec.job_options import format_problem
    from harvest.tasks.output.layout import OutputLayout

    monkeypatch.setitem(sys.modules, "deltalake", None)  # as if `harvest[delta]` were not installed
    monkeypatch.delitem(sys.modules, "harvest.flows.handoff.lakehouse.delta_tables")
    assert "pip install 'harvest[delta]'" in str(format_problem("delta"))
    with pytest.raises(UsageError, match=r"pip install 'harvest\[delta\]'"):
        open_format("delta", str(tmp_path / "lake"), OutputLayout(tmp_path / "out"))
    (tmp_path / "out" / "raw").mkdir(parents=True)
    result = export(tmp_path / "out", str(tmp_path / "lake"))
    assert result.exit_code == 2 and "harvest[delta]" in result.output, result.output


def small_load(ids: list[int], value: int, at: int) -> TableLoad:
    schema = pa.schema(
        [("id", pa.string()), ("v", pa.int64()), ("_fetched_at", pa.timestamp("us", tz="UTC"))]
    )
    batch = pa.record_batch([[str(i) for i in ids], [value] * len(ids), [at] * len(ids)], schema)
    return TableLoad("t", ("id",), schema, lambda: pa.RecordBatchReader.from_batches(schema, [batch]))


def test_a_merge_rewrites_only_the_files_holding_keys_it_replaces(tmp_path: Path) -> None:
    """Three nights of new keys make three files; a night fetching two keys of the second again rewrites
    that file alone and adds its new key; the same rows again, or an older fetch, write nothing."""
    fmt, uri = DeltaFormat(str(tmp_path)), str(tmp_path / "t")
    for night_ids in (range(0, 100), range(100, 200), range(200, 300)):
        fmt.merge(small_load(list(night_ids), 1, 1_000))
    before = set(DeltaTable(uri).file_uris())
    holding = {f for f in before if "151" in duckdb.execute(f"SELECT list(id) FROM '{f}'").fetchall()[0][0]}

    result = fmt.merge(small_load([150, 151, 400], 2, 2_000))
    table = DeltaTable(uri)
    after = set(table.file_uris())
    assert len(holding) == 1 and before - after == holding, (
        "only the file holding the updated keys is replaced"
    )
    assert result.updated == 2 and result.inserted == 1 and result.version == str(table.version()) == "3"
    got = key_values(table.to_pyarrow_table(), "id", "v")
    assert len(got) == table.to_pyarrow_table().num_rows == 301
    assert {k for k, v in got.items() if v == 2} == {"150", "151", "400"}

    for again in (small_load([150, 151, 400], 2, 2_000), small_load([150], 9, 1_500)):
        unchanged = fmt.merge(again)
        assert unchanged.updated == unchanged.inserted == 0 and DeltaTable(uri).version() == 3
    assert key_values(DeltaTable(uri).to_pyarrow_table(), "id", "v")["150"] == 2, "an older fetch loses"

    rebuilt = fmt.merge(small_load([151, 400], 3, 2_000))  # as new, but a rebuild read other values
    assert rebuilt.updated == 2 and rebuilt.inserted == 0 and DeltaTable(uri).version() == 4
    got = key_values(DeltaTable(uri).to_pyarrow_table(), "id", "v")
    assert (got["150"], got["151"], got["400"], len(got)) == (2, 3, 3, 301)


def test_a_table_another_engine_gave_deletion_vectors_is_merged_by_delta_rs(tmp_path: Path) -> None:
    """Its data files are not its rows alone (deletion vectors): merged by delta-rs's MERGE, which reads them."""
    uri = str(tmp_path / "t")
    first = small_load(list(range(10)), 1, 1_000)
    write_deltalake(uri, first.open(), configuration={"delta.enableDeletionVectors": "true"})
    result = DeltaFormat(str(tmp_path)).merge(small_load([5, 10], 2, 2_000))
    rows_read = QueryBuilder().register("t", DeltaTable(uri)).execute("SELECT id, v FROM t").read_all()
    got = key_values(pa.table(rows_read), "id", "v")
    assert result.updated == 1 and result.inserted == 1 and len(got) == 11 and got["5"] == got["10"] == 2


def test_maintenance_compacts_and_vacuums_a_merged_table_without_losing_a_row(tmp_path: Path) -> None:
    """What docs/warehouse-tables.md tells a user to run: compaction, then vacuum. The files a merge wrote under
    `harvest-<id>/` and later replaced are deleted like any other; the table reads the same after both."""
    fmt, uri = DeltaFormat(str(tmp_path)), str(tmp_path / "t")
    for night_ids, value, at in (
        (range(0, 100), 1, 1_000),
        (range(100, 200), 1, 1_000),
        ([150, 400], 2, 2_000),
    ):
        fmt.merge(small_load(list(night_ids), value, at))
    fmt.merge(
        small_load([151, 400], 3, 3_000)
    )  # replaces a file the previous merge wrote under harvest-<id>/
    before = key_values(DeltaTable(uri).to_pyarrow_table(), "id", "v")
    merged = {
        p.resolve() for p in (tmp_path / "t").rglob("*.parquet") if p.parent.name.startswith("harvest-")
    }
    assert merged, "merges write under harvest-<id>/"

    table = DeltaTable(uri)
    table.optimize.compact()
    table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    table = DeltaTable(uri)
    on_disk = {p.resolve() for p in (tmp_path / "t").rglob("*.parquet")}
    assert on_disk == {Path(u).resolve() for u in table.file_uris()}, (
        "vacuum left only the files the table reads"
    )
    assert not merged & on_disk, "the merges' replaced files are gone"
    assert key_values(table.to_pyarrow_table(), "id", "v") == before and len(before) == 201
    assert (before["150"], before["151"], before["400"]) == (2, 3, 3)


def test_harvest_export_delta_of_200k_rows_with_their_raw_answers_completes(tmp_path: Path) -> None:
    """The command a user runs, on a loaded run of 200,000 videos with ~330-byte raw answers in the sink's row
    groups, under the default memory cap: every key reaches the Delta table once. It ran out of memory from
    150,000 rows while the newest row was chosen by sorting whole rows (`table_rows.record_reader`)."""
    from harvest.tasks.output.layout import OutputLayout
    from harvest.tasks.output.manifest import RunManifest, write_manifest
    from harvest.tasks.output.parquet_sink import ROW_GROUP_ROWS

    kind, n, run_id = all_kinds()[VIDEOS], 200_000, "20261124T030000Z-aaaaaa"
    layout = OutputLayout(tmp_path / "out")
    path = layout.parquet_file(VIDEOS, dt.date(2026, 11, 24), run_id, "0000")
    path.parent.mkdir(parents=True)
    at = dt.datetime(2026, 11, 24, 3, tzinfo=dt.UTC)
    given = {
        "aweme_id": pa.array([str(i) for i in range(n)]),
        "raw": pa.array([f'{{"aweme_id": "{i}", "desc": "{f"{i:08d}" * 40}"}}' for i in range(n)]),
        "_run_id": pa.array([run_id] * n),
        "_fetched_at": pa.array([at] * n, kind.schema.field("_fetched_at").type),
    }
    table = pa.table(
        {f.name: given.get(f.name, pa.nulls(n, f.type)) for f in kind.schema}, schema=kind.schema
    )
    pq.write_table(table, path, compression="zstd", row_group_size=ROW_GROUP_ROWS)
    run = RunManifest(
        run_id=run_id, job="big", spec_hash="h", service="s", started=at.isoformat(), finished=at.isoformat(),
        status="complete", budget=0, credits_spent=0, loaded=True, files=[(VIDEOS, layout.relative(path), n)],
    )  # fmt: skip
    write_manifest(layout, run)
    result = export(layout.root, str(tmp_path / "dest"))
    assert result.exit_code == 0, result.output
    got = delta(str(tmp_path / "dest" / VIDEOS)).to_pyarrow_table(columns=["aweme_id"])
    assert got.num_rows == n == len(set(got.column("aweme_id").to_pylist()))
