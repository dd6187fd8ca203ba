"""Child tables across nights: two real runs against the sandbox on two nights, the second serving every
record's nested lists one item shorter (`sandbox.emulation.variation`: comments deleted, a shelf's video gone),
so some lists shrink and some empty. Whatever holds the current rows holds exactly the items of each parent's
newest fetch, at their positions, as its raw JSON has them: DuckDB after the load, DuckDB again after `harvest
rebuild` from the raw pages, a snapshot export, a Delta table and an Iceberg table merged after each night; the
Parquet export hands the child rows over with their parent, so a loader can do the same."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyiceberg.catalog.sql import SqlCatalog
from typer.testing import CliRunner

from harvest.flows.cli import app
from harvest.flows.handoff.lakehouse.iceberg_catalog import SQLITE_FILE
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import running
from tests.endpoints import GROUP, VIDEO_SEARCH
from tests.flow_helpers import BIG_BALANCE, ROOT, SECRET_KEY, job_spec, rows, run_flow, write_spec

CONFIG = SandboxConfig(
    api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={GROUP: (3, 3), VIDEO_SEARCH: (1, 1)}
)
CHILDREN = {  # child table: (parent table, parent key, the list in the parent's JSON, the item's column, field)
    "network_a_group_post_top_comments": ("network_a_group_posts", ("id",), "topComments", "id", "id"),
    "video_platform_shelf_items": (
        "video_platform_shelves",
        ("type", "title"),
        "items",
        "view_count",
        "viewCountInt",
    ),
}
runner = CliRunner()


def night(tmp_path: Path, output: Path, observation: int) -> None:
    spec = write_spec(
        tmp_path,
        job_spec(
            "http://127.0.0.1:9",
            output,
            [
                {"id": "group", "endpoint": GROUP, "params": {"group_id": "42"}},
                {"id": "search", "endpoint": VIDEO_SEARCH, "params": {"query": "trail shoes"}},
            ],
            name="children",
        ),
    )
    with running(replace(CONFIG, observation=observation)) as sb:
        assert run_flow(spec, base_url=sb.base_url).status == "complete"


def from_raw(db: Path, child: str) -> set[tuple[Any, ...]]:
    """(parent key, position, the item's value) of every item the current parents' raw JSON holds."""
    parent, key, listed, _, field = CHILDREN[child]
    found = set()
    for (raw,) in rows(db, f"SELECT raw FROM {parent}"):
        record = json.loads(raw)
        found |= {(*(record[k] for k in key), n, item[field]) for n, item in enumerate(record[listed])}
    return found


def landed(con: duckdb.DuckDBPyConnection, child: str, source: str) -> list[tuple[Any, ...]]:
    """(parent key, position, the item's column) of each row of `source`, sorted; a row twice stays twice."""
    _, key, _, column, _ = CHILDREN[child]
    keys = ", ".join(f"parent_{k}" for k in key)
    return sorted(con.execute(f"SELECT {keys}, position, {column} FROM {source}").fetchall())


def current(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {child: landed(con, child, child) for child in CHILDREN}
    finally:
        con.close()


@pytest.mark.scenario
def test_a_list_that_shrank_or_emptied_leaves_no_rows_behind(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path))  # the default SQLite catalog, not a developer's
    output, lake, snapshot = tmp_path / "out", tmp_path / "lake", tmp_path / "snapshot"
    ice = tmp_path / "ice"
    db = output / "harvest.duckdb"
    night(tmp_path, output, 0)
    first = current(db)
    increment = tmp_path / "increment"
    for to, fmt in ((lake, "delta"), (ice, "iceberg"), (increment, "parquet")):
        exported = runner.invoke(app, ["export", str(output), "--to", str(to), "--format", fmt])
        assert exported.exit_code == 0, exported.output
    night(tmp_path, output, 1)
    second = current(db)
    for child in CHILDREN:
        assert set(second[child]) == from_raw(db, child) and len(set(second[child])) == len(second[child]), (
            child
        )
    # the second night shrank lists and emptied some: their old rows are gone, not left as orphans
    comments = "network_a_group_post_top_comments"
    before = {p for p, *_ in first[comments]}
    after = {p for p, *_ in second[comments]}
    assert after < before and len(second[comments]) == len(first[comments]) - len(before)

    rebuilt = runner.invoke(app, ["rebuild", str(output)])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert current(db) == second

    for to, fmt in ((lake, "delta"), (ice, "iceberg")):
        merged = runner.invoke(app, ["export", str(output), "--to", str(to), "--format", fmt])
        assert merged.exit_code == 0, merged.output
    iceberg = SqlCatalog("harvest", uri=f"sqlite:///{ice / SQLITE_FILE}", warehouse=f"file://{ice}")
    assert runner.invoke(app, ["export", str(output), "--to", str(snapshot), "--snapshot"]).exit_code == 0
    assert runner.invoke(app, ["export", str(output), "--to", str(increment)]).exit_code == 0
    con = duckdb.connect()
    for child in CHILDREN:
        con.register("delta", DeltaTable(str(lake / child)).to_pyarrow_table())
        con.register("snap", pq.read_table(snapshot / child / "snapshot.parquet"))
        con.register("ice", iceberg.load_table(("harvest", child)).scan().to_arrow())
        assert landed(con, child, "delta") == second[child] == landed(con, child, "snap"), child
        assert landed(con, child, "ice") == second[child], child
        for name in ("delta", "snap", "ice"):
            con.unregister(name)

    loaded = load_increments(increment)  # exported after each night (above), loaded as docs/handoff.md says
    parquet = duckdb.connect()
    for child in CHILDREN:
        assert landed(loaded, child, child) == second[child], child
    # docs/output.md's query of a child table's current rows, on the job's own Parquet
    parquet.execute(f"CREATE VIEW current AS {current_children_sql(output, comments)}")
    assert landed(parquet, comments, "current") == second[comments]
    (entry,) = [
        json.loads(m.read_text())["tables"].get(comments)
        for m in sorted(increment.glob("_exports/*/_manifest.json"))
    ][1:]
    assert entry["parent"] == {
        "table": "network_a_group_posts",
        "key": {"parent_id": "id"},
        "replace_by": ["parent_id"],
    }


def test_a_night_that_empties_every_list_still_hands_the_child_table_over(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second night serves every list empty: the child tables hold no row, and the increment exported
    after it still names them (no files, their parent): a loader following docs/handoff.md deletes the rows the
    first night's increment gave it. Left out of the manifest, a warehouse kept every comment for ever.

    A video shelf is known by its first item (the service repeats a shelf's title from page to page): a shelf
    sent without items is another shelf (`first_item_id` `[]`), and the shelves that had items stay, with them,
    as a search's earlier results do; so its items are checked apart, and the comments hold the rule."""
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    output, increment = tmp_path / "out", tmp_path / "increment"
    for observation in (0, 99):  # 99 nights on, every nested list has lost all its items
        night(tmp_path, output, observation)
        exported = runner.invoke(app, ["export", str(output), "--to", str(increment)])
        assert exported.exit_code == 0, exported.output
    db, shelves = output / "harvest.duckdb", "video_platform_shelf_items"
    before = rows(db, "SELECT DISTINCT parent_first_item_id FROM video_platform_shelf_items ORDER BY ALL")
    assert rows(db, "SELECT DISTINCT first_item_id FROM video_platform_shelves WHERE _run_id = (SELECT max(run_id) "
                    "FROM runs)") == [("[]",)] and before and ("[]",) not in before  # fmt: skip
    children = {child: kind for child, kind in CHILDREN.items() if child != shelves}
    assert {c: v for c, v in current(db).items() if c != shelves} == {child: [] for child in children}
    first, second = [
        json.loads(m.read_text())["tables"] for m in sorted(increment.glob("_exports/*/_manifest.json"))
    ]
    for child, (parent, *_) in CHILDREN.items():
        assert first[child]["files"], child  # the first night had items
        assert second[child]["files"] == [] and second[child]["parent"]["table"] == parent, second.get(child)
    loaded = load_increments(increment)
    for child in children:
        assert landed(loaded, child, child) == [], child
    assert landed(loaded, shelves, shelves) == current(db)[shelves]  # the first night's shelves, kept


def load_increments(increment: Path) -> duckdb.DuckDBPyConnection:
    """A warehouse loading `harvest export`'s increments as docs/handoff.md says, export by export: a record
    table merged on its primary key, the newest `_fetched_at` winning; a child table's rows of each parent row
    the export brought newer replaced by the export's rows of that parent's fetch (none when its list emptied)."""
    con = duckdb.connect()
    for folder in sorted(increment.glob("_exports/*")):
        tables = json.loads((folder / "_manifest.json").read_text())["tables"]
        for name, t in sorted(tables.items(), key=lambda kv: "parent" in kv[1]):  # parents first
            files = [str(increment / f["key"]) for f in t["files"]]
            source = f"read_parquet({files!r}, union_by_name = true)" if files else None
            if "parent" not in t:
                key = ", ".join(t["primary_key"])
                con.execute(
                    f"CREATE OR REPLACE TEMP TABLE newer_{name} AS SELECT * FROM {source} AS i "
                    f"QUALIFY row_number() OVER (PARTITION BY {key} ORDER BY _fetched_at DESC) = 1"
                )
                con.execute(f"CREATE TABLE IF NOT EXISTS {name} AS SELECT * FROM newer_{name} LIMIT 0")
                same = " AND ".join(f"t.{k} = i.{k}" for k in t["primary_key"])
                con.execute(
                    f"DELETE FROM newer_{name} AS i WHERE EXISTS "
                    f"(SELECT 1 FROM {name} AS t WHERE {same} AND t._fetched_at > i._fetched_at)"
                )
                con.execute(
                    f"DELETE FROM {name} AS t WHERE EXISTS (SELECT 1 FROM newer_{name} AS i WHERE {same})"
                )
                con.execute(f"INSERT INTO {name} BY NAME SELECT * FROM newer_{name}")
                continue
            parent, mapping = t["parent"]["table"], t["parent"]["key"]
            of_parent = " AND ".join(f"c.{mine} = p.{theirs}" for mine, theirs in mapping.items())
            if source is not None:
                con.execute(f"CREATE TABLE IF NOT EXISTS {name} AS SELECT * FROM {source} LIMIT 0")
            if con.execute("SELECT 1 FROM duckdb_tables() WHERE table_name = ?", [name]).fetchall():
                con.execute(
                    f"DELETE FROM {name} AS c WHERE EXISTS "
                    f"(SELECT 1 FROM newer_{parent} AS p WHERE {of_parent})"
                )
            if source is not None:
                con.execute(
                    f"INSERT INTO {name} BY NAME SELECT c.* FROM {source} AS c "
                    f"SEMI JOIN newer_{parent} AS p ON {of_parent} AND c._fetched_at = p._fetched_at"
                )
    return con


def current_children_sql(output: Path, child: str, parent_key: tuple[str, str] | None = None) -> str:
    """docs/output.md's query of a child table's current rows, with this output's paths and a child table of
    this job keyed by one column (`parent_key`: its parent table and key, where `CHILDREN` does not list it)."""
    import re

    docs = (ROOT / "docs" / "output.md").read_text()
    (query,) = [q for q in re.findall(r"```sql\n(.*?)```", docs, re.S) if "streaming_clip_qualities" in q]
    parent, key = parent_key or (CHILDREN[child][0], CHILDREN[child][1][0])
    query = query.replace("data/demo/parquet", str(output / "parquet")).replace(
        "streaming_clip_qualities", child
    )
    query = query.replace("streaming_clips", parent).replace("parent_id", f"parent_{key}")
    return re.sub(r"\bid\b", key, query)


def _post(images: int) -> dict[str, Any]:
    """A microblog-b post (its upstream view) with `images` embedded images."""
    shown = [{"thumb": f"t{n}", "fullsize": f"f{n}", "alt": ""} for n in range(images)]
    return {
        "uri": "at://did:plc:someone/app.bsky.feed.post/1", "cid": f"cid{images}",
        "author": {"did": "did:plc:someone", "handle": "someone.test"},
        "record": {"text": "three pictures", "createdAt": "2026-11-30T10:00:00.000Z"},
        "indexedAt": "2026-11-30T10:00:01.000Z",
        **({"embed": {"$type": "app.bsky.embed.images#view", "images": shown}} if images else {}),
    }  # fmt: skip


def test_a_parent_fetched_again_in_the_same_run_with_its_list_emptied_has_no_items_in_its_history(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A feed's post (three images) whose thread, fetched after it in the same run, shows it without them: the
    child table keeps no image of it (its parent row is the thread's fetch), and neither does the history view
    for that run, nor docs/output.md's query on the Parquet. The view read the child's files alone and showed
    the feed's three images as that run's."""
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    envelope = {"success": True, "credits_remaining": BIG_BALANCE, "credits_charged": 1}
    replay = {
        "/v1/microblog-b/user/posts": orjson.dumps({**envelope, "feed": [_post(3)], "cursor": None}),
        "/v1/microblog-b/post": orjson.dumps({**envelope, "post": _post(0), "replies": []}),
    }
    output = tmp_path / "out"
    queries = [
        {"id": "feed", "endpoint": "/v1/microblog-b/user/posts", "params": {"handle": "someone.test"}},
        {"id": "thread", "endpoint": "/v1/microblog-b/post", "for_each": {"url": {"from": "feed", "field": "uri"}}},
    ]  # fmt: skip
    spec = write_spec(tmp_path, job_spec("http://127.0.0.1:9", output, queries, name="refetched"))
    with running(SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, replay=replay)) as sb:
        assert run_flow(spec, base_url=sb.base_url).status == "complete"
    db = output / "harvest.duckdb"
    (newest,) = rows(db, "SELECT _query_id FROM microblog_b_posts")
    assert newest[0].startswith("thread["), newest  # the post's row is the thread's fetch, the later one
    in_files = rows(
        db, f"SELECT count(*) FROM read_parquet('{output}/parquet/microblog_b_post_images/*/*.parquet')"
    )
    assert in_files == [(3,)]  # the feed's fetch landed its three images
    assert rows(db, "SELECT count(*) FROM microblog_b_post_images") == [(0,)]
    assert rows(db, "SELECT count(*) FROM microblog_b_post_images_history") == [(0,)]
    assert rows(db, "SELECT count(*) FROM microblog_b_posts_history") == [(1,)]
    parquet = duckdb.connect()
    docs = current_children_sql(output, "microblog_b_post_images", ("microblog_b_posts", "uri"))
    assert parquet.execute(f"SELECT count(*) FROM ({docs})").fetchall() == [(0,)]
