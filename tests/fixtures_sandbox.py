"""Fixtures that serve the sandbox over real HTTP on 127.0.0.1, and a reference client for sandbox tests.

Fixtures:
- `sandbox`: one shared default sandbox for the session (every quirk on, no faults, a huge balance). For
  read-only tests: do not change its balance or rely on its ledger's length.
- `sandbox_factory`: `sandbox_factory(config=None, **overrides) -> RunningSandbox`, a fresh sandbox stopped at
  the end of the test (also usable as `with sandbox_factory(...) as sb:`).
- `sandbox_client`: an httpx client on the shared sandbox, with its key.

The reference client below (`records_of`, `next_params`, `http_crawl`) reads answers the way
docs/service-shapes.md says a client must; it is written independently of the sandbox code, so comparing
its crawl with `sandbox.expected.full_crawl` checks the wire shapes against the generator.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx
import pytest

from harvest.sandbox.config import DEFAULT_KEY, SandboxConfig
from harvest.sandbox.wire.serving import RunningSandbox, running, start
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

SESSION_CREDITS = 10**9

ENVELOPE = ("success", "credits_remaining", "credits_charged")

# kind -> primary key field, per docs/service-shapes.md
PRIMARY_KEYS: dict[str, str] = {
    "materials": "material_id",
    "material_details": "material_id",
    "network_a_photos": "photo_id",
    "network_a_group_posts": "id",
    "forum_posts": "id",
    "forum_comments": "id",
    "forum_media": "id",
    "posts": "id",
    "comments": "id",
    "clips": "id",
    "broadcaster_clips": "id",
    "video_platform_community_posts": "id",
    "replies": "uri",
    "microblog_a_tweets": "id",
    "search_engine_advertisers": "advertiser_id",
    "search_engine_websites": "domain",
    "photo_app_embeds": "html",  # the answer holds only `html` (harvest keys it by the request)
    "reels": "id",
    "pins": "id",
    "videos": "id",
    "channels": "id",
    "playlists": "id",
    "shorts": "id",
    "shelves": "type+title",
    "lives": "id",
    "short_video_products": "product_id",
    "short_video_shops": "seller_id",
}
URI_KEYED_PATHS = (POST, FEED)


def primary_key(path: str, kind: str, record: Mapping[str, Any]) -> Any:
    if path in URI_KEYED_PATHS:
        return record["uri"]
    if path == PROFILE:
        return record["aweme_id"]
    key = PRIMARY_KEYS[kind]
    if "+" in key:
        return tuple(record[k] for k in key.split("+"))
    return next(record[k] for k in key.split("|") if k in record)  # the service's name, or the interface's


def _truthy(value: Any) -> bool:
    return str(value).lower() in ("true", "1")


def _thread(views: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The replies of a thread: each view's `post`, then the replies nested in it."""
    return [r for view in views for r in (view["post"], *_thread(view["replies"]))]


