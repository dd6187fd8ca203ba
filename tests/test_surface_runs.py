"""Endpoints of the service's published surface whose paging no declaration could say before, run as a
user runs them: `harvest run` of a job naming their declarations (`tests/data/declared/surface-requests.yaml`).

A page-number endpoint (web search, pages 1 to 11), a POST one (the ad library search) and the forum post's
comments (POST, a cursor per comment thread) run on the embedded sandbox, then on their published sample
answers served over HTTP (read in place from `../shared/spec/service-samples/`). The comments' follow-up
requests are paid once across a `kill -9` and the resume.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import harvest.flows.collect  # noqa: F401  (Prefect binds its log handlers on first import: not inside CliRunner)
from harvest.connectors.catalog.records import keys_of
from harvest.flows.cli import app
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.expected import expected_pages, full_crawl
from harvest.sandbox.wire.serving import running
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import all_manifests
from tests.crawl_helpers import data_entries
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, job_spec, rows, scalar, write_spec
from tests.process_helpers import finish, start_run, wait_for_requests
from tests.surface_helpers import (
    CATALOG,
    COMMENTS,
    CREATORS,
    LIBRARY_ADS,
    SEARCH,
    declared,
    endpoint,
    needs_samples,
    sample,
)
from tests.test_resume_kill import kill_hard

runner = CliRunner()
THREADS = {"url": "https://forum.example/r/desks/comments/1"}


def key_set(db: Path, table: str) -> set[tuple[Any, ...]]:
    """The keys a declared table holds."""
    kind = next(
        k for path in (SEARCH, LIBRARY_ADS, COMMENTS) for k in endpoint(path).kinds if k.table == table
    )
    return set(rows(db, f"SELECT {', '.join(kind.primary_key)} FROM {table}"))


def job(tmp_path: Path, base_url: str, queries: list[dict[str, Any]], **more: Any) -> Path:
    spec = job_spec(
        base_url, tmp_path / "out", queries, name="surface", credits=500, catalogs=[str(CATALOG)], **more
    )
    return write_spec(tmp_path, spec)


def test_page_numbers_post_and_thread_cursors_run_on_the_embedded_sandbox(
    prefect_harness: None, tmp_path: Path
) -> None:
    spec = job(tmp_path, "sandbox", [
        {"id": "search", "endpoint": SEARCH, "params": {"query": "standing desks"}},
        {"id": "ads", "endpoint": LIBRARY_ADS, "params": {"query": "running shoes"}},
        {"id": "threads", "endpoint": COMMENTS, "params": THREADS, "method": "POST"},
    ])  # fmt: skip
    result = runner.invoke(app, ["run", str(spec)])
    assert result.exit_code == 0, result.output
    output = tmp_path / "out"
    db = output / "harvest.duckdb"
    states = {
        q: (s, p, f) for q, s, p, f in rows(db, "SELECT query_id, status, pages, follow_ups FROM query_state")
    }
    assert {q: s for q, (s, _, _) in states.items()} == {
        "search": "complete",
        "ads": "complete",
        "threads": "complete",
    }
    assert states["search"][2] is None and states["threads"][2] > 0  # follow-ups: counted apart, in pages too
    assert states["threads"][1] > states["threads"][2]
    comments = scalar(db, "SELECT count(*) FROM example_forum_post_comments")
    assert (
        comments > 0 and scalar(db, "SELECT count(DISTINCT post_url) FROM example_forum_post_comments") == 1
    )
    for table in ("example_search_engine_results", "example_network_a_library_ads"):
        assert scalar(db, f"SELECT count(*) FROM {table}") > 0, table
    before = {
        t: key_set(db, t)
        for t in (
            "example_search_engine_results",
            "example_network_a_library_ads",
            "example_forum_post_comments",
        )
    }
    rebuilt = runner.invoke(app, ["rebuild", str(output)])  # the stored answers, POST's too, read again
    assert rebuilt.exit_code == 0, rebuilt.output
    assert {t: key_set(db, t) for t in before} == before


@needs_samples
def test_their_published_samples_served_over_http_land_whole(prefect_harness: None, tmp_path: Path) -> None:
    """Each path answers its published sample, as published (its own envelope), to every valid request: the
    popular creators end on the sample's `pagination.has_more: false`; the web search and the ad library
    (POST) stop at `max_pages: 1`, as every page of a replay is the same."""
    replay = {
        CREATORS: sample("_v1_short-video_creators_popular.json"),
        SEARCH: sample("_v1_search-engine_search.json"),
        LIBRARY_ADS: sample("_v1_network-a_adLibrary_search_ads.json"),
    }
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, declared=declared(*replay), replay=replay)
    with running(config) as sb:
        spec = job(tmp_path, sb.base_url, [
            {"id": "creators", "endpoint": CREATORS, "params": {"sortBy": "follower"}},
            {"id": "search", "endpoint": SEARCH, "params": {"query": "austen allred"}, "max_pages": 1},
            {"id": "ads", "endpoint": LIBRARY_ADS, "params": {"query": "labradoodles"}, "max_pages": 1},
        ])  # fmt: skip
        result = runner.invoke(app, ["run", str(spec)], env={"HARVEST_API_KEY": SECRET_KEY})
        entries = data_entries(sb)
    assert result.exit_code == 0, result.output
    asked = {(e.path, e.method): e.params for e in entries}
    assert asked[(CREATORS, "GET")]["page"] == "1" and asked[(SEARCH, "GET")]["page"] == "1"
    assert asked[(LIBRARY_ADS, "POST")] == {"query": "labradoodles"} and len(entries) == 3
    db = tmp_path / "out" / "harvest.duckdb"
    statuses = dict(rows(db, "SELECT query_id, status FROM query_state"))
    assert statuses == {"creators": "complete", "search": "max_pages", "ads": "max_pages"}
    assert rows(db, "SELECT nick_name, follower_cnt FROM example_short_video_popular_creators ORDER BY follower_cnt DESC LIMIT 1") == [
        ("SANIEV", 431339)
    ]  # fmt: skip
    assert scalar(db, "SELECT count(*) FROM example_search_engine_results") == 5
    assert rows(
        db, "SELECT page_name, is_active, start_date::DATE::VARCHAR FROM example_network_a_library_ads"
    ) == [("JNB Stables Labradoodles", True, "2025-02-28")]


@pytest.mark.scenario
def test_thread_cursors_are_paid_once_across_a_kill_9_and_the_resume(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """The run is killed while it follows the threads; the same command resumes it from the raw pages: no
    follow-up it paid is asked again, none it had not asked is skipped, every comment of every thread lands once."""
    decls = declared(COMMENTS)
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, declared=decls, pages=(4, 4), page_size=4, latency=0.05
    )
    output = tmp_path / "out"
    with running(config) as sb:
        spec = job(tmp_path, sb.base_url, [{"id": "threads", "endpoint": COMMENTS, "params": THREADS}])
        proc = start_run(spec, tmp_path, prefect_api_url)
        wait_for_requests(sb, 12, proc)
        at_kill = kill_hard(proc, sb)
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
        entries = data_entries(sb)
    assert code == 0, out + err
    (run,) = all_manifests(OutputLayout(output))
    assert run.status == "complete" and run.resumes == 1
    total = expected_pages(COMMENTS, THREADS, config)
    asked = Counter(e.params.get("cursor") for e in entries)
    twice = sum(n - 1 for n in asked.values())
    assert at_kill < total and twice <= 1, "only the request in flight at the kill may be paid twice"
    assert len(entries) == total + twice and set(asked) == {None} | _thread_cursors(config)
    ep = endpoint(COMMENTS, decls)
    kind = ep.kind("example_forum_post_comments")
    want = set(keys_of(kind, full_crawl(COMMENTS, THREADS, config)["example_forum_post_comments"], THREADS))
    assert key_set(output / "harvest.duckdb", "example_forum_post_comments") == want
    (threads,) = run.queries
    assert threads["pages"] == total and threads["follow_ups"] == total - 4


def _thread_cursors(config: SandboxConfig) -> set[str | None]:
    """Every cursor a full crawl sends: the query's own pages' and the threads'."""
    from harvest.sandbox.expected import crawl

    return {page.next.get("cursor") if page.next else None for page in crawl(COMMENTS, THREADS, config)} | {
        ask["cursor"] for page in crawl(COMMENTS, THREADS, config) for ask in page.follow
    }


