"""Records of the search engine's ad library (`served_paths.ADVERTISERS`)."""

from __future__ import annotations

from harvest.sandbox.emulation.platforms import Record
from harvest.sandbox.emulation.platforms.wording import TLDS, title
from harvest.sandbox.emulation.scope import Scope
from harvest.sandbox.emulation.stablehash import Draw


def advertiser(s: Scope, pos: int, query: str) -> Record:
    d = Draw(s.key, "advertiser", pos)
    suffix = ("", " Inc.", " LLC", " GmbH", " Ltd")[pos % 5]
    return {
        "name": f"{query.title()}{suffix}" if pos < 5 else f"{query.title()} {title(d, 1, 2)}{suffix}",
        "advertiser_id": "AR" + s.numid("advertiser", pos, 20),
        "region": d.pick(("US", "GB", "DE", "FR", "BR", "IN", "JP")),
        "number_of_ads_estimate": d.num(1, 20000),
    }


def website(s: Scope, pos: int, query: str) -> Record:
    d = Draw(s.key, "website", pos)
    stem = "".join(ch for ch in query.lower() if ch.isalnum())[:20] or "site"
    return {"domain": f"{stem}{'' if pos == 0 else pos}.{d.pick(TLDS)}"}
