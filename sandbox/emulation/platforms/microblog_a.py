"""Records of microblog-a's community tweets (`served_paths.TWEETS`)."""

from __future__ import annotations

from sandbox.emulation.platforms import Record
from sandbox.emulation.platforms.wording import NAMES, phrase
from sandbox.emulation.scope import Scope, iso
from sandbox.emulation.stablehash import Draw, hexid


def tweet(s: Scope, pos: int) -> Record:
    d = Draw(s.key, "tweet", pos)
    name = d.pick(NAMES)
    return {
        "id": s.numid("tweet", pos, 19),
        "full_text": phrase(d, 3, 40),
        "view_count": d.num(0, 2_000_000),
        "favorite_count": d.num(0, 50000),
        "retweet_count": d.num(0, 10000),
        "reply_count": d.num(0, 3000),
        "bookmark_count": d.num(0, 2000),
        "quote_count": d.num(0, 500),
        "created_at": iso(s.time(pos)),
        "source": d.pick(("Web App", "iPhone", "Android")),
        "user": {
            "name": f"{name} {d.pick(NAMES)}",
            "screen_name": f"{name.lower()}{d.num(1, 99999)}",
            "avatar": f"https://pbs.microblog-a.example/profile_images/{hexid(16, s.key, 'u', pos)}.jpg",
            "followers_count": d.num(0, 3_000_000),
            "is_blue_verified": d.chance(0.2),
        },
    }
