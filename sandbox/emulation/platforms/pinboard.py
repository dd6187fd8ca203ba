"""Records of the pinboard search (`served_paths.PINS`)."""

from __future__ import annotations

import re

from harvest.sandbox.emulation.platforms import Record
from harvest.sandbox.emulation.platforms.wording import (
    NAMES,
    TLDS,
    WORDS,
    mail_date,
    phrase,
    title,
    user_handle,
)
from harvest.sandbox.emulation.scope import Scope
from harvest.sandbox.emulation.stablehash import Draw, hexid

PIN_URL = re.compile(r"https://(?:www\.)?pinboard\.example/pin/(?P<key>\d+)/?")
"""A pin's URL, as `pin` makes it (and as the platform writes it): a pin detail asked for with it is about that
pin (`generic.joined_values`)."""


def pin(s: Scope, pos: int, trim: bool) -> Record:
    d = Draw(s.key, "pin", pos)
    pid = s.numid("pin", pos, 18)
    domain = f"{d.pick(WORDS)}{d.pick(WORDS)}.{d.pick(TLDS)}"
    rec: Record = {
        "id": pid,
        "url": f"https://www.pinboard.example/pin/{pid}/",
        "title": title(d),
        "description": phrase(d, 0, 25),
        "created_at": mail_date(s.time(pos)),
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
            "name": title(d, 1, 3),
            "url": f"https://www.pinboard.example/board/{s.numid('board', pos % 7, 18)}/",
            "images": {"170x": []},
        },
        "pinner": {
            "id": s.numid("pinner", pos, 18),
            "username": user_handle(d),
            "full_name": f"{d.pick(NAMES)}",
            "follower_count": d.num(0, 50_000),
        },
    }
    if trim:  # as the service trims: the images stay
        for name in ("title", "link", "domain", "board"):
            del rec[name]
    return rec
