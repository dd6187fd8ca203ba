"""What a lakehouse export hands Iceberg or Delta: one row per key, the newest fetch, in the catalog's schema,
whether the table is read in one window or in buckets of keys (a table too large for one)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from typer.testing import CliRunner

from harvest.connectors.catalog.endpoints import all_kinds
from harvest.flows.cli import app
from harvest.flows.commands.history_note import current_rows_sql
from harvest.flows.handoff.lakehouse import table_rows
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import running
from harvest.tasks.output.parquet_sink import ROW_GROUP_ROWS
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, job_spec, rows, run_flow, write_spec
from tests.published_samples import sample

KIND = all_kinds()["short_video_videos"]


@pytest.fixture
def db() -> Iterator[duckdb.DuckDBPyConnection]:
    """The database an export reads its tables in."""
    with table_rows.one_database() as con:
        yield con


def _night(path: Path, day: int, ids: range, *, drop: str | None = None) -> Path:
    """A run's Parquet file: `caption` says which night fetched the row; `drop`: a column it did not have yet."""
    schema = KIND.schema if drop is None else pa.schema([f for f in KIND.schema if f.name != drop])
    n = len(ids)
    columns = {
        f.name: pa.array([f"v{i}" for i in ids])
        if f.name == "aweme_id"
        else pa.array([f"night {day}"] * n)
        if f.name == "caption"
        else pa.array([datetime(2026, 11, day, tzinfo=UTC)] * n, f.type)
        if f.name == "_fetched_at"
        else pa.nulls(n, f.type)
        for f in schema
    }
    pq.write_table(pa.table(columns, schema=schema), path)
    return path


@pytest.mark.parametrize("bucket_rows", [500_000, 7], ids=["one window", "buckets of keys"])
def test_each_key_once_with_its_newest_fetch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bucket_rows: int, db: duckdb.DuckDBPyConnection
) -> None:
    monkeypatch.setattr(table_rows, "BUCKET_ROWS", bucket_rows)
    files = [
        _night(tmp_path / "a.parquet", 1, range(0, 60), drop="share_count"),  # an older catalog's file
        _night(tmp_path / "b.parquet", 3, range(40, 100)),
        _night(tmp_path / "c.parquet", 2, range(50, 70)),  # older than b for the keys they share
    ]
    got = pa.Table.from_batches(list(table_rows.record_reader(files, KIND.schema, KIND.primary_key, db)))
    assert got.schema == KIND.schema
    rows = {r["aweme_id"]: r["caption"] for r in got.to_pylist()}
    assert got.num_rows == len(rows) == 100, "each key once"
    assert {rows[f"v{i}"] for i in range(40)} == {"night 1"}
    assert {rows[f"v{i}"] for i in range(40, 100)} == {"night 3"}, "the newest fetch wins"


def test_a_table_wider_than_the_memory_cap_streams_in_one_window(
    tmp_path: Path, db: duckdb.DuckDBPyConnection
) -> None:
    """200,000 videos with their `raw` answers (~70 MB of rows, in row groups as the sink writes them), under
    the export's default 64 MB cap and in one window (under `BUCKET_ROWS`): the newest row is chosen on narrow
    rows, as the load does; sorting whole rows ran out of memory at 150,000 (a Delta export of it failed)."""
    n = 200_000
    pad = "{:08d}" * 40
    fetched = [datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 2, tzinfo=UTC)]
    columns = {
        "aweme_id": pa.array([f"v{i % (n - 1000)}" for i in range(n)]),  # the last 1,000 fetched again
        "caption": pa.array([f"night {1 + (i >= n - 1000)}" for i in range(n)]),
        "raw": pa.array([f'{{"i": {i}, "pad": "{pad.format(*[i] * 40)}"}}' for i in range(n)]),
        "_fetched_at": pa.array(
            [fetched[i >= n - 1000] for i in range(n)], KIND.schema.field("_fetched_at").type
        ),
    }
    table = pa.table(
        {f.name: columns.get(f.name, pa.nulls(n, f.type)) for f in KIND.schema}, schema=KIND.schema
    )
    pq.write_table(table, tmp_path / "wide.parquet", compression="zstd", row_group_size=ROW_GROUP_ROWS)
    got = pa.Table.from_batches(
        list(table_rows.record_reader([tmp_path / "wide.parquet"], KIND.schema, KIND.primary_key, db))
    )
    assert got.num_rows == n - 1000 == len(set(got.column("aweme_id").to_pylist())), "each key once"
    captions = dict(zip(got.column("aweme_id").to_pylist(), got.column("caption").to_pylist(), strict=True))
    assert {captions[f"v{i}"] for i in range(1000)} == {"night 2"}, "the newest fetch wins"
    assert {captions[f"v{i}"] for i in range(1000, n - 1000)} == {"night 1"}


