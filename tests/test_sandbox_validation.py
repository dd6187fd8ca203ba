"""400 answers: each kind names the offending parameter, and none is billed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from harvest.sandbox.config import Quirks
from harvest.sandbox.wire.serving import RunningSandbox
from tests.endpoints import (
    COMMENT_REPLIES,
    CREATIVE,
    EMBED,
    FEED,
    FORUM,
    GROUP,
    PHOTOS,
    PINS,
    PROFILE,
    REELS,
    SHOP,
    VIDEO_SEARCH,
)

BAD: list[tuple[str, dict[str, Any], str]] = [
    # missing required parameter
    (PINS, {}, "query"),
    (FORUM, {"query": "x"}, "subreddit"),
    (PHOTOS, {"cursor": "x"}, "url"),
    (COMMENT_REPLIES, {}, "continuationToken"),
    (PROFILE, {"user_id": "123"}, "handle"),
    (PINS, {"query": ""}, "query"),
    # neither of the two identifiers
    (GROUP, {"sort_by": "TOP_POSTS"}, "url"),
    (REELS, {"trim": "true"}, "user_id"),
    (FEED, {}, "user_id"),
    # enums
    (GROUP, {"url": "u", "sort_by": "top_posts"}, "sort_by"),
    (FORUM, {"subreddit": "python", "sort": "best"}, "sort"),
    (FORUM, {"subreddit": "python", "timeframe": "decade"}, "timeframe"),
    (CREATIVE, {"order": "newest"}, "order"),
    (VIDEO_SEARCH, {"query": "q", "uploadDate": "yesterday"}, "uploadDate"),
    (VIDEO_SEARCH, {"query": "q", "sortBy": "views"}, "sortBy"),
    (VIDEO_SEARCH, {"query": "q", "filter": "long"}, "filter"),
    (PROFILE, {"handle": "h", "sort_by": "oldest"}, "sort_by"),
    # limit
    (CREATIVE, {"limit": "0"}, "limit"),
    (CREATIVE, {"limit": "101"}, "limit"),
    (CREATIVE, {"limit": "ten"}, "limit"),
    (CREATIVE, {"limit": "2.5"}, "limit"),
    # subreddit with a prefix or as a URL
    (FORUM, {"subreddit": "r/python"}, "subreddit"),
    (FORUM, {"subreddit": "/r/python"}, "subreddit"),
    (FORUM, {"subreddit": "https://www.reddit.com/r/python/"}, "subreddit"),
    # booleans
    (PINS, {"query": "q", "trim": "yes"}, "trim"),
    (REELS, {"handle": "h", "trim": "TRUEISH"}, "trim"),
    (PROFILE, {"handle": "h", "trim": "2"}, "trim"),
    # regions
    (SHOP, {"url": "u", "region": "CA"}, "region"),
    (SHOP, {"url": "u", "region": "us"}, "region"),
    (VIDEO_SEARCH, {"query": "q", "region": "USA"}, "region"),
    # cursors
    (PROFILE, {"handle": "h", "max_cursor": "abc"}, "max_cursor"),
    (FEED, {"handle": "h", "cursor": "yesterday"}, "cursor"),
    (PHOTOS, {"url": "u", "cursor": "x"}, "next_page_id"),
    (PHOTOS, {"url": "u", "next_page_id": "x"}, "cursor"),
    # "does not exist" trigger word
    (EMBED, {"handle": "nonexistent_user"}, "handle"),
]


@pytest.mark.parametrize(("path", "params", "parameter"), BAD)
def test_bad_request_names_the_parameter_and_is_free(
    sandbox: RunningSandbox, sandbox_client: Any, path: str, params: dict[str, Any], parameter: str
) -> None:
    before = sandbox.balance()
    response = sandbox_client.get(path, params=params)
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["success"] is False and body["error"] == "bad_request"
    assert body["parameter"] == parameter
    assert body["credits_charged"] == 0 and body["credits_remaining"] == before
    assert sandbox.balance() == before


@pytest.mark.parametrize(
    ("path", "params"),
    [
        (GROUP, {"url": "https://network-a.example/groups/g"}),
        (GROUP, {"group_id": "42"}),
        (REELS, {"user_id": "42"}),
        (REELS, {"handle": "h"}),
        (FEED, {"handle": "h.mb.example"}),
        (FEED, {"user_id": "did:plc:xyz"}),
        (CREATIVE, {"limit": "1"}),
        (CREATIVE, {"limit": "100"}),
        (PINS, {"query": "q", "trim": "false"}),
        (SHOP, {"url": "u", "region": "JP"}),
        (
            FORUM,
            {"subreddit": "AskHistorians", "sort": "comments", "timeframe": "hour"},
        ),
    ],
)
def test_valid_variants_are_accepted(sandbox_client: Any, path: str, params: dict[str, Any]) -> None:
    response = sandbox_client.get(path, params=params)
    assert response.status_code == 200, response.text


def test_unknown_parameter_refused_when_quirk_off(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    sb = sandbox_factory(quirks=Quirks(ignore_unknown_params=False))
    with sb.client() as client:
        response = client.get(PINS, params={"query": "q", "next_cursor": "abc"})
        detail = client.get("/v1/creative/materials/video:000000000000abcd", params={"x": "1"})
    assert response.status_code == 400 and response.json()["parameter"] == "next_cursor"
    assert detail.status_code == 400 and detail.json()["parameter"] == "x"
    assert sb.billed_total() == 0


def test_validation_ledger_records_unbilled_400(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    sb = sandbox_factory()
    with sb.client() as client:
        client.get(PINS)
    (entry,) = sb.ledger
    assert (entry.path, entry.status, entry.credits, entry.fault) == (PINS, 400, 0, None)
