"""One example job per platform (`configs/examples/<platform>-*.yaml`), run as a user runs it offline: `harvest
run SPEC --base-url sandbox --output DIR`, in this process, inside the session's Prefect harness. What a user
checks after it: the run ended complete and exited 0 within its budget, every query landed rows, and every
dependent query's rows say which parent value they were fetched for (their `$params` column), each a value its
parent query landed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import harvest.flows.collect  # noqa: F401  (Prefect binds its log handlers on first import: not inside CliRunner)
from harvest.connectors.catalog import endpoints as catalog
from harvest.connectors.catalog.fields import PARAM_PREFIX
from harvest.connectors.catalog.records import RecordKind
from harvest.flows.cli import app
from harvest.flows.spec import load_spec
from harvest.flows.spec.model import FromQuery, JobSpec, Query
from tests.flow_helpers import ROOT, rows, scalar

EXAMPLES = ROOT / "configs" / "examples"
JOBS = {
    "forum": "forum-subreddit.yaml",
    "microblog-a": "microblog-a-accounts.yaml",
    "microblog-b": "microblog-b-accounts.yaml",
    "network-a": "network-a-page.yaml",
    "photo-app": "photo-app-profile.yaml",
    "pinboard": "pinboard-boards.yaml",
    "search-engine": "search-engine-ads.yaml",
    "short-video": "short-video-creator.yaml",
    "streaming": "streaming-channels.yaml",
    "video-platform": "video-platform-channel.yaml",
}
"""Platform -> its example job."""
NO_PLATFORM = {"creative", "detect-age-gender"}
"""The catalog's endpoints of no platform."""


def test_every_platform_has_an_example_job_of_its_own_endpoints() -> None:
    platforms = {path.split("/")[2] for path in catalog.endpoints()} - NO_PLATFORM
    assert set(JOBS) == platforms
    for platform, name in JOBS.items():
        endpoints = {q.endpoint for q in load_spec(str(EXAMPLES / name)).queries}
        assert {e.split("/")[2] for e in endpoints} == {platform}, name
        assert 3 <= len(endpoints) <= 5, name


def _ids(query_id: str) -> str:
    """A WHERE clause on `_query_id` for a spec query's rows, its fanned-out and dependent instances too."""
    return f"(_query_id = '{query_id}' OR _query_id LIKE '{query_id}[%')"


def _kinds(query: Query) -> list[RecordKind]:
    return [k for k in catalog.get(query.endpoint).kinds if isinstance(k, RecordKind)]


def _parent_values(db: Path, spec: JobSpec, source: FromQuery) -> set[str]:
    parent = next(q for q in spec.queries if q.id == source.from_)
    table = source.kind or next(k.table for k in _kinds(parent) if k.field(source.field) is not None)
    return {v for (v,) in rows(db, f'SELECT DISTINCT "{source.field}" FROM {table} WHERE {_ids(parent.id)}')}


def _fetched_for(db: Path, query: Query, param: str) -> set[str]:
    """The values of the child's column read from the request's `param`, over its tables."""
    found: set[str] = set()
    columns = [
        (k.table, f.name)
        for k in _kinds(query)
        for f in k.fields
        if f.path.split("|")[0] == PARAM_PREFIX + param
    ]
    assert columns, f"{query.endpoint} keeps no column of the request's {param}"
    for table, column in columns:
        found |= {v for (v,) in rows(db, f'SELECT DISTINCT "{column}" FROM {table} WHERE {_ids(query.id)}')}
    return found


@pytest.mark.parametrize("platform", sorted(JOBS))
def test_a_platform_job_runs_offline_lands_every_query_and_chains_its_parents(
    prefect_harness: None, tmp_path: Path, platform: str
) -> None:
    path = EXAMPLES / JOBS[platform]
    spec = load_spec(str(path))
    output = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(path), "--base-url", "sandbox", "--output", str(output)])
    assert result.exit_code == 0, result.output
    db = output / "harvest.duckdb"
    assert scalar(db, "SELECT status FROM runs") == "complete"
    spent = scalar(db, "SELECT sum(credits) FROM requests")
    assert 0 < spent <= spec.budget.credits and f"credits spent: {spent} of a budget" in result.stdout
    for query in spec.queries:
        landed = sum(
            scalar(db, f"SELECT count(*) FROM {k.table} WHERE {_ids(query.id)}") for k in _kinds(query)
        )
        assert landed, f"{query.id}: no rows"
        for param, source in (query.for_each or {}).items():
            if isinstance(source, FromQuery):
                parents = _parent_values(db, spec, source)
                fetched_for = _fetched_for(db, query, param)
                assert fetched_for and fetched_for <= parents, (query.id, fetched_for - parents)


def test_the_forum_jobs_tables_join_on_the_ids_the_columns_name(
    prefect_harness: None, tmp_path: Path
) -> None:
    """What an analyst joins after the offline forum job: a post's details (fetched with its comments) are the
    post the listing landed (same id), the listing's URL names the post, and a comment's `url` is the comment's
    own (not the post's the request asked with)."""
    output = tmp_path / "out"
    path = EXAMPLES / JOBS["forum"]
    result = CliRunner().invoke(app, ["run", str(path), "--base-url", "sandbox", "--output", str(output)])
    assert result.exit_code == 0, result.output
    db = output / "harvest.duckdb"
    posts = scalar(db, "SELECT count(*) FROM forum_subreddit_posts")
    joined = "SELECT count(*) FROM forum_post_details AS d JOIN forum_subreddit_posts AS p ON d.id = p.id"
    assert posts and scalar(db, "SELECT count(*) FROM forum_post_details") == scalar(db, joined) == posts
    assert scalar(db, "SELECT count(*) FROM forum_subreddit_posts WHERE url LIKE '%/' || id") == posts
    comments = scalar(db, "SELECT count(DISTINCT url) FROM forum_post_comments")
    assert comments == scalar(db, "SELECT count(*) FROM forum_post_comments") and comments > posts
    assert not scalar(db, "SELECT count(*) FROM forum_post_comments WHERE url = post_url")
