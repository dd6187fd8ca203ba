"""The real service's quirks, each on (as real) and off (idealised)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from harvest.sandbox.config import Quirks
from harvest.sandbox.expected import expected_pages, full_crawl
from harvest.sandbox.wire.serving import RunningSandbox
from tests.endpoints import (
    CLIP,
    COMMUNITY_POST,
    CREATIVE,
    FEED,
    GROUP,
    PHOTOS,
    PINS,
    PROFILE,
    REELS,
    SHOP,
    VIDEO_SEARCH,
)
from tests.fixtures_sandbox import http_crawl, next_params, records_of


def strip_credits(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "credits_remaining"}


# --- (a) unknown parameters -----------------------------------------------------------------------------------


def test_misspelled_cursor_restarts_at_page_one(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    sb = sandbox_factory(pages=(3, 3), api_keys={"k": 100})
    with sb.client() as client:
        first = client.get(PINS, params={"query": "vases"}).json()
        again = client.get(PINS, params={"query": "vases", "next_cursor": first["cursor"]}).json()
    assert strip_credits(again) == strip_credits(first)
    assert sb.billed_total("k") == 2


# --- (b) a cursor left on the last page ---------------------------------------------------------------------


def last_page(client: Any, path: str, params: dict[str, Any]) -> dict[str, Any]:
    bodies, _ = http_crawl(client, path, params)
    return bodies[-1]


@pytest.mark.parametrize("quirk", [True, False], ids=["on", "off"])
def test_dangling_cursor_on_last_page(sandbox_factory: Callable[..., RunningSandbox], quirk: bool) -> None:
    sb = sandbox_factory(pages=(2, 2), api_keys={"k": 100}, quirks=Quirks(dangling_last_cursor=quirk))
    shop = {"url": "https://shop.example/s"}
    profile = {"handle": "chef"}
    reels = {"handle": "natgeo"}
    photos = {"url": "https://network-a.example/p"}
    with sb.client() as client:
        shop_last = last_page(client, SHOP, shop)
        profile_last = last_page(client, PROFILE, profile)
        reels_last = last_page(client, REELS, reels)
        photos_last = last_page(client, PHOTOS, photos)
        assert shop_last["has_more"] is False and shop_last["products"]
        assert profile_last["has_more"] == 0 and profile_last["aweme_list"]
        assert reels_last["paging_info"]["more_available"] is False
        assert photos_last["next_page_id"] is None
        if not quirk:
            assert shop_last["cursor"] is None
            assert profile_last["max_cursor"] == 0
            assert reels_last["paging_info"]["max_id"] is None
            assert photos_last["cursor"] is None
            return
        assert shop_last["cursor"] and profile_last["max_cursor"] and reels_last["paging_info"]["max_id"]
        assert photos_last["cursor"]
        billed = sb.billed_total("k")
        empty_shop = client.get(SHOP, params={**shop, "cursor": shop_last["cursor"]})
        empty_profile = client.get(PROFILE, params={**profile, "max_cursor": profile_last["max_cursor"]})
        empty_reels = client.get(REELS, params={**reels, "max_id": reels_last["paging_info"]["max_id"]})
    assert empty_shop.status_code == empty_profile.status_code == empty_reels.status_code == 200
    assert empty_shop.json()["products"] == [] and empty_shop.json()["cursor"] is None
    assert empty_profile.json()["aweme_list"] == [] and empty_profile.json()["max_cursor"] == 0
    assert empty_reels.json()["items"] == [] and empty_reels.json()["paging_info"]["max_id"] is None
    assert sb.billed_total("k") == billed + 3


def test_trimmed_answers_cost_one_more_page_with_the_quirk(
    sandbox_factory: Callable[..., RunningSandbox],
) -> None:
    """Trimmed reels and profile videos have no "more" flag: the dangling cursor must be followed."""
    sb = sandbox_factory(pages=(2, 2))
    for path, params in [
        (REELS, {"handle": "natgeo", "trim": "true"}),
        (PROFILE, {"handle": "chef", "trim": "true"}),
    ]:
        with sb.client() as client:
            bodies, _ = http_crawl(client, path, params)
        assert len(bodies) == 3 == expected_pages(path, params, sb.config)
        assert records_of(path, bodies[-1], params) in ({"reels": []}, {"videos": []})
        no_quirk = sb.config.replace(quirks={"dangling_last_cursor": False})
        assert expected_pages(path, params, no_quirk) == 2


# --- (c) repeated items on search pages ---------------------------------------------------------------------

SEARCHES: list[tuple[str, dict[str, Any], str]] = [
    (PINS, {"query": "mugs"}, "pins"),
    (VIDEO_SEARCH, {"query": "jazz"}, "videos"),
    (CREATIVE, {"query": "cola", "limit": "6"}, "materials"),
]


@pytest.mark.parametrize(("path", "params", "kind"), SEARCHES, ids=[s[2] for s in SEARCHES])
@pytest.mark.parametrize("quirk", [True, False], ids=["on", "off"])
def test_repeat_items(
    sandbox_factory: Callable[..., RunningSandbox], path: str, params: dict[str, Any], kind: str, quirk: bool
) -> None:
    sb = sandbox_factory(pages=(3, 3), page_size=6, quirks=Quirks(repeat_items=quirk))
    with sb.client() as client:
        first = client.get(path, params=params).json()
        second = client.get(path, params={**params, **(next_params(path, first, params) or {})}).json()
    page1 = records_of(path, first, params)[kind]
    page2 = records_of(path, second, params)[kind]
    key = "material_id" if kind == "materials" else "id"
    if quirk:
        assert page2[0][key] == page1[-1][key]
        assert len(page2) == len(page1) + 1
    else:
        assert not {r[key] for r in page1} & {r[key] for r in page2}
    # either way a full crawl holds the same distinct records
    with sb.client() as client:
        _, collected = http_crawl(client, path, params)
    assert collected[kind] == full_crawl(path, params, sb.config)[kind]


# --- (d) not found, blocked -------------------------------------------------------------------------------


def test_not_found_the_real_ways(sandbox_client: Any) -> None:
    reels = sandbox_client.get(REELS, params={"handle": "missing_person"})
    assert reels.status_code == 200
    body = reels.json()
    assert body["success"] is True and body["account_deactivated"] is True and body["items"] == []
    assert body["paging_info"] == {"max_id": None, "more_available": False}

    feed = sandbox_client.get(FEED, params={"handle": "missing.mb.example"})
    assert feed.status_code == 404
    assert feed.json()["success"] is True and feed.json()["error"] == "not_found"

    clip = sandbox_client.get(CLIP, params={"url": "https://clips.streaming.example/missing"})
    assert clip.status_code == 200 and clip.json()[0]["data"]["clip"] is None

    post = sandbox_client.get(COMMUNITY_POST, params={"url": "https://vp.example/missing"})
    assert post.status_code == 200 and post.json()["success"] is True and post.json()["id"] is None

    search = sandbox_client.get(PINS, params={"query": "missing things"})
    assert search.status_code == 200 and search.json()["pins"] == [] and search.json()["cursor"] is None

    profile = sandbox_client.get(PROFILE, params={"handle": "missing", "trim": "true"})
    assert profile.json()["aweme_list"] == [] and profile.json()["max_cursor"] == 0
    assert "has_more" not in profile.json()

    expected = full_crawl(REELS, {"handle": "missing_person"})
    assert expected == {"reels": []}


def test_not_found_uniform_when_quirk_off(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    sb = sandbox_factory(api_keys={"k": 10}, quirks=Quirks(real_not_found=False))
    with sb.client() as client:
        answers = [
            client.get(REELS, params={"handle": "missing_person"}),
            client.get(FEED, params={"handle": "missing.mb.example"}),
            client.get(CLIP, params={"url": "https://clips.streaming.example/missing"}),
        ]
    for answer in answers:
        assert answer.status_code == 404
        assert answer.json()["success"] is False and answer.json()["error"] == "not_found"
        assert answer.json()["credits_charged"] == 1
    assert sb.billed_total("k") == 3


@pytest.mark.parametrize("quirk", [True, False], ids=["on", "off"])
def test_blocked_is_403_either_way(sandbox_factory: Callable[..., RunningSandbox], quirk: bool) -> None:
    sb = sandbox_factory(quirks=Quirks(real_not_found=quirk))
    with sb.client() as client:
        response = client.get(GROUP, params={"url": "https://network-a.example/blocked"})
    assert response.status_code == 403
    assert response.json()["success"] is False and response.json()["error"] == "forbidden"
