"""End to end: the real `collect_job` flow against the sandbox over HTTP, landing real Parquet and DuckDB files.

One module-scoped crawl (run twice: the second run is the rerun) serves the checks of what landed; the
DuckDB-lock scenario has its own sandbox and output directory.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from harvest.connectors.catalog import endpoints as catalog
from harvest.flows.cli import app
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.expected import full_crawl
from harvest.sandbox.wire.serving import running
from harvest.tasks.output.raw_store import RawPageReader
from tests.crawl_helpers import data_entries
from tests.endpoints import CREATIVE, CREATIVE_DETAIL, FORUM, PINS, PROFILE, VIDEO_SEARCH
from tests.flow_helpers import (
    BIG_BALANCE,
    HARVEST,
    SECRET_KEY,
    assert_no_secret_in_outputs,
    child_tables,
    expected_keys,
    held_duckdb,
    job_spec,
    key_set,
    query_pages,
    rows,
    run_flow,
    scalar,
    subprocess_env,
    table_counts,
    write_spec,
)

CONFIG = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages=(2, 4))
"""Every paged query has 2-4 pages; every quirk of the real service is on."""

FORUM_PARAMS = {"subreddit": "running", "query": "shoes", "sort": "top"}
VIDEO_PARAMS = {"query": "marathon training"}
CREATIVE_PARAMS = {"query": "running shoes", "limit": 3}
HANDLES = ["nasa", "esa"]


def crawl_spec(base_url: str, output: Path) -> dict[str, Any]:
    return job_spec(
        base_url,
        output,
        [
            {"id": "forum", "endpoint": FORUM, "params": FORUM_PARAMS},
            {"id": "video_search", "endpoint": VIDEO_SEARCH, "params": VIDEO_PARAMS},
            {
                "id": "videos",
                "endpoint": PROFILE,
                "params": {"sort_by": "latest"},
                "for_each": {"handle": HANDLES},
            },
            {"id": "creatives", "endpoint": CREATIVE, "params": CREATIVE_PARAMS},
            {
                "id": "creative_detail",
                "endpoint": CREATIVE_DETAIL,
                "for_each": {"material_id": {"from": "creatives", "field": "material_id"}},
            },
        ],
        name="e2e",
        credits=1000,
        concurrency=4,
    )


def material_ids() -> list[str]:
    return [m["material_id"] for m in full_crawl(CREATIVE, CREATIVE_PARAMS, CONFIG)["materials"]]


def expected_tables() -> dict[str, dict[tuple[Any, ...], dict[str, Any]]]:
    queries = [(FORUM, FORUM_PARAMS), (VIDEO_SEARCH, VIDEO_PARAMS), (CREATIVE, CREATIVE_PARAMS)]
    queries += [(PROFILE, {"sort_by": "latest", "handle": h}) for h in HANDLES]
    return expected_keys(queries, CONFIG, [f"/v1/creative/materials/{m}" for m in material_ids()])


@dataclass
class Crawl:
    output: Path
    db: Path
    first: dict[str, Any]
    second: dict[str, Any]
    ledger_first: list[Any]
    ledger_all: list[Any]
    billed_first: int
    billed_all: int
    counts_first: dict[str, int]
    keys_first: dict[str, set[tuple[Any, ...]]]


@pytest.fixture(scope="module")
def crawl(prefect_harness: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crawl]:
    tmp = tmp_path_factory.mktemp("crawl")
    output = tmp / "out"
    with pytest.MonkeyPatch.context() as mp, running(CONFIG) as sb:
        mp.setenv("HARVEST_API_KEY", SECRET_KEY)
        mp.delenv("HARVEST_BASE_URL", raising=False)
        spec = write_spec(tmp, crawl_spec(sb.base_url, output))
        first = run_flow(spec)
        ledger_first, billed_first = data_entries(sb), sb.billed_total()
        db = output / "harvest.duckdb"
        counts = table_counts(db)
        keys = {t: key_set(db, t) for t in counts}
        second = run_flow(spec)
        yield Crawl(
            output,
            db,
            first,
            second,
            ledger_first,
            data_entries(sb),
            billed_first,
            sb.billed_total(),
            counts,
            keys,
        )


# ------------------------------------------------------------------------------------------- 1. records
def test_every_table_holds_exactly_what_a_full_crawl_holds(crawl: Crawl) -> None:
    assert crawl.first.status == "complete" and crawl.first.loaded is True
    assert all(q["status"] == "complete" for q in crawl.first.queries), crawl.first.queries
    expected = expected_tables()
    for path in (FORUM, VIDEO_SEARCH, PROFILE, CREATIVE, CREATIVE_DETAIL):
        for kind in catalog.get(path).kinds:
            assert kind.table in expected
    # multi-kind endpoints land in all their tables
    for table in ("forum_posts", "forum_comments", "forum_media", "video_platform_videos",
                  "video_platform_channels", "video_platform_shelves"):  # fmt: skip
        assert expected[table], f"the sandbox crawl of {table} is empty: the test would prove nothing"
    nonempty = {t for t, recs in expected.items() if recs}
    assert {t for t, n in crawl.counts_first.items() if n} - child_tables() == nonempty
    for table, records in expected.items():
        assert crawl.counts_first.get(table, 0) == len(records), table
        assert crawl.keys_first.get(table, set()) == set(records), table
    assert crawl.first.tables == {t: n for t, n in crawl.counts_first.items()}
    # the fan-out ran one query per handle, and each landed its own videos
    by_query = dict(rows(crawl.db, "SELECT _query_id, count(*) FROM short_video_videos GROUP BY ALL"))
    for handle in HANDLES:
        want = full_crawl(PROFILE, {"sort_by": "latest", "handle": handle}, CONFIG)["videos"]
        assert by_query[f"videos[handle={handle}]"] == len(want)


def test_the_dependent_query_ran_once_per_distinct_parent_material(crawl: Crawl) -> None:
    ids = material_ids()
    assert len(ids) == len(set(ids)) > 3
    run_id = crawl.first.run_id
    states = rows(
        crawl.db,
        "SELECT query_id, status, pages FROM query_state WHERE run_id = ? AND query_id LIKE 'creative_detail[%'",
        [run_id],
    )
    assert sorted(q for q, _, _ in states) == sorted(f"creative_detail[material_id={m}]" for m in ids)
    assert all(status == "complete" and pages == 1 for _, status, pages in states)
    # the sandbox's own ledger: one detail request per distinct material, each material exactly once ...
    asked = Counter(e.path_params["material_id"] for e in crawl.ledger_first if e.path == CREATIVE_DETAIL)
    assert asked == Counter(ids)
    # ... and the attempt log and raw pages show which: each material exactly once
    calls = rows(
        crawl.db,
        "SELECT query_id, count(*) FROM requests WHERE run_id = ? AND endpoint = ? GROUP BY ALL",
        [run_id, CREATIVE_DETAIL],
    )
    assert dict(calls) == {f"creative_detail[material_id={m}]": 1 for m in ids}
    bodies = [
        orjson.loads(p.body)["data"]["material_id"]
        for p in query_pages(crawl.output, lambda q: q.startswith("creative_detail"), run_id)
    ]
    assert Counter(bodies) == Counter(ids)
    assert key_set(crawl.db, "creative_material_details") == {(m,) for m in ids}


# --------------------------------------------------------------------------------------------- 2. credits
def test_credits_in_duckdb_equal_the_sandbox_ledger(crawl: Crawl) -> None:
    run_id = crawl.first.run_id
    assert crawl.billed_first > 0 and all(e.status == 200 for e in crawl.ledger_first)
    assert (
        scalar(crawl.db, "SELECT sum(credits) FROM requests WHERE run_id = ?", [run_id]) == crawl.billed_first
    )
    assert scalar(crawl.db, "SELECT count(*) FROM requests WHERE run_id = ?", [run_id]) == len(
        crawl.ledger_first
    )
    assert scalar(crawl.db, "SELECT credits_spent FROM runs WHERE run_id = ?", [run_id]) == crawl.billed_first
    assert crawl.first.credits_spent == crawl.billed_first
    assert scalar(crawl.db, "SELECT sum(credits) FROM requests") == crawl.billed_all
    assert scalar(crawl.db, "SELECT sum(credits_spent) FROM runs") == crawl.billed_all

    states = rows(
        crawl.db, "SELECT query_id, status, pages, credits FROM query_state WHERE run_id = ?", [run_id]
    )
    assert len(states) == len({s[0] for s in states}) == len(crawl.first.queries)
    summary = {q["query_id"]: (q["status"], q["pages"], q["credits"]) for q in crawl.first.queries}
    assert {q: (st, p, c) for q, st, p, c in states} == summary
    planned = {"forum", "video_search", "creatives", "videos[handle=nasa]", "videos[handle=esa]"}
    assert planned <= set(summary)
    assert sum(p for _, _, p, _ in states) == len(crawl.ledger_first)  # a page per billed request
    assert sum(c for _, _, _, c in states) == crawl.billed_first


# ----------------------------------------------------------------------------------------------- 3. rerun
def test_a_rerun_adds_no_duplicate_rows(crawl: Crawl) -> None:
    assert crawl.second.status == "complete" and crawl.second.loaded is True
    assert crawl.second.run_id != crawl.first.run_id
    assert table_counts(crawl.db) == crawl.counts_first
    for table in crawl.counts_first:
        assert key_set(crawl.db, table) == crawl.keys_first[table]
        pk = ", ".join(catalog.all_kinds()[table].primary_key)
        total, distinct = rows(crawl.db, f"SELECT count(*), count(DISTINCT ({pk})) FROM {table}")[0]
        assert total == distinct, table
    runs = rows(crawl.db, "SELECT run_id, status, credits_spent, job FROM runs ORDER BY started")
    assert [r[0] for r in runs] == [crawl.first.run_id, crawl.second.run_id]
    assert [r[2] for r in runs] == [crawl.billed_first, crawl.billed_all - crawl.billed_first]
    assert {(r[1], r[3]) for r in runs} == {("complete", "e2e")}
    # the newest fetch wins: every row now comes from the second run
    newest = rows(crawl.db, "SELECT DISTINCT _run_id FROM short_video_videos")
    assert newest == [(crawl.second.run_id,)]
    assert scalar(crawl.db, "SELECT count(*) FROM query_state") == len(crawl.first.queries) + len(
        crawl.second.queries
    )


# ------------------------------------------------------------------------------------- 5. Parquet and raw
PARQUET_NAME = re.compile(
    r"^parquet/(?P<table>[a-z_]+)/date=(?P<date>\d{4}-\d{2}-\d{2})/(?P<file>[^/]+\.parquet)$"
)


def test_parquet_layout_and_raw_pages(crawl: Crawl) -> None:
    run_ids = {crawl.first.run_id, crawl.second.run_id}
    started = {r: d for r, d in rows(crawl.db, "SELECT run_id, started FROM runs")}
    files = sorted(crawl.output.glob("parquet/**/*.parquet"))
    assert files
    tables = set()
    for path in files:
        m = PARQUET_NAME.match(path.relative_to(crawl.output).as_posix())
        assert m, path
        run_id = next(r for r in run_ids if m["file"].startswith(f"{r}-"))
        assert m["date"] == started[run_id].astimezone(dt.UTC).date().isoformat()
        tables.add(m["table"])
        meta = pq.read_metadata(path)
        assert meta.num_row_groups >= 1
        codecs = {meta.row_group(g).column(c).compression for g in range(meta.num_row_groups)
                  for c in range(meta.num_columns)}  # fmt: skip
        assert codecs == {"ZSTD"}, (path, codecs)
        assert pq.read_table(path).num_rows == meta.num_rows
    assert tables == {t for t, n in crawl.counts_first.items() if n}
    # hive-partitioned reads, as a warehouse would do
    con = duckdb.connect()
    try:
        glob = str(crawl.output / "parquet" / "forum_posts" / "*" / "*.parquet")
        got = con.execute(
            "SELECT DISTINCT _run_id, CAST(date AS VARCHAR) FROM read_parquet(?, hive_partitioning = true)",
            [glob],
        ).fetchall()
        assert {r for r, _ in got} == run_ids
        assert {d for _, d in got} <= {s.astimezone(dt.UTC).date().isoformat() for s in started.values()}
        per_run = con.execute(
            "SELECT _run_id, count(DISTINCT id) FROM read_parquet(?, hive_partitioning = true) GROUP BY ALL",
            [glob],
        ).fetchall()
        assert dict(per_run) == dict.fromkeys(run_ids, crawl.counts_first["forum_posts"])
    finally:
        con.close()
    assert (
        pq.read_table(crawl.output / "parquet" / "forum_posts").num_rows
        >= 2 * crawl.counts_first["forum_posts"]
    )

    # raw pages: one per billed request, chained by their cursors
    run_id = crawl.first.run_id
    run_dir = crawl.output / "raw" / run_id
    assert (run_dir / "manifest.json").is_file()
    pages = [p for f in sorted(run_dir.glob("*.pages")) for p in RawPageReader(f)]
    assert len(pages) == len(crawl.ledger_first)
    assert sum(p.credits for p in pages) == crawl.billed_first
    by_query: dict[str, list[Any]] = {}
    for page in pages:
        by_query.setdefault(page.query_id, []).append(page)
        assert page.status_code == 200
        json.loads(page.body)
    assert set(by_query) == {q["query_id"] for q in crawl.first.queries}
    for query_id, chain in by_query.items():
        assert [p.page for p in chain] == list(range(len(chain))), query_id
        assert chain[0].cursor_in is None
        for before, after in itertools.pairwise(chain):
            assert after.cursor_in == before.cursor_out is not None, query_id
    assert len(by_query["forum"]) > 1 and len(by_query["videos[handle=nasa]"]) > 1


# -------------------------------------------------------------------------------------------- 6. columns
def test_columns_are_typed_and_carry_their_provenance(crawl: Crawl) -> None:
    types = dict(rows(crawl.db, "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ?",
                      ["short_video_videos"]))  # fmt: skip
    assert types["play_count"] == "BIGINT"
    assert types["like_count"] == "BIGINT"
    assert types["created_at"] == "TIMESTAMP WITH TIME ZONE"
    assert types["_fetched_at"] == "TIMESTAMP WITH TIME ZONE"
    assert types["aweme_id"] == types["caption"] == types["raw"] == "VARCHAR"
    got = rows(
        crawl.db,
        "SELECT aweme_id, play_count, created_at, caption, raw, _endpoint, _query_id, _run_id, _fetched_at "
        "FROM short_video_videos",
    )
    expected = expected_tables()["short_video_videos"]
    assert len(got) == len(expected)
    run_ids = {crawl.first.run_id, crawl.second.run_id}
    for aweme_id, plays, created, caption, raw, endpoint, query_id, run_id, fetched in got:
        want = expected[(aweme_id,)]
        assert plays == want["statistics"]["play_count"]
        assert created == dt.datetime.fromtimestamp(want["create_time"], dt.UTC)
        assert caption == want["desc"]
        record = json.loads(raw)
        assert record["aweme_id"] == aweme_id and record == want
        assert endpoint == PROFILE
        assert query_id in {f"videos[handle={h}]" for h in HANDLES}
        assert run_id in run_ids
        assert isinstance(fetched, dt.datetime) and fetched.tzinfo is not None
    nulls = rows(
        crawl.db,
        "SELECT count(*) FILTER (raw IS NULL OR NOT json_valid(raw) OR _endpoint IS NULL OR _query_id IS NULL "
        "OR _run_id IS NULL OR _fetched_at IS NULL) FROM forum_comments",
    )
    assert nulls == [(0,)]
    assert types_of(crawl.db, "forum_comments")["score"] == "BIGINT"


def types_of(db: Path, table: str) -> dict[str, str]:
    return dict(rows(db, "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ?", [table]))


# ------------------------------------------------------------------------------------------- 9. the key
def test_the_api_key_is_in_no_landed_file_nor_table(crawl: Crawl) -> None:
    assert_no_secret_in_outputs(crawl.output)
    params = [json.loads(p) for (p,) in rows(crawl.db, "SELECT params FROM requests")]
    assert params and all(isinstance(p, dict) for p in params)
    assert all(not ({"x-api-key", "api_key"} & set(p)) for p in params)


# ----------------------------------------------------------------------------------- 7. DuckDB held by another process
def test_a_run_while_duckdb_is_held_lands_parquet_and_loads_later(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = tmp_path / "out"
    output.mkdir()
    db = output / "harvest.duckdb"
    handles = ["nasa", "esa"]
    with running(CONFIG) as sb:
        monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
        spec = write_spec(
            tmp_path,
            job_spec(
                sb.base_url,
                output,
                [
                    {"id": "pins", "endpoint": PINS, "params": {"query": "trail shoes"}},
                    {"id": "videos", "endpoint": PROFILE, "for_each": {"handle": handles}},
                ],
                name="locked",
            ),
        )
        with held_duckdb(db):
            summary = run_flow(spec)
            busy = CliRunner().invoke(app, ["load", str(output)])  # still held: refused, nothing changes
        billed = sb.billed_total()
    assert summary.loaded is False and summary.tables == {}
    assert busy.exit_code == 1 and "open in another process" in busy.stderr, busy.output
    assert summary.status == "complete" and summary.credits_spent == billed > 0
    manifest = orjson.loads((output / "raw" / summary.run_id / "manifest.json").read_bytes())
    assert manifest["loaded"] is False
    landed = {table: rows_ for table, _path, rows_ in manifest["files"]}
    assert set(landed) == {"pinboard_pins", "short_video_videos"}
    assert len(manifest["files"]) == 2, "one file per table, not per query"
    assert all(not q["files"] for q in summary.queries)
    for _table, path, _n in manifest["files"]:
        assert not Path(path).is_absolute() and (output / path).is_file()  # relative: the output can move

    loaded = subprocess.run(
        [str(HARVEST), "load", str(output)], env=subprocess_env(tmp_path), capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert loaded.returncode == 0, loaded.stderr
    assert f"loaded run {summary.run_id}" in loaded.stdout
    expected = expected_keys(
        [(PINS, {"query": "trail shoes"})] + [(PROFILE, {"handle": h}) for h in handles], CONFIG
    )
    for table, records in expected.items():
        assert key_set(db, table) == set(records), table
    assert scalar(db, "SELECT count(*) FROM held_by_a_notebook") == 0  # the holder's own work survived
    assert rows(db, "SELECT run_id, credits_spent FROM runs") == [(summary.run_id, billed)]
    assert scalar(db, "SELECT sum(credits) FROM requests") == billed
    assert scalar(db, "SELECT count(*) FROM query_state") == 3
    manifest = orjson.loads((output / "raw" / summary.run_id / "manifest.json").read_bytes())
    assert manifest["loaded"] is True

    again = subprocess.run(
        [str(HARVEST), "load", str(output)], env=subprocess_env(tmp_path), capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert again.returncode == 0 and "nothing to load" in again.stdout
    with held_duckdb(db, mark=False):  # nothing to load while a notebook holds the file: no error, no "rerun"
        held = subprocess.run(
            [str(HARVEST), "load", str(output)], env=subprocess_env(tmp_path), capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
    assert held.returncode == 0, held.stdout + held.stderr
    assert "nothing to load" in held.stdout and "every finished or interrupted run is in" in held.stdout
    assert "open in another process" not in held.stdout + held.stderr
    assert {t: n for t, n in table_counts(db).items() if t != "held_by_a_notebook"} == {
        t: len(r) for t, r in expected.items()
    }
