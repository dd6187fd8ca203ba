"""Trigger words: how a test asks the sandbox for the service's "not found", "blocked" and "does not exist"
answers without any hidden state.

A subject value (handle, user id, url, group id, query, subreddit, root continuation token) containing, case
insensitively:

- `nonexistent` -> 400 naming that parameter ("does not exist"), as the real service answers some unknown
  handles and URLs. Not billed, like every 400.
- `blocked` -> 403 `{"success": false, "error": "forbidden"}`: the source platform blocked the content. Billed
  (the service did fetch; a client must count it as spent).
- `missing` -> "not found", answered the real ways while the `real_not_found` quirk is on (see
  `not_found_page`), else a uniform 404 `{"success": false, "error": "not_found"}`. Billed either way.
"""

from __future__ import annotations

from typing import Any

from sandbox import endpoints as ep
from sandbox.page import Ctx, ServedPage
from sandbox.paged import replies_root
from sandbox.validation import BadRequest

NONEXISTENT = "nonexistent"
BLOCKED = "blocked"
MISSING = "missing"


def subjects(ctx: Ctx) -> list[tuple[str, str]]:
    """(parameter, value) pairs the trigger words apply to."""
    if ctx.endpoint.path == ep.REPLIES:
        return [("continuationToken", replies_root(ctx.params))]
    out = []
    for p in ctx.endpoint.params:
        value = ctx.params.get(p.name)
        if p.subject and value is not None:
            out.append((p.name, value))
    return out


def triggered(ctx: Ctx) -> ServedPage | None:
    """The answer a trigger word forces, or None. Raises `BadRequest` for `nonexistent`."""
    found: dict[str, str] = {}
    for name, value in subjects(ctx):
        lowered = value.lower()
        for word in (NONEXISTENT, BLOCKED, MISSING):
            if word in lowered:
                found.setdefault(word, name)
    if NONEXISTENT in found:
        name = found[NONEXISTENT]
        raise BadRequest(name, f"'{name}' does not exist")
    if BLOCKED in found:
        return ServedPage(
            {"error": "forbidden", "message": "The source platform blocked access to this content."},
            status=403,
            success=False,
        )
    if MISSING in found:
        if ctx.config.quirks.real_not_found:
            return not_found_page(ctx)
        return ServedPage({"error": "not_found", "message": "Not found."}, status=404, success=False)
    return None


def not_found_page(ctx: Ctx) -> ServedPage:
    """The real service's "not found" shapes: mostly 200 with `success: true`, empty lists, null cursors and,
    for account lookups, `account_deactivated: true`; 404 `{"success": true, "error": "not_found"}` on the
    microblog-b user feed."""
    path = ctx.endpoint.path
    trim = ctx.params.flag("trim")
    body: Any
    if path == ep.MB_FEED:
        return ServedPage({"error": "not_found"}, status=404)
    if path == ep.CLIP:
        body = [{"data": {"clip": None}}, {"data": {"user": None}}, {"data": {"user": None}}]
        return ServedPage(body, envelope=False)
    if path == ep.CREATIVE_SEARCH:
        body = {"data": [], "metadata": {"cursor": None, "total": 0}}
    elif path == ep.PHOTOS:
        body = {"photos": [], "next_page_id": None, "cursor": None}
    elif path == ep.GROUP_POSTS:
        body = {"posts": [], "cursor": None}
    elif path == ep.FORUM_SEARCH:
        body = {"posts": [], "comments": [], "media": [], "cursor": None}
    elif path == ep.COMMUNITY_POST:
        body = {
            "id": None, "channel": None, "content": "", "images": [], "likeCount": 0, "publishedTime": None,
            "video": None,
        }  # fmt: skip
    elif path == ep.MB_POST:
        body = {"post": None, "replies": []}
    elif path == ep.TWEETS:
        body = {"tweets": []}
    elif path == ep.ADVERTISERS:
        body = {"advertisers": [], "websites": []}
    elif path == ep.EMBED:
        body = {"html": ""}
    elif path == ep.REELS:
        body = {"items": [], "max_id": None} if trim else {
            "items": [], "paging_info": {"max_id": None, "more_available": False},
        }  # fmt: skip
    elif path == ep.PINS:
        body = {"pins": [], "cursor": None}
    elif path == ep.VIDEO_SEARCH:
        body = {k: [] for k in ctx.endpoint.kinds} | {"continuationToken": None}
    elif path == ep.REPLIES:
        body = {"comments": [], "continuationToken": None}
    elif path == ep.SHOP:
        body = {"products": [], "shopInfo": None, "has_more": False, "cursor": None}
    elif path == ep.PROFILE_VIDEOS:
        body = (
            {"aweme_list": [], "max_cursor": 0}
            if trim
            else {"aweme_list": [], "has_more": 0, "max_cursor": 0}
        )
    else:  # pragma: no cover - every endpoint with subjects is listed above
        body = {}
    if ctx.endpoint.user_scoped:
        body["account_deactivated"] = True
    return ServedPage(body)
