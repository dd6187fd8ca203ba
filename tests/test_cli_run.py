"""`harvest run` and `harvest demo` as a user runs them: exit codes, what they print, what they land.

One real `harvest run` subprocess; the demo is the session's (`tests.landed_demo`, typed in a clean shell); the
other runs go through typer's CliRunner in this process, inside the session's Prefect harness.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import shlex
import subprocess
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

# Prefect binds its log handlers to sys.stderr on first import: import it now, not inside a CliRunner
# invocation whose streams are closed afterwards (later Prefect logs would then fail to print).
import harvest.flows.collect  # noqa: F401
from harvest.connectors.catalog import endpoints as catalog
from harvest.connectors.catalog.child_kinds import ChildKind
from harvest.flows.cli import app
from harvest.flows.commands.run_job import DEMO_SPEC
from harvest.flows.spec import load_spec
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.expected import expected_pages
from harvest.sandbox.wire.serving import running
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import all_manifests
from tests.crawl_helpers import data_entries
from tests.endpoints import CREATIVE_DETAIL, PINS
from tests.flow_helpers import (
    BIG_BALANCE,
    HARVEST,
    SECRET_KEY,
    assert_no_secret_in_outputs,
    job_spec,
    query_pages,
    rows,
    scalar,
    subprocess_env,
    table_counts,
    write_spec,
)
from tests.landed_demo import OUTPUT, LandedDemo
from tests.prefect_helpers import run_log
from tests.process_helpers import finish, start_run

runner = CliRunner()


# ---------------------------------------------------------------------------------------- 4. a short budget
BUDGET_CONFIG = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (2, 8)}, page_size=3)
TOPICS = ["trail f", "trail c", "trail b", "trail e", "trail a"]
BUDGET = 12


def test_a_short_budget_stops_at_exactly_the_cap_breadth_first(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    demand = {t: expected_pages(PINS, {"query": t}, BUDGET_CONFIG) for t in TOPICS}
    assert sum(demand.values()) > BUDGET and min(demand.values()) < BUDGET / len(TOPICS) + 1
    output = tmp_path / "out"
    with running(BUDGET_CONFIG) as sb:
        monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
        spec = write_spec(
            tmp_path,
            job_spec(
                sb.base_url,
                output,
                [{"id": "pins", "endpoint": PINS, "for_each": {"query": TOPICS}}],
                name="short-budget",
                credits=1000,
                concurrency=3,
            ),
        )
        invoked = time.monotonic()
        result = runner.invoke(app, ["run", str(spec), "--budget", str(BUDGET)])
        wall = time.monotonic() - invoked
        billed = sb.billed_total()
    assert result.exit_code == 0, result.output
    assert f"credits spent: {BUDGET} of a budget of {BUDGET}" in result.stdout
    assert "status: budget_exhausted" in result.stdout
    assert SECRET_KEY not in result.stdout + result.stderr
    took = re.search(
        r"^took ([\d.]+) s: ([\d.]+) s paging, ([\d.]+) s loading, ([\d.]+) s start and end$",
        result.stdout,
        re.MULTILINE,
    )
    assert took and len(took.group()) <= 80, result.stdout  # the line fits a terminal
    total, paging, loading, rest = map(float, took.groups())
    # the parts are measured inside the run and the total around it, bounded by what the test saw (0.1 s: the
    # line rounds each figure to a tenth)
    assert paging > 0 and loading > 0 and paging + loading <= total + 0.1 and total <= wall + 0.1
    assert abs(rest - (total - paging - loading)) <= 0.15
    db = output / "harvest.duckdb"
    assert billed == BUDGET
    assert rows(db, "SELECT status FROM runs") == [("budget_exhausted",)]
    assert scalar(db, "SELECT credits_spent FROM runs") == BUDGET
    assert scalar(db, "SELECT sum(credits) FROM requests") == BUDGET
    assert len(rows(db, "SELECT run_id FROM runs")) == 1
    states = {
        q: (status, pages, cursor)
        for q, status, pages, cursor in rows(
            db, "SELECT query_id, status, pages, next_cursor FROM query_state"
        )
    }
    assert set(states) == {f"pins[query={t}]" for t in TOPICS}
    assert sum(p for _, p, _ in states.values()) == BUDGET
    cut = {}
    for topic in TOPICS:
        status, pages, cursor = states[f"pins[query={topic}]"]
        if pages < demand[topic]:
            assert status == "budget_exhausted", (topic, status)
            last = query_pages(output, f"pins[query={topic}]")[-1]
            assert cursor is not None and json.loads(cursor) == last.cursor_out
            cut[topic] = pages
        else:
            assert (status, pages, cursor) == ("complete", demand[topic], None)
    assert len(cut) >= 3
    assert max(cut.values()) - min(cut.values()) <= 1, cut  # breadth-first: nobody ran ahead
    assert "trail f" not in cut  # the 2-page query completed within the budget
    assert_no_secret_in_outputs(output)


# ------------------------------------------------------------------------------------------ 8. exit codes
def test_an_invalid_spec_exits_2_before_any_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with running(BUDGET_CONFIG) as sb:
        monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
        spec = write_spec(
            tmp_path,
            job_spec(
                sb.base_url,
                tmp_path / "out",
                [
                    {"id": "ok", "endpoint": PINS, "params": {"query": "cats"}},
                    {"id": "typo", "endpoint": PINS, "params": {"qeury": "dogs"}},
                ],
                name="bad",
                credits=10,
            ),
        )
        result = runner.invoke(app, ["run", str(spec)])
        assert sb.ledger == [] and sb.billed_total() == 0
    assert result.exit_code == 2
    assert f"{spec}:" in result.stderr and "'qeury' is not a parameter" in result.stderr
    assert not (tmp_path / "out").exists()


def test_no_service_url_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HARVEST_BASE_URL", raising=False)
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    spec = write_spec(
        tmp_path,
        {
            "name": "nowhere",
            "budget": {"credits": 10},
            "output": str(tmp_path / "out"),
            "queries": [{"endpoint": PINS, "params": {"query": "cats"}}],
        },
    )
    result = runner.invoke(app, ["run", str(spec)])
    assert result.exit_code == 2
    assert "no service URL" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_failed_query_exits_1_and_the_key_never_leaks(prefect_api_url: str, tmp_path: Path) -> None:
    """A real `harvest run` process (reporting to the session's Prefect server: Prefect's temporary server has
    tests of its own); the source platform blocks one query (403, billed)."""
    output = tmp_path / "out"
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (3, 3)})
    with running(config) as sb:
        spec = write_spec(
            tmp_path,
            job_spec(
                sb.base_url,
                output,
                [
                    {"id": "fine", "endpoint": PINS, "params": {"query": "trail shoes"}},
                    {"id": "walled", "endpoint": PINS, "params": {"query": "blocked boards"}},
                ],
                name="partly-blocked",
                credits=50,
            ),
        )
        proc = subprocess.run(
            [str(HARVEST), "run", str(spec)],
            env=subprocess_env(tmp_path, HARVEST_API_KEY=SECRET_KEY, PREFECT_API_URL=prefect_api_url),
            capture_output=True,
            text=True,
            timeout=120,
        )
        billed = sb.billed_total()
        statuses = [e.status for e in data_entries(sb)]
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # three pages of pins and the page ending pin search (`"cursor": "-end-"`), then the blocked query's 403
    assert sorted(statuses) == [200, 200, 200, 200, 403], proc.stdout + proc.stderr
    assert SECRET_KEY not in proc.stdout and SECRET_KEY not in proc.stderr
    assert "walled" in proc.stderr and "fine" in proc.stdout
    assert "Task run" not in proc.stderr, proc.stderr  # the failed task run is not echoed: harvest says why
    db = output / "harvest.duckdb"
    states = dict(rows(db, "SELECT query_id, status FROM query_state"))
    assert states == {"fine": "complete", "walled": "failed"}
    assert rows(db, "SELECT status FROM runs") == [("failed",)]
    assert scalar(db, "SELECT credits_spent FROM runs") == billed == 5
    assert scalar(db, "SELECT sum(credits) FROM requests") == billed
    assert scalar(db, "SELECT count(*) FROM requests WHERE status_code = 403 AND credits = 1") == 1
    assert scalar(db, "SELECT count(DISTINCT _query_id) FROM pinboard_pins") == 1
    assert f"credits spent: {billed}" in proc.stdout
    assert_no_secret_in_outputs(output)


def test_harvest_s_own_warnings_come_as_its_lines_not_in_prefect_s_log_format(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """A cron log is read (and grepped) as harvest's sentences: the ledger's warning that the service charged
    more than the cost table says came as `04:55:05.938 | WARNING | harvest.ledger - ...` among them, and the
    flow's that a parent's value could not start a dependent query as `... | WARNING | Flow run 'magic-lionfish'
    - ...`. Each is one `warning:` line, and each is in the flow run's log in Prefect, which the UI shows."""
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (2, 2)}, costs={PINS: 3})
    output = tmp_path / "out"
    with running(config) as sb:
        queries = [
            {"id": "pins", "endpoint": PINS, "params": {"query": "oak"}},
            # a pin's id is no creative's `material_id` (`<kind>:<id>`): each one is refused, none is sent
            {"id": "detail", "endpoint": CREATIVE_DETAIL, "for_each": {"material_id": {"from": "pins", "field": "id"}}},
        ]  # fmt: skip
        spec = write_spec(tmp_path, job_spec(sb.base_url, output, queries, credits=50))
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
        sent = {e.path for e in data_entries(sb)}
    assert code == 0, out + err
    assert sent == {PINS}, sent
    lines = err.splitlines()
    assert any(line.startswith("warning: the service charged 3 credits for pins page 0") for line in lines), (
        lines
    )
    refused = [line for line in lines if "dependent query not started" in line]
    pins = scalar(output / "harvest.duckdb", "SELECT count(*) FROM pinboard_pins")
    assert pins and len(refused) == pins, lines
    for line in refused:
        assert re.fullmatch(
            r"warning: dependent query not started: detail: material_id='\d+' from pins\.id is not allowed: "
            r"String should match pattern .*",
            line,
        ), line
    assert not [line for line in lines if "| WARNING |" in line or "harvest.ledger" in line], lines
    (manifest,) = all_manifests(OutputLayout(output))
    assert manifest.flow_run_id is not None
    logged = [message for _, level, message in run_log(manifest.flow_run_id) if level == logging.WARNING]
    told = [line.removeprefix("warning: ") for line in lines if line.startswith("warning: ")]
    assert sorted(logged) == sorted(told), (logged, told)


