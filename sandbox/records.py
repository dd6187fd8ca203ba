"""Synthetic records, one function per record kind, with the field names of docs/service-shapes.md.

Each record is a pure function of (query scope, kind, position): ids are built from the query and the position
(so they are unique within a query), other fields come from a `Draw` on the same inputs, timestamps count back
from the query's anchor (newest first). Kept cheap: one digest per record, no per-record objects beyond the
dicts themselves.
"""

from __future__ import annotations

from typing import Any

from sandbox.scope import Scope, b36, b64int, iso
from sandbox.stablehash import Draw, hexid, hnum

Record = dict[str, Any]

WORDS = (
    "morning",
    "coffee",
    "launch",
    "review",
    "street",
    "garden",
    "travel",
    "recipe",
    "sunset",
    "update",
    "city",
    "build",
    "quick",
    "guide",
    "vintage",
    "studio",
    "market",
    "river",
    "weekend",
    "project",
    "music",
    "design",
    "honest",
    "daily",
    "budget",
    "summer",
    "winter",
    "light",
    "classic",
    "fresh",
    "local",
    "small",
    "big",
    "new",
)
NAMES = (
    "Alex",
    "Sam",
    "Jordan",
    "Taylor",
    "Morgan",
    "Casey",
    "Riley",
    "Jamie",
    "Avery",
    "Quinn",
    "Robin",
    "Kai",
)
GAMES = ("Just Chatting", "Minecraft", "Chess", "Valorant", "Fortnite", "Art", "Music", "Retro")
LANGS = ("en", "en", "en", "de", "fr", "es", "pt", "ja")
TLDS = ("com", "io", "net", "shop", "co")
_ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"
_VP = "https://www.video-platform.example"
_PA = "https://www.photo-app.example"


def _words(d: Draw, lo: int, hi: int) -> str:
    return " ".join(d.pick(WORDS) for _ in range(d.num(lo, hi)))


def _title(d: Draw, lo: int = 2, hi: int = 6) -> str:
    return _words(d, lo, hi).capitalize()


def _handle(d: Draw) -> str:
    return f"{d.pick(NAMES).lower()}_{d.pick(WORDS)}{d.num(1, 999)}"


# --- network-a -------------------------------------------------------------------------------------------


def photo(s: Scope, pos: int) -> Record:
    d = Draw(s.key, "photo", pos)
    pid = s.numid("photo", pos, 16)
    w, h = d.pick(((1080, 1080), (1080, 1350), (1920, 1080), (720, 960)))
    return {
        "photo_id": pid,
        "accessibility_caption": f"May be an image of {_words(d, 2, 5)}",
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
        "text": _words(d, 5, 30),
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
            {"id": f"{pid}_{i}", "text": _words(d, 3, 12), "author": f"{d.pick(NAMES)} {d.pick(NAMES)}"}
            for i in range(d.num(0, 3))
        ],
    }


# --- forum ------------------------------------------------------------------------------------------------


def forum_post(s: Scope, pos: int) -> Record:
    d = Draw(s.key, "forum_post", pos)
    pid = "t3_" + b36(int(s.numid("forum_post", pos, 12)))
    return {
        "id": pid,
        "title": _title(d, 3, 12),
        "votes": d.num(-20, 25000),
        "num_comments": d.num(0, 3000),
        "url": f"https://www.forum.example/comments/{pid[3:]}/",
        "created_at": iso(s.time(pos)),
    }


def forum_comment(s: Scope, pos: int) -> Record:
    d = Draw(s.key, "forum_comment", pos)
    cid = "t1_" + b36(int(s.numid("forum_comment", pos, 12)))
    post_id = "t3_" + b36(int(s.numid("forum_parent", pos, 12)))
    return {
        "id": cid,
        "author": _handle(d),
        "body": _words(d, 4, 40),
        "votes": d.num(-10, 5000),
        "created_at": iso(s.time(pos) - 60),
        "post": {
            "id": post_id,
            "title": _title(d),
            "url": f"https://www.forum.example/comments/{post_id[3:]}/",
        },
    }


