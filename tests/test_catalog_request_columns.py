"""The catalog's columns on the service's published answers, served over HTTP to a real `harvest run`: what
tells two records apart and what a request asked for land, so a user's joins and counts hold.

A video search repeats a shelf's generic title ("Shorts", as the published answer's) from page to page: keyed
by its title, the later page's shelf replaced the earlier one and its items were lost, silently. A channel's
details asked by handle did not say the handle, so they did not join the channel's videos asked by it. A reply
in the published (unwrapped) feed names what it replies to in its record only, and `reply_parent_uri` read the
wrapper's reply context alone. A subreddit's or a group's details did not say the name, URL or id asked: the
answer spells the name its own way (`AbsoluteUnits` asked as `absoluteunits`) and gives the group's numeric URL
for its vanity one, so the details joined nothing of the list the job asked for. So did a video's, a clip's, a
post's transcript, a community's, a shop's, a listing's, an event's and an ad's details asked by a URL or an id:
the answer gives the service's spelling of the URL (a share link made canonical) or no URL at all."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

import harvest.flows.collect  # noqa: F401  (Prefect binds its log handlers on first import: not inside CliRunner)
from harvest.flows.cli import app
from tests.endpoints import CHANNEL_VIDEOS, CLIP, FEED, SHOP, VIDEO_SEARCH
from tests.flow_helpers import job_spec, rows, write_spec
from tests.published_samples import sample, sample_service

runner = CliRunner()
CHANNEL = "/v1/video-platform/channel"
SUBREDDIT_DETAILS, GROUP_DETAILS = "/v1/forum/subreddit/details", "/v1/network-a/group"


def _run(tmp_path: Path, url: str, queries: list[dict[str, Any]], credits: int = 20) -> Path:
    spec = write_spec(tmp_path, job_spec(url, tmp_path / "out", queries, name="asked", credits=credits))
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


def _answer_per_request(published: dict[str, Any], key: str, values: dict[str, str], at: str = "") -> Any:
    """The published answer, its `key` (in its `at` object) made `values[asked]` for the request asking `asked`
    (as a value of any parameter): two requests are two records, each the answer to what it asked."""

    def answer(params: Any) -> Any:
        (asked,) = (v for v in params.values() if v in values)
        if at:
            return {**published, at: {**published[at], key: values[asked]}}
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


SHARED = "?utm_source=share&si=AbCd"
"""What a share link adds to a URL: the job's list holds it so, the answer's `url` does not."""
ASKED_BY_URL = [  # endpoint, published answer, table, the column keeping the asked URL, the answer's URL
    ("/v1/forum/post/transcript", "_v1_forum_post_transcript.json", "forum_post_transcripts", "post_url", "url"),
    ("/v1/microblog-a/community", "_v1_microblog-a_community.json", "microblog_a_communities", "community_url", None),
    ("/v1/short-video/video/transcript", "_v1_short-video_video_transcript.json", "short_video_transcripts", "video_url", "url"),
    (CLIP, "_v1_streaming_clip.json", "streaming_clips", "clip_url", "url"),
    ("/v1/video-platform/video", "_v1_video-platform_video.json", "video_platform_video_details", "video_url", "url"),
    ("/v1/video-platform/video/transcript", "_v1_video-platform_video_transcript.json", "video_platform_video_transcripts", "video_url", "url"),
    ("/v1/video-platform/video/sponsors", "_v1_video-platform_video_sponsors.json", "video_platform_sponsor_checks", "asked_video_url", "video_url"),
]  # fmt: skip


def test_details_asked_by_a_url_say_the_url_the_job_asked(
    prefect_harness: None, api_key: str, tmp_path: Path
) -> None:
    answers = {path: sample(name) for path, name, *_ in ASKED_BY_URL}
    shop, product = sample("_v1_short-video_shop_products.json"), sample("_v1_short-video_product.json")
    shop.pop("has_more"), shop.pop("cursor")
    answers |= {SHOP: shop, "/v1/short-video/product": product}
    asked = {path: f"https://example.com/asked{n}{SHARED}" for n, path in enumerate(answers)}
    routes = {path: (lambda params, body=body: body) for path, body in answers.items()}
    with sample_service(routes) as (url, _):
        db = _run(tmp_path, url, [
            {"id": f"q{n}", "endpoint": path, "params": {"url": asked[path]}} for n, path in enumerate(answers)
        ], credits=50)  # fmt: skip
    for path, _, table, column, theirs in ASKED_BY_URL:
        landed = rows(db, f"SELECT {column}, {theirs or 'NULL'} FROM {table}")
        assert landed == [(asked[path], landed[0][1])] and landed[0][1] != asked[path], table
    sponsors = rows(db, "SELECT count(*) FROM video_platform_video_sponsors s JOIN video_platform_sponsor_checks c "
                        "ON s.video_url = c.asked_video_url")  # fmt: skip
    assert sponsors == [(len(answers["/v1/video-platform/video/sponsors"]["suspectedSponsors"]),)] != [(0,)]
    assert sorted(rows(db, "SELECT id, asked_url FROM short_video_shops")) == sorted([
        (shop["shopInfo"]["seller_id"], asked[SHOP]),
        (product["shop_info"]["seller_id"], asked["/v1/short-video/product"]),
    ])  # fmt: skip


ASKED_BY_ID_OR_URL = [  # endpoint, published answer, table, (the answer's key, its object, the table's key), id and URL columns
    ("/v1/network-a/marketplace/item", "_v1_network-a_marketplace_item.json", "network_a_marketplace_items", ("id", "", "id"), "item_id", "item_url"),
    ("/v1/network-a/event/details", "_v1_network-a_event_details.json", "network_a_event_details", ("id", "", "id"), "event_id", "event_url"),
    ("/v1/network-a/adLibrary/ad", "_v1_network-a_adLibrary_ad.json", "network_a_ad_library_ads", ("adArchiveID", "", "id"), "ad_id", "ad_url"),
    ("/v1/network-a/adLibrary/ad/transcript", "_v1_network-a_adLibrary_ad_transcript.json", "network_a_ad_library_transcripts", ("ad_id", "data", "ad_id"), "asked_ad_id", "ad_url"),
]  # fmt: skip


def test_details_asked_by_an_id_or_a_url_say_which_the_job_asked(
    prefect_harness: None, api_key: str, tmp_path: Path
) -> None:
    routes, queries = {}, []
    for n, (path, name, _, (key, at, _), _, _) in enumerate(ASKED_BY_ID_OR_URL):
        by_id, by_url = f"10{n}", f"https://www.facebook.com/asked/{n}/{SHARED}"
        routes[path] = _answer_per_request(
            sample(name), key, {by_id: "answered_by_id", by_url: "answered_by_url"}, at
        )
        queries += [{"id": f"id{n}", "endpoint": path, "params": {"id": by_id}},
                    {"id": f"url{n}", "endpoint": path, "params": {"url": by_url}}]  # fmt: skip
    with sample_service(routes) as (url, _):
        db = _run(tmp_path, url, queries, credits=50)
    for n, (_, _, table, (_, _, own_key), id_column, url_column) in enumerate(ASKED_BY_ID_OR_URL):
        assert rows(db, f"SELECT {own_key}, {id_column}, {url_column} FROM {table} ORDER BY 1") == [
            ("answered_by_id", f"10{n}", None),
            ("answered_by_url", None, f"https://www.facebook.com/asked/{n}/{SHARED}"),
        ], table