# ---------------------------------------------------------------------------------------------- 10. demo
def test_demo_lands_every_table(landed_demo: LandedDemo, prefect_harness: None, tmp_path: Path) -> None:
    """The session's demo, as a user typed it (`tests.landed_demo`), then a second night into the same file."""
    output, stdout, stderr = landed_demo.output, landed_demo.stdout, landed_demo.stderr
    assert landed_demo.returncode == 0, stdout + stderr
    counts = table_counts(output / "harvest.duckdb")
    # the demo asks every endpoint of the catalog (an endpoint added to the catalog fails here until the
    # demo asks it too), and lands every table they land
    asked = {q.endpoint for q in load_spec(DEMO_SPEC).queries}
    assert sorted(set(catalog.endpoints()) - asked) == []
    assert set(counts) == set(demo_kinds())
    empty = {t for t, n in counts.items() if n == 0}
    assert empty <= DEMO_EMPTY, empty
    assert_child_tables_read_without_json(output)
    # what landed, by platform: one row each and a total, not a row per query and per table
    shown = stdout.split("Query it")[0]
    platforms = {ep.split("/")[2] for ep in catalog.endpoints()}
    assert all(re.search(rf"^. {re.escape(p)} ", shown, re.MULTILINE) for p in platforms), shown
    total = re.search(rf"^. all +. +{len(asked)} .+ {len(counts)} . +{sum(counts.values())} .$", shown, re.M)
    assert total, shown
    assert len(shown.splitlines()) < len(platforms) + 25 and "microblog_b_threads" not in shown
    assert "Query it" in stdout
    assert f"harvest sql {shlex.quote(OUTPUT)}" in stdout
    assert "credits spent:" in stdout and "status: complete" in stdout
    assert scalar(output / "harvest.duckdb", "SELECT service FROM runs") == "sandbox (embedded)"
    # the catalog reads every field the (undrifted) service sends: nothing to report, nothing lost
    assert rows(
        output / "harvest.duckdb", "SELECT new_fields, values_misfit, records_without_key FROM runs"
    ) == [("[]", 0, 0)]
    assert "new fields" not in stderr and "did not fit" not in stderr
    assert_true_types_and_described(output / "harvest.duckdb")
    # the hint's first command works as printed
    sql = runner.invoke(app, ["sql", str(output), "SELECT count(*) AS n FROM short_video_videos"])
    assert sql.exit_code == 0 and str(counts["short_video_videos"]) in sql.stdout
    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    shown = re.findall(r'^\.venv/bin/harvest sql data/demo "(.+)"$', readme, re.MULTILINE)
    assert len(shown) == 3, shown  # the README's queries of the demo: a record table, a child table, a join
    for query in shown:
        answered = runner.invoke(app, ["sql", str(output), query, "--format", "csv"])
        assert answered.exit_code == 0 and len(answered.stdout.splitlines()) > 1, (query, answered.output)
    assert_replies_say_which_post_they_were_fetched_for(output / "harvest.duckdb")
    # the second night into the same file: its 161 tables' keys are in DuckDB's memory at once, and the load
    # still fits the default cap (at a flat 64 MB it was refused, the night left unloaded with exit 0)
    output = landed_demo.copy_output(tmp_path / "demo")  # the session's demo is read by other tests
    again = runner.invoke(app, ["demo", "--output", str(output)])
    assert again.exit_code == 0, again.output
    assert "not loaded" not in again.output and "more memory" not in again.output, again.output
    assert rows(output / "harvest.duckdb", "SELECT count(*), count(DISTINCT status) FROM runs") == [(2, 1)]
    assert table_counts(output / "harvest.duckdb") == counts  # every record once, newest fetch kept


