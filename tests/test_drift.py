"""Nothing lost, nothing silent: real runs against a sandbox whose answers drifted from the documented shapes.

Each test runs the real flow over HTTP and checks what a user would: rows, columns, `query_state` counts, exit
codes and the one message that says what happened.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

import harvest.flows.collect  # noqa: F401  (Prefect binds its log handlers on first import: not inside CliRunner)
from harvest.connectors.catalog.fields import parse_number
from harvest.flows.cli import app
from harvest.sandbox.config import Drift, SandboxConfig
from harvest.sandbox.expected import full_crawl
from harvest.sandbox.wire.serving import running
from harvest.tasks.output.raw_store import RawPageReader
from tests.crawl_helpers import data_entries
from tests.endpoints import FEED, PINS, PROFILE
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, one_query, rows, run_flow, scalar

FEED_PARAMS = {"handle": "nasa.example"}
runner = CliRunner()


pytestmark = pytest.mark.usefixtures("api_key")  # harvest's key in the environment (conftest)


@pytest.mark.parametrize("share", [1.0, 0.4])
def test_wrapped_feed_items_land_whole(prefect_harness: None, tmp_path: Path, share: float) -> None:
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages=(2, 2), page_size=8, drift=Drift(wrapped_feed=share)
    )
    with running(config) as sb:
        summary = run_flow(one_query(tmp_path, sb.base_url, FEED, FEED_PARAMS))
    db = tmp_path / "out" / "harvest.duckdb"
    posts = full_crawl(FEED, FEED_PARAMS, config)["posts"]
    assert summary.status == "complete"
    assert set(r[0] for r in rows(db, "SELECT uri FROM microblog_b_posts")) == {p["uri"] for p in posts}
    assert summary.records == len(posts) == scalar(db, "SELECT count(*) FROM microblog_b_posts")
    assert scalar(db, "SELECT count(*) FROM microblog_b_posts WHERE text IS NULL OR author_did IS NULL") == 0
    reasons = scalar(db, "SELECT count(*) FROM microblog_b_posts WHERE feed_reason IS NOT NULL")
    replies = scalar(db, "SELECT count(*) FROM microblog_b_posts WHERE reply_parent_uri LIKE '%-parent'")
    assert replies > 0 and scalar(db, "SELECT new_fields FROM runs") == "[]"
    wrapped = scalar(db, "SELECT count(*) FROM microblog_b_posts WHERE raw LIKE '{\"post\":%'")
    assert 0 < reasons <= wrapped and (wrapped == len(posts)) == (share == 1.0)
    assert scalar(db, "SELECT items_seen, records_without_key FROM query_state")
    assert rows(db, "SELECT items_seen, records_without_key, lists_missing FROM query_state") == [
        (len(posts), 0, 0)
    ]


def test_a_renamed_list_is_drift_said_once_and_the_page_is_kept(
    prefect_harness: None, tmp_path: Path
) -> None:
    drift = Drift(renamed_lists={FEED: ("feed", "items")})
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages=(3, 3), page_size=5, drift=drift)
    with running(config) as sb:
        result = runner.invoke(app, ["run", str(one_query(tmp_path, sb.base_url, FEED, FEED_PARAMS))])
        paid = len(data_entries(sb))
    assert result.exit_code == 1, result.output
    assert paid == 1, "stopped after the first page it could not read"
    message = [line for line in result.stderr.splitlines() if "changed shape" in line]
    assert len(message) == 1
    for part in (FEED, "microblog_b_posts", "feed or post", "items", "raw store", "harvest rebuild"):
        assert part in message[0], part
    db = tmp_path / "out" / "harvest.duckdb"
    assert rows(db, "SELECT status, lists_missing, items_seen FROM query_state") == [("drift", 1, 0)]
    assert rows(db, "SELECT status FROM runs") == [("failed",)]
    (raw,) = (tmp_path / "out" / "raw").glob("*/*.pages")
    (page,) = list(RawPageReader(raw))
    assert b'"items"' in page.body


def test_values_that_do_not_fit_are_null_counted_and_kept(prefect_harness: None, tmp_path: Path) -> None:
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages=(1, 1), page_size=8, drift=Drift(bad_values=1.0)
    )
    params = {"handle": "nasa", "sort_by": "latest"}
    with running(config) as sb:
        result = runner.invoke(app, ["run", str(one_query(tmp_path, sb.base_url, PROFILE, params))])
    assert result.exit_code == 0, result.output
    db = tmp_path / "out" / "harvest.duckdb"
    sent = [orjson.loads(r[0]) for r in rows(db, "SELECT raw FROM short_video_videos ORDER BY aweme_id")]
    plays = [r[0] for r in rows(db, "SELECT play_count FROM short_video_videos ORDER BY aweme_id")]
    meaning = {"1.2K": 1200, "1,234": 1234, "42": 42, "twelve": None}
    assert plays == [meaning[v["statistics"]["play_count"]] for v in sent]
    assert scalar(db, "SELECT count(*) FROM short_video_videos WHERE created_at IS NULL") == len(sent)
    misfits = (
        sum((v == "twelve") for video in sent for k, v in video["statistics"].items() if k != "play_count")
        + sum(video["statistics"]["play_count"] == "twelve" for video in sent)
        + len(sent)
    )  # + every "yesterday"
    assert scalar(db, "SELECT values_misfit FROM query_state") == misfits
    assert "did not fit their column" in result.stderr and "(create_time = yesterday)" in result.stderr
    assert rows(db, "SELECT status FROM query_state") == [("complete",)]


def test_records_without_their_key_end_the_query_as_drift(prefect_harness: None, tmp_path: Path) -> None:
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages=(3, 3), page_size=10, drift=Drift(missing_keys=0.3)
    )
    with running(config) as sb:
        result = runner.invoke(app, ["run", str(one_query(tmp_path, sb.base_url, PINS, {"query": "lamps"}))])
    assert result.exit_code == 1, result.output
    db = tmp_path / "out" / "harvest.duckdb"
    status, without, seen, kept = rows(
        db, "SELECT status, records_without_key, items_seen, records FROM query_state"
    )[0]
    assert status == "drift" and without > 0 and kept == seen - without
    assert scalar(db, "SELECT count(*) FROM pinboard_pins") == kept
    assert "without their primary key (search_query, id)" in result.stderr and '"title"' in result.stderr


def test_new_fields_are_reported_once_per_run(prefect_harness: None, tmp_path: Path) -> None:
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages=(2, 2), page_size=4, drift=Drift(new_fields=True)
    )
    with running(config) as sb:
        result = runner.invoke(app, ["run", str(one_query(tmp_path, sb.base_url, PINS, {"query": "lamps"}))])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if "new fields" in line]
    assert (
        len(lines) == 1
        and "pinboard_pins.experiment_bucket" in lines[0]
        and "pinboard_pins.sponsored" in lines[0]
    )
    db = tmp_path / "out" / "harvest.duckdb"
    assert orjson.loads(scalar(db, "SELECT new_fields FROM runs")) == [
        "pinboard_pins.experiment_bucket",
        "pinboard_pins.sponsored",
    ]


@given(st.integers(0, 10**12))
def test_grouped_numbers_read_back(n: int) -> None:
    assert parse_number(f"{n:,}") == n


@pytest.mark.parametrize(
    ("text", "value"),
    [("42", 42), ("1,234", 1234), ("1.2K", 1200), ("3.4m", 3_400_000), ("1B", 10**9), (" 7 ", 7),
     ("twelve", None), ("1.2.3", None), ("1,23", None), ("yesterday", None), ("", None), ("K", None)],
)  # fmt: skip
def test_numbers_sent_as_text(text: str, value: float | None) -> None:
    assert parse_number(text) == value