def test_a_file_an_older_catalog_typed_otherwise_is_read_in_todays_types(
    tmp_path: Path, db: duckdb.DuckDBPyConnection
) -> None:
    """A run landed before `created_at` became a TIMESTAMPTZ (text in its file) exports in today's type;
    a value that does not convert is NULL (the load's rule; the file and `raw` keep it)."""
    kind = all_kinds()["video_platform_videos"]
    fields = [pa.field(f.name, pa.string()) if f.name == "created_at" else f for f in kind.schema]
    older = pa.schema([f for f in fields if f.name != "created_at_text"])
    fetched = datetime(2026, 11, 1, tzinfo=UTC)
    data = {
        "id": ["a", "b"],
        "created_at": ["2023-05-28T17:08:46.499Z", "2 years ago"],
        "_fetched_at": [fetched] * 2,
    }
    table = pa.table({f.name: data.get(f.name, pa.nulls(2, f.type)) for f in older}, schema=older)
    pq.write_table(table, tmp_path / "old.parquet")
    got = pa.Table.from_batches(
        list(table_rows.record_reader([tmp_path / "old.parquet"], kind.schema, ("id",), db))
    )
    assert got.schema == kind.schema
    assert dict(zip(got.column("id").to_pylist(), got.column("created_at").to_pylist(), strict=True)) == {
        "a": datetime(2023, 5, 28, 17, 8, 46, 499000, tzinfo=UTC),
        "b": None,
    }


def test_a_child_file_an_older_catalog_typed_otherwise_is_read_in_todays_types(
    tmp_path: Path, db: duckdb.DuckDBPyConnection
) -> None:
    """A video shelf's items landed while their `created_at` was text export in today's type, as the
    parent's rows do; a value that does not convert is NULL."""
    parent, child = all_kinds()["video_platform_shelves"], all_kinds()["video_platform_shelf_items"]
    fetched = datetime(2026, 11, 1, tzinfo=UTC)
    shelf = {
        "search_query": ["cats"], "type": ["shelf"], "title": ["Latest"], "first_item_id": ["v1"],
        "_fetched_at": [fetched],
    }  # fmt: skip
    pq.write_table(
        pa.table(
            {f.name: shelf.get(f.name, pa.nulls(1, f.type)) for f in parent.schema}, schema=parent.schema
        ),
        tmp_path / "shelves.parquet",
    )
    fields = [pa.field(f.name, pa.string()) if f.name == "created_at" else f for f in child.schema]
    older = pa.schema([f for f in fields if f.name != "created_at_text"])
    data = {
        "parent_search_query": ["cats"] * 2,
        "parent_type": ["shelf"] * 2,
        "parent_title": ["Latest"] * 2,
        "parent_first_item_id": ["v1"] * 2,
        "position": [0, 1],
        "created_at": ["2023-05-28T17:08:46.499Z", "2 years ago"],
        "_fetched_at": [fetched] * 2,
    }
    pq.write_table(
        pa.table({f.name: data.get(f.name, pa.nulls(2, f.type)) for f in older}, schema=older),
        tmp_path / "items.parquet",
    )
    reader = table_rows.child_reader(
        child, [tmp_path / "items.parquet"], [tmp_path / "shelves.parquet"], groups=False, db=db
    )
    got = pa.Table.from_batches(list(reader), schema=child.schema)
    assert got.schema == child.schema
    pairs = zip(got.column("position").to_pylist(), got.column("created_at").to_pylist(), strict=True)
    assert sorted(pairs) == [
        (0, datetime(2023, 5, 28, 17, 8, 46, 499000, tzinfo=UTC)),
        (1, None),
    ]