def records_of(path: str, body: Any, params: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The records of one answer, by kind, read from the documented locations."""
    if path == CREATIVE:
        return {"materials": body["data"]}
    if path.startswith("/v1/creative/materials/"):
        return {"material_details": [body["data"]]}
    if path == PHOTOS:
        return {"network_a_photos": body["photos"]}
    if path == GROUP:
        return {"network_a_group_posts": body.get("posts", [])}  # the page ending them has none
    if path == FORUM:
        return {f"forum_{k}": body.get(k, []) for k in ("posts", "comments", "media")}  # as group posts
    if path == CLIP:
        clip = body[0]["data"]["clip"]
        user = body[1]["data"]["user"]
        others = [edge["node"] for edge in user["clips"]["edges"]] if user else []
        return {"clips": [clip] if clip else [], "broadcaster_clips": others}
    if path == COMMUNITY_POST:
        rec = {k: v for k, v in body.items() if k not in ENVELOPE}
        return {"video_platform_community_posts": [rec] if rec.get("id") else []}
    if path == POST:
        return {"posts": [body["post"]] if body["post"] else [], "replies": _thread(body["replies"])}
    if path == FEED:
        return {"posts": body["feed"]}
    if path == TWEETS:
        return {"microblog_a_tweets": body["tweets"]}
    if path == ADVERTISERS:
        return {"search_engine_advertisers": body["advertisers"], "search_engine_websites": body["websites"]}
    if path == EMBED:
        return {"photo_app_embeds": [{"html": body["html"]}] if body["html"] else []}
    if path == REELS:
        items = body["items"]
        return {"reels": items if _truthy(params.get("trim")) else [i["media"] for i in items]}
    if path == PINS:
        return {"pins": body.get("pins", [])}  # the page ending pin search has none
    if path == VIDEO_SEARCH:
        return {k: body[k] for k in ("videos", "channels", "playlists", "shorts", "shelves", "lives")}
    if path == COMMENT_REPLIES:
        return {"comments": body["comments"]}
    if path == SHOP:
        shop = body["shopInfo"]
        return {"short_video_products": body["products"], "short_video_shops": [shop] if shop else []}
    if path == PROFILE:
        return {"videos": body["aweme_list"]}
    raise AssertionError(f"no record locations for {path}")


def next_params(path: str, body: Any, params: Mapping[str, Any]) -> dict[str, str] | None:
    """The cursor parameters of the next request, read from the documented end-of-pages signals."""

    def nonempty(value: Any) -> bool:
        return value not in (None, "", 0, False)

    if path == CREATIVE:
        cur = body["metadata"].get("cursor")
        return {"cursor": cur} if nonempty(cur) else None
    if path == PHOTOS:
        npid, cur = body.get("next_page_id"), body.get("cursor")
        return {"next_page_id": npid, "cursor": cur} if nonempty(npid) and nonempty(cur) else None
    if path in (
        GROUP,
        FORUM,
        FEED,
        PINS,
    ):
        cur = body.get("cursor")
        return {"cursor": cur} if nonempty(cur) and cur != "-end-" else None
    if path in (VIDEO_SEARCH, COMMENT_REPLIES):
        tok = body.get("continuationToken")
        return {"continuationToken": tok} if nonempty(tok) else None
    if path == REELS:
        if "paging_info" in body:
            info = body["paging_info"]
            ok = info.get("more_available") and nonempty(info.get("max_id"))
            return {"max_id": info["max_id"]} if ok else None
        return {"max_id": body["max_id"]} if nonempty(body.get("max_id")) else None
    if path == SHOP:
        return {"cursor": body["cursor"]} if body.get("has_more") and nonempty(body.get("cursor")) else None
    if path == PROFILE:
        if "has_more" in body and not body["has_more"]:
            return None
        return {"max_cursor": str(body["max_cursor"])} if nonempty(body.get("max_cursor")) else None
    return None


def http_crawl(
    client: httpx.Client, path: str, params: Mapping[str, Any], max_pages: int = 10_000
) -> tuple[list[Any], dict[str, list[dict[str, Any]]]]:
    """Follow a query to its end over HTTP: (page bodies, distinct records by kind in first-seen order)."""
    bodies: list[Any] = []
    seen: dict[str, dict[Any, dict[str, Any]]] = {}
    request = dict(params)
    for _ in range(max_pages):
        response = client.get(path, params=request)
        assert response.status_code == 200, (response.status_code, response.text[:300])
        body = response.json()
        bodies.append(body)
        for kind, recs in records_of(path, body, params).items():
            bucket = seen.setdefault(kind, {})
            for rec in recs:
                bucket.setdefault(primary_key(path, kind, rec), rec)
        nxt = next_params(path, body, params)
        if nxt is None:
            return bodies, {k: list(v.values()) for k, v in seen.items()}
        request = {**params, **nxt}
    raise AssertionError(f"{path} did not end within {max_pages} pages")


@pytest.fixture(scope="session")
def sandbox() -> Iterator[RunningSandbox]:
    with running(SandboxConfig(api_keys={DEFAULT_KEY: SESSION_CREDITS})) as sb:
        yield sb


@pytest.fixture
def sandbox_client(sandbox: RunningSandbox) -> Iterator[httpx.Client]:
    with sandbox.client() as client:
        yield client


@pytest.fixture
def sandbox_factory() -> Iterator[Callable[..., RunningSandbox]]:
    started: list[RunningSandbox] = []

    def make(config: SandboxConfig | None = None, **overrides: Any) -> RunningSandbox:
        sb = start(config, **overrides)
        started.append(sb)
        return sb

    yield make
    for sb in started:
        sb.stop(wait=False)