def test_every_record_table_of_the_demo_has_its_history_view(landed_demo: LandedDemo) -> None:
    """docs/handoff.md: every record table has a view `<table>_history`, an empty one too (the demo's clips
    come without qualities): with its table's columns and `date`, described, and answering `harvest sql`."""
    assert landed_demo.returncode == 0, landed_demo.stdout + landed_demo.stderr
    db = landed_demo.output / "harvest.duckdb"
    counts = table_counts(db)
    views = dict(rows(db, "SELECT view_name, comment FROM duckdb_views() WHERE NOT internal"))
    assert sorted(t for t in counts if t + "_history" not in views) == []
    assert all(views[t + "_history"] for t in counts), "every view described"
    columns: dict[str, list[tuple[str, str]]] = {}
    for table, column, type_ in rows(
        db,
        "SELECT table_name, column_name, data_type FROM duckdb_columns() ORDER BY table_name, column_index",
    ):
        columns.setdefault(table, []).append((column, type_))
    assert {t: columns[t] + [("date", "DATE")] for t in counts} == {
        t: columns[t + "_history"] for t in counts
    }
    empty = sorted(t for t, n in counts.items() if n == 0)
    assert empty, "the demo lands an empty table (DEMO_EMPTY)"
    for table in [*empty, "streaming_clip_qualities"]:
        query = f"SELECT count(*) AS n FROM {table}_history"
        answered = runner.invoke(app, ["sql", str(landed_demo.output), query, "--format", "csv"])
        assert answered.exit_code == 0, answered.output
        assert (answered.stdout.splitlines()[1] == "0") == (table in empty), (table, answered.stdout)


