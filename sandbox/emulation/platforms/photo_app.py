"""Records of the photo app's reels (`/v1/photo-app/user/reels`)."""

from __future__ import annotations

from harvest.sandbox.emulation.platforms import Record
from harvest.sandbox.emulation.platforms.wording import phrase, user_handle
from harvest.sandbox.emulation.scope import Scope, b64int
from harvest.sandbox.emulation.stablehash import Draw, hexid, hnum

_PA = "https://www.photo-app.example"


def reel_owner(s: Scope, who: str) -> Record:
    d = Draw(s.key, "owner", who)
    return {
        "id": who if who.isdigit() else s.numid("owner", 0, 11),
        "username": who if not who.isdigit() else user_handle(d),
        "hd_profile_pic_versions": [],
    }


def reel(s: Scope, pos: int, owner: Record, trim: bool) -> Record:
    d = Draw(s.key, "reel", pos)
    media = s.numid("reel", pos, 19)
    code = b64int(hnum(s.key, "reel_code", pos), 11)
    video_url = f"https://scontent.photo-app.example/v/t50/{media}_n.mp4?efg={hexid(24, s.key, 'v', pos)}"
    thumb = f"https://scontent.photo-app.example/v/t51/{media}_n.jpg"
    base: Record = {
        "id": f"{media}_{owner['id']}",
        "code": code,
        "url": f"{_PA}/reel/{code}/",
        "taken_at": s.time(pos),
        "caption": {"text": phrase(d, 2, 20)} if d.chance(0.8) else None,
        "play_count": d.num(0, 20_000_000),
        "like_count": d.num(0, 2_000_000),
        "comment_count": d.num(0, 50000),
        "image_versions2": {"candidates": [{"url": thumb, "width": 640, "height": 1136}]},
    }
    if not trim:  # a trimmed reel has no video URLs, as the service trims
        base["video_versions"] = [
            {"url": video_url, "width": 720, "height": 1280},
            {"url": video_url.replace("_n.mp4", "_l.mp4"), "width": 480, "height": 854},
        ]
    base["owner"] = dict(owner)
    return base
