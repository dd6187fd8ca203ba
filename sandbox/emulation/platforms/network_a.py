"""Records of the social network's public pages and groups (`/v1/network-a/...`)."""

from __future__ import annotations

from harvest.sandbox.emulation.platforms import Record
from harvest.sandbox.emulation.platforms.wording import NAMES, phrase
from harvest.sandbox.emulation.scope import Scope
from harvest.sandbox.emulation.stablehash import Draw, hexid


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
    group = hexid(8, s.key)
    author = f"{d.pick(NAMES)} {d.pick(NAMES)}"
    author_id = s.numid("group_author", pos, 14)
    return {
        "id": pid,
        "text": phrase(d, 5, 30),
        "url": f"https://www.network-a.example/groups/{group}/permalink/{pid}/",
        "permalink": f"https://www.network-a.example/{author_id}/posts/{pid}/?idorvanity={group}",
        "author": {"name": author, "id": author_id},
        "reactionCount": d.num(0, 5000),
        "commentCount": d.num(0, 400),
        "videoViewCount": d.num(0, 10**6) if has_video else None,
        "publishTime": s.time(pos),
        "videoDetails": (
            {
                "sdUrl": f"https://video.network-a.example/v/{s.numid('group_video', pos, 15)}_sd.mp4",
                "hdUrl": f"https://video.network-a.example/v/{s.numid('group_video', pos, 15)}_hd.mp4",
                "thumbnailUrl": f"https://scontent.network-a.example/v/{s.numid('group_video', pos, 15)}.jpg",
            }
            if has_video
            else None
        ),
        "topComments": [
            {
                "id": f"{pid}_{i}",
                "text": phrase(d, 3, 12),
                "publishTime": s.time(pos) + 60 * (i + 1),
                "author": {
                    "id": s.numid("comment_author", pos * 3 + i, 14),
                    "name": f"{d.pick(NAMES)} {d.pick(NAMES)}",
                    "url": f"https://network-a.example/profile/{s.numid('comment_author', pos * 3 + i, 14)}"
                    if i % 2 == 0
                    else None,  # the published answers leave some out
                },
            }
            for i in range(d.num(0, 3))
        ],
    }