def assert_replies_say_which_post_they_were_fetched_for(db: Path) -> None:
    """The demo's dependent query (each feed post's thread) lands replies whose `post_url` is the post they
    were fetched for, nested replies too: each joins a feed post, and each thread asked is there (the feed
    fetched it, and the thread again: as the service answers, a thread's post is the post asked for)."""
    asked = {u for (u,) in rows(db, "SELECT DISTINCT json_extract_string(params, '$.url') FROM requests "
                                    "WHERE endpoint = '/v1/microblog-b/post'")}  # fmt: skip
    replies = rows(
        db, "SELECT post_url, parent_uri IN (SELECT uri FROM microblog_b_replies) FROM microblog_b_replies"
    )
    fetched_for = {url for url, _ in replies}  # a thread without replies lands none
    assert fetched_for and fetched_for <= asked and None not in asked
    assert any(nested for _, nested in replies), "no nested reply: the thread's depth went untested"
    history = db.parent / "parquet" / "microblog_b_posts" / "*" / "*.parquet"
    sql = "SELECT uri FROM read_parquet(?) WHERE _query_id = 'microblog_b_feed'"
    feed = {uri for (uri,) in rows(db, sql, [str(history)])}
    posts = {uri for (uri,) in rows(db, "SELECT uri FROM microblog_b_posts")}
    assert asked <= feed and asked <= posts  # a thread's post is the feed's: one row, its newest fetch
    (comment,) = rows(db, "SELECT comment FROM duckdb_tables() WHERE table_name = 'microblog_b_replies'")
    assert comment == ("primary key: uri; fetched for: post_url (the request's url)",)


