"""The interface's chains, run end to end: `configs/examples/video-chains.yaml` on the embedded sandbox
(`service.base_url: sandbox`). Each chain lands rows in each of its tables, and each child query was asked with its parent's values:
video search -> each video's record (`url`), a video's comments -> their replies (`repliesContinuationToken`),
advertiser search -> each company's ads (`advertiser_id`)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from tests.declared_helpers import ROOT
from tests.endpoints import COMMENT_REPLIES
from tests.flow_helpers import rows, run_flow

SPEC = ROOT / "configs" / "examples" / "video-chains.yaml"


def _asked(db: Path, endpoint: str, param: str) -> set[str]:
    """The values of `param` the first pages of `endpoint`'s queries were asked with."""
    sql = (
        "SELECT DISTINCT json_extract_string(params, '$.' || ?) FROM requests "
        "WHERE endpoint = ? AND page = (SELECT min(page) FROM requests)"
    )
    return {value for (value,) in rows(db, sql, [param, endpoint])}


def _column(db: Path, table: str, column: str, query_id: str | None = None) -> set[str]:
    where = "" if query_id is None else " WHERE _query_id = ?"
    return {
        v
        for (v,) in rows(
            db, f'SELECT DISTINCT "{column}" FROM "{table}"{where}', [query_id] if query_id else []
        )
    }


def test_the_example_chains_land_every_table_with_the_parents_values(
    prefect_harness: None, tmp_path: Path
) -> None:
    output = tmp_path / "out"
    summary = run_flow(SPEC, output=output)
    assert summary.status == "complete" and summary.loaded is True, summary
    db = output / "harvest.duckdb"
    counts = {
        table: rows(db, f'SELECT count(*) FROM "{table}"')[0][0]
        for table in (
            "video_platform_videos", "video_platform_video_details", "video_platform_video_comments",
            "video_platform_comments", "search_engine_advertisers", "search_engine_ads",
        )
    }  # fmt: skip
    assert all(counts.values()), counts
    # video search -> each video's record: one record per video url, which the record carries
    urls = _column(db, "video_platform_videos", "url", "videos")
    assert (
        _asked(db, "/v1/video-platform/video", "url")
        == urls
        == _column(db, "video_platform_video_details", "url")
    )
    assert counts["video_platform_video_details"] == len(urls)
    # ... about the video its URL names: the documented join on the video's id finds each, and the record names
    # the channel the search result named
    joined_on_id = rows(
        db,
        "SELECT count(*), count(*) FILTER (WHERE d.channel_id = v.channel_id AND d.id <> d.channel_id) "
        "FROM video_platform_videos v JOIN video_platform_video_details d ON d.id = v.id AND d.url = v.url",
    )[0]
    assert joined_on_id == (len(urls), len(urls)), joined_on_id
    # a video's comments -> their replies, one thread per comment's token
    tokens = _column(db, "video_platform_video_comments", "replies_token")
    # each comment is on the video itself (`reply_level` "0: a comment on the video"), by authors of their own
    assert _column(db, "video_platform_video_comments", "reply_level") == {0}
    authors = rows(
        db, "SELECT count(*), count(DISTINCT author_channel_id) FROM video_platform_video_comments"
    )
    assert authors[0][0] == authors[0][1] > 1, authors
    assert tokens and _asked(db, COMMENT_REPLIES, "continuationToken") == tokens
    # each reply joins the comment it answers, a thread's later pages (asked with the next page's token) too
    joined = rows(
        db,
        "SELECT count(*), count(c.id), count(DISTINCT c.id) "
        "FROM video_platform_comments r LEFT JOIN video_platform_video_comments c "
        "ON r.comment_replies_token = c.replies_token",
    )[0]
    later = rows(db, "SELECT count(*) FROM requests WHERE endpoint = ? AND page > 0", [COMMENT_REPLIES])[0][0]
    assert joined == (counts["video_platform_comments"], counts["video_platform_comments"], len(tokens))
    assert later, "no thread had a second page: the join is not checked on one"
    # advertiser search -> each company's ads, every ad its advertiser's
    advertisers = _column(db, "search_engine_advertisers", "advertiser_id")
    assert _asked(db, "/v1/search-engine/company/ads", "advertiser_id") == advertisers
    assert _column(db, "search_engine_ads", "advertiser_id") == advertisers
    assert 0 < summary.credits_spent <= 300
    # a child table: each video's "watch next" list as rows, typed, joined on the record's key,
    # the items of its JSON at their positions
    watch_next = rows(
        db,
        "SELECT d.id, w.position, w.id, w.title, w.view_count, w.created_at "
        "FROM video_platform_video_details d JOIN video_platform_video_watch_next w "
        "ON w.parent_id = d.id ORDER BY ALL",
    )
    listed = sorted(
        (video, n, item["id"], item["title"], item["viewCountInt"], item["publishDate"])
        for video, items in rows(db, "SELECT id, watch_next FROM video_platform_video_details")
        for n, item in enumerate(json.loads(items or "[]"))
    )
    assert watch_next and [row[:5] for row in watch_next] == [row[:5] for row in listed]
    assert {(type(row[4]), type(row[5])) for row in watch_next} == {(int, datetime)}
