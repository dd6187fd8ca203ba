"""Records of the short-video platform (`/v1/short-video/...`, `/v3/short-video/...`): shop products,
the shop, and profile videos."""

from __future__ import annotations

from sandbox.emulation.platforms import Record
from sandbox.emulation.platforms.wording import phrase, title
from sandbox.emulation.scope import Scope
from sandbox.emulation.stablehash import Draw, hexid


def product(s: Scope, pos: int, currency: str) -> Record:
    d = Draw(s.key, "product", pos)
    pid = s.numid("product", pos, 19)
    return {
        "id": pid,
        "title": title(d, 2, 8),
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
        "name": title(d, 1, 3) + " Store",
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
        "desc": phrase(d, 0, 20),
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