def assert_child_tables_read_without_json(output: Path) -> None:
    """The qualities of every clip, the top comments of every group post and the items of every video
    shelf are rows with typed columns, joined to their parent by its key, no JSON function: the values the raw
    JSON of the same parents holds, at the items' positions; in Parquet with the same types; in the table docs."""
    db = output / "harvest.duckdb"

    def raw(table: str) -> list[dict[str, Any]]:
        return [json.loads(r) for (r,) in rows(db, f"SELECT raw FROM {table}")]

    qualities = rows(db, "SELECT c.id, q.position, q.quality, q.frame_rate, q.source_url FROM streaming_clips c "
                         "JOIN streaming_clip_qualities q ON q.parent_id = c.id ORDER BY ALL")  # fmt: skip
    assert qualities and qualities == sorted(
        (c["id"], n, q["quality"], q["frameRate"], q["sourceURL"])
        for c in raw("streaming_clips") for n, q in enumerate(c["assets"][0]["videoQualities"])
    )  # fmt: skip
    comments = rows(db, "SELECT p.id, c.position, c.id, c.text, epoch(c.created_at), c.author_name "
                        "FROM network_a_group_posts p JOIN network_a_group_post_top_comments c ON c.parent_id = p.id "
                        "ORDER BY ALL")  # fmt: skip
    assert comments and comments == sorted(
        (p["id"], n, c["id"], c["text"], iso_epoch(c["publishTime"]), c["author"]["name"])
        for p in raw("network_a_group_posts") for n, c in enumerate(p["topComments"])
    )  # fmt: skip
    items = rows(db, "SELECT s.type, s.title, i.position, i.id, i.title, i.view_count, i.duration_seconds "
                     "FROM video_platform_shelves s JOIN video_platform_shelf_items i "
                     "ON i.parent_search_query = s.search_query AND i.parent_type = s.type AND i.parent_title = s.title "
                     "AND i.parent_first_item_id = s.first_item_id "
                     "ORDER BY ALL")  # fmt: skip
    assert items and items == sorted(
        (s["type"], s["title"], n, i["id"], i["title"], i["viewCountInt"], i["lengthSeconds"])
        for s in raw("video_platform_shelves") for n, i in enumerate(s["items"])
    )  # fmt: skip
    assert {type(v) for row in qualities for v in row[2:4]} == {str, float}
    assert {type(row[5]) for row in items} == {int}
    landed = pq.read_table(output / "parquet" / "network_a_group_post_top_comments")
    assert str(landed.schema.field("created_at").type).startswith("timestamp[us")
    assert landed.schema.field("position").type == "int64" and landed.num_rows == len(comments)
    tables = runner.invoke(app, ["schema", "--tables"]).stdout
    assert "## video_platform_shelf_items\n\nChild of `video_platform_shelves`" in tables
    assert (
        "Primary key: `parent_search_query, parent_type, parent_title, parent_first_item_id, position`"
        in tables
    )
    assert "| `parent_type` | VARCHAR | video_platform_shelves.type |" in tables


