"""True types: a published time is a TIMESTAMPTZ beside its relative text, a price an exact DECIMAL beside its
currency; a value that does not fit is a counted misfit, never a crash; and a database or Parquet an older
harvest wrote with the old types (VARCHAR times, DOUBLE prices) is brought to them without losing a value.

The landed demo's types and comments are checked in tests/test_cli_run.py (`assert_true_types_and_described`).
"""

from __future__ import annotations

import datetime as dt
import logging
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from harvest.configs import spec_path
from harvest.connectors.catalog import endpoints as catalog
from harvest.connectors.catalog.child_kinds import ChildKind
from harvest.connectors.catalog.fields import Field, coercer, decimal
from harvest.connectors.catalog.records import META_COLUMNS
from harvest.connectors.reading import extraction
from harvest.flows.run.preflight import check_output_dir
from harvest.flows.spec import UsageError, load_spec
from harvest.tasks.database.column_comments import column_comment
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.parquet_sink import MultiTableSink
from tests.endpoints import SHOP, VIDEO_SEARCH
from tests.flow_helpers import write_spec
from tests.landing_helpers import Kind, load_tables

COMMENTS, PRODUCTS = "video_platform_comments", "short_video_products"
T0 = dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.UTC)


# ------------------------------------------------------------------------------------------- reading
@pytest.mark.parametrize(
    ("sent", "kept"),
    [("14.96", "14.96"), ("1,234.50", "1234.5"), (14.96, "14.96"), (3, "3"), ("0.0001", "0.0001"),
     ("99999999999999.9999", "99999999999999.9999"), ("12.34567", None), (0.1 + 0.2, None), ("1e3", None),
     ("$4.99", None), ("1.2K", None), ("100000000000000", None), (True, None), (float("nan"), None)],
)  # fmt: skip
def test_an_amount_is_kept_exactly_or_not_at_all(sent: Any, kept: str | None) -> None:
    """Money is never rounded: more decimals than DECIMAL(18,4) holds (0.1 + 0.2 is 0.30000000000000004) or more
    whole digits is a misfit."""
    assert coercer(decimal("price"))(sent) == (None if kept is None else Decimal(kept))


def test_a_page_of_prices_and_times_lands_true_types_and_counts_what_does_not_fit() -> None:
    products = [
        {"product_id": "p1", "product_price_info": {"currency_name": "USD", "sale_price_decimal": "14.96"}},
        {"product_id": "p2", "price": {"currency": "EUR", "amount": 1099.5}},  # the interface's names
        {
            "product_id": "p3",
            "product_price_info": {"currency_name": "JPY", "sale_price_decimal": "12.34567"},
        },
    ]
    page = extraction.convert_page(catalog.get(SHOP).kinds, {"products": products}, {})
    table, report = page.tables[PRODUCTS], page.report.tables[PRODUCTS]
    assert table.schema.field("price_amount").type == pa.decimal128(18, 4)
    assert table.column("price_amount").to_pylist() == [Decimal("14.96"), Decimal("1099.5"), None]
    assert table.column("price_currency").to_pylist() == ["USD", "EUR", "JPY"]
    assert (report.kept, report.misfits) == (3, {"price_amount": 1})
    videos = [
        {"id": "a", "publishedTime": "2023-05-28T17:08:46.499Z", "publishedTimeText": "2 years ago"},
        {
            "id": "b",
            "publishedTime": "2023-13-45T99:00:00Z",
            "publishedTimeText": "3 days ago",
        },  # ISO-looking
        {"id": "c", "publishedTime": "3 days ago"},
    ]
    page = extraction.convert_page(catalog.get(VIDEO_SEARCH).kinds, {"videos": videos}, {"query": "cats"})
    table, report = page.tables["video_platform_videos"], page.report.tables["video_platform_videos"]
    assert table.column("created_at").to_pylist() == [
        dt.datetime(2023, 5, 28, 17, 8, 46, 499000, tzinfo=dt.UTC),
        None,
        None,
    ]
    assert table.column("created_at_text").to_pylist() == ["2 years ago", "3 days ago", None]
    assert (report.kept, report.misfits) == (3, {"created_at": 2}) and not page.report.lost