def forum_media(s: Scope, pos: int) -> Record:
    d = Draw(s.key, "forum_media", pos)
    mid = "t3_" + b36(int(s.numid("forum_media", pos, 12)))
    media_type = d.pick(("image", "gallery", "video"))
    w, h = d.pick(((1080, 1080), (1920, 1080), (1080, 1920), (800, 600)))
    return {
        "id": mid,
        "title": _title(d),
        "media_type": media_type,
        "width": w,
        "height": h,
        "gallery_count": d.num(2, 20) if media_type == "gallery" else 1,
        "url": f"https://i.forum.example/{mid[3:]}.jpg",
    }


# --- streaming ----------------------------------------------------------------------------------------------


def broadcaster(s: Scope) -> Record:
    d = Draw(s.key, "broadcaster")
    login = _handle(d)
    return {
        "id": s.numid("broadcaster", 0, 9),
        "login": login,
        "displayName": login.replace("_", " ").title().replace(" ", ""),
        "followers": d.num(10, 5_000_000),
    }


def clip(s: Scope, pos: int, owner: Record) -> Record:
    d = Draw(s.key, "clip", pos)
    slug = "".join(w.capitalize() for w in _words(d, 4, 4).split()) + "-" + d.token(16, _ALNUM)
    url = f"https://clips.streaming.example/{slug}"
    return {
        "id": s.numid("clip", pos, 10),
        "slug": slug,
        "url": url,
        "embedURL": f"https://clips.streaming.example/embed?clip={slug}",
        "title": _title(d, 2, 8),
        "viewCount": d.num(0, 2_000_000),
        "language": d.pick(LANGS),
        "durationSeconds": d.num(5, 60),
        "createdAt": iso(s.time(pos)),
        "game": {"id": str(d.num(1000, 999999)), "name": d.pick(GAMES)},
        "broadcaster": dict(owner),
        "thumbnailURL": f"https://clips-media.streaming.example/{slug}-preview-480x272.jpg",
        "videoQualities": [
            {
                "quality": q,
                "frameRate": 60 if q == "1080" else 30,
                "videoURL": f"https://clips-media.streaming.example/{slug}/{q}.mp4"
                f"?sig={hexid(40, s.key, pos, q)}&token=exp{s.time(pos) + 86400}",
            }
            for q in ("1080", "720", "480")
        ],
    }


# --- video-platform ---------------------------------------------------------------------------------------


def channel_ref(s: Scope, kind: str, pos: int) -> Record:
    d = Draw(s.key, kind, "channel", pos)
    cid = "UC" + b64int(hnum(s.key, kind, "channel", pos), 22)
    return {"id": cid, "title": _title(d, 1, 3), "url": f"https://www.video-platform.example/channel/{cid}"}


def community_post(s: Scope) -> Record:
    d = Draw(s.key, "community_post")
    pid = "Ugkx" + b64int(hnum(s.key, "community_post"), 32)
    has_video = d.chance(0.4)
    vid = b64int(hnum(s.key, "community_video"), 11)
    return {
        "id": pid,
        "channel": channel_ref(s, "community", 0),
        "content": _words(d, 5, 40),
        "images": [
            f"https://yt3.video-platform.example/{hexid(24, s.key, i)}=s1024" for i in range(d.num(0, 4))
        ],
        "likeCount": d.num(0, 100000),
        "publishedTime": iso(s.time(0)),
        "video": (
            {"id": vid, "title": _title(d), "url": f"https://www.video-platform.example/watch?v={vid}"}
            if has_video
            else None
        ),
    }


def _video_like(s: Scope, kind: str, pos: int, extras: bool) -> Record:
    d = Draw(s.key, kind, pos)
    vid = b64int(int(s.numid(kind, pos, 18)), 11)
    rec: Record = {
        "id": vid,
        "title": _title(d, 2, 10),
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
        rec["description"] = _words(d, 5, 40)
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
        "title": _title(d),
        "url": f"https://www.video-platform.example/playlist?list={pid}",
        "videoCount": d.num(1, 500),
    }


def live(s: Scope, pos: int) -> Record:
    d = Draw(s.key, "live", pos)
    vid = b64int(int(s.numid("live", pos, 18)), 11)
    return {
        "id": vid,
        "title": _title(d),
        "url": f"https://www.video-platform.example/watch?v={vid}",
        "watching": d.num(0, 100000),
    }


