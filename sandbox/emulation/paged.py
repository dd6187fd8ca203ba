"""Builders of the paged endpoints whose answers need code (docs/decisions.md, "One engine").

Single-kind endpoints page by offset (the cursor encodes where the next page starts); video search pages by
page index, each of its lists advancing by its own per-page count. The last
page carries a "dangling" cursor only where the real service does and only while that quirk is on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harvest.sandbox.emulation import cursor_values as cursors
from harvest.sandbox.emulation.page import Ctx, ServedPage, window, with_repeat
from harvest.sandbox.emulation.platforms import (
    Record,
    microblog_b,
    photo_app,
    pinboard,
    short_video,
    video_platform,
)
from harvest.sandbox.emulation.scope import PagePlan, Scope
from harvest.sandbox.emulation.subjects import subject_id, subject_secret


def _single_total(ctx: Ctx, scope: Scope, kind: str, size: int) -> int:
    return ctx.page_plan(scope, {kind: size}, kind).total(kind)


def _opaque_start(ctx: Ctx, scope: Scope, param: str, tag: str) -> int:
    token = ctx.params.get(param)
    return 0 if token is None else cursors.decode(token, tag, scope, param)


def _opaque_page(
    lists: dict[str, list[Record]], param: str, tag: str, scope: Scope, plan: PagePlan, page_no: int
) -> ServedPage:
    """A page of several lists whose opaque token (`_opaque_start` reads it back) is in the body, null on the last."""
    page = ServedPage({**lists, param: None}, lists)
    if page_no + 1 < plan.n_pages:
        page.next = {param: cursors.encode(tag, page_no + 1, scope)}
        page.body[param] = page.next[param]
    return page


def _multi_page(
    ctx: Ctx, plan: PagePlan, page_no: int, kind: str, render: Callable[[int], Record]
) -> list[Record]:
    """The records of one kind on page `page_no`, with the repeat-items quirk applied."""
    count = plan.count(kind, page_no)
    lo = plan.start(kind, page_no)
    first = lo - 1 if ctx.repeat and page_no > 0 and count > 0 and plan.per_page[kind] > 0 else lo
    return [render(i) for i in range(first, lo + count)]


def feed(ctx: Ctx) -> ServedPage:
    """Microblog-b user posts: the cursor is the `indexedAt` timestamp of the page's last post."""
    s = ctx.scope()
    size = ctx.size
    new = ctx.new_items
    total = _single_total(ctx, s, "posts", size) + new
    token = ctx.params.get("cursor")
    start = 0 if token is None else cursors.parse_feed_cursor(s, token, "cursor", floor=-new) + new
    author = microblog_b.author(s, ctx.params.get("user_id") or ctx.params.get("handle") or "")
    lo, hi = window(start, size, total)
    items = [microblog_b.post(s, "feed", i - new, author) for i in range(lo, hi)]
    page = ServedPage({"feed": items, "cursor": None}, {"posts": items})
    if hi < total:
        page.next = {"cursor": cursors.feed_cursor(s, hi - 1 - new)}
        page.body["cursor"] = page.next["cursor"]
    return page


def reels(ctx: Ctx) -> ServedPage:
    """Reels: full answers nest each reel in `items[].media` with `paging_info`; trimmed ones are flat with a
    top-level `max_id` and no `more_available`, so a trimmed client can only stop on a missing `max_id`."""
    s = ctx.scope()
    size = ctx.size
    trim = ctx.params.flag("trim")
    new = ctx.new_items
    total = _single_total(ctx, s, "reels", size) + new
    owner = photo_app.reel_owner(s, ctx.params.get("user_id") or ctx.params.get("handle") or "")
    lo, hi = window(_opaque_start(ctx, s, "max_id", "ri"), size, total)
    items = [photo_app.reel(s, i - new, owner, trim) for i in range(lo, hi)]
    more = hi < total
    token = cursors.encode("ri", hi, s) if more or (ctx.dangling and lo < hi) else None
    body: dict[str, Any]
    if trim:
        body = {"items": items, "max_id": token}
    else:
        body = {
            "items": [{"media": r} for r in items],
            "paging_info": {"max_id": token, "more_available": more},
        }
    page = ServedPage(body, {"reels": items})
    if token is not None:
        if more or trim:
            page.next = {"max_id": token}
        else:
            page.dangling = {"max_id": token}
    return page


END_OF_PINS = "-end-"
"""The cursor value pin search ends its pages with (a sentinel, not a cursor to send back)."""


