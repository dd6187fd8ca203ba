"""Builders of the single-page endpoints (one answer per request, no cursor).

Record counts (tweets of a community, replies of a thread, ...) come from the query's stable hash, bounded by
the configured page size.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from harvest.sandbox.emulation.page import Ctx, ServedPage
from harvest.sandbox.emulation.platforms import (
    Record,
    microblog_b,
    streaming,
)
from harvest.sandbox.emulation.stablehash import span


def clip_identity(url: str) -> str:
    """A clip URL names the same clip whatever query string it carries (tracking parameters and the like)."""
    return url.split("?", 1)[0].split("#", 1)[0].rstrip("/")


def clip(ctx: Ctx) -> ServedPage:
    """Streaming clip: a bare JSON array of three objects, no envelope (the one exception of the service)."""
    url = clip_identity(ctx.params.get("url") or "")
    s = ctx.scope(identity=f"url={url}")
    owner = streaming.broadcaster(s)
    main = streaming.clip(s, 0, owner)
    slug = urlsplit(url).path.rsplit("/", 1)[-1]
    if slug and slug != "clip":
        # The clip the URL names: its slug, its URL (without the URL's query string).
        main["slug"] = slug
        main["url"] = url
        main["embedURL"] = f"https://clips.streaming.example/embed?clip={slug}"
    more = [
        streaming.other_clip(s, i, owner)
        for i in range(1, 1 + span(0, min(ctx.size, 20), s.key, "more_clips"))
    ]
    clips = {  # a GraphQL connection, as the platform pages them
        "pageInfo": {"hasNextPage": False},
        "edges": [{"cursor": None, "node": other} for other in more],
    }
    body = [
        {"data": {"clip": main}},
        {"data": {"user": {"id": owner["id"], "clips": clips}}},
        {"data": {"user": owner}},
    ]
    return ServedPage(body, {"clips": [main], "broadcaster_clips": more}, envelope=False)


def thread(ctx: Ctx) -> ServedPage:
    """Microblog-b single post with its threaded replies, as the service sends them: each reply a thread view
    (`{"$type", "post", "replies", "threadContext"}`) naming its parent in `post.record.reply`, the replies to a
    reply nested in its view."""
    url = ctx.params.get("url") or ""
    s = ctx.scope()
    split = urlsplit(url)
    parts = split.path.strip("/").split("/")
    at_uri = split.scheme == "at" and bool(split.netloc) and len(parts) >= 2
    who = split.netloc if at_uri else parts[1] if len(parts) >= 2 and parts[0] == "profile" else "author"
    author = microblog_b.author(s, who)
    if (
        at_uri and microblog_b.tid_time(parts[-1]) is not None
    ):  # a feed's post, asked for by its uri: that post
        post = microblog_b.post_at(s, "feed", author, parts[-1])
    else:
        post = microblog_b.post(s, "post", 0, author)
    replies: list[Record] = []
    views: list[Record] = []
    top: list[Record] = []
    for i in range(1, 1 + span(0, ctx.size, s.key, "replies")):
        at = None if i == 1 or i % 3 else (i - 1) // 3 - 1
        parent = post if at is None else replies[at]
        reply = microblog_b.post(s, "reply", i, microblog_b.author(s, f"replier{i % 7}"), parent, post)
        view = microblog_b.thread_view(reply, [])
        (top if at is None else views[at]["replies"]).append(view)
        replies.append(reply)
        views.append(view)
    return ServedPage({"post": post, "replies": top}, {"posts": [post], "replies": replies})
