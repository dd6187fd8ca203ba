"""Records of the subreddit search (`served_paths.FORUM_SEARCH`): posts, comments and media, named as the service's
published answers name them (a medium's dimensions under `image`)."""

from __future__ import annotations

from harvest.sandbox.emulation.platforms import Record
from harvest.sandbox.emulation.platforms.wording import phrase, title, user_handle
from harvest.sandbox.emulation.scope import Scope, b36, iso
from harvest.sandbox.emulation.stablehash import Draw


def post(s: Scope, pos: int, subreddit: str) -> Record:
    d = Draw(s.key, "forum_post", pos)
    pid = "t3_" + b36(int(s.numid("forum_post", pos, 12)))
    return {
        "id": pid,
        "title": title(d, 3, 12),
        "url": f"https://www.forum.example/comments/{pid[3:]}/",
        "permalink": f"/comments/{pid[3:]}/",
        "subreddit": {"name": subreddit},
        "votes": d.num(-20, 25000),
        "num_comments": d.num(0, 3000),
        "created_at": iso(s.time(pos)),
    }


def comment(s: Scope, pos: int) -> Record:
    d = Draw(s.key, "forum_comment", pos)
    cid = "t1_" + b36(int(s.numid("forum_comment", pos, 12)))
    post_id = "t3_" + b36(int(s.numid("forum_parent", pos, 12)))
    return {
        "id": cid,
        "post_id": post_id,
        "parent_comment_id": None,
        "author": user_handle(d),
        "body": phrase(d, 4, 40),
        "votes": d.num(-10, 5000),
        "permalink": f"/comments/{post_id[3:]}/c/{cid[3:]}/",
        "created_at": iso(s.time(pos) - 60),
        "post": {
            "id": post_id,
            "title": title(d),
            "url": f"https://www.forum.example/comments/{post_id[3:]}/",
        },
    }


def media(s: Scope, pos: int) -> Record:
    d = Draw(s.key, "forum_media", pos)
    mid = "t3_" + b36(int(s.numid("forum_media", pos, 12)))
    media_type = d.pick(("image", "gallery", "video"))
    w, h = d.pick(((1080, 1080), (1920, 1080), (1080, 1920), (800, 600)))
    return {
        "id": mid,
        "title": title(d),
        "url": f"https://www.forum.example/comments/{mid[3:]}/",
        "permalink": f"/comments/{mid[3:]}/",
        "media_type": media_type,
        "image": {
            "src": f"https://i.forum.example/{mid[3:]}.jpg",
            "width": w,
            "height": h,
            "resolutions": [],
        },
        "gallery_count": d.num(2, 20) if media_type == "gallery" else None,
    }
