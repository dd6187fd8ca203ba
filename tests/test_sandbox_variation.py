"""The sandbox across nights and service changes, over real HTTP: new items at the front of newest-first listings,
counters that grow with the night, and answers that drift from the documented shapes."""

from __future__ import annotations

from typing import Any

import pytest

from harvest.sandbox.config import Drift, SandboxConfig
from harvest.sandbox.expected import full_crawl
from harvest.sandbox.wire.serving import running
from tests.endpoints import FEED, GROUP, PINS, PROFILE, REELS, SHOP
from tests.fixtures_sandbox import http_crawl

KEY = "variation-key"

NEWEST_FIRST = [
    (FEED, {"handle": "nasa.example"}, "posts", "uri", "indexedAt"),
    (PROFILE, {"handle": "nasa", "sort_by": "latest"}, "videos", "aweme_id", "create_time"),
    (REELS, {"handle": "nasa"}, "reels", "id", "taken_at"),
    (REELS, {"handle": "nasa", "trim": "true"}, "reels", "id", "taken_at"),
    (
        SHOP,
        {"url": "https://shop.example/acme", "sort_by": "new_releases"},
        "short_video_products",
        "product_id",
        None,
    ),
    (GROUP, {"group_id": "42", "sort_by": "CHRONOLOGICAL"}, "network_a_group_posts", "id", "publishTime"),
]


def crawl(config: SandboxConfig, path: str, params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    with running(config) as sb, sb.client() as client:
        _, records = http_crawl(client, path, params)
    return records


@pytest.mark.parametrize(("path", "params", "kind", "pk", "time"), NEWEST_FIRST)
def test_new_items_come_first_and_old_ones_keep_their_ids(
    path: str, params: dict[str, Any], kind: str, pk: str, time: str | None
) -> None:
    base = SandboxConfig(api_keys={KEY: 10**6}, pages=(3, 3), page_size=4)
    before = crawl(base, path, params)[kind]
    after = crawl(base.replace(new_items=5), path, params)[kind]
    assert [r[pk] for r in after[5:]] == [r[pk] for r in before]  # the old items, in order, unchanged
    new_ids = {r[pk] for r in after[:5]}
    assert len(new_ids) == 5 and not new_ids & {r[pk] for r in before}
    if time is not None:  # ISO texts or epoch seconds of one width: both order as text
        assert min(str(r[time]) for r in after[:5]) > max(str(r[time]) for r in before)
    assert after == full_crawl(path, params, base.replace(new_items=5))[kind]


def test_new_items_leave_other_orders_and_listings_alone() -> None:
    base = SandboxConfig(api_keys={KEY: 10**6}, pages=(2, 2), page_size=4)
    for path, params, kind in [
        (PROFILE, {"handle": "nasa", "sort_by": "popular"}, "videos"),
        (PINS, {"query": "lamps"}, "pins"),
    ]:
        assert crawl(base, path, params)[kind] == crawl(base.replace(new_items=5), path, params)[kind]


def test_counters_grow_with_the_night_and_nothing_else_changes() -> None:
    base = SandboxConfig(api_keys={KEY: 10**6}, pages=(2, 2), page_size=4)
    params = {"handle": "nasa", "sort_by": "latest"}
    first = crawl(base, PROFILE, params)["videos"]
    second = crawl(base.replace(observation=1), PROFILE, params)["videos"]
    assert [v["aweme_id"] for v in first] == [v["aweme_id"] for v in second]
    assert [v["desc"] for v in first] == [v["desc"] for v in second]
    assert all(
        b["statistics"]["play_count"] > a["statistics"]["play_count"]
        for a, b in zip(first, second, strict=True)
    )


def test_drift_wraps_feed_items_the_upstream_way() -> None:
    config = SandboxConfig(api_keys={KEY: 10**6}, pages=(2, 2), page_size=8, drift=Drift(wrapped_feed=1.0))
    with running(config) as sb, sb.client() as client:
        body = client.get(FEED, params={"handle": "nasa.example"}).json()
    items = body["feed"]
    assert len(items) == 8 and all(set(i) == {"post", "reason", "reply"} for i in items)
    assert all(i["post"]["uri"].startswith("at://") for i in items)
    assert any(i["reason"] for i in items) and any(i["reply"] for i in items)


def test_drift_renames_a_list_sends_counters_as_text_and_adds_fields() -> None:
    drift = Drift(renamed_lists={FEED: ("feed", "items")}, bad_values=1.0, new_fields=True)
    config = SandboxConfig(api_keys={KEY: 10**6}, pages=(1, 1), page_size=4, drift=drift)
    with running(config) as sb, sb.client() as client:
        feed = client.get(FEED, params={"handle": "nasa.example"}).json()
        videos = client.get(PROFILE, params={"handle": "nasa"}).json()["aweme_list"]
    assert "feed" not in feed and len(feed["items"]) >= 1
    assert {v["statistics"]["play_count"] for v in videos} <= {"1.2K", "1,234", "42", "twelve"}
    assert all(v["create_time"] == "yesterday" and v["sponsored"] is False for v in videos)


def test_drift_drops_primary_keys() -> None:
    config = SandboxConfig(api_keys={KEY: 10**6}, pages=(3, 3), page_size=10, drift=Drift(missing_keys=0.5))
    with running(config) as sb, sb.client() as client:
        pins = client.get(PINS, params={"query": "lamps"}).json()["pins"]
    without = [p for p in pins if "id" not in p]
    assert 0 < len(without) < len(pins)


def test_cached_pages_are_the_same_bytes() -> None:
    """`cache_pages` (benchmarks) serves what building the page serves, byte for byte but the balance."""
    base = SandboxConfig(api_keys={KEY: 10**6}, pages=(2, 2), page_size=4)
    requests = [
        (PROFILE, {"handle": "nasa", "sort_by": "latest"}),
        (FEED, {"handle": "nasa.example"}),
        (PINS, {}),
    ]
    answers = []
    for config in (base, base.replace(cache_pages=True)):
        with running(config) as sb, sb.client() as client:
            got = [client.get(path, params=params).content for path, params in requests for _ in range(2)]
        answers.append([body.split(b',"credits_remaining"')[0] for body in got])
    assert answers[0] == answers[1] and answers[1][0] == answers[1][1]
    assert answers[0][4].startswith(b'{"success":false')  # a refused request (no query) is never cached
