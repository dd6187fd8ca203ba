"""Records of the social network's public pages and groups (`/v1/network-a/...`)."""

from __future__ import annotations

from sandbox.emulation.platforms import Record
from sandbox.emulation.platforms.wording import NAMES, phrase
from sandbox.emulation.scope import Scope
from sandbox.emulation.stablehash import Draw, hexid


def photo(s: Scope, pos: int) -> Record:
    d = Draw(s.key, "photo", pos)
    pid = s.numid("photo", pos, 16)
    w, h = d.pick(((1080, 1080), (1080, 1350), (1920, 1080), (720, 960)))
    return {
        "photo_id": pid,
        "accessibility_caption": f"May be an image of {phrase(d, 2, 5)}",
        "viewer_image": {"uri": f"https://scontent.network-a.example/v/{pid}_n.jpg", "height": h, "width": w},
        "thumbnail": f"https://scontent.network-a.example/v/{pid}_s.jpg",
        "url": f"https://www.network-a.example/photo/?fbid={pid}",
    }


def group_post(s: Scope, pos: int) -> Record:
    d = Draw(s.key, "group_post", pos)
    pid = s.numid("group_post", pos, 16)
    has_video = d.chance(0.25)
    return {
        "id": pid,
        "text": phrase(d, 5, 30),
        "url": f"https://www.network-a.example/groups/{hexid(8, s.key)}/posts/{pid}/",
        "reactionCount": d.num(0, 5000),
        "commentCount": d.num(0, 400),
        "publishTime": s.time(pos),
        "videoDetails": (
            {
                "id": s.numid("group_video", pos, 15),
                "durationSeconds": d.num(5, 900),
                "viewCount": d.num(0, 10**6),
            }
            if has_video
            else None
        ),
        "topComments": [
            {"id": f"{pid}_{i}", "text": phrase(d, 3, 12), "author": f"{d.pick(NAMES)} {d.pick(NAMES)}"}
            for i in range(d.num(0, 3))
        ],
    }