def shelf(s: Scope, pos: int, extras: bool) -> Record:
    d = Draw(s.key, "shelf", pos)
    return {
        "type": d.pick(("shelf", "horizontal_shelf", "people_also_watched")),
        "title": f"{_title(d, 1, 3)} #{pos + 1}",
        "items": [_video_like(s, "shelf_item", pos * 3 + i, extras) for i in range(3)],
    }


def comment_reply(s: Scope, pos: int) -> Record:
    d = Draw(s.key, "reply", pos)
    name = d.pick(NAMES)
    return {
        "id": "Ugz" + b64int(int(s.numid("reply", pos, 18)), 20) + ".reply",
        "content": _words(d, 2, 30),
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


# --- microblog-b --------------------------------------------------------------------------------------------


def bsky_author(s: Scope, who: str) -> Record:
    """The author of a feed or thread, from the handle or did the request named."""
    d = Draw(s.key, "author", who)
    if who.startswith("did:"):
        did = who
        handle = f"{_handle(d).replace('_', '-')}.microblog-b.example"
    else:
        handle = who
        did = "did:plc:" + hexid(24, s.key, "did", who)
    return {
        "did": did,
        "handle": handle,
        "displayName": f"{d.pick(NAMES)} {d.pick(NAMES)}",
        "avatar": f"https://cdn.microblog-b.example/avatar/{did}.jpg",
    }


def bsky_post(s: Scope, kind: str, pos: int, author: Record) -> Record:
    d = Draw(s.key, kind, pos)
    rkey = b36(int(s.numid(kind, pos, 19)))
    t = iso(s.time(pos))
    embed = None
    if d.chance(0.3):
        embed = {
            "$type": "app.bsky.embed.images#view",
            "images": [{"thumb": f"https://cdn.microblog-b.example/img/{rkey}.jpg", "alt": _words(d, 1, 4)}],
        }
    return {
        "uri": f"at://{author['did']}/app.bsky.feed.post/{rkey}",
        "cid": "bafyrei" + hexid(52, s.key, kind, pos),
        "record": {"text": _words(d, 3, 40), "createdAt": t},
        "author": dict(author),
        "embed": embed,
        "replyCount": d.num(0, 200),
        "repostCount": d.num(0, 500),
        "likeCount": d.num(0, 5000),
        "quoteCount": d.num(0, 50),
        "indexedAt": t,
    }


# --- microblog-a --------------------------------------------------------------------------------------------


def tweet(s: Scope, pos: int) -> Record:
    d = Draw(s.key, "tweet", pos)
    name = d.pick(NAMES)
    return {
        "id": s.numid("tweet", pos, 19),
        "full_text": _words(d, 3, 40),
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


# --- ad library ---------------------------------------------------------------------------------------------


def advertiser(s: Scope, pos: int, query: str) -> Record:
    d = Draw(s.key, "advertiser", pos)
    suffix = ("", " Inc.", " LLC", " GmbH", " Ltd")[pos % 5]
    return {
        "name": f"{query.title()}{suffix}" if pos < 5 else f"{query.title()} {_title(d, 1, 2)}{suffix}",
        "advertiser_id": "AR" + s.numid("advertiser", pos, 20),
        "region": d.pick(("US", "GB", "DE", "FR", "BR", "IN", "JP")),
        "number_of_ads_estimate": d.num(1, 20000),
    }


def website(s: Scope, pos: int, query: str) -> Record:
    d = Draw(s.key, "website", pos)
    stem = "".join(ch for ch in query.lower() if ch.isalnum())[:20] or "site"
    return {"domain": f"{stem}{'' if pos == 0 else pos}.{d.pick(TLDS)}"}


# --- photo-app ----------------------------------------------------------------------------------------------


def embed_html(s: Scope, handle: str) -> str:
    d = Draw(s.key, "embed")
    return (
        f'<blockquote class="photo-app-media" data-instgrm-permalink="{_PA}/{handle}/" '
        f'data-instgrm-version="14"><a href="{_PA}/{handle}/">{handle}</a> '
        f"<p>{d.num(10, 900)} posts, {d.num(100, 5_000_000)} followers</p></blockquote>"
        '<script async src="//www.photo-app.example/embed.js"></script>'
    )


def reel_owner(s: Scope, who: str) -> Record:
    d = Draw(s.key, "owner", who)
    return {
        "id": who if who.isdigit() else s.numid("owner", 0, 11),
        "username": who if not who.isdigit() else _handle(d),
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
        "play_count": d.num(0, 20_000_000),
        "like_count": d.num(0, 2_000_000),
        "comment_count": d.num(0, 50000),
        "taken_at": s.time(pos),
    }
    if trim:
        base["video_url"] = video_url
        base["thumbnail_url"] = thumb
    else:
        base["video_versions"] = [
            {"url": video_url, "width": 720, "height": 1280},
            {"url": video_url.replace("_n.mp4", "_l.mp4"), "width": 480, "height": 854},
        ]
        base["image_versions2"] = {"candidates": [{"url": thumb, "width": 640, "height": 1136}]}
    base["owner"] = dict(owner)
    return base


# --- pinboard -----------------------------------------------------------------------------------------------


def pin(s: Scope, pos: int, trim: bool) -> Record:
    d = Draw(s.key, "pin", pos)
    pid = s.numid("pin", pos, 18)
    domain = f"{d.pick(WORDS)}{d.pick(WORDS)}.{d.pick(TLDS)}"
    rec: Record = {
        "id": pid,
        "url": f"https://www.pinboard.example/pin/{pid}/",
        "title": _title(d),
        "description": _words(d, 0, 25),
        "images": {
            "orig": {
                "url": f"https://i.pinboard.example/originals/{hexid(32, s.key, 'pin', pos)}.jpg",
                "width": 736,
                "height": d.pick((736, 1104, 1308)),
            }
        },
        "link": f"https://{domain}/{d.pick(WORDS)}",
        "domain": domain,
        "board": {
            "id": s.numid("board", pos % 7, 18),
            "name": _title(d, 1, 3),
            "url": f"https://www.pinboard.example/board/{s.numid('board', pos % 7, 18)}/",
        },
        "pinner": {"id": s.numid("pinner", pos, 18), "username": _handle(d), "full_name": f"{d.pick(NAMES)}"},
    }
    if trim:
        del rec["images"]
        del rec["board"]
    return rec


# --- short-video --------------------------------------------------------------------------------------------


def product(s: Scope, pos: int, currency: str) -> Record:
    d = Draw(s.key, "product", pos)
    pid = s.numid("product", pos, 19)
    return {
        "id": pid,
        "title": _title(d, 2, 8),
        "cover": [
            f"https://p16-shop.short-video.example/{hexid(20, s.key, 'cover', pos, i)}.jpeg" for i in range(2)
        ],
        "url": f"https://shop.short-video.example/view/product/{pid}",
        "price": {"currency": currency, "amount": d.num(100, 30000) / 100},
        "sold_count": d.num(0, 200000),
        "review_count": d.num(0, 20000),
        "rating": round(3.0 + d.unit() * 2.0, 1),
    }


def shop_info(s: Scope, url: str, region: str) -> Record:
    d = Draw(s.key, "shop")
    return {
        "id": s.numid("shop", 0, 19),
        "name": _title(d, 1, 3) + " Store",
        "url": url,
        "followers": d.num(0, 3_000_000),
        "region": region,
    }


def aweme(s: Scope, pos: int, author: Record, trim: bool) -> Record:
    d = Draw(s.key, "aweme", pos)
    aid = s.numid("aweme", pos, 19)
    cover = f"https://p16-sign.short-video.example/obj/{hexid(24, s.key, 'cover', pos)}.jpeg"
    video_obj: Record = {"duration": d.num(3000, 180000), "cover": {"url_list": [cover]}}
    if not trim:
        video_obj["play_addr"] = {"url_list": [f"https://v16.short-video.example/video/{aid}.mp4"]}
    rec: Record = {
        "aweme_id": aid,
        "desc": _words(d, 0, 20),
        "create_time": s.time(pos),
        "statistics": {
            "play_count": d.num(0, 50_000_000),
            "digg_count": d.num(0, 5_000_000),
            "comment_count": d.num(0, 100000),
            "share_count": d.num(0, 100000),
            "collect_count": d.num(0, 500000),
        },
        "video": video_obj,
    }
    if not trim:
        rec["author"] = dict(author)
    return rec
