"""Records of the video platform (`/v1/video-platform/...`): the community post, the six kinds of
search results and comment replies."""

from __future__ import annotations

from sandbox.emulation.platforms import Record
from sandbox.emulation.platforms.wording import NAMES, phrase, title
from sandbox.emulation.scope import Scope, b64int, iso
from sandbox.emulation.stablehash import Draw, hexid, hnum

_VP = "https://www.video-platform.example"


def channel_ref(s: Scope, kind: str, pos: int) -> Record:
    d = Draw(s.key, kind, "channel", pos)
    cid = "UC" + b64int(hnum(s.key, kind, "channel", pos), 22)
    return {"id": cid, "title": title(d, 1, 3), "url": f"https://www.video-platform.example/channel/{cid}"}


def community_post(s: Scope) -> Record:
    d = Draw(s.key, "community_post")
    pid = "Ugkx" + b64int(hnum(s.key, "community_post"), 32)
    has_video = d.chance(0.4)
    vid = b64int(hnum(s.key, "community_video"), 11)
    return {
        "id": pid,
        "channel": channel_ref(s, "community", 0),
        "content": phrase(d, 5, 40),
        "images": [
            f"https://yt3.video-platform.example/{hexid(24, s.key, i)}=s1024" for i in range(d.num(0, 4))
        ],
        "likeCount": d.num(0, 100000),
        "publishedTime": iso(s.time(0)),
        "video": (
            {"id": vid, "title": title(d), "url": f"https://www.video-platform.example/watch?v={vid}"}
            if has_video
            else None
        ),
    }


def _video_like(s: Scope, kind: str, pos: int, extras: bool) -> Record:
    d = Draw(s.key, kind, pos)
    vid = b64int(int(s.numid(kind, pos, 18)), 11)
    rec: Record = {
        "id": vid,
        "title": title(d, 2, 10),
        "url": f"{_VP}/shorts/{vid}" if kind == "short" else f"{_VP}/watch?v={vid}",
        "thumbnail": f"https://i.video-platform.example/vi/{vid}/hqdefault.jpg",
        "views": d.num(0, 50_000_000),
        "publishedTime": iso(s.time(pos)),
        "lengthSeconds": d.num(5, 59) if kind == "short" else d.num(30, 7200),
        "channel": channel_ref(s, kind, pos),
        "badges": d.sample(("New", "4K", "CC", "Live"), d.num(0, 2)),
    }
    if extras:
        rec["likeCount"] = d.num(0, 1_000_000)
        rec["commentCount"] = d.num(0, 50_000)
        rec["description"] = phrase(d, 5, 40)
    return rec


def video(s: Scope, pos: int, extras: bool) -> Record:
    return _video_like(s, "video", pos, extras)


def short(s: Scope, pos: int, extras: bool) -> Record:
    return _video_like(s, "short", pos, extras)


def channel(s: Scope, pos: int) -> Record:
    d = Draw(s.key, "channel_result", pos)
    ref = channel_ref(s, "channel_result", pos)
    return {**ref, "subscriberCount": d.num(0, 20_000_000)}


def playlist(s: Scope, pos: int) -> Record:
    d = Draw(s.key, "playlist", pos)
    pid = "PL" + b64int(int(s.numid("playlist", pos, 18)), 32)
    return {
        "id": pid,
        "title": title(d),
        "url": f"https://www.video-platform.example/playlist?list={pid}",
        "videoCount": d.num(1, 500),
    }


def live(s: Scope, pos: int) -> Record:
    d = Draw(s.key, "live", pos)
    vid = b64int(int(s.numid("live", pos, 18)), 11)
    return {
        "id": vid,
        "title": title(d),
        "url": f"https://www.video-platform.example/watch?v={vid}",
        "watching": d.num(0, 100000),
    }


def shelf(s: Scope, pos: int, extras: bool) -> Record:
    d = Draw(s.key, "shelf", pos)
    return {
        "type": d.pick(("shelf", "horizontal_shelf", "people_also_watched")),
        "title": f"{title(d, 1, 3)} #{pos + 1}",
        "items": [_video_like(s, "shelf_item", pos * 3 + i, extras) for i in range(3)],
    }


def comment_reply(s: Scope, pos: int) -> Record:
    d = Draw(s.key, "reply", pos)
    name = d.pick(NAMES)
    return {
        "id": "Ugz" + b64int(int(s.numid("reply", pos, 18)), 20) + ".reply",
        "content": phrase(d, 2, 30),
        "author": {
            "name": f"@{name.lower()}{d.num(1, 9999)}",
            "channelId": "UC" + b64int(hnum(s.key, "reply_author", pos), 22),
            "avatar": f"https://yt3.video-platform.example/ytc/{hexid(20, s.key, 'av', pos)}=s88",
            "isVerified": d.chance(0.05),
            "isCreator": d.chance(0.05),
        },
        "likeCount": d.num(0, 20000),
        "publishedTime": iso(s.time(pos)),
    }