def test_a_child_table_wider_than_the_memory_cap_streams(
    tmp_path: Path, db: duckdb.DuckDBPyConnection
) -> None:
    """100,000 shelf items of 1,000 shelves with ~1 KB of text each (~100 MB of rows, in the sink's row groups),
    under the default cap: each item is chosen on narrow rows and read whole after, as the record tables' are; a
    window over whole items ran out of memory (the Delta or Iceberg export of the table failed)."""
    parent, child = all_kinds()["video_platform_shelves"], all_kinds()["video_platform_shelf_items"]
    fetched, n, shelves = datetime(2026, 11, 1, tzinfo=UTC), 100_000, 1_000
    shelf = {
        "search_query": [f"q{i}" for i in range(shelves)], "type": ["shelf"] * shelves,
        "title": ["Latest"] * shelves, "first_item_id": [f"v{i}" for i in range(shelves)],
        "_fetched_at": [fetched] * shelves,
    }  # fmt: skip
    shelf_table = pa.table({f.name: shelf.get(f.name, pa.nulls(shelves, f.type)) for f in parent.schema})
    pq.write_table(shelf_table.cast(parent.schema), tmp_path / "shelves.parquet")
    items: dict[str, list[Any]] = {
        "parent_search_query": [f"q{i // 100}" for i in range(n)], "parent_type": ["shelf"] * n,
        "parent_title": ["Latest"] * n, "parent_first_item_id": [f"v{i // 100}" for i in range(n)],
        "position": [i % 100 for i in range(n)], "_fetched_at": [fetched] * n,
    }  # fmt: skip
    for column in ("id", "title", "url", "thumbnail_url"):
        items[column] = [f"{column} {i:08d} " * 12 for i in range(n)]
    item_table = pa.table({f.name: items.get(f.name, pa.nulls(n, f.type)) for f in child.schema})
    pq.write_table(item_table.cast(child.schema), tmp_path / "items.parquet", row_group_size=ROW_GROUP_ROWS)
    reader = table_rows.child_reader(
        child, [tmp_path / "items.parquet"], [tmp_path / "shelves.parquet"], groups=False, db=db
    )
    got = pa.Table.from_batches(list(reader), schema=child.schema)
    assert got.num_rows == n
    assert set(got.column("id").to_pylist()) == set(items["id"]), "every item once, whole"


def test_a_key_a_page_holds_three_times_is_its_last_occurrence_in_the_table_view_query_and_delta(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One page (the published sample, served over HTTP) holds video X three times, all with the page's
    `_fetched_at`: the DuckDB table, the `_history` view, the current-rows query the end of a run prints and a
    Delta export all keep the last occurrence (`dup 2`, 333 views). The table kept the last while the view,
    the query and the lakehouse reader ordered by `_fetched_at` alone and kept the first."""
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    page = sample("_v1_streaming_user_videos.json")
    first = page["allVideos"][0]
    page["allVideos"] = [
        {**first, "title": f"dup {n}", "viewCount": views} for n, views in enumerate((111, 222, 333))
    ] + page["allVideos"][1:]
    page["credits_remaining"] = BIG_BALANCE
    replay = {"/v1/streaming/user/videos": orjson.dumps(page)}
    output = tmp_path / "out"
    queries = [{"id": "videos", "endpoint": "/v1/streaming/user/videos", "params": {"handle": "acmeesports"}}]
    spec = write_spec(tmp_path, job_spec("http://127.0.0.1:9", output, queries, name="dups"))
    with running(SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, replay=replay)) as sb:
        assert run_flow(spec, base_url=sb.base_url).status == "complete"
    db, x, last = output / "harvest.duckdb", first["id"], [("dup 2", 333)]
    assert len(rows(db, "SELECT DISTINCT _fetched_at FROM streaming_videos")) == 1  # one page: one fetch time
    assert rows(db, "SELECT title, view_count FROM streaming_videos WHERE id = ?", [x]) == last
    assert rows(db, "SELECT title, view_count FROM streaming_videos_history WHERE id = ?", [x]) == last
    printed = "\n".join(current_rows_sql(output / "parquet" / "streaming_videos", ("id",), None))
    assert rows(db, f"SELECT title, view_count FROM ({printed}) WHERE id = ?", [x]) == last
    lake = tmp_path / "lake"
    exported = CliRunner().invoke(app, ["export", str(output), "--to", str(lake), "--format", "delta"])
    assert exported.exit_code == 0, exported.output
    delta = duckdb.connect()
    delta.register("exported", DeltaTable(str(lake / "streaming_videos")).to_pyarrow_table())
    assert delta.execute("SELECT title, view_count FROM exported WHERE id = ?", [x]).fetchall() == last
