"""Records of microblog-b (`/v1/microblog-b/...`): posts of a thread or a feed, and their authors."""

from __future__ import annotations

from harvest.sandbox.emulation.platforms import Record
from harvest.sandbox.emulation.platforms.wording import NAMES, phrase, user_handle
from harvest.sandbox.emulation.scope import Scope, iso
from harvest.sandbox.emulation.stablehash import Draw, hexid, hnum
from harvest.sandbox.emulation.subjects import did_handle, subject_id


def author(s: Scope, who: str) -> Record:
    """The author of a feed or thread, from the handle or did the request named: one account, the same on every
    endpoint (its did holds its handle: `subjects.subject_did`)."""
    if who.startswith("did:"):
        did = who
        handle = (
            did_handle(s, who)
            or f"{user_handle(Draw(s.key, 'author', who)).replace('_', '-')}.microblog-b.example"
        )
    else:
        handle = who
        did = subject_id(s, who, did=True)
    d = Draw(s.seed, "author", handle)
    return {
        "did": did,
        "handle": handle,
        "displayName": f"{d.pick(NAMES)} {d.pick(NAMES)}",
        "avatar": f"https://cdn.microblog-b.example/avatar/{did}.jpg",
        "labels": [],
        "verification": {
            "verifications": [],
            "verifiedStatus": d.pick(("valid", "none", "none")),
            "trustedVerifierStatus": "none",
        },
    }


def post(
    s: Scope, kind: str, pos: int, author: Record, parent: Record | None = None, root: Record | None = None
) -> Record:
    """A post; a reply names its `parent` and its thread's `root` in `record.reply`, as the platform does."""
    micros = s.time(pos) * 1_000_000 + hnum(s.key, kind, pos) % 1_000_000
    return post_at(s, kind, author, _tid(micros, hnum(s.key, "clock", kind, pos) % 1024), parent, root)


_TID = "234567abcdefghijklmnopqrstuvwxyz"
"""The alphabet of a record key (a TID: the time it was made, in microseconds, and a clock id), sorting as
its times do."""


def _tid(micros: int, clock: int) -> str:
    n = micros << 10 | clock
    return "".join(_TID[n >> (5 * k) & 31] for k in reversed(range(13)))


def tid_time(rkey: str) -> int | None:
    """The epoch second a record key (`_tid`) was made at; None for another key."""
    if len(rkey) != 13 or any(c not in _TID for c in rkey):
        return None
    n = 0
    for c in rkey:
        n = n << 5 | _TID.index(c)
    return (n >> 10) // 1_000_000


def post_at(
    s: Scope, kind: str, author: Record, rkey: str, parent: Record | None = None, root: Record | None = None
) -> Record:
    """The post `rkey` of `author`, the same on every endpoint (its values drawn from its URI, its time read
    from its key): the thread asked for a feed's post answers that very post."""
    uri = f"at://{author['did']}/app.bsky.feed.post/{rkey}"
    d = Draw(s.seed, uri)
    t = iso(tid_time(rkey) or 0)
    embed: Record | None = None
    linked: Record | None = None
    if kind == "post":  # the post a thread is about links a page, as the published one
        embed = {
            "$type": "app.bsky.embed.external#view",
            "external": {
                "uri": f"https://news.example/{rkey}",
                "title": phrase(d, 3, 10),
                "description": phrase(d, 8, 30),
                "thumb": f"https://cdn.microblog-b.example/img/{rkey}.jpg",
            },
        }
    elif d.chance(0.3):  # others embed images: one row each in a child table
        embed = {
            "$type": "app.bsky.embed.images#view",
            "images": [_image(d, rkey, n) for n in range(d.num(1, 4))],
        }
    elif kind == "feed" and d.chance(
        0.3
    ):  # a feed post's link is in its record, as the published feed has it
        external = {"uri": f"https://news.example/{rkey}", "title": phrase(d, 3, 10)}
        linked = {"$type": "app.bsky.embed.external", "external": external}
    return {
        "uri": uri,
        "cid": "bafyrei" + hexid(52, s.seed, uri),
        "record": {
            "createdAt": t,
            "text": phrase(d, 3, 40),
            "langs": ["en"],
            "facets": [],
            **({} if parent is None else {"reply": {"parent": _ref(parent), "root": _ref(root or parent)}}),
            **({} if linked is None else {"embed": linked}),
        },
        "author": dict(author),
        "embed": {} if linked else embed,
        "replyCount": d.num(0, 200),
        "repostCount": d.num(0, 500),
        "likeCount": d.num(0, 5000),
        "quoteCount": d.num(0, 50),
        "indexedAt": t,
        "labels": [],
    }


def _image(d: Draw, rkey: str, n: int) -> Record:
    """An embedded image as the platform's images view has it."""
    return {
        "thumb": f"https://cdn.microblog-b.example/img/{rkey}-{n}-thumb.jpg",
        "fullsize": f"https://cdn.microblog-b.example/img/{rkey}-{n}.jpg",
        "alt": phrase(d, 1, 4),
        "aspectRatio": {"width": 1200, "height": d.pick((675, 900, 1200, 1600))},
    }


def _ref(post: Record) -> Record:
    return {"cid": post["cid"], "uri": post["uri"]}


def thread_view(post: Record, replies: list[Record]) -> Record:
    """A reply as a thread answers it: the post wrapped, with the replies to it nested."""
    return {
        "$type": "app.bsky.feed.defs#threadViewPost",
        "post": post,
        "replies": replies,
        "threadContext": {},
    }
