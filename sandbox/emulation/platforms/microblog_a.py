"""Records of microblog-a's community tweets (`served_paths.TWEETS`), named as the service's published answers name
them: the author's name and handle under `user.core`, followers under `user.legacy`, the avatar an object, the
view count as text."""

from __future__ import annotations

from harvest.sandbox.emulation.platforms import Record
from harvest.sandbox.emulation.platforms.wording import NAMES, phrase, tweet_date
from harvest.sandbox.emulation.scope import Scope
from harvest.sandbox.emulation.stablehash import Draw, hexid


def tweet(s: Scope, pos: int) -> Record:
    d = Draw(s.key, "tweet", pos)
    name = d.pick(NAMES)
    tid = s.numid("tweet", pos, 19)
    uid = s.numid("tweet_user", pos, 10)
    return {
        "id": tid,
        "source": d.pick(("Web App", "iPhone", "Android")),
        "view_count": str(d.num(0, 2_000_000)),
        "bookmark_count": d.num(0, 2000),
        "created_at": tweet_date(s.time(pos)),
        "favorite_count": d.num(0, 50000),
        "full_text": phrase(d, 3, 40),
        "lang": d.pick(("en", "en", "es", "de", "ja")),
        "quote_count": d.num(0, 500),
        "reply_count": d.num(0, 3000),
        "retweet_count": d.num(0, 10000),
        "user_id_str": uid,
        "conversation_id_str": tid,
        "is_quote_status": False,
        "possibly_sensitive": False,
        "user": {
            "rest_id": uid,
            "avatar": {
                "image_url": f"https://pbs.microblog-a.example/profile_images/{hexid(16, s.key, 'u', pos)}.jpg"
            },
            "core": {
                "name": f"{name} {d.pick(NAMES)}",
                "screen_name": f"{name.lower()}{d.num(1, 99999)}",
            },
            "is_blue_verified": d.chance(0.2),
            "legacy": {"followers_count": d.num(0, 3_000_000)},
            "professional": {"category": []},
        },
    }
