"""Records of microblog-b (`/v1/microblog-b/...`): posts of a thread or a feed, and their authors."""

from __future__ import annotations

from sandbox.emulation.platforms import Record
from sandbox.emulation.platforms.wording import NAMES, phrase, user_handle
from sandbox.emulation.scope import Scope, b36, iso
from sandbox.emulation.stablehash import Draw, hexid


def author(s: Scope, who: str) -> Record:
    """The author of a feed or thread, from the handle or did the request named."""
    d = Draw(s.key, "author", who)
    if who.startswith("did:"):
        did = who
        handle = f"{user_handle(d).replace('_', '-')}.microblog-b.example"
    else:
        handle = who
        did = "did:plc:" + hexid(24, s.key, "did", who)
    return {
        "did": did,
        "handle": handle,
        "displayName": f"{d.pick(NAMES)} {d.pick(NAMES)}",
        "avatar": f"https://cdn.microblog-b.example/avatar/{did}.jpg",
    }


def post(s: Scope, kind: str, pos: int, author: Record) -> Record:
    d = Draw(s.key, kind, pos)
    rkey = b36(int(s.numid(kind, pos, 19)))
    t = iso(s.time(pos))
    embed = None
    if d.chance(0.3):
        embed = {
            "$type": "app.bsky.embed.images#view",
            "images": [{"thumb": f"https://cdn.microblog-b.example/img/{rkey}.jpg", "alt": phrase(d, 1, 4)}],
        }
    return {
        "uri": f"at://{author['did']}/app.bsky.feed.post/{rkey}",
        "cid": "bafyrei" + hexid(52, s.key, kind, pos),
        "record": {"text": phrase(d, 3, 40), "createdAt": t},
        "author": dict(author),
        "embed": embed,
        "replyCount": d.num(0, 200),
        "repostCount": d.num(0, 500),
        "likeCount": d.num(0, 5000),
        "quoteCount": d.num(0, 50),
        "indexedAt": t,
    }
