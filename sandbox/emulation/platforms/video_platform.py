"""Records of the video platform (`/v1/video-platform/...`): the six kinds of search results and comment replies, named as the service's published answers name them (`viewCountInt`, a channel
with a `handle`, `author.avatarUrl`, `engagement.likes`)."""

from __future__ import annotations

import re

from harvest.sandbox.emulation.platforms import Record
from harvest.sandbox.emulation.platforms.wording import NAMES, ago, clock, count_text, phrase, title
from harvest.sandbox.emulation.scope import Scope, b64int, iso
from harvest.sandbox.emulation.stablehash import Draw, hexid, hnum
from harvest.sandbox.emulation.subjects import subject_id

_VP = "https://www.video-platform.example"
VIDEO_URL = re.compile(
    r"(?P<url>https://(?:www\.)?video-platform\.example/(?:watch\?v=|shorts/)(?P<key>[A-Za-z0-9_-]+)(?:[?&/].*)?)"
)
"""A video's or a short's URL, as `_video_like` makes it (and as the platform writes it): a video detail asked
for with it is about that video, its key the URL's id (`generic.joined_values`); the URL itself names the
video's channel (`url`: `subjects.subject_id` of it), as the search result's `channel.id` does."""


def _published(s: Scope, pos: int) -> Record:
    """When a record was published, as the service sends it: the platform's relative text, and the time the
    service computes from it (`Scope.age`: on the day of the sandbox's clock)."""
    at = s.time(pos)
    return {"publishedTime": iso(at), "publishedTimeText": ago(s.age(at))}


def channel_ref(s: Scope, kind: str, pos: int) -> Record:
    """A channel as a community post or a channel result names it: id, title, url and handle."""
    d = Draw(s.key, kind, "channel", pos)
    cid = "UC" + b64int(hnum(s.key, kind, "channel", pos), 22)
    name = title(d, 1, 3)
    handle = name.lower().replace(" ", "")
    return {"id": cid, "title": name, "url": f"{_VP}/@{handle}", "handle": handle}


def _video_channel(s: Scope, kind: str, pos: int) -> Record:
    """A search result's channel: a handle, no url."""
    ref = channel_ref(s, kind, pos)
    return {"id": ref["id"], "title": ref["title"], "handle": ref["handle"]}


def _video_like(s: Scope, kind: str, pos: int, extras: bool) -> Record:
    d = Draw(s.key, kind, pos)
    vid = b64int(int(s.numid(kind, pos, 18)), 11)
    views = d.num(0, 50_000_000)
    length = d.num(5, 59) if kind == "short" else d.num(30, 7200)
    url = f"{_VP}/shorts/{vid}" if kind == "short" else f"{_VP}/watch?v={vid}"
    rec: Record = {
        "id": vid,
        "url": url,
        "title": title(d, 2, 10),
        "thumbnail": f"https://i.video-platform.example/vi/{vid}/hqdefault.jpg",
        # the channel the video's details name too: what its URL names (`VIDEO_URL`)
        "channel": {**_video_channel(s, kind, pos), "id": subject_id(s, url)},
        "viewCountText": count_text(views, "views"),
        "viewCountInt": views,
        **_published(s, pos),
        "lengthText": clock(length),
        "lengthSeconds": length,
        "badges": d.sample(("New", "4K", "CC", "Live"), d.num(0, 2)),
    }
    if extras:  # named as the video endpoint's answer names them (the interface: `likeCount`, `commentCount`)
        rec["likeCountInt"] = d.num(0, 1_000_000)
        rec["commentCountInt"] = d.num(0, 50_000)
        rec["description"] = phrase(d, 5, 40)
    return rec


def video(s: Scope, pos: int, extras: bool) -> Record:
    return _video_like(s, "video", pos, extras)


def short(s: Scope, pos: int, extras: bool) -> Record:
    return _video_like(s, "short", pos, extras)


def channel(s: Scope, pos: int) -> Record:
    d = Draw(s.key, "channel_result", pos)
    ref = channel_ref(s, "channel_result", pos)
    return {
        "id": ref["id"],
        "title": ref["title"],
        "url": ref["url"],
        "subscriberCount": d.num(0, 20_000_000),
    }


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
        "items": [
            {"type": "video", **_video_like(s, "shelf_item", pos * 3 + i, extras)} for i in range(d.num(1, 4))
        ],
    }


def comment_reply(s: Scope, pos: int) -> Record:
    d = Draw(s.key, "reply", pos)
    handle = f"@{d.pick(NAMES).lower()}{d.num(1, 9999)}"
    return {
        "id": "Ugz" + b64int(int(s.numid("reply", pos, 18)), 20) + ".reply",
        "content": phrase(d, 2, 30),
        **_published(s, pos),
        "replyLevel": 1,
        "author": {
            "name": handle,
            "channelId": "UC" + b64int(hnum(s.key, "reply_author", pos), 22),
            "isVerified": d.chance(0.05),
            "isCreator": d.chance(0.05),
            "avatarUrl": f"https://yt3.video-platform.example/ytc/{hexid(20, s.key, 'av', pos)}=s88",
            "channelUrl": f"https://video-platform.example/{handle}",
        },
        "engagement": {"likes": d.num(0, 20000), "replies": 0},
    }
