"""The catalog's columns on the service's published answers, served over HTTP to a real `harvest run`: what
tells two records apart and what a request asked for land, so a user's joins and counts hold.

A video search repeats a shelf's generic title ("Shorts", as the published answer's) from page to page: keyed
by its title, the later page's shelf replaced the earlier one and its items were lost, silently. A channel's
details asked by handle did not say the handle, so they did not join the channel's videos asked by it. A reply
in the published (unwrapped) feed names what it replies to in its record only, and `reply_parent_uri` read the
wrapper's reply context alone. A subreddit's or a group's details did not say the name, URL or id asked: the
answer spells the name its own way (`AbsoluteUnits` asked as `absoluteunits`) and gives the group's numeric URL
for its vanity one, so the details joined nothing of the list the job asked for."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

import harvest.flows.collect  # noqa: F401  (Prefect binds its log handlers on first import: not inside CliRunner)
from harvest.flows.cli import app
from tests.endpoints import CHANNEL_VIDEOS, FEED, VIDEO_SEARCH
from tests.flow_helpers import job_spec, rows, write_spec
from tests.published_samples import sample, sample_service

runner = CliRunner()
CHANNEL = "/v1/video-platform/channel"
SUBREDDIT_DETAILS, GROUP_DETAILS = "/v1/forum/subreddit/details", "/v1/network-a/group"


def _run(tmp_path: Path, url: str, queries: list[dict[str, Any]]) -> Path:
    spec = write_spec(tmp_path, job_spec(url, tmp_path / "out", queries, name="asked", credits=20))
    result = runner.invoke(app, ["run", str(spec)])
    assert result.exit_code == 0, result.output
    return tmp_path / "out" / "harvest.duckdb"


def _search_pages() -> dict[str | None, Any]:
    """The published search answer as two pages, each with a "Shorts" shelf holding a short of its own."""
    first, second = sample("_v1_video-platform_search.json"), sample("_v1_video-platform_search.json")
    first["continuationToken"] = "PAGE2"
    second.pop("continuationToken", None)
    short = second["shelves"][0]["items"][0]
    short.update(id="SECONDshort1", url="https://www.youtube.com/watch?v=SECONDshort1", title="second short")
    for listed in ("videos", "shorts"):
        for item in second[listed]:
            item["id"] += "_p2"
    return {None: first, "PAGE2": second}


def test_shelves_of_one_title_on_two_pages_keep_each_its_items(
    prefect_harness: None, api_key: str, tmp_path: Path
) -> None:
    pages = _search_pages()
    assert [s["title"] for p in pages.values() for s in p["shelves"]] == ["Shorts", "Shorts"]
    sent = sorted(i["id"] for p in pages.values() for s in p["shelves"] for i in s["items"])
    with sample_service({VIDEO_SEARCH: lambda params: pages[params.get("continuationToken")]}) as (url, _):
        query = {"id": "search", "endpoint": VIDEO_SEARCH, "params": {"query": "running"}}
        db = _run(tmp_path, url, [query])
        assert sorted(i for (i,) in rows(db, "SELECT id FROM video_platform_shelf_items")) == sent
        landed = "SELECT parent_title, parent_first_item_id, id FROM video_platform_shelf_items ORDER BY id"
        assert rows(db, landed) == [("Shorts", i, i) for i in sent]
        assert rows(db, "SELECT items_dropped FROM runs") == [(0,)]
        # the next night's same answers are the same shelves: no row twice
        _run(tmp_path, url, [query])
    assert sorted(i for (i,) in rows(db, "SELECT id FROM video_platform_shelf_items")) == sent
    assert rows(db, "SELECT count(*) FROM video_platform_shelves") == [(2,)]


def test_a_channel_s_details_and_videos_asked_by_one_handle_join(
    prefect_harness: None, api_key: str, tmp_path: Path
) -> None:
    details, videos = (
        sample("_v1_video-platform_channel.json"),
        sample("_v1_video-platform_channel-videos.json"),
    )
    videos.pop("continuationToken", None)
    routes = {CHANNEL: lambda params: details, CHANNEL_VIDEOS: lambda params: videos}
    with sample_service(routes) as (url, _):
        db = _run(tmp_path, url, [
            {"id": "channel", "endpoint": CHANNEL, "params": {"handle": "ThePatMcAfeeShow"}},
            {"id": "videos", "endpoint": CHANNEL_VIDEOS, "params": {"handle": "ThePatMcAfeeShow"}, "max_pages": 1},
        ])  # fmt: skip
    assert rows(db, "SELECT id, channel_handle FROM video_platform_channel_details") == [
        (details["channelId"], "ThePatMcAfeeShow")
    ]
    joined = rows(db, "SELECT count(*) FROM video_platform_channel_videos v "
                      "JOIN video_platform_channel_details c USING (channel_handle)")  # fmt: skip
    assert joined == [(len(videos["videos"]),)] and videos["videos"]


def test_a_reply_in_the_published_feed_says_what_it_replies_to(
    prefect_harness: None, api_key: str, tmp_path: Path
) -> None:
    feed = sample("_v1_microblog-b_user_posts.json")
    first = feed["feed"][0]
    reply = copy.deepcopy(first)
    reply["uri"] = first["uri"] + "reply"
    root = {"uri": "at://did:plc:root/app.bsky.feed.post/root", "cid": "bafyroot"}
    reply["record"]["reply"] = {"parent": {"uri": first["uri"], "cid": first["cid"]}, "root": root}
    feed["feed"].append(reply)
    feed.pop("cursor", None)
    with sample_service({FEED: lambda params: feed}) as (url, _):
        db = _run(tmp_path, url, [{"id": "posts", "endpoint": FEED, "params": {"handle": "espn.com"}}])
    landed = dict(rows(db, "SELECT uri, (reply_parent_uri, reply_root_uri) FROM microblog_b_posts"))
    assert landed[reply["uri"]] == (first["uri"], root["uri"])
    assert {landed[p["uri"]] for p in feed["feed"][:-1]} == {(None, None)}
    assert rows(db, "SELECT new_fields FROM runs") == [("[]",)]


def _answer_per_request(published: dict[str, Any], key: str, values: dict[str, str]) -> Any:
    """The published answer, its `key` made `values[asked]` for the request asking `asked` (as a value of any
    parameter): two requests are two records, each the answer to what it asked."""

    def answer(params: Any) -> Any:
        (asked,) = (v for v in params.values() if v in values)
        return {**published, key: values[asked]}

    return answer


def test_a_subreddit_s_and_a_group_s_details_say_what_the_job_asked(
    prefect_harness: None, api_key: str, tmp_path: Path
) -> None:
    subreddit, group = sample("_v1_forum_subreddit_details.json"), sample("_v1_network-a_group.json")
    name, subreddit_url = subreddit["display_name"].lower(), "https://www.reddit.com/r/AbsoluteUnits/"
    group_url, group_id = "https://www.facebook.com/groups/pythonprogramming/", "1234567890"
    routes = {
        SUBREDDIT_DETAILS: _answer_per_request(subreddit, "subreddit_id", {name: "t5_byname", subreddit_url: "t5_byurl"}),
        GROUP_DETAILS: _answer_per_request(group, "id", {group_url: group["id"], group_id: group_id}),
    }  # fmt: skip
    with sample_service(routes) as (url, _):
        db = _run(tmp_path, url, [
            {"id": "by_name", "endpoint": SUBREDDIT_DETAILS, "params": {"subreddit": name}},
            {"id": "by_url", "endpoint": SUBREDDIT_DETAILS, "params": {"url": subreddit_url}},
            {"id": "group_by_url", "endpoint": GROUP_DETAILS, "params": {"url": group_url}},
            {"id": "group_by_id", "endpoint": GROUP_DETAILS, "params": {"group_id": group_id}},
        ])  # fmt: skip
    assert rows(db, "SELECT id, name, subreddit_name, subreddit_url FROM forum_subreddits ORDER BY id") == [
        ("t5_byname", subreddit["display_name"], name, None),
        ("t5_byurl", subreddit["display_name"], None, subreddit_url),
    ]
    assert rows(db, "SELECT id, url, group_url, group_id FROM network_a_groups ORDER BY id") == [
        (group_id, group["url"], None, group_id),
        (group["id"], group["url"], group_url, None),
    ]
