"""One example job per platform (`configs/examples/<platform>-*.yaml`), run as a user runs it offline: `harvest
run SPEC --base-url sandbox --output DIR`, in this process, inside the session's Prefect harness, once per job for
every test of this module (`landed`). What a user checks after it: the run ended complete and exited 0 within
its budget, every query landed rows, and every dependent query's rows say which parent value they were fetched
for (their `$params` column), each a value its parent query landed. What an analyst does next: join the tables
on the columns their comments say they join (`Joins ...`, `Made as ...`), each row finding its match, as the
service's ids would (`JOINS`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import Result
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
    """The values of the parent's column in its table: its query's rows, and those a dependent query fetched
    again (a thread's post is the feed's post, its newest fetch the thread's)."""
    parent = next(q for q in spec.queries if q.id == source.from_)
    table = source.kind or next(k.table for k in _kinds(parent) if k.field(source.field) is not None)
    return {v for (v,) in rows(db, f'SELECT DISTINCT "{source.field}" FROM {table}')}


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


@dataclass(frozen=True)
class Landed:
    """An example job run once: its spec, what `harvest run` printed and exited with, its DuckDB file."""

    spec: JobSpec
    result: Result
    db: Path


@pytest.fixture(scope="module")
def landed(prefect_harness: None, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Landed]:
    """A platform -> its example job, run offline the first time a test asks for it (one run per job)."""
    runs: dict[str, Landed] = {}

    def land(platform: str) -> Landed:
        if platform not in runs:
            path = EXAMPLES / JOBS[platform]
            output = tmp_path_factory.mktemp(platform) / "out"
            result = CliRunner().invoke(
                app, ["run", str(path), "--base-url", "sandbox", "--output", str(output)]
            )
            runs[platform] = Landed(load_spec(str(path)), result, output / "harvest.duckdb")
        return runs[platform]

    return land


@pytest.mark.scenario
@pytest.mark.parametrize("platform", sorted(JOBS))
def test_a_platform_job_runs_offline_lands_every_query_and_chains_its_parents(
    landed: Callable[[str], Landed], platform: str
) -> None:
    job = landed(platform)
    spec, result, db = job.spec, job.result, job.db
    assert result.exit_code == 0, result.output
    assert scalar(db, "SELECT status FROM runs") == "complete"
    spent = scalar(db, "SELECT sum(credits) FROM requests")
    assert 0 < spent <= spec.budget.credits and f"credits spent: {spent} of a budget" in result.stdout
    for query in spec.queries:
        records = scalar(
            db,
            f"SELECT sum(records) FROM query_state WHERE {_ids(query.id).replace('_query_id', 'query_id')}",
        )
        landed_rows = sum(scalar(db, f"SELECT count(*) FROM {k.table}") for k in _kinds(query))
        assert records and landed_rows, f"{query.id}: no rows"
        for param, source in (query.for_each or {}).items():
            if isinstance(source, FromQuery):
                parents = _parent_values(db, spec, source)
                fetched_for = _fetched_for(db, query, param)
                assert fetched_for and fetched_for <= parents, (query.id, fetched_for - parents)


@dataclass(frozen=True)
class Join:
    """`left` joined to `right` (tables, or a subquery in parentheses) on `on` (aliases `l` and `r`): every row
    of `left` finds one. `said`: `left.column` and `right.column` whose DuckDB comment names the join (`Joins
    ...`, either way), or None where the ids are the same record's (a post's details and the listed post)."""

    left: str
    right: str
    on: str
    said: tuple[str, str] | None = None


def _j(left: str, column: str, right: str, other: str) -> Join:
    """The join a column's comment says: `left.column = right.other`."""
    return Join(left, right, f"l.{column} = r.{other}", (f"{left}.{column}", f"{right}.{other}"))


POST_NAMES = "(SELECT name FROM forum_post_details UNION ALL SELECT name FROM forum_post_comments)"
"""What a forum comment's `parent_id` names: the post's fullname, or its parent comment's."""
THREAD_URIS = "(SELECT uri FROM microblog_b_posts UNION ALL SELECT uri FROM microblog_b_replies)"

JOINS: dict[str, tuple[Join, ...]] = {
    "forum": (
        _j("forum_subreddit_posts", "subreddit_id", "forum_subreddits", "id"),
        _j("forum_subreddit_posts", "subreddit", "forum_subreddits", "name"),
        Join("forum_post_details", "forum_subreddit_posts", "l.id = r.id AND l.name = r.name"),
        _j("forum_post_details", "subreddit_id", "forum_subreddits", "id"),
        Join(
            "forum_post_comments",
            POST_NAMES,
            "l.parent_id = r.name",
            ("forum_post_comments.parent_id", "forum_post_details.name"),
        ),
        Join("forum_post_comments", "forum_subreddit_posts", "l.post_url = r.url"),
    ),
    "microblog-a": (
        _j("microblog_a_user_tweets", "user_id", "microblog_a_profiles", "id"),
        _j("microblog_a_user_tweets", "user_screen_name", "microblog_a_profiles", "screen_name"),
        _j("microblog_a_tweet_details", "id", "microblog_a_user_tweets", "id"),
        _j("microblog_a_tweet_details", "user_id", "microblog_a_profiles", "id"),
        Join("microblog_a_tweet_details", "microblog_a_user_tweets", "l.id = r.id AND l.user_id = r.user_id"),
    ),
    "microblog-b": (
        _j("microblog_b_posts", "author_did", "microblog_b_profiles", "did"),
        _j("microblog_b_posts", "author_handle", "microblog_b_profiles", "handle"),
        _j("microblog_b_replies", "post_url", "microblog_b_posts", "uri"),
        _j("microblog_b_replies", "root_uri", "microblog_b_posts", "uri"),
        Join(
            "microblog_b_replies",
            THREAD_URIS,
            "l.parent_uri = r.uri",
            ("microblog_b_replies.parent_uri", "microblog_b_posts.uri"),
        ),
    ),
    "network-a": (
        _j("network_a_profile_posts", "author_id", "network_a_profiles", "id"),
        _j("network_a_reels", "author_id", "network_a_profiles", "id"),
        _j("network_a_post_comments", "post_url", "network_a_profile_posts", "url"),
    ),
    "photo-app": (
        _j("photo_app_user_posts", "owner_id", "photo_app_profiles", "id"),
        _j("photo_app_user_posts", "owner_username", "photo_app_profiles", "username"),
        _j("photo_app_profile_posts", "owner_id", "photo_app_profiles", "id"),
        _j("photo_app_highlights", "owner_id", "photo_app_profiles", "id"),
        _j("photo_app_post_comments", "post_url", "photo_app_user_posts", "url"),
        _j("photo_app_highlight_items", "highlight_id", "photo_app_highlights", "id"),
        Join("photo_app_highlight_details", "photo_app_highlights", "l.id = 'highlight:' || r.id"),
    ),
    "pinboard": (
        _j("pinboard_board_pins", "board_id", "pinboard_boards", "id"),
        _j("pinboard_board_pins", "board_url", "pinboard_boards", "url"),
        _j("pinboard_pin_details", "id", "pinboard_pins", "id"),
        _j("pinboard_pin_details", "pin_url", "pinboard_pins", "url"),
    ),
    "search-engine": (
        _j("search_engine_ads", "company_domain", "search_engine_websites", "domain"),
        _j("search_engine_ad_details", "creative_id", "search_engine_ads", "creative_id"),
        _j("search_engine_ad_details", "ad_url", "search_engine_ads", "ad_url"),
    ),
    "short-video": (
        _j("short_video_videos", "author_uid", "short_video_profiles", "id"),
        _j("short_video_videos", "author_unique_id", "short_video_profiles", "handle"),
        _j("short_video_comments", "video_id", "short_video_videos", "aweme_id"),
        _j("short_video_comments", "video_url", "short_video_videos", "url"),
    ),
    "streaming": (
        _j("streaming_videos", "owner_id", "streaming_profiles", "id"),
        _j("streaming_videos", "owner_login", "streaming_profiles", "handle"),
        _j("streaming_featured_clips", "broadcaster_id", "streaming_profiles", "id"),
    ),
    "video-platform": (
        _j("video_platform_channel_playlists", "channel_id", "video_platform_channel_details", "id"),
        Join(
            "video_platform_channel_playlists",
            "video_platform_channel_videos",
            "l.channel_handle = r.channel_handle",
        ),
        _j("video_platform_video_comments", "video_url", "video_platform_channel_videos", "url"),
        _j("video_platform_playlist_details", "playlist_id", "video_platform_channel_playlists", "id"),
        _j("video_platform_playlist_videos", "playlist_id", "video_platform_channel_playlists", "id"),
    ),
}
"""Per platform, the joins an analyst writes from the comments after the example job. Left out, as the sandbox
cannot know them (docs/decisions.md, Sandbox): a detail asked for by an id alone (a playlist's owner, a
highlight's items' owner), a listing's record that another endpoint lists too (a streamer's recent broadcasts
among its videos), ads to the advertisers a search found (the service links a domain to no advertiser)."""


def _comment(db: Path, column: str) -> str:
    table, name = column.split(".")
    sql = "SELECT comment FROM duckdb_columns() WHERE table_name = ? AND column_name = ?"
    return str(scalar(db, sql, [table, name]))


@pytest.mark.parametrize("platform", sorted(JOBS))
def test_a_platform_jobs_tables_join_on_the_columns_their_comments_name(
    landed: Callable[[str], Landed], platform: str
) -> None:
    """Each join of `JOINS` is said by the comment of one of its columns (`Joins forum_subreddits.id`), and
    every row of its left table finds a row of its right one, as the service's ids do."""
    job = landed(platform)
    assert job.result.exit_code == 0, job.result.output
    for join in JOINS[platform]:
        if join.said is not None:
            left, right = join.said
            comments = _comment(job.db, left) + _comment(job.db, right)
            assert f"`{right}`" in comments or f"`{left}`" in comments, (join, comments)
        left_rows = join.left if join.left.startswith("(") else f"{join.left}"
        every = scalar(job.db, f"SELECT count(*) FROM {left_rows} AS l")
        found = scalar(
            job.db,
            f"SELECT count(*) FROM {left_rows} AS l WHERE EXISTS (SELECT 1 FROM {join.right} AS r WHERE {join.on})",
        )
        assert every and found == every, (
            f"{platform}: {join.left} JOIN {join.right} ON {join.on}: {found} of {every}"
        )


def test_the_forum_jobs_comments_are_their_own_records_and_name_their_posts(
    landed: Callable[[str], Landed],
) -> None:
    """A forum comment's `url` is its own (not its post's, which the request asked with), its fullname is
    `t1_` and its id, and the thread holds comments on the post (`parent_id` a post's `t3_` fullname) and
    replies (a comment's): as the service's comments do."""
    db = landed("forum").db
    posts = scalar(db, "SELECT count(*) FROM forum_subreddit_posts")
    assert posts and scalar(db, "SELECT count(*) FROM forum_post_details") == posts
    comments = scalar(db, "SELECT count(DISTINCT url) FROM forum_post_comments")
    assert comments == scalar(db, "SELECT count(*) FROM forum_post_comments") and comments > posts
    assert not scalar(db, "SELECT count(*) FROM forum_post_comments WHERE url = post_url")
    assert not scalar(db, "SELECT count(*) FROM forum_post_comments WHERE name <> 't1_' || id")
    on_post = scalar(db, "SELECT count(*) FROM forum_post_comments WHERE parent_id LIKE 't3_%'")
    assert (
        0
        < on_post
        < scalar(db, "SELECT count(*) FROM forum_post_comments WHERE parent_id LIKE 't1_%'") + on_post
    )


def test_the_forum_jobs_comments_hold_their_documented_depth_and_flags(
    landed: Callable[[str], Landed],
) -> None:
    """`depth` is "0: a comment on the post itself", a reply one deeper than the comment it answers;
    `controversiality` is "1 when the votes on the comment are split, else 0" (the sandbox had drawn any count
    for both)."""
    db = landed("forum").db
    on_post = rows(db, "SELECT DISTINCT depth FROM forum_post_comments WHERE parent_id LIKE 't3_%'")
    assert on_post == [(0,)], on_post
    replies = rows(
        db,
        "SELECT count(*), count(*) FILTER (WHERE r.depth = c.depth + 1) "
        "FROM forum_post_comments r JOIN forum_post_comments c ON r.parent_id = c.name",
    )[0]
    assert replies[0] and replies[0] == replies[1], replies
    flags = {v for (v,) in rows(db, "SELECT DISTINCT controversiality FROM forum_post_comments")}
    assert flags == {0, 1}, flags
