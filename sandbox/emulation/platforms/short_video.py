"""Records of the short-video platform's profile videos (`/v3/short-video/profile/videos`), named as the
service's published answers name them."""

from __future__ import annotations

import re

from harvest.sandbox.emulation.platforms import Record
from harvest.sandbox.emulation.platforms.wording import phrase
from harvest.sandbox.emulation.scope import Scope
from harvest.sandbox.emulation.stablehash import Draw, hexid

VIDEO_URL = re.compile(
    r"https://(?:www\.)?short-video\.example/@(?P<handle>[^/?]+)/video/(?P<key>\d+)(?:\?.*)?"
)
"""A video's URL, as `aweme` makes it (and as the platform writes it): its author's handle, then its id
(`generic.joined_values` reads both)."""


def aweme(s: Scope, pos: int, author: Record) -> Record:
    """A profile video; a trimmed answer has the same videos (it leaves out `has_more`, `sandbox.emulation.paged`)."""
    d = Draw(s.key, "aweme", pos)
    aid = s.numid("aweme", pos, 19)
    cover = f"https://p16-sign.short-video.example/obj/{hexid(24, s.key, 'cover', pos)}.jpeg"
    video_obj: Record = {
        "duration": d.num(3000, 180000),
        "cover": {"url_list": [cover]},
        "play_addr": {"url_list": [f"https://v16.short-video.example/video/{aid}.mp4"]},
        "width": 576,
        "height": 1024,
        "bit_rate": [],
        "big_thumbs": [],
        "cla_info": {"caption_infos": []},
    }
    rec: Record = {
        "aweme_id": aid,
        "desc": phrase(d, 0, 20),
        "create_time": s.time(pos),
        "url": f"https://www.short-video.example/@{author['unique_id']}/video/{aid}",
        "statistics": {
            "play_count": d.num(0, 50_000_000),
            "digg_count": d.num(0, 5_000_000),
            "comment_count": d.num(0, 100000),
            "share_count": d.num(0, 100000),
            "collect_count": d.num(0, 500000),
        },
        "video": video_obj,
    }
    if d.chance(0.2):
        rec["shop_product_url"] = f"https://www.short-video.example/shop/pdp/{s.numid('promoted', pos, 19)}"
    rec["author"] = dict(author)
    rec["share_url"] = f"https://www.short-video.example/@{author['unique_id']}/video/{aid}?_r=1&source=h5_m"
    rec["region"] = "US"
    rec["desc_language"] = "en"
    rec["content_type"] = "video"
    rec["is_ad"] = False
    rec["is_top"] = 1 if pos == 0 else 0
    rec["statistics"]["download_count"] = d.num(0, 1000)  # drawn last: the earlier draws keep their values
    rec["music"] = {
        "id_str": s.numid("music", pos, 19),
        "title": f"original sound - {author['unique_id']}",
        "author": author.get("nickname", ""),
        "artists": [],
    }
    rec["text_extra"] = []
    rec["banners"] = []
    rec["added_sound_music_info"] = {k: rec["music"][k] for k in ("id_str", "title", "author")}
    rec["original_client_text"] = {"markup_text": rec["desc"], "text_extra": None}
    return rec