# ---------------------------------------------------------------------------- what an older harvest left
def older(table: str, **types: pa.DataType) -> Kind:
    """The kind as an older catalog typed it: other types, no `created_at_text`, no descriptions."""
    schema = catalog.all_kinds()[table].schema
    fields = [pa.field(f.name, types.get(f.name, f.type)) for f in schema if f.name != "created_at_text"]
    return Kind(table, catalog.all_kinds()[table].primary_key, pa.schema(fields))


OLD_COMMENTS, OLD_PRODUCTS = (
    older(COMMENTS, created_at=pa.string()),
    older(PRODUCTS, price_amount=pa.float64()),
)
TODAYS_PRODUCTS = older(PRODUCTS, price_amount=pa.decimal128(18, 4)).schema
"""Today's products without the descriptions' metadata: a load as a lakehouse export makes it."""


def land(root: Path, run_id: str, kind: Any, records: list[dict[str, Any]], at: dt.datetime) -> list[Path]:
    meta = {"raw": "{}", "_endpoint": "/e", "_query_id": "q", "_run_id": run_id, "_fetched_at": at}
    data = pa.Table.from_pylist([{**meta, **r} for r in records], schema=kind.schema)
    with MultiTableSink(OutputLayout(root), run_id, at, "0000") as sink:
        sink.write_page([(kind, data)])
    return [path for _, path, _ in sink.close()]


def db_rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def columns(db: Path, table: str) -> dict[str, tuple[str, str | None]]:
    sql = f"SELECT column_name, data_type, comment FROM duckdb_columns() WHERE table_name = '{table}'"
    return {name: (typ, comment) for name, typ, comment in db_rows(db, sql)}


ISO = "2025-01-23T23:14:02.948Z"


