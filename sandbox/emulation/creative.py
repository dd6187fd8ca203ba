"""Creative materials: the search (4.1) and the detail (4.2) endpoints.

A material's content is a pure function of its `material_id`, so an id returned by any search resolves on the
detail endpoint, and the detail agrees with the search record. The id is "<type>:<12 hex><4 hex checksum>"; an
id whose checksum does not match was never issued and answers 404 (billed, like every "not found").

Search: a query has a hash-derived candidate list in relevance order; `language` keeps the materials of that
language; `style_tags` and `cta_type_tags` keep materials that have ALL the given tags (each parameter
repeatable, both parameters combined with AND); `order` is relevance (candidate order), latest (newest
`created_at` first) or oldest. The page size is `limit` (1..100, default
`SandboxConfig.creative_default_limit`, 20). Filtering needs the whole candidate list, so the filtered,
ordered list is cached per query: the first page of a query costs O(candidates), later pages O(limit)."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from harvest.sandbox.emulation import cursor_values as cursors
from harvest.sandbox.emulation.page import Ctx, ServedPage, window, with_repeat
from harvest.sandbox.emulation.platforms import Record
from harvest.sandbox.emulation.platforms.wording import NAMES, WORDS
from harvest.sandbox.emulation.scope import ANCHOR, iso
from harvest.sandbox.emulation.stablehash import Draw, hexid, hnum, span

TYPES = ("video", "image", "carousel")
STYLE_TAGS = ("ugc", "testimonial", "animation", "minimal", "bold", "humor", "tutorial", "unboxing")
CTA_TYPE_TAGS = ("shop_now", "learn_more", "sign_up", "download", "contact_us", "book_now")
LANGUAGES = ("en", "en", "en", "en", "de", "fr", "es", "pt", "ja", "it")
PLATFORMS = ("network-a", "photo-app", "short-video", "video-platform", "pinboard")
_ID_RE = re.compile(r"^(video|image|carousel):([0-9a-f]{12})([0-9a-f]{4})$")
_MIX = 0x9E3779B97F4B  # odd: i -> (base + i * _MIX) mod 2**48 is a bijection, so ids never collide in a query


def _checksum(kind: str, body: str) -> str:
    return hexid(4, "material", kind, body)


def material_id(seed: int, query: str, i: int) -> str:
    body = f"{(hnum(seed, 'material', query) + i * _MIX) % 2**48:012x}"
    roll = hnum(seed, "material-type", query, i) % 100
    kind = "video" if roll < 50 else "image" if roll < 85 else "carousel"
    return f"{kind}:{body}{_checksum(kind, body)}"


def is_issued(mid: str) -> bool:
    """Whether `mid` is well-formed and was issued by a search (its checksum matches)."""
    m = _ID_RE.match(mid)
    return m is not None and _checksum(m.group(1), m.group(2)) == m.group(3)


@lru_cache(maxsize=65536)
def attributes(mid: str) -> dict[str, Any]:
    """The query-independent fields of a material (`created_at` as epoch seconds)."""
    kind = mid.split(":", 1)[0]
    d = Draw("material", mid)
    return {
        "material_id": mid,
        "type": kind,
        "title": " ".join(d.pick(WORDS) for _ in range(d.num(2, 6))).capitalize(),
        "language": d.pick(LANGUAGES),
        "style_tags": d.sample(STYLE_TAGS, d.num(1, 3)),
        "cta_type_tags": d.sample(CTA_TYPE_TAGS, d.num(1, 2)),
        "advertiser": f"{d.pick(NAMES)} {d.pick(WORDS).capitalize()} Co",
        "thumbnail_url": f"https://cdn.creative.example/thumb/{mid.replace(':', '/')}.jpg",
        "duration_seconds": d.num(6, 90) if kind == "video" else None,
        "created_at": ANCHOR - d.num(0, 3 * 365 * 86400),
    }


def _search_record(mid: str, relevance: float) -> Record:
    rec = dict(attributes(mid))
    rec["style_tags"] = list(rec["style_tags"])
    rec["cta_type_tags"] = list(rec["cta_type_tags"])
    rec["created_at"] = iso(rec["created_at"])
    rec["relevance"] = relevance
    return rec


@lru_cache(maxsize=64)
def _matching(
    seed: int,
    query: str,
    n: int,
    language: str | None,
    style_tags: frozenset[str],
    cta_tags: frozenset[str],
    order: str,
) -> tuple[tuple[str, float], ...]:
    """(material_id, relevance) of every candidate passing the filters, in the requested order."""
    out = []
    for i in range(n):
        mid = material_id(seed, query, i)
        attrs = attributes(mid)
        if language is not None and attrs["language"] != language.lower():
            continue
        if not style_tags <= set(attrs["style_tags"]) or not cta_tags <= set(attrs["cta_type_tags"]):
            continue
        out.append((mid, round(1.0 - i / (n + 1), 6)))
    if order == "latest":
        out.sort(key=lambda m: (-attributes(m[0])["created_at"], m[0]))
    elif order == "oldest":
        out.sort(key=lambda m: (attributes(m[0])["created_at"], m[0]))
    return tuple(out)


def candidate_count(ctx: Ctx, query: str) -> int:
    """How many materials a query matches before filters: `pages` full pages of the default limit, the last
    one partly filled."""
    lo, hi = ctx.config.pages_for(ctx.endpoint.path)
    limit = ctx.config.creative_default_limit
    key = f"{ctx.config.seed}|creative|{query}"
    return (span(lo, hi, key, "pages") - 1) * limit + span(1, limit, key, "last")


def search(ctx: Ctx) -> ServedPage:
    p = ctx.params
    query = p.get("query") or ""
    s = ctx.scope()
    matching = _matching(
        ctx.config.seed,
        query,
        candidate_count(ctx, query),
        p.get("language"),
        frozenset(t.lower() for t in p.many("style_tags")),
        frozenset(t.lower() for t in p.many("cta_type_tags")),
        p.get("order") or "relevance",
    )
    limit = int(p.get("limit") or ctx.config.creative_default_limit)
    token = p.get("cursor")
    start = 0 if token is None else cursors.decode(token, "cm", s, "cursor")
    total = len(matching)
    lo, hi = window(start, limit, total)
    items = [_search_record(*matching[i]) for i in with_repeat(ctx, lo, hi, total)]
    page = ServedPage({"data": items, "metadata": {"cursor": None, "total": total}}, {"materials": items})
    if hi < total:
        page.next = {"cursor": cursors.encode("cm", hi, s)}
        page.body["metadata"]["cursor"] = page.next["cursor"]
    return page


def detail(ctx: Ctx) -> ServedPage:
    mid = ctx.path_values.get("material_id", "")
    if not is_issued(mid):
        return ServedPage(
            {"error": "not_found", "message": f"material not found: {mid}"}, status=404, success=False
        )
    attrs = attributes(mid)
    d = Draw("material-detail", mid)
    first_seen = attrs["created_at"] + d.num(0, 30 * 86400)
    last_seen = min(ANCHOR, first_seen + d.num(0, 365 * 86400))
    cta = attrs["cta_type_tags"][0]
    data = {
        "material_id": mid,
        "type": attrs["type"],
        "title": attrs["title"],
        "structured_fields": {
            "language": attrs["language"],
            "format": attrs["type"],
            "aspect_ratio": d.pick(("9:16", "1:1", "4:5", "16:9")),
            "duration_seconds": attrs["duration_seconds"],
            "hook": " ".join(d.pick(WORDS) for _ in range(d.num(3, 8))),
            "slides": d.num(2, 10) if attrs["type"] == "carousel" else None,
        },
        "structured_tags": list(attrs["style_tags"]) + list(attrs["cta_type_tags"]),
        "labels": d.sample(
            ("high_performer", "new", "seasonal", "evergreen", "localized", "ai_generated"), 2
        ),
        "related_context": {
            "industry": d.pick(("beauty", "gaming", "apparel", "food", "finance", "travel", "apps")),
            "product": " ".join(d.pick(WORDS) for _ in range(2)),
            "audience": d.pick(("gen_z", "parents", "professionals", "students", "everyone")),
        },
        "script": ". ".join(
            " ".join(d.pick(WORDS) for _ in range(d.num(4, 10))).capitalize() for _ in range(d.num(2, 5))
        )
        + ".",
        "cta": {
            "type": cta,
            "text": cta.replace("_", " ").title(),
            "url": f"https://landing.creative.example/{mid.split(':', 1)[1]}",
        },
        "latest_ad_context": {
            "advertiser": attrs["advertiser"],
            "first_seen": iso(first_seen),
            "last_seen": iso(last_seen),
            "platforms": d.sample(PLATFORMS, d.num(1, 3)),
        },
    }
    return ServedPage({"data": data, "metadata": {}}, {"material_details": [data]})