def iso_epoch(value: Any) -> Any:
    """Seconds since the epoch of a time sent as ISO text (a number as it is)."""
    return (
        dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        if isinstance(value, str)
        else value
    )


DEMO_EMPTY = {
    "streaming_broadcaster_clip_qualities",  # the service sends qualities with the clip only
}
"""The demo's tables that may land no rows."""


def demo_kinds() -> dict[str, Any]:
    """The record kinds the demo's endpoints land, by table name."""
    asked = {q.endpoint for q in load_spec(DEMO_SPEC).queries}
    return {kind.table: kind for ep in asked for kind in catalog.endpoints()[ep].landed_kinds}


def assert_true_types_and_described(db: Path) -> None:
    """On a landed demo: times an analyst compares with now(), exact prices beside their currency, and a
    comment on every column of every record table naming where it is read (and the key)."""
    videos = "video_platform_videos"
    for table in (
        videos,
        "video_platform_shorts",
        "video_platform_comments",
        "video_platform_community_posts",
    ):
        assert types_of(db, table)["created_at"] == "TIMESTAMP WITH TIME ZONE", table
        (n, past, worded) = rows(
            db, f"SELECT count(*), count(*) FILTER (created_at < now()), "
            f"count(*) FILTER (created_at_text LIKE '% ago') FROM {table}"
        )[0]  # fmt: skip
        assert n > 0 and past == n == worded, table
    sent = rows(db, f"SELECT created_at, raw->>'publishedTime' FROM {videos}")
    assert all(t == dt.datetime.fromisoformat(s.replace("Z", "+00:00")) for t, s in sent)
    product = types_of(db, "short_video_products")
    assert (product["price_amount"], product["price_currency"]) == ("DECIMAL(18,4)", "VARCHAR")
    prices = rows(db, "SELECT price_amount, price_currency, raw FROM short_video_products")
    for amount, currency, raw in prices:
        info = json.loads(raw)["product_price_info"]
        assert (amount, currency) == (Decimal(info["sale_price_decimal"]), info["currency_name"])
    images = [json.loads(i) for (i,) in rows(db, "SELECT images FROM short_video_product_details")]
    assert images and all(i and all(x["url_list"][0].startswith("https://") for x in i) for i in images)
    comments = rows(
        db, "SELECT table_name, column_name, comment FROM duckdb_columns() WHERE table_name IN "
        "(SELECT unnest(?::VARCHAR[]))", [list(demo_kinds())]
    )  # fmt: skip
    assert {t for t, _, _ in comments} == set(demo_kinds())
    for table, column, comment in comments:
        kind = catalog.all_kinds()[table]
        fld = kind.field(column)
        if isinstance(kind, ChildKind) and column in kind.parent_columns:  # the parent's key column
            source = f"Source: `{kind.parent}.{fld.path if fld else ''}`."
        elif isinstance(kind, ChildKind) and column == "position":
            source = "0 for the first"
        elif (
            fld is not None
        ):  # the record path it is read from (the request's parameter for the embed's handle)
            source = f"`{fld.path.split('|')[0].removeprefix('$params.')}`"
        else:  # the columns harvest adds
            source = "Source: harvest." if column == "_run_id" else "Source: the "
        assert comment and source in comment and len(comment) > len(source) + 10, (table, column, comment)
        assert ("Primary key." in comment or "Part of the primary key" in comment) == (
            column in kind.primary_key
        )
    keys = dict(rows(db, "SELECT table_name, comment FROM duckdb_tables()"))
    fetched_for = "; fetched for: search_query (the request's query)"
    assert keys[videos] == "primary key: search_query, id" + fetched_for
    assert (
        keys["video_platform_shelves"]
        == "primary key: search_query, type, title, first_item_id" + fetched_for
    )
    # child tables too: their key, a video shelf's items typed as the search's videos, their views
    items = "video_platform_shelf_items"
    assert keys[items] == (
        "primary key: parent_search_query, parent_type, parent_title, parent_first_item_id, position"
    )
    assert types_of(db, items)["created_at"] == "TIMESTAMP WITH TIME ZONE"
    assert (
        "Deprecated: the same list as rows in `video_platform_shelf_items`"
        in dict(
            rows(
                db,
                "SELECT column_name, comment FROM duckdb_columns() WHERE table_name = 'video_platform_shelves'",
            )
        )["items"]
    )
    views = dict(rows(db, "SELECT view_name, comment FROM duckdb_views() WHERE NOT internal"))
    assert "video_platform_shelves row's list" in views[items + "_history"]
    described = rows(
        db, "SELECT count(*), count(comment) FROM duckdb_columns() WHERE table_name = ?", [items + "_history"]
    )  # fmt: skip
    assert described[0][0] == described[0][1] > 20