def test_an_older_database_is_brought_to_the_true_types_without_losing_a_value(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = OutputLayout(tmp_path).db
    old = [{"id": "c1", "created_at": ISO}, {"id": "c2", "created_at": "yesterday"}, {"id": "c3"}]
    load_tables(db, [(OLD_COMMENTS, land(tmp_path, "r1", OLD_COMMENTS, old, T0))])  # as the old load left it
    prices = [{"id": "p1", "price_amount": 14.96, "price_currency": "USD"}, {"id": "p2", "price_amount": 0.5}]
    load_tables(db, [(OLD_PRODUCTS, land(tmp_path, "r1", OLD_PRODUCTS, prices, T0))])
    assert columns(db, COMMENTS)["created_at"][0] == "VARCHAR"
    check_output_dir(tmp_path)  # a run is not refused over it: the load retypes it

    kinds = catalog.all_kinds()
    later = T0 + dt.timedelta(hours=1)
    new = [{"id": "c4", "created_at": T0, "created_at_text": "1 hour ago"}]
    with caplog.at_level(logging.WARNING, logger="harvest.tasks.database.column_types"):
        load_tables(db, [(kinds[COMMENTS], land(tmp_path, "r2", kinds[COMMENTS], new, later))])
        load_tables(db, [(kinds[PRODUCTS], [])])
    got = columns(db, COMMENTS)
    assert got["created_at"][0] == got["_fetched_at"][0] == "TIMESTAMP WITH TIME ZONE"
    assert got["created_at_was_varchar"][0] == "VARCHAR"  # "yesterday" does not convert: kept beside
    assert "did not convert" in str(got["created_at_was_varchar"][1])
    assert db_rows(db, f"SELECT id, created_at, created_at_was_varchar FROM {COMMENTS} ORDER BY id") == [
        ("c1", dt.datetime(2025, 1, 23, 23, 14, 2, 948000, tzinfo=dt.UTC), ISO),
        ("c2", None, "yesterday"),
        ("c3", None, None),
        ("c4", T0, None),
    ]
    assert db_rows(db, f"SELECT count(*) FROM {COMMENTS} WHERE created_at < now()") == [(2,)]
    assert columns(db, PRODUCTS)["price_amount"][0] == "DECIMAL(18,4)"  # every DOUBLE converts exactly
    assert db_rows(db, f"SELECT id, price_amount FROM {PRODUCTS} ORDER BY id") == [
        ("p1", Decimal("14.96")), ("p2", Decimal("0.5"))
    ]  # fmt: skip
    told = [r.getMessage() for r in caplog.records]
    assert told == [
        f"table {COMMENTS}: column created_at is now TIMESTAMP WITH TIME ZONE; 1 of its VARCHAR values did "
        "not convert exactly and are kept in created_at_was_varchar (and in each row's raw)",
        f"table {PRODUCTS}: column price_amount is now DECIMAL(18,4) (was DOUBLE; every value converted)",
    ]
    for table in (COMMENTS, PRODUCTS):  # the comments are the catalog's now
        kind = kinds[table]
        assert {n: c for n, (_, c) in columns(db, table).items() if n in kind.schema.names} == {
            f.name: column_comment(f, kind.primary_key) for f in kind.schema
        }


def test_every_is_and_has_column_is_boolean() -> None:
    """A flag is BOOLEAN whatever the service sends for it (`is_top` is 0 or 1: `_as_bool` reads ints):
    `WHERE is_pinned` works on every table as on the others."""
    flags = {
        (table, f.name): str(f.type)
        for table, kind in catalog.all_kinds().items()
        for f in kind.columns
        if f.name.startswith(("is_", "has_"))
    }
    assert flags and {name: typ for name, typ in flags.items() if typ != "bool"} == {}
    assert [coercer(Field("f", "f", pa.bool_()))(v) for v in (0, 1, True, "false")] == [
        False,
        True,
        True,
        False,
    ]


def test_an_older_bigint_flag_becomes_boolean_in_place(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`is_pinned` was a BIGINT of 0 and 1: an older database's column is retyped in place, every value kept,
    and a run an older harvest landed (its Parquet's BIGINT) loads into it."""
    videos = "short_video_videos"
    was = older(videos, is_pinned=pa.int64())
    db = OutputLayout(tmp_path).db
    old = [{"aweme_id": "v1", "is_pinned": 1}, {"aweme_id": "v2", "is_pinned": 0}, {"aweme_id": "v3"}]
    load_tables(db, [(was, land(tmp_path, "r1", was, old, T0))])
    assert columns(db, videos)["is_pinned"][0] == "BIGINT"
    check_output_dir(tmp_path)  # a run is not refused over it: the load retypes it
    kind, later = catalog.all_kinds()[videos], T0 + dt.timedelta(hours=1)
    landed_before = land(tmp_path, "r2", was, [{"aweme_id": "v4", "is_pinned": 1}], later)
    with caplog.at_level(logging.WARNING, logger="harvest.tasks.database.column_types"):
        load_tables(db, [(kind, [*landed_before, *land(tmp_path, "r3", kind, [{"aweme_id": "v5"}], later)])])
    got = columns(db, videos)
    assert got["is_pinned"][0] == "BOOLEAN" and "is_pinned_was_bigint" not in got
    assert db_rows(db, f"SELECT aweme_id, is_pinned FROM {videos} ORDER BY ALL") == [
        ("v1", True), ("v2", False), ("v3", None), ("v4", True), ("v5", None)
    ]  # fmt: skip
    assert (
        f"table {videos}: column is_pinned is now BOOLEAN (was BIGINT; every value converted)"
        in caplog.messages
    )


def test_parquet_an_older_harvest_wrote_loads_into_the_true_types(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A run landed before the upgrade and loaded after it, or a database built again from old Parquet."""
    db = OutputLayout(tmp_path).db
    old = [{"id": "c1", "created_at": ISO}, {"id": "c2", "created_at": "yesterday"}]
    files = land(tmp_path, "r1", OLD_COMMENTS, old, T0)
    with caplog.at_level(logging.WARNING, logger="harvest.tasks.database.column_types"):
        assert load_tables(db, [(catalog.all_kinds()[COMMENTS], files)]) == {COMMENTS: 2}
    assert columns(db, COMMENTS)["created_at"][0] == "TIMESTAMP WITH TIME ZONE"
    assert db_rows(db, f"SELECT id, created_at FROM {COMMENTS} ORDER BY id") == [
        ("c1", dt.datetime(2025, 1, 23, 23, 14, 2, 948000, tzinfo=dt.UTC)),
        ("c2", None),
    ]
    assert "1 value(s) of created_at in Parquet an older harvest wrote (VARCHAR)" in caplog.text


def test_child_parquet_an_older_harvest_wrote_loads_into_the_true_types(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A child table's Parquet is read into today's types as a record table's: a video shelf's items landed
    while their `created_at` was text load with it a TIMESTAMPTZ, what does not convert NULL and said."""
    db, shelves, items = OutputLayout(tmp_path).db, "video_platform_shelves", "video_platform_shelf_items"
    parents = land(
        tmp_path,
        "r1",
        older(shelves),
        [{"search_query": "q", "type": "shelf", "title": "Latest", "first_item_id": "v1"}],
        T0,
    )
    key = {
        "parent_search_query": "q",
        "parent_type": "shelf",
        "parent_title": "Latest",
        "parent_first_item_id": "v1",
    }
    old = [
        {**key, "position": 0, "created_at": ISO},
        {**key, "position": 1, "created_at": "yesterday"},
    ]
    files = land(tmp_path, "r1", older(items, created_at=pa.string()), old, T0)
    kinds = catalog.all_kinds()
    with caplog.at_level(logging.WARNING, logger="harvest.tasks.database.column_types"):
        loaded = load_tables(db, [(kinds[shelves], parents), (kinds[items], files)])
    assert loaded == {shelves: 1, items: 2}
    assert columns(db, items)["created_at"][0] == "TIMESTAMP WITH TIME ZONE"
    assert db_rows(db, f"SELECT position, created_at FROM {items} ORDER BY position") == [
        (0, dt.datetime(2025, 1, 23, 23, 14, 2, 948000, tzinfo=dt.UTC)),
        (1, None),
    ]
    assert "1 value(s) of created_at in Parquet an older harvest wrote (VARCHAR)" in caplog.text


def test_an_older_table_whose_values_do_not_convert_is_refused_only_when_harvest_may_not_have_made_it(
    tmp_path: Path,
) -> None:
    """A table keyed by a constraint (the very first harvests, or someone else's) is not reshaped over values
    that do not convert; one whose values all convert is accepted."""
    for case, value, refused in (("fine", ISO, False), ("odd", "yesterday", True)):
        db = OutputLayout(tmp_path / case).db
        db.parent.mkdir(parents=True)
        con = duckdb.connect(str(db))
        con.execute(f"CREATE TABLE {COMMENTS} (id VARCHAR PRIMARY KEY, created_at VARCHAR)")
        con.execute(f"INSERT INTO {COMMENTS} VALUES ('c1', ?)", [value])
        con.close()
        if not refused:
            check_output_dir(db.parent)
            continue
        with pytest.raises(UsageError) as caught:
            check_output_dir(db.parent)
        assert (
            f"{COMMENTS}.created_at: VARCHAR, harvest writes TIMESTAMP WITH TIME ZONE (1 of its values do not "
            "convert)" in str(caught.value)
        )


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_a_lake_table_an_older_catalog_made_keeps_its_types_and_the_export_says_so(
    tmp_path: Path, fmt: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Iceberg and Delta change no column's type in place: the table keeps its VARCHAR time and DOUBLE price,
    today's rows are cast to them, and each merge says so (Iceberg refused the merge: "Cannot promote")."""
    from harvest.flows.handoff.lakehouse.delta_tables import DeltaFormat
    from harvest.flows.handoff.lakehouse.iceberg_tables import IcebergFormat
    from harvest.flows.handoff.lakehouse.table_format import TableLoad

    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path))  # no catalog of the developer's
    kind = catalog.all_kinds()[PRODUCTS]

    def load(schema: pa.Schema, amount: Any, at: dt.datetime) -> TableLoad:
        meta = {"raw": "{}", "_endpoint": "/e", "_query_id": "q", "_run_id": "r", "_fetched_at": at}
        data = pa.Table.from_pylist([{**meta, "id": "p1", "price_amount": amount}], schema=schema)
        return TableLoad(PRODUCTS, kind.primary_key, schema, lambda: data.to_reader())

    lake = tmp_path / "lake"
    target = (
        IcebergFormat(str(lake), OutputLayout(tmp_path / "out"))
        if fmt == "iceberg"
        else DeltaFormat(str(lake))
    )
    try:
        target.merge(load(OLD_PRODUCTS.schema, 14.96, T0))
        with caplog.at_level(logging.WARNING):
            result = target.merge(load(TODAYS_PRODUCTS, Decimal("15.5"), T0 + dt.timedelta(days=1)))
    finally:
        target.close()
    assert result.updated == 1
    assert f"{fmt} table {PRODUCTS} keeps price_amount in the type it was made with" in caplog.text
    if fmt == "delta":
        from deltalake import DeltaTable

        got = DeltaTable(str(lake / PRODUCTS)).to_pyarrow_table()
    else:
        got = target.catalog.load_table(("harvest", PRODUCTS)).scan().to_arrow()
    assert got.schema.field("price_amount").type == pa.float64() and got.column(
        "price_amount"
    ).to_pylist() == [15.5]


# ------------------------------------------------------------------- the next run on an older landed output
UPGRADED_QUERIES = (
    "video_search",
    "channel_videos",
    "video_comments",
    "comment_replies",
    "community_post",
    "shop",
    "clip",
)
"""The demo's queries an older harvest landed with the types this upgrade changes (and the parents the replies
are chained from). The whole demo (~160 tables) is not used: a second load of it needs more than DuckDB's
default memory limit of 64 MB."""
DEMO_PATHS = {q.endpoint for q in load_spec(str(spec_path("demo.yaml"))).queries if q.id in UPGRADED_QUERIES}
CHILDREN = sorted(  # the child tables of the endpoints the demo asks
    {
        kind.table
        for path in DEMO_PATHS
        for kind in catalog.get(path).landed_kinds
        if isinstance(kind, ChildKind)
    }
)
TIMED = (
    "video_platform_videos",
    "video_platform_shorts",
    "video_platform_comments",
    "video_platform_community_posts",
)


def as_an_older_harvest_left_it(output: Path) -> None:
    """The landed demo as an older harvest wrote it, in DuckDB and in the run's Parquet: `created_at` the
    service's ISO text, `price_amount` a DOUBLE, no `created_at_text`, no column comments, no child tables
    (nor their Parquet). Plus rows no later run fetches again (an item gone from the service): one whose time does
    not parse ("yesterday")."""
    con = duckdb.connect(str(OutputLayout(output).db))
    try:
        con.execute("DROP SCHEMA harvest_state CASCADE")  # what the views were checked against: not kept then
        for child in CHILDREN:
            con.execute(f"DROP VIEW IF EXISTS {child}_history")
            con.execute(f"DROP TABLE IF EXISTS {child}")
            shutil.rmtree(output / "parquet" / child, ignore_errors=True)
        for table, column in con.execute(
            "SELECT table_name, column_name FROM duckdb_columns() WHERE comment IS NOT NULL AND NOT internal"
        ).fetchall():
            con.execute(f'COMMENT ON COLUMN "{table}"."{column}" IS NULL')
        for table in TIMED:
            con.execute(
                f"ALTER TABLE {table} ALTER created_at SET DATA TYPE VARCHAR USING raw->>'publishedTime'"
            )
            con.execute(f"ALTER TABLE {table} DROP COLUMN created_at_text")
        con.execute(f"ALTER TABLE {PRODUCTS} ALTER price_amount SET DATA TYPE DOUBLE")
        meta = "'{}', '/e', 'q', 'r0', TIMESTAMPTZ '2026-01-01 00:00:00+00'"
        cols = "raw, _endpoint, _query_id, _run_id, _fetched_at"
        con.execute(
            f"INSERT INTO video_platform_videos (id, created_at, {cols}) VALUES ('gone', '{ISO}', {meta})"
        )
        con.execute(f"INSERT INTO {COMMENTS} (id, created_at, {cols}) VALUES ('gone', 'yesterday', {meta})")
        con.execute(f"INSERT INTO {PRODUCTS} (id, price_amount, {cols}) VALUES ('gone', 14.96, {meta})")
        for table, change in [(t, "REPLACE (raw->>'publishedTime' AS created_at)") for t in TIMED] + [
            (PRODUCTS, "REPLACE (price_amount::DOUBLE AS price_amount)")
        ]:
            excluded = "EXCLUDE (created_at_text) " if table in TIMED else ""
            for path in (output / "parquet" / table).rglob("*.parquet"):
                old = path.with_suffix(".old")
                con.execute(f"COPY (SELECT * {excluded}{change} FROM '{path}') TO '{old}' (FORMAT parquet)")
                old.replace(path)
    finally:
        con.close()


@pytest.mark.scenario
def test_the_next_run_loads_into_a_database_an_older_harvest_landed_and_exports_true_types(
    prefect_harness: None, tmp_path: Path
) -> None:
    """The upgrade as a user meets it: a demo landed by an older harvest, the next run on the same output, then
    an export. No row is lost, the types are true and every column is described."""
    from deltalake import DeltaTable
    from typer.testing import CliRunner

    from harvest.flows.cli import app
    from tests.flow_helpers import table_counts

    runner, output = CliRunner(), tmp_path / "demo"
    demo = yaml.safe_load(spec_path("demo.yaml").read_text(encoding="utf-8"))
    demo["queries"] = [q for q in demo["queries"] if q["id"] in UPGRADED_QUERIES]
    spec = str(write_spec(tmp_path, demo, "demo.yaml"))
    run = ["run", spec, "--base-url", "sandbox", "--output", str(output)]
    assert runner.invoke(app, run).exit_code == 0
    as_an_older_harvest_left_it(output)
    db = OutputLayout(output).db
    before = table_counts(db)
    assert columns(db, "video_platform_videos")["created_at"][0] == "VARCHAR"

    again = runner.invoke(app, run)
    assert again.exit_code == 0, again.output
    after = table_counts(db)
    assert all(after[t] >= n for t, n in before.items()), (before, after)
    for table in TIMED:
        assert columns(db, table)["created_at"][0] == "TIMESTAMP WITH TIME ZONE", table
        (n, past, timed) = db_rows(
            db, f"SELECT count(*), count(*) FILTER (created_at < now()), count(created_at) FROM {table}"
        )[0]  # fmt: skip
        assert n > 0 and past == timed == n - (table == COMMENTS), table  # all but "yesterday"
    gone = dt.datetime(2025, 1, 23, 23, 14, 2, 948000, tzinfo=dt.UTC)
    assert db_rows(db, "SELECT created_at FROM video_platform_videos WHERE id = 'gone'") == [(gone,)]
    assert db_rows(db, f"SELECT created_at_was_varchar FROM {COMMENTS} WHERE id = 'gone'") == [("yesterday",)]
    assert columns(db, PRODUCTS)["price_amount"][0] == "DECIMAL(18,4)"
    assert db_rows(db, f"SELECT price_amount FROM {PRODUCTS} WHERE id = 'gone'") == [(Decimal("14.96"),)]

    snapshot = runner.invoke(app, ["export", str(output), "--to", str(tmp_path / "snap"), "--snapshot"])
    assert snapshot.exit_code == 0, snapshot.output
    snap = pq.read_schema(tmp_path / "snap" / PRODUCTS / "snapshot.parquet")
    assert snap.field("price_amount").type == pa.decimal128(18, 4)
    lake = runner.invoke(app, ["export", str(output), "--to", str(tmp_path / "lake"), "--format", "delta"])
    assert lake.exit_code == 0, lake.output
    videos = DeltaTable(str(tmp_path / "lake" / "video_platform_videos")).to_pyarrow_table()
    assert pa.types.is_timestamp(videos.schema.field("created_at").type)
    assert videos.schema.field("created_at").type.tz in ("UTC", "Etc/UTC")
    assert videos.num_rows > 0 and videos.column("created_at").null_count == 0
    prices = DeltaTable(str(tmp_path / "lake" / PRODUCTS)).to_pyarrow_table()
    assert prices.schema.field("price_amount").type == pa.decimal128(18, 4)
    # every table and view harvest made, and every column of each, describes itself (exports made one more)
    assert db_rows(
        db, "SELECT table_name FROM duckdb_tables() WHERE comment IS NULL UNION ALL "
        "SELECT view_name FROM duckdb_views() WHERE NOT internal AND comment IS NULL"
    ) == []  # fmt: skip
    assert (
        db_rows(
            db, "SELECT table_name, column_name FROM duckdb_columns() WHERE NOT internal AND comment IS NULL"
        )
        == []
    )
    assert "exports" in {t for t, _ in db_rows(db, "SELECT table_name, comment FROM duckdb_tables()")}
    # the child tables the older harvest did not have were made and filled by the same load, described too
    made = dict(db_rows(db, "SELECT table_name, comment FROM duckdb_tables()"))
    views = {v for (v,) in db_rows(db, "SELECT view_name FROM duckdb_views() WHERE NOT internal")}
    assert (
        set(CHILDREN) <= set(made) and made["streaming_clip_qualities"] == "primary key: parent_id, position"
    )
    filled = {t for t in CHILDREN if after.get(t)}
    assert filled == set(CHILDREN) - {
        "streaming_broadcaster_clip_qualities"
    }  # qualities come with a clip only
    assert {t + "_history" for t in filled} <= views
    shelf_items = columns(db, "video_platform_shelf_items")
    assert shelf_items["created_at"][0] == "TIMESTAMP WITH TIME ZONE"
    assert "`video_platform_shelves.type`" in shelf_items["parent_type"][1]


# ------------------------------------------------------------------------------------ a renamed column
def tweets(*columns: pa.Field) -> Kind:
    """A record kind of tweets: an id, the given columns and the columns harvest adds to every record."""
    return Kind("renamed_tweets", ("id",), pa.schema([pa.field("id", pa.string()), *columns, *META_COLUMNS]))


BEFORE = tweets(pa.field("favorite_count", pa.int64()))
"""The table as an older catalog declared it."""
AFTER = tweets(
    Field("like_count", "favorite_count", pa.int64(), renamed_from=("favorite_count",)).arrow_field()
)
"""Today's: one name for one thing across tables."""


def test_a_renamed_column_keeps_its_values_in_an_older_database(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = OutputLayout(tmp_path).db
    load_tables(db, [(BEFORE, land(tmp_path, "r1", BEFORE, [{"id": "t1", "favorite_count": 7}], T0))])
    later = T0 + dt.timedelta(hours=1)
    with caplog.at_level(logging.WARNING, logger="harvest.tasks.database.column_types"):
        load_tables(db, [(AFTER, land(tmp_path, "r2", AFTER, [{"id": "t2", "like_count": 9}], later))])
    assert "favorite_count" not in columns(db, "renamed_tweets") and "like_count" in columns(
        db, "renamed_tweets"
    )
    assert db_rows(db, "SELECT id, like_count FROM renamed_tweets ORDER BY id") == [("t1", 7), ("t2", 9)]
    assert caplog.messages == [
        "table renamed_tweets: column favorite_count is now named like_count (its values kept)"
    ]


def test_parquet_an_older_harvest_wrote_is_read_under_the_new_name(tmp_path: Path) -> None:
    """A run landed before the rename and loaded after it (or a database built again from older Parquet)."""
    db = OutputLayout(tmp_path).db
    files = land(tmp_path, "r1", BEFORE, [{"id": "t1", "favorite_count": 7}], T0)
    load_tables(db, [(AFTER, files)])
    assert db_rows(db, "SELECT id, like_count FROM renamed_tweets") == [("t1", 7)]
