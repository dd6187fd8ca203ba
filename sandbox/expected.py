"""What a full crawl of a query holds, computed by the very builders the server answers with.

    full_crawl(served_paths.PINS, {"query": "cats"}, config)
    -> {"pins": [...distinct records, in crawl order...]}

Record kinds (the keys) are those of docs/service-shapes.md: materials, material_details, photos, group_posts,
posts, comments, media, clips, broadcaster_clips, community_posts, replies, tweets, advertisers, websites,
embeds, reels, pins, videos, channels, playlists, shorts, shelves, lives, products, shops. Every kind of the
endpoint is present, possibly empty. Records are deduplicated by primary key (the repeat-items quirk does not
change what a crawl holds).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.emulation.emulated import key_part
from harvest.sandbox.emulation.generate import build, make_ctx
from harvest.sandbox.emulation.generic.declared_endpoints import served
from harvest.sandbox.emulation.page import Ctx, ServedPage
from harvest.sandbox.emulation.platforms import Record

ParamValue = str | int | bool | Sequence[str]

MAX_PAGES = 1_000_000


def _items(params: Mapping[str, ParamValue]) -> list[tuple[str, str]]:
    items: list[tuple[str, str]] = []
    for name, value in params.items():
        if isinstance(value, bool):
            items.append((name, "true" if value else "false"))
        elif isinstance(value, int | str):
            items.append((name, str(value)))
        else:
            items.extend((name, str(v)) for v in value)
    return items


def start(path: str, params: Mapping[str, ParamValue], config: SandboxConfig | None = None) -> Ctx:
    """The validated first request of a crawl. `path` is a documented path, or the detail path with a material
    id in it. Raises `sandbox.wire.validation.InvalidRequest` for parameters the server would refuse."""
    config = config or SandboxConfig()
    endpoint = served(config).match(path)
    if endpoint is None:
        raise ValueError(f"unknown path: {path}")
    return make_ctx(endpoint, _items(params), config, endpoint.path_values(path))


def crawl(
    path: str,
    params: Mapping[str, ParamValue],
    config: SandboxConfig | None = None,
    follow_dangling: bool = False,
) -> Iterator[ServedPage]:
    """Every page a client gets by following the documented end-of-pages signals, and the follow-up requests
    the pages' records hand out (a declared `paging.follow`), each once, breadth-first; with `follow_dangling`,
    also the empty page behind a cursor left on the last page."""
    waiting = deque([start(path, params, config)])
    asked: set[tuple[tuple[str, str], ...]] = set()
    for _ in range(MAX_PAGES):
        if not waiting:
            return
        ctx = waiting.popleft()
        page = build(ctx)
        yield page
        nxt = page.next or (page.dangling if follow_dangling else None)
        for more in [nxt] if nxt else []:
            waiting.append(dataclasses.replace(ctx, params=ctx.params.with_values(**more)))
        for ask in page.follow:
            if (key := tuple(sorted(ask.items()))) not in asked:
                asked.add(key)
                waiting.append(dataclasses.replace(ctx, params=ctx.params.with_values(**ask)))
    raise RuntimeError("crawl did not end")  # pragma: no cover - plans are finite


def primary_key(key_field: str, record: Record) -> Any:
    if "+" in key_field:
        return tuple(key_part(record, f) for f in key_field.split("+"))
    return key_part(record, key_field)


def full_crawl(
    path: str, params: Mapping[str, ParamValue], config: SandboxConfig | None = None
) -> dict[str, list[Record]]:
    """Record kind -> the distinct records a full crawl returns, in the order first seen."""
    ctx = start(path, params, config)
    kinds = ctx.endpoint.kinds
    seen: dict[str, dict[Any, Record]] = {kind: {} for kind in kinds}
    for page in crawl(path, params, config):
        for kind, recs in page.records.items():
            bucket = seen[kind]
            for rec in recs:
                bucket.setdefault(primary_key(kinds[kind], rec), rec)
    return {kind: list(bucket.values()) for kind, bucket in seen.items()}


def expected_pages(
    path: str,
    params: Mapping[str, ParamValue],
    config: SandboxConfig | None = None,
    follow_dangling: bool = False,
) -> int:
    """How many requests a full crawl makes (1 for a single-page endpoint)."""
    return sum(1 for _ in crawl(path, params, config, follow_dangling))