def test_a_budget_stop_keeps_the_waiting_thread_cursors_and_continue_asks_them_once(
    prefect_harness: None, tmp_path: Path
) -> None:
    """A short budget stops the query with threads not yet asked: `--continue` asks exactly those (and the
    query's next page), none of the first run's again, and the two runs hold every comment."""
    decls = declared(COMMENTS)
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, declared=decls, pages=(3, 3), page_size=4)
    with running(config) as sb:
        spec = job(tmp_path, sb.base_url, [{"id": "threads", "endpoint": COMMENTS, "params": THREADS}])
        env = {"HARVEST_API_KEY": SECRET_KEY}
        short = runner.invoke(app, ["run", str(spec), "--budget", "5"], env=env)
        first = len(data_entries(sb))
        again = runner.invoke(app, ["run", str(spec), "--continue"], env=env)
        entries = data_entries(sb)
    assert short.exit_code == 0 and again.exit_code == 0, short.output + again.output
    db = tmp_path / "out" / "harvest.duckdb"
    states = rows(db, "SELECT status, pages, follow_ups FROM query_state ORDER BY pages")
    assert states[0][0] == "budget_exhausted" and states[-1][0] == "complete" and first == 5
    assert max(Counter(e.params.get("cursor") for e in entries).values()) == 1, "a request was paid twice"
    assert len(entries) == expected_pages(COMMENTS, THREADS, config)
    kind = endpoint(COMMENTS, decls).kind("example_forum_post_comments")
    want = set(keys_of(kind, full_crawl(COMMENTS, THREADS, config)["example_forum_post_comments"], THREADS))
    assert key_set(db, "example_forum_post_comments") == want
