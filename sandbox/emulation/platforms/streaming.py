"""Records of the streaming platform's clip endpoint (`served_paths.CLIP`)."""

from __future__ import annotations

from harvest.sandbox.emulation.platforms import Record
from harvest.sandbox.emulation.platforms.wording import phrase, title, user_handle
from harvest.sandbox.emulation.scope import Scope, iso
from harvest.sandbox.emulation.stablehash import Draw, hexid

GAMES = ("Just Chatting", "Minecraft", "Chess", "Valorant", "Fortnite", "Art", "Music", "Retro")
LANGS = ("en", "en", "en", "de", "fr", "es", "pt", "ja")
_ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"
QUALITIES = ("1080", "720", "480", "360")
TYPE = "ClipVideoQuality"


def broadcaster(s: Scope) -> Record:
    d = Draw(s.key, "broadcaster")
    login = user_handle(d)
    return {
        "id": s.numid("broadcaster", 0, 9),
        "login": login,
        "displayName": login.replace("_", " ").title().replace(" ", ""),
        "followers": {"totalCount": d.num(10, 5_000_000), "__typename": "FollowerConnection"},
    }


def clip(s: Scope, pos: int, owner: Record) -> Record:
    """The clip a request names: its broadcaster in full, its qualities and its signed video URL. As the service
    sends them, each quality's name and frame rate are in `assets[0].videoQualities`, the top-level
    `videoQualities` has only the URLs. The broadcaster's other clips (`other_clip`) come without them."""
    d = Draw(s.key, "clip", pos)
    slug = "".join(w.capitalize() for w in phrase(d, 4, 4).split()) + "-" + d.token(16, _ALNUM)
    url = f"https://clips.streaming.example/{slug}"
    rec: Record = {
        "id": s.numid("clip", pos, 10),
        "slug": slug,
        "url": url,
        "embedURL": f"https://clips.streaming.example/embed?clip={slug}",
        "title": title(d, 2, 8),
        "viewCount": d.num(0, 2_000_000),
        "language": d.pick(LANGS),
        "durationSeconds": d.num(5, 60),
        "createdAt": iso(s.time(pos)),
        "game": {"id": str(d.num(1000, 999999)), "name": d.pick(GAMES)},
        "broadcaster": dict(owner),
        "thumbnailURL": f"https://clips-media.streaming.example/{slug}-preview-480x272.jpg",
    }
    qualities = QUALITIES[: d.num(2, len(QUALITIES))]
    source = [f"https://clips-media.streaming.example/{slug}/{q}.mp4" for q in qualities]
    rec["assets"] = [
        {
            "id": f"AT-cm|{hexid(22, s.key, 'asset', pos)}",
            "type": "SOURCE",
            "videoQualities": [
                {
                    "frameRate": 60.01 if q == "1080" else 30.02,
                    "quality": q,
                    "sourceURL": u,
                    "__typename": TYPE,
                }
                for q, u in zip(qualities, source, strict=True)
            ],
            "__typename": "ClipAsset",
        }
    ]
    rec["videoQualities"] = [{"sourceURL": u, "__typename": TYPE} for u in source]
    rec["videoURL"] = f"{source[0]}?sig={hexid(40, s.key, pos)}&token=exp{s.time(pos) + 86400}"
    return rec


def other_clip(s: Scope, pos: int, owner: Record) -> Record:
    """One of the broadcaster's other clips: no qualities, no signed URL, the broadcaster without followers."""
    rec = clip(s, pos, owner)
    del rec["videoQualities"], rec["videoURL"], rec["assets"]
    rec["broadcaster"] = {k: v for k, v in owner.items() if k != "followers"}
    return rec
