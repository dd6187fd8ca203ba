"""An incremental feed whose posts its threads fetch again (the thread's answer includes the post, landing in
the feed's table) knows those posts from the load's record of replaced fetches (`harvest_state.replaced_fetches`),
not from the Parquet history: after `harvest rebuild`, and in a database made before the record (its first load
fills it once), the next nights pay for new posts and their threads only. Real flow runs against the sandbox
over HTTP; credits counted by harvest and paths by the sandbox's ledger."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest
from typer.testing import CliRunner

from harvest.flows.cli import app
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import running
from tests.crawl_helpers import data_entries
from tests.endpoints import FEED, POST
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, expected_keys, job_spec, rows, run_flow, write_spec

FEED_PARAMS = {"handle": "nasa"}
CONFIG = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={FEED: (3, 3)}, page_size=5)
QUERIES = [
    {"id": "feed", "endpoint": FEED, "params": FEED_PARAMS, "incremental": True},
    {"id": "threads", "endpoint": POST, "for_each": {"url": {"from": "feed", "field": "uri"}}},
]
RECORD = "SELECT table_name, key, query_id, run_id FROM harvest_state.replaced_fetches"


def _record(output: Path) -> set[tuple[Any, ...]]:
    return {(t, tuple(k), q, r) for t, k, q, r in rows(output / "harvest.duckdb", RECORD)}


def _rebuild(output: Path) -> None:
    done = CliRunner().invoke(app, ["rebuild", str(output)])
    assert done.exit_code == 0, done.output


def _drop_record(output: Path) -> None:
    """A database as harvest made it before the record existed."""
    con = duckdb.connect(str(output / "harvest.duckdb"))
    try:
        con.execute("DROP TABLE harvest_state.replaced_fetches")
    finally:
        con.close()


@pytest.mark.scenario
@pytest.mark.parametrize("between", [_rebuild, _drop_record], ids=["rebuild", "no-record-yet"])
def test_the_next_nights_pay_for_new_posts_only(
    prefect_harness: None, tmp_path: Path, api_key: str, between: Callable[[Path], None]
) -> None:
    output = tmp_path / "out"
    with running(CONFIG) as night1:
        spec = write_spec(tmp_path, job_spec(night1.base_url, output, QUERIES, name="feeds", credits=1000))
        first = run_flow(spec)
        kept = _record(output)
        between(output)
        after = _record(output) if between is _rebuild else set()
        unchanged = run_flow(spec)
        refilled = _record(output)
    later = CONFIG.replace(new_items=4)
    with running(later) as night2:
        spec = write_spec(tmp_path, job_spec(night2.base_url, output, QUERIES, name="feeds", credits=1000))
        second = run_flow(spec)
        threads = Counter(e.params["url"] for e in data_entries(night2) if e.path == POST)
    old_posts = set(expected_keys([(FEED, FEED_PARAMS)], CONFIG)["microblog_b_posts"])
    new_posts = set(expected_keys([(FEED, FEED_PARAMS)], later)["microblog_b_posts"]) - old_posts
    assert first.status == "complete"
    # every post the feed fetched, its row now the thread's: the record says the feed fetched it, in night 1
    assert {(k, q, r) for t, k, q, r in kept if t == "microblog_b_posts" and q == "feed"} == {
        (post, "feed", first.run_id) for post in old_posts
    }
    if between is _rebuild:
        assert after == kept  # the runs replayed through the same merge
    assert kept <= refilled  # filled from the Parquet history once, or kept through the rebuild
    assert unchanged.credits_spent == 1  # the head page only: no post's thread paid again
    assert second.credits_spent == 2 + 4  # the page of new posts, one of known ones, 4 threads
    assert {(u,) for u in threads} == new_posts and set(threads.values()) == {1}
