"""400 answers: each kind names the offending parameter, and none is billed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from harvest.sandbox.config import Quirks
from harvest.sandbox.wire.serving import RunningSandbox

BAD: list[tuple[str, dict[str, Any], str]] = [
    # missing required parameter
    ("/v1/pinboard/search", {}, "query"),
    ("/v1/forum/subreddit/search", {"query": "x"}, "subreddit"),
    ("/v1/network-a/profile/photos", {"cursor": "x"}, "url"),
    ("/v1/video-platform/video/comment/replies", {}, "continuationToken"),
    ("/v3/short-video/profile/videos", {"user_id": "123"}, "handle"),
    ("/v1/pinboard/search", {"query": ""}, "query"),
    # neither of the two identifiers
    ("/v1/network-a/group/posts", {"sort_by": "TOP_POSTS"}, "url"),
    ("/v1/photo-app/user/reels", {"trim": "true"}, "user_id"),
    ("/v1/microblog-b/user/posts", {}, "user_id"),
    # enums
    ("/v1/network-a/group/posts", {"url": "u", "sort_by": "top_posts"}, "sort_by"),
    ("/v1/forum/subreddit/search", {"subreddit": "python", "sort": "best"}, "sort"),
    ("/v1/forum/subreddit/search", {"subreddit": "python", "timeframe": "decade"}, "timeframe"),
    ("/v1/creative/materials", {"order": "newest"}, "order"),
    ("/v1/video-platform/search", {"query": "q", "uploadDate": "yesterday"}, "uploadDate"),
    ("/v1/video-platform/search", {"query": "q", "sortBy": "views"}, "sortBy"),
    ("/v1/video-platform/search", {"query": "q", "filter": "long"}, "filter"),
    ("/v3/short-video/profile/videos", {"handle": "h", "sort_by": "oldest"}, "sort_by"),
    # limit
    ("/v1/creative/materials", {"limit": "0"}, "limit"),
    ("/v1/creative/materials", {"limit": "101"}, "limit"),
    ("/v1/creative/materials", {"limit": "ten"}, "limit"),
    ("/v1/creative/materials", {"limit": "2.5"}, "limit"),
    # subreddit with a prefix or as a URL
    ("/v1/forum/subreddit/search", {"subreddit": "r/python"}, "subreddit"),
    ("/v1/forum/subreddit/search", {"subreddit": "/r/python"}, "subreddit"),
    ("/v1/forum/subreddit/search", {"subreddit": "https://www.reddit.com/r/python/"}, "subreddit"),
    # booleans
    ("/v1/pinboard/search", {"query": "q", "trim": "yes"}, "trim"),
    ("/v1/photo-app/user/reels", {"handle": "h", "trim": "TRUEISH"}, "trim"),
    ("/v3/short-video/profile/videos", {"handle": "h", "trim": "2"}, "trim"),
    # regions
    ("/v1/short-video/shop/products", {"url": "u", "region": "CA"}, "region"),
    ("/v1/short-video/shop/products", {"url": "u", "region": "us"}, "region"),
    ("/v1/video-platform/search", {"query": "q", "region": "USA"}, "region"),
    # cursors
    ("/v3/short-video/profile/videos", {"handle": "h", "max_cursor": "abc"}, "max_cursor"),
    ("/v1/microblog-b/user/posts", {"handle": "h", "cursor": "yesterday"}, "cursor"),
    ("/v1/network-a/profile/photos", {"url": "u", "cursor": "x"}, "next_page_id"),
    ("/v1/network-a/profile/photos", {"url": "u", "next_page_id": "x"}, "cursor"),
    # "does not exist" trigger word
    ("/v1/photo-app/user/embed", {"handle": "nonexistent_user"}, "handle"),
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
        ("/v1/network-a/group/posts", {"url": "https://network-a.example/groups/g"}),
        ("/v1/network-a/group/posts", {"group_id": "42"}),
        ("/v1/photo-app/user/reels", {"user_id": "42"}),
        ("/v1/photo-app/user/reels", {"handle": "h"}),
        ("/v1/microblog-b/user/posts", {"handle": "h.mb.example"}),
        ("/v1/microblog-b/user/posts", {"user_id": "did:plc:xyz"}),
        ("/v1/creative/materials", {"limit": "1"}),
        ("/v1/creative/materials", {"limit": "100"}),
        ("/v1/pinboard/search", {"query": "q", "trim": "false"}),
        ("/v1/short-video/shop/products", {"url": "u", "region": "JP"}),
        (
            "/v1/forum/subreddit/search",
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
        response = client.get("/v1/pinboard/search", params={"query": "q", "next_cursor": "abc"})
        detail = client.get("/v1/creative/materials/video:000000000000abcd", params={"x": "1"})
    assert response.status_code == 400 and response.json()["parameter"] == "next_cursor"
    assert detail.status_code == 400 and detail.json()["parameter"] == "x"
    assert sb.billed_total() == 0


def test_validation_ledger_records_unbilled_400(sandbox_factory: Callable[..., RunningSandbox]) -> None:
    sb = sandbox_factory()
    with sb.client() as client:
        client.get("/v1/pinboard/search")
    (entry,) = sb.ledger
    assert (entry.path, entry.status, entry.credits, entry.fault) == ("/v1/pinboard/search", 400, 0, None)
