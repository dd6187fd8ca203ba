"""First-page shapes of every endpoint, over HTTP, against docs/service-shapes.md: the envelope, the record
locations, every record's field names and their types, as the service's published answers name them
(`tests/test_sandbox_published_shapes.py` holds them against the answers themselves)."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.endpoints import (
    ADVERTISERS,
    BALANCE,
    CLIP,
    COMMENT_REPLIES,
    COMMUNITY_POST,
    CREATIVE,
    EMBED,
    FEED,
    FORUM,
    GROUP,
    OLD_BALANCE,
    PHOTOS,
    PINS,
    POST,
    PROFILE,
    REELS,
    SHOP,
    TWEETS,
    VIDEO_SEARCH,
)
from tests.fixtures_sandbox import records_of

ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")

# kind -> exact top-level field names of its records
FIELDS: dict[str, set[str]] = {
    "materials": {
        "material_id", "type", "title", "language", "style_tags", "cta_type_tags", "advertiser", "thumbnail_url",
        "duration_seconds", "created_at", "relevance",
    },
    "material_details": {
        "material_id", "type", "title", "structured_fields", "structured_tags", "labels", "related_context",
        "script", "cta", "latest_ad_context",
    },
    "clips": {
        "id", "slug", "url", "embedURL", "title", "viewCount", "language", "durationSeconds", "createdAt", "game",
        "broadcaster", "thumbnailURL", "assets", "videoQualities", "videoURL",
    },
    "other_clips": {
        "id", "slug", "url", "embedURL", "title", "viewCount", "language", "durationSeconds", "createdAt", "game",
        "broadcaster", "thumbnailURL",
    },
    "mb_posts": {
        "uri", "cid", "record", "author", "embed", "replyCount", "repostCount", "likeCount", "quoteCount", "indexedAt",
        "labels",
    },
    "advertisers": {"name", "advertiser_id", "region", "number_of_ads_estimate"},
    "websites": {"domain"},
    "reels_full": {
        "id", "code", "url", "taken_at", "caption", "play_count", "like_count", "comment_count", "image_versions2",
        "video_versions", "owner",
    },
    "reels_trim": {
        "id", "code", "url", "taken_at", "caption", "play_count", "like_count", "comment_count", "image_versions2",
        "owner",
    },
    "pins": {"id", "url", "title", "description", "created_at", "images", "link", "domain", "board", "pinner"},
    "videos": {
        "id", "url", "title", "thumbnail", "channel", "viewCountText", "viewCountInt", "publishedTime",
        "publishedTimeText", "lengthText", "lengthSeconds", "badges",
    },
    "channels": {"id", "title", "url", "subscriberCount"},
    "playlists": {"id", "title", "url", "videoCount"},
    "lives": {"id", "title", "url", "watching"},
    "shelves": {"type", "title", "items"},
    "reply_comments": {
        "id", "content", "publishedTime", "publishedTimeText", "replyLevel", "author", "engagement",
    },
    "aweme": {"aweme_id", "desc", "create_time", "url", "statistics", "video", "author", "share_url", "region",
              "desc_language", "content_type", "is_ad", "is_top", "music", "text_extra", "banners",
              "added_sound_music_info", "original_client_text"},
}  # fmt: skip


def get(client: httpx.Client, path: str, **params: Any) -> Any:
    response = client.get(path, params=params)
    assert response.status_code == 200, response.text[:300]
    assert response.headers["content-type"].startswith("application/json")
    return response.json()


def check_envelope(body: dict[str, Any]) -> None:
    assert body["success"] is True
    assert isinstance(body["credits_remaining"], int)
    assert body["credits_charged"] == 1


def check_records(
    records: list[dict[str, Any]],
    fields: set[str],
    min_count: int = 1,
    optional: frozenset[str] = frozenset(),
) -> None:
    assert len(records) >= min_count
    for rec in records:
        assert set(rec) - optional == fields, set(rec) ^ fields


def test_creative_search_and_detail(sandbox_client: httpx.Client) -> None:
    body = get(sandbox_client, CREATIVE, query="sneakers")
    assert set(body) == {"success", "data", "metadata", "credits_remaining", "credits_charged"}
    check_envelope(body)
    check_records(body["data"], FIELDS["materials"])
    assert set(body["metadata"]) == {"cursor", "total"}
    first = body["data"][0]
    assert first["type"] in ("video", "image", "carousel")
    assert first["material_id"].startswith(first["type"] + ":")
    assert ISO.match(first["created_at"])
    assert isinstance(first["relevance"], float)
    detail = get(sandbox_client, f"/v1/creative/materials/{first['material_id']}")
    check_envelope(detail)
    assert set(detail) == {"success", "data", "metadata", "credits_remaining", "credits_charged"}
    data = detail["data"]
    check_records([data], FIELDS["material_details"])
    assert (data["material_id"], data["type"], data["title"]) == (
        first["material_id"],
        first["type"],
        first["title"],
    )
    assert set(data["cta"]) == {"type", "text", "url"}
    assert set(data["latest_ad_context"]) == {"advertiser", "first_seen", "last_seen", "platforms"}
    assert isinstance(data["script"], str) and isinstance(data["labels"], list)


DECLARED_FIRST_PAGES = [
    (PHOTOS, {"url": "https://network-a.example/acme"}, {"photos": "photo_id"}),
    (GROUP, {"url": "https://network-a.example/groups/hikers"}, {"posts": "id"}),
    (FORUM, {"subreddit": "python", "query": "asyncio"}, {"posts": "id", "comments": "id", "media": "id"}),
    (TWEETS, {"url": "https://mba.example/i/communities/42"}, {"tweets": "id"}),
    (SHOP, {"url": "https://shop.example/acme"}, {"products": "product_id"}),
]


@pytest.mark.parametrize(
    ("path", "params", "lists"), DECLARED_FIRST_PAGES, ids=[p for p, _, _ in DECLARED_FIRST_PAGES]
)
def test_declared_lists_hold_keyed_records(
    sandbox_client: httpx.Client, path: str, params: dict[str, str], lists: dict[str, str]
) -> None:
    """Endpoints served from their declarations: each list at its declared place, every record keyed, once."""
    body = get(sandbox_client, path, **params)
    check_envelope(body)
    for place, key in lists.items():
        keys = [record[key] for record in body[place]]
        assert all(isinstance(k, str) and k for k in keys) and len(set(keys)) == len(keys)
    assert body[next(iter(lists))]


def test_declared_objects_are_the_answer_itself(sandbox_client: httpx.Client) -> None:
    """A community post is the answer's own fields, the embed its `html`; a shop beside its products, the
    page saying whether more follow."""
    post = get(sandbox_client, COMMUNITY_POST, url="https://video-platform.example/post/U")
    check_envelope(post)
    assert isinstance(post["id"], str) and set(post["channel"]) >= {"id", "title", "url", "handle"}
    embed = get(sandbox_client, EMBED, handle="natgeo")
    assert set(embed) == {"success", "html", "credits_remaining", "credits_charged"}
    shop = get(sandbox_client, SHOP, url="https://shop.example/acme", region="GB")
    assert isinstance(shop["has_more"], bool) and isinstance(shop["shopInfo"]["seller_id"], str)


def test_clip_is_a_bare_array(sandbox_client: httpx.Client) -> None:
    body = get(sandbox_client, CLIP, url="https://clips.streaming.example/SillyClip?tt=1")
    assert isinstance(body, list) and len(body) == 3
    clip = body[0]["data"]["clip"]
    check_records([clip], FIELDS["clips"])
    others = body[1]["data"]["user"]["clips"]  # a GraphQL connection
    assert set(others) == {"pageInfo", "edges"}
    check_records([edge["node"] for edge in others["edges"]], FIELDS["other_clips"], min_count=0)
    assert set(body[2]["data"]["user"]) == {"id", "login", "displayName", "followers"}
    assert set(body[2]["data"]["user"]["followers"]) == {"totalCount", "__typename"}
    assert clip["slug"] == "SillyClip" and clip["url"] == "https://clips.streaming.example/SillyClip"
    assert "sig=" in clip["videoURL"]
    # as the published clip: each quality in full in its asset, only its URL at the top
    qualities = clip["assets"][0]["videoQualities"]
    assert {q["sourceURL"] for q in qualities} == {q["sourceURL"] for q in clip["videoQualities"]}
    for quality in qualities:
        assert set(quality) == {"quality", "frameRate", "sourceURL", "__typename"}
    for quality in clip["videoQualities"]:
        assert set(quality) == {"sourceURL", "__typename"}


def test_microblog_b_post_and_feed(sandbox_client: httpx.Client) -> None:
    body = get(sandbox_client, POST, url="https://mb.example/profile/alice.mb.example/post/3k2")
    check_envelope(body)
    check_records([body["post"]], FIELDS["mb_posts"])
    views = body["replies"]  # thread views, the replies to a reply nested in its view
    check_records(views, {"$type", "post", "replies", "threadContext"}, min_count=1)
    check_records([v["post"] for v in views], FIELDS["mb_posts"])
    assert {v["post"]["record"]["reply"]["parent"]["uri"] for v in views} == {body["post"]["uri"]}
    assert body["post"]["author"]["handle"] == "alice.mb.example"
    assert set(body["post"]["record"]) == {"text", "createdAt", "langs", "facets"}
    feed = get(sandbox_client, FEED, handle="alice.mb.example")
    check_envelope(feed)
    check_records(feed["feed"], FIELDS["mb_posts"])
    assert set(feed["feed"][0]["author"]) == {
        "did",
        "handle",
        "displayName",
        "avatar",
        "labels",
        "verification",
    }
    assert ISO.match(feed["feed"][0]["indexedAt"])


def test_advertisers(sandbox_client: httpx.Client) -> None:
    body = get(sandbox_client, ADVERTISERS, query="acme")
    check_envelope(body)
    check_records(body["advertisers"], FIELDS["advertisers"])
    check_records(body["websites"], FIELDS["websites"], min_count=0)
    assert isinstance(body["advertisers"][0]["number_of_ads_estimate"], int)


def test_reels_full_and_trim(sandbox_client: httpx.Client) -> None:
    full = get(sandbox_client, REELS, handle="natgeo")
    check_envelope(full)
    check_records([i["media"] for i in full["items"]], FIELDS["reels_full"])
    assert set(full["paging_info"]) == {"max_id", "more_available"}
    trim = get(sandbox_client, REELS, handle="natgeo", trim="true")
    check_records(trim["items"], FIELDS["reels_trim"])
    assert "max_id" in trim and "paging_info" not in trim
    assert [r["id"] for r in trim["items"]] == [i["media"]["id"] for i in full["items"]]


def test_pins_full_and_trim(sandbox_client: httpx.Client) -> None:
    full = get(sandbox_client, PINS, query="kitchen")
    check_envelope(full)
    check_records(full["pins"], FIELDS["pins"])
    assert set(full["pins"][0]["images"]["orig"]) == {"url", "width", "height"}
    trim = get(sandbox_client, PINS, query="kitchen", trim="true")
    check_records(trim["pins"], FIELDS["pins"] - {"title", "link", "domain", "board"})


def test_video_search(sandbox_client: httpx.Client) -> None:
    body = get(sandbox_client, VIDEO_SEARCH, query="guitar")
    check_envelope(body)
    check_records(body["videos"], FIELDS["videos"])
    check_records(body["shorts"], FIELDS["videos"])
    check_records(body["channels"], FIELDS["channels"])
    check_records(body["playlists"], FIELDS["playlists"])
    check_records(body["lives"], FIELDS["lives"])
    check_records(body["shelves"], FIELDS["shelves"])
    check_records(body["shelves"][0]["items"], FIELDS["videos"] | {"type"})  # "type": as published
    extras = get(sandbox_client, VIDEO_SEARCH, query="guitar", includeExtras="true")
    check_records(extras["videos"], FIELDS["videos"] | {"likeCountInt", "commentCountInt", "description"})
    assert [v["id"] for v in extras["videos"]] == [v["id"] for v in body["videos"]]


def test_video_search_shorts_filter(sandbox_client: httpx.Client) -> None:
    shorts = get(sandbox_client, VIDEO_SEARCH, query="guitar", filter="shorts")
    assert shorts["shorts"] and not shorts["videos"]
    ignored = get(sandbox_client, VIDEO_SEARCH, query="guitar", filter="shorts", sortBy="popular")
    plain = get(sandbox_client, VIDEO_SEARCH, query="guitar", sortBy="popular")
    assert ignored["videos"] == plain["videos"] and ignored["videos"]


def test_comment_replies(sandbox_client: httpx.Client) -> None:
    body = get(sandbox_client, COMMENT_REPLIES, continuationToken="Eg0SC2RRdzR3")
    check_envelope(body)
    check_records(body["comments"], FIELDS["reply_comments"])
    assert set(body["comments"][0]["author"]) == {
        "name", "channelId", "isVerified", "isCreator", "avatarUrl", "channelUrl",
    }  # fmt: skip
    assert set(body["comments"][0]["engagement"]) == {"likes", "replies"}


def test_profile_videos_full_and_trim(sandbox_client: httpx.Client) -> None:
    full = get(sandbox_client, PROFILE, handle="chef")
    check_envelope(full)
    check_records(full["aweme_list"], FIELDS["aweme"], optional=frozenset({"shop_product_url"}))
    assert full["has_more"] in (0, 1) and isinstance(full["max_cursor"], int)
    video = full["aweme_list"][0]
    assert set(video["statistics"]) == {
        "play_count",
        "digg_count",
        "comment_count",
        "share_count",
        "collect_count",
        "download_count",
    }
    assert set(video["video"]) == {
        "duration", "cover", "play_addr", "width", "height", "bit_rate", "big_thumbs", "cla_info",
    }  # fmt: skip
    assert isinstance(video["create_time"], int)
    trim = get(sandbox_client, PROFILE, handle="chef", trim="true")
    assert "has_more" not in trim
    check_records(trim["aweme_list"], FIELDS["aweme"], optional=frozenset({"shop_product_url"}))
    assert (
        trim["aweme_list"] == full["aweme_list"]
    )  # trimming leaves out `has_more` only, as the service does


def test_credit_balance(sandbox_client: httpx.Client) -> None:
    """At the service's path and at the one it answered at before it moved the balance, the same answer."""
    body = get(sandbox_client, BALANCE)
    assert set(body) == {"creditCount"} and isinstance(body["creditCount"], int)
    assert get(sandbox_client, OLD_BALANCE) == body


@pytest.mark.parametrize(
    ("path", "params"),
    [
        (PINS, {"query": "tents"}),
        (CLIP, {"url": "https://clips.streaming.example/Clip1"}),
        (PROFILE, {"handle": "chef", "trim": "true"}),
        (CREATIVE, {"query": "soda", "order": "latest"}),
    ],
)
def test_same_request_same_body(sandbox_client: httpx.Client, path: str, params: dict[str, str]) -> None:
    """Byte-identical answers to the same request, but for the balance."""
    first = sandbox_client.get(path, params=params)
    second = sandbox_client.get(path, params=params)
    strip = re.compile(rb'"credits_remaining":\d+')
    assert strip.sub(b"", first.content) == strip.sub(b"", second.content)
    assert records_of(path, first.json(), params) == records_of(path, second.json(), params)