def types_of(db: Path, table: str) -> dict[str, str]:
    return dict(rows(db, "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ?", [table]))


# ------------------------------------------------------------------------------- once each per run
def test_a_run_parses_its_spec_checks_its_output_and_takes_its_lock_once(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command line parses, checks and locks before Prefect starts; the flow gets all three with the prepared
    run instead of doing them again. A second run of the job is still refused while the lock is held."""
    import harvest.flows.run.preflight
    import harvest.flows.spec.parse
    import harvest.tasks.output.job_lock

    calls: dict[str, int] = {"parse": 0, "check": 0, "lock": 0}

    def counted(name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(
        harvest.flows.spec.parse, "parse_spec", counted("parse", harvest.flows.spec.parse.parse_spec)
    )
    check = counted("check", harvest.flows.run.preflight.check_output_dir)
    monkeypatch.setattr(harvest.flows.run.preflight, "check_output_dir", check)  # the command line's
    monkeypatch.setattr(
        harvest.flows.collect, "check_output_dir", check
    )  # the flow's, for a deployment's run
    monkeypatch.setattr(
        harvest.tasks.output.job_lock, "acquire", counted("lock", harvest.tasks.output.job_lock.acquire)
    )
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    output = tmp_path / "out"
    with running(SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (2, 2)})) as sb:
        spec = write_spec(
            tmp_path,
            job_spec(
                sb.base_url,
                output,
                [{"id": "pins", "endpoint": PINS, "params": {"query": "oak"}}],
                name="once",
                credits=20,
            ),
        )
        result = runner.invoke(app, ["run", str(spec)])
    assert result.exit_code == 0, result.output
    assert calls == {"parse": 1, "check": 1, "lock": 1}
    assert rows(output / "harvest.duckdb", "SELECT status FROM runs") == [("complete",)]
    held = harvest.tasks.output.job_lock.acquire(output / ".harvest-once.lock")
    try:
        with pytest.raises(harvest.tasks.output.job_lock.JobLocked):
            harvest.tasks.output.job_lock.acquire(
                output / ".harvest-once.lock"
            )  # in this process too: no reentry
    finally:
        held.release()
