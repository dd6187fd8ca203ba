"""Paging every endpoint to its natural end over HTTP, with each cursor style, against `sandbox.expected`."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import httpx
import pytest

from harvest.sandbox.config import Quirks, SandboxConfig
from harvest.sandbox.expected import expected_pages, full_crawl
from harvest.sandbox.wire.serving import RunningSandbox
from tests.endpoints import (
    ADVERTISERS,
    CLIP,
    COMMENT_REPLIES,
    COMMUNITY_POST,
    CREATIVE,
    EMBED,
    FEED,
    FORUM,
    GROUP,
    PHOTOS,
    PINS,
    POST,
    PROFILE,
    REELS,
    SHOP,
    TWEETS,
    VIDEO_SEARCH,
)
from tests.fixtures_sandbox import http_crawl, records_of

CASES: list[tuple[str, dict[str, Any]]] = [
    (CREATIVE, {"query": "running shoes"}),
    (CREATIVE, {"query": "running shoes", "limit": "7", "order": "oldest"}),
    (PHOTOS, {"url": "https://network-a.example/acme"}),
    (GROUP, {"group_id": "1234567", "sort_by": "CHRONOLOGICAL"}),
    (FORUM, {"subreddit": "python", "query": "typing", "sort": "top"}),
    (CLIP, {"url": "https://clips.streaming.example/FastClip"}),
    (COMMUNITY_POST, {"url": "https://video-platform.example/post/Ugkx9"}),
    (POST, {"url": "https://mb.example/profile/bob.mb.example/post/3kx"}),
    (FEED, {"user_id": "did:plc:abc123"}),
    (TWEETS, {"url": "https://mba.example/i/communities/7"}),
    (ADVERTISERS, {"query": "globex"}),
    (EMBED, {"handle": "natgeo"}),
    (REELS, {"user_id": "173560420"}),
    (REELS, {"handle": "natgeo", "trim": "true"}),
    (PINS, {"query": "garden ideas"}),
    (PINS, {"query": "garden ideas", "trim": "true"}),
    (VIDEO_SEARCH, {"query": "lofi", "uploadDate": "this_week"}),
    (COMMENT_REPLIES, {"continuationToken": "Eg0SC2RRdzR3OVdnWGNR"}),
    (SHOP, {"url": "https://shop.example/acme", "region": "DE"}),
    (PROFILE, {"handle": "chef", "sort_by": "popular"}),
    (PROFILE, {"handle": "chef", "trim": "true"}),
]

SCALE: dict[str, Any] = {"pages": (2, 5), "page_size": 7, "creative_default_limit": 9}


@pytest.fixture(scope="module", params=["real", "idealised"])
def paging_sandbox(request: pytest.FixtureRequest) -> Any:
    from harvest.sandbox.wire.serving import running

    quirks = Quirks() if request.param == "real" else Quirks.none()
    with running(SandboxConfig(api_keys={"k": 10**6}, quirks=quirks, **SCALE)) as sb:
        yield sb


@pytest.mark.parametrize(
    ("path", "params"), CASES, ids=[f"{p}{'-trim' if 'trim' in q else ''}" for p, q in CASES]
)
def test_full_crawl_over_http_matches_expected(
    paging_sandbox: RunningSandbox, path: str, params: dict[str, Any]
) -> None:
    config = paging_sandbox.config
    with paging_sandbox.client() as client:
        bodies, collected = http_crawl(client, path, params)
    want = full_crawl(path, params, config)
    assert {k: v for k, v in collected.items() if v} == {k: v for k, v in want.items() if v}
    assert len(bodies) == expected_pages(path, params, config)
    assert any(want.values())


def test_paged_queries_really_page() -> None:
    """The scale above makes most paged queries span several pages, so cursors are exercised."""
    config = SandboxConfig(**SCALE)
    multi = [(p, q) for p, q in CASES if expected_pages(p, q, config) > 1]
    assert len(multi) >= 10


def test_group_posts_at_most_three_a_page(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    sb = sandbox_factory(page_size=50, pages=(3, 3))
    params = {"url": "https://network-a.example/groups/big"}
    with sb.client() as client:
        bodies, collected = http_crawl(client, GROUP, params)
    assert len(bodies) == expected_pages(GROUP, params, sb.config) >= 3
    assert all(len(b.get("posts", [])) <= 3 for b in bodies) and len(collected["network_a_group_posts"]) > 3
    assert [len(b["posts"]) for b in bodies[:2]] == [3, 3]
    assert collected["network_a_group_posts"] == full_crawl(GROUP, params, sb.config)["network_a_group_posts"]


def test_records_unique_across_pages_without_repeats(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    sb = sandbox_factory(pages=(4, 4), page_size=5, quirks=Quirks(repeat_items=False))
    params = {"query": "lamps"}
    with sb.client() as client:
        bodies, collected = http_crawl(client, PINS, params)
    ids = [p["id"] for b in bodies for p in b.get("pins", [])]
    assert len(ids) == len(set(ids)) == len(collected["pins"])
    assert len(bodies) == 5 and bodies[-1]["cursor"] == "-end-" and "pins" not in bodies[-1]  # the sentinel


def test_benchmark_scale_pages_through(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    """200 pages of 100 records, as a benchmark asks: every page full but maybe the last, all distinct."""
    sb = sandbox_factory(pages=(200, 200), page_size=100, quirks=Quirks.none(), api_keys={"k": 1000})
    params = {"handle": "bigcreator"}
    with sb.client() as client:
        bodies, collected = http_crawl(client, PROFILE, params)
    assert len(bodies) == 200
    assert all(len(b["aweme_list"]) == 100 for b in bodies[:-1])
    assert len(collected["videos"]) == 199 * 100 + len(bodies[-1]["aweme_list"])
    assert sb.balance("k") == 800


def test_cursor_styles(sandbox_client: Any) -> None:
    """Opaque strings, a timestamp string (microblog-b feed), an int of ms (short-video), a string max_id."""
    feed = sandbox_client.get(FEED, params={"handle": "many.mb.example"}).json()
    if feed["cursor"] is not None:
        assert datetime.fromisoformat(feed["cursor"].replace("Z", "+00:00"))
        assert feed["cursor"] == feed["feed"][-1]["indexedAt"]
    videos = sandbox_client.get(PROFILE, params={"handle": "chef"}).json()
    assert isinstance(videos["max_cursor"], int)
    if videos["max_cursor"]:
        assert videos["max_cursor"] == videos["aweme_list"][-1]["create_time"] * 1000
    reels = sandbox_client.get(REELS, params={"handle": "natgeo"}).json()
    assert reels["paging_info"]["max_id"] is None or isinstance(reels["paging_info"]["max_id"], str)


def test_feed_cursor_any_timestamp_returns_older_posts(
    sandbox_factory: Callable[..., RunningSandbox],
) -> None:
    sb = sandbox_factory(pages=(3, 3), page_size=4)
    params = {"handle": "clock.mb.example"}
    everything = full_crawl(FEED, params, sb.config)["posts"]
    # a moment strictly between posts 4 and 5 (newest first): the next page starts at post 5
    t4 = datetime.fromisoformat(everything[4]["indexedAt"].replace("Z", "+00:00")).timestamp()
    t5 = datetime.fromisoformat(everything[5]["indexedAt"].replace("Z", "+00:00")).timestamp()
    between = datetime.fromtimestamp((t4 + t5) / 2).astimezone().isoformat()
    with sb.client() as client:
        page = client.get(FEED, params={**params, "cursor": between}).json()
    assert [p["uri"] for p in page["feed"]] == [p["uri"] for p in everything[5:9]]


@pytest.mark.parametrize(
    ("path", "params", "cursor_param"),
    [
        (PINS, {"query": "a"}, "cursor"),
        (SHOP, {"url": "https://shop.example/a"}, "cursor"),
        (VIDEO_SEARCH, {"query": "a"}, "continuationToken"),
    ],
)
def test_cursor_of_another_query_is_refused(
    sandbox_factory: Callable[..., RunningSandbox], path: str, params: dict[str, str], cursor_param: str
) -> None:
    sb = sandbox_factory(pages=(3, 3))
    with sb.client() as client:
        first = client.get(path, params=params).json()
        token = first[cursor_param]
        other = {k: v + "-other" for k, v in params.items()}
        response = client.get(path, params={**other, cursor_param: token})
        garbage = client.get(path, params={**params, cursor_param: "not-a-cursor"})
    assert response.status_code == 400 and response.json()["parameter"] == cursor_param
    assert garbage.status_code == 400 and garbage.json()["parameter"] == cursor_param


def test_single_page_endpoints_answer_one_page(sandbox_client: Any) -> None:
    params = {"url": "https://mba.example/i/communities/1"}
    body = sandbox_client.get(TWEETS, params=params).json()
    assert set(body) == {"success", "tweets", "credits_remaining", "credits_charged"}
    assert (
        records_of(TWEETS, body, params)["microblog_a_tweets"]
        == full_crawl(TWEETS, params, SandboxConfig())["microblog_a_tweets"]
    )


@pytest.mark.parametrize(
    ("path", "preferred", "other"),
    [
        (REELS, {"user_id": "787132"}, {"handle": "natgeo"}),
        (FEED, {"user_id": "did:plc:abc"}, {"handle": "a.mb.example"}),
    ],
)
def test_either_identifier_and_ids_win_over_handles(
    sandbox_client: Any, path: str, preferred: dict[str, str], other: dict[str, str]
) -> None:
    def page(params: dict[str, str]) -> Any:
        response = sandbox_client.get(path, params=params)
        assert response.status_code == 200
        return records_of(path, response.json(), params)

    both = page({**preferred, **other})
    assert both == page(preferred)
    assert both != page(other)


def test_expected_over_http(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    sb = sandbox_factory(pages=(3, 3), page_size=4)
    params = {"path": REELS, "handle": "natgeo", "trim": "true"}
    answer = httpx.get(sb.base_url + "/_sandbox/expected", params=params).json()
    assert answer["pages"] == 4 and answer["pages_following_dangling"] == 4
    assert answer["records"] == full_crawl(REELS, {"handle": "natgeo", "trim": "true"}, sb.config)
    bad = httpx.get(sb.base_url + "/_sandbox/expected", params={"path": PINS})
    assert bad.status_code == 400