def pins(ctx: Ctx) -> ServedPage:
    """Pin search; `trim` drops `title`, `link`, `domain` and `board`. Pages end as the service ends them: the
    last page of pins still carries a cursor, and it answers (billed) `"cursor": "-end-"` and no `pins`, while
    the dangling quirk is on; the `sentinel-with-pins` drift puts `-end-` on the last page of pins itself."""
    s = ctx.scope()
    size = ctx.size
    trim = ctx.params.flag("trim")
    total = _single_total(ctx, s, "pins", size)
    start = _opaque_start(ctx, s, "cursor", "pn")
    drift = ctx.config.drift
    sentinel = ctx.dangling and not drift.interface_names  # the interface names no sentinel
    if start >= total > 0 and sentinel:
        return ServedPage({"cursor": END_OF_PINS}, {"pins": []})
    lo, hi = window(start, size, total)
    items = [pinboard.pin(s, i, trim) for i in with_repeat(ctx, lo, hi, total)]
    page = ServedPage({"pins": items, "cursor": None}, {"pins": items})
    if hi < total or (sentinel and lo < hi and not drift.sentinel_with_records):
        page.next = {"cursor": cursors.encode("pn", hi, s)}
        page.body["cursor"] = page.next["cursor"]
    elif lo < hi and drift.sentinel_with_records:
        page.body["cursor"] = END_OF_PINS
    return page


def video_search(ctx: Ctx) -> ServedPage:
    """Video search: six result lists a page; `filter=shorts` (alone with a query) returns shorts only;
    `includeExtras` adds like count, comment count and description to videos and shorts."""
    s = ctx.scope()
    size = ctx.size
    extras = ctx.params.flag("includeExtras")
    if ctx.params.get("filter") == "shorts":
        per_page = {"videos": 0, "channels": 0, "playlists": 0, "shorts": size, "shelves": 0, "lives": 0}
        primary = "shorts"
    else:
        small = max(1, size // 10)
        per_page = {
            "videos": size,
            "channels": small,
            "playlists": small,
            "shorts": max(1, size // 5),
            "shelves": 1,
            "lives": max(1, size // 20),
        }
        primary = "videos"
    plan = ctx.page_plan(s, per_page, primary)
    page_no = _opaque_start(ctx, s, "continuationToken", "vs")
    lists = {
        "videos": _multi_page(ctx, plan, page_no, "videos", lambda i: video_platform.video(s, i, extras)),
        "channels": _multi_page(ctx, plan, page_no, "channels", lambda i: video_platform.channel(s, i)),
        "playlists": _multi_page(ctx, plan, page_no, "playlists", lambda i: video_platform.playlist(s, i)),
        "shorts": _multi_page(ctx, plan, page_no, "shorts", lambda i: video_platform.short(s, i, extras)),
        "shelves": _multi_page(ctx, plan, page_no, "shelves", lambda i: video_platform.shelf(s, i, extras)),
        "lives": _multi_page(ctx, plan, page_no, "lives", lambda i: video_platform.live(s, i)),
    }
    return _opaque_page(lists, "continuationToken", "vs", s, plan, page_no)


def comment_replies(ctx: Ctx) -> ServedPage:
    """Comment replies: the token is the identity (first call: the comment's `repliesContinuationToken`) and
    later tokens carry that root plus the offset."""
    root, start = cursors.decode_replies(ctx.params.get("continuationToken") or "")
    s = ctx.scope(identity=f"root={root}")
    size = ctx.size
    total = _single_total(ctx, s, "comments", size)
    lo, hi = window(start, size, total)
    items = [video_platform.comment_reply(s, i) for i in range(lo, hi)]
    page = ServedPage({"comments": items, "continuationToken": None}, {"comments": items})
    if hi < total:
        page.next = {"continuationToken": cursors.encode_replies(root, hi)}
        page.body["continuationToken"] = page.next["continuationToken"]
    return page


def profile_videos(ctx: Ctx) -> ServedPage:
    """Short-video profile: `max_cursor` is the last video's `create_time` in ms. The last page says
    `has_more: 0` but keeps a non-zero `max_cursor` while the dangling quirk is on; trimmed answers have no
    `has_more`, so a trimmed client can only stop on a zero `max_cursor`."""
    s = ctx.scope()
    size = ctx.size
    trim = ctx.params.flag("trim")
    handle = ctx.params.get("handle") or ""
    new = ctx.new_items
    total = _single_total(ctx, s, "videos", size) + new
    token = ctx.params.get("max_cursor")
    start = 0 if token is None else cursors.parse_ms_cursor(s, token, floor=-new) + new
    author = {
        "uid": ctx.params.get("user_id") or subject_id(s, handle),
        "unique_id": handle,
        "nickname": handle.replace("_", " ").title(),
        "sec_uid": "MS4wLjABAAAA" + subject_secret(s, ctx.params.get("user_id") or handle, 40),
        "avatar_meta_info_list": [],
    }
    lo, hi = window(start, size, total)
    items = [short_video.aweme(s, i - new, author) for i in range(lo, hi)]
    more = hi < total
    cursor = cursors.ms_cursor(s, hi - 1 - new) if more or (ctx.dangling and lo < hi) else 0
    body: dict[str, object] = {"aweme_list": items}
    if not trim:
        body["has_more"] = 1 if more else 0
    body["max_cursor"] = cursor
    page = ServedPage(body, {"videos": items})
    if cursor:
        if more or trim:
            page.next = {"max_cursor": str(cursor)}
        else:
            page.dangling = {"max_cursor": str(cursor)}
    return page
