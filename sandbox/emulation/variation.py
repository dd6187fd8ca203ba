"""What changes between nights and what a service change looks like, applied to a built page.

`observation`: engagement counters grow with the night, ids and texts stay, so a job run twice sees two
observations of the same items; lists inside a record (`NESTED_LISTS`: top comments, qualities, shelf items,
embedded images, a creative's structured fields) lose their last item each night, down to none, as comments are
deleted and qualities dropped. `drift`: the answer drifts from the service's shapes (the interface's names,
wrapped feed items, a renamed, nulled, keyed or omitted list, a renamed field, wrapped records, counters as text,
values no naive conversion survives, unknown fields, records without their key or with an empty one),
deterministically from the seed.
Both act on the records of `ServedPage.records` in place, so `sandbox.expected` describes what was served.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from harvest.sandbox.config import Drift
from harvest.sandbox.emulation.emulated import key_part
from harvest.sandbox.emulation.interface_names import as_interface_names
from harvest.sandbox.emulation.page import Ctx, ServedPage
from harvest.sandbox.emulation.platforms import Record
from harvest.sandbox.emulation.stablehash import unit

COUNTERS = frozenset(
    {
        "play_count", "digg_count", "comment_count", "share_count", "collect_count", "like_count", "likeCount",
        "viewCount", "view_count", "views", "votes", "num_comments", "reactionCount", "commentCount",
        "replyCount", "repostCount", "quoteCount", "favorite_count", "retweet_count", "reply_count",
        "bookmark_count", "quote_count", "sold_count", "review_count", "subscriberCount", "watching",
        "viewCountInt", "likes", "totalCount",
    }
)  # fmt: skip
TIMESTAMPS = frozenset({"create_time", "taken_at", "publishTime", "created_at", "indexedAt"})
BAD_COUNTS = ("1.2K", "1,234", "42", "twelve")
ODD_TIMESTAMPS: tuple[str | int, ...] = ("\u00b2", 2**64 - 1)
ODD_COUNT = "1" * 5000
NEW_FIELDS = {"sponsored": False, "experiment_bucket": "b7"}
TEXTS = ("full_text", "text", "title", "desc", "content", "body", "caption")
"""A record's text field, the first of these it has: where a platform truncates text."""
HALF_EMOJI = "\ud83d"
"""The high half of a surrogate pair (most emoji start with it), alone: text cut in the middle of an emoji."""


def _dicts(value: Any) -> Iterator[dict[str, Any]]:
    """Every dict inside a record (the record itself, `statistics`, `media`, ...)."""
    if isinstance(value, dict):
        yield value
        for inner in value.values():
            yield from _dicts(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _dicts(inner)


def _grow_counters(record: Record, night: int) -> None:
    for d in _dicts(record):
        for key in COUNTERS & d.keys():
            value = d[key]
            if isinstance(value, int) and not isinstance(value, bool):
                d[key] = value + night * (1 + value % 13)


NESTED_LISTS = frozenset({"topComments", "videoQualities", "items", "images", "structured_fields"})
"""Lists of objects inside a record, as the platforms nest them (not lists of records: a thread's replies), and
a creative's `structured_fields` (an object: it loses its last field)."""


def _shrink_lists(record: Record, night: int) -> None:
    for d in _dicts(record):
        for key in NESTED_LISTS & d.keys():
            if isinstance(d[key], list):
                d[key] = d[key][: max(0, len(d[key]) - night)]
            elif isinstance(d[key], dict):
                d[key] = dict(list(d[key].items())[: max(0, len(d[key]) - night)])


def _record_id(kind: str, record: Record, pk: str) -> str:
    """A record's identity for the drift draws: its key (a composite one, `type+title`, in full)."""
    parts = [str(key_part(record, part)) for part in pk.split("+")]
    return f"{kind}|{'|'.join(parts)}"


def _spoil_values(record: Record, n: int) -> None:
    for d in _dicts(record):
        for key in sorted(COUNTERS & d.keys()):
            d[key] = BAD_COUNTS[n % len(BAD_COUNTS)]
            n += 1
        for key in TIMESTAMPS & d.keys():
            d[key] = "yesterday"


def _odd_values(record: Record, n: int) -> None:
    for d in _dicts(record):
        for key in COUNTERS & d.keys():
            d[key] = ODD_COUNT
        for key in TIMESTAMPS & d.keys():
            d[key] = ODD_TIMESTAMPS[n % len(ODD_TIMESTAMPS)]


def _drift_records(ctx: Ctx, page: ServedPage, drift: Drift) -> None:
    seed = ctx.config.seed
    for kind, records in page.records.items():
        pk = ctx.endpoint.kinds.get(kind, "id")
        for n, record in enumerate(records):
            if not isinstance(record, dict):
                continue
            rid = _record_id(kind, record, pk)
            if drift.bad_values and unit(seed, "bad", rid) < drift.bad_values:
                _spoil_values(record, n)
            if drift.odd_values and unit(seed, "odd", rid) < drift.odd_values:
                _odd_values(record, n)
            if drift.new_fields:
                record.update(NEW_FIELDS)
            if drift.missing_keys and ctx.endpoint.paged and unit(seed, "nokey", rid) < drift.missing_keys:
                for part in pk.split("+"):
                    for name in part.split("|"):
                        record.pop(name, None)
            if drift.empty_keys and ctx.endpoint.paged and unit(seed, "emptykey", rid) < drift.empty_keys:
                for part in pk.split("+"):
                    record[next((n for n in part.split("|") if n in record), part)] = ""


def _wrap_feed(page: ServedPage, feed_list: str, share: float, seed: int) -> None:
    items = page.body.get(feed_list)
    if not isinstance(items, list):
        return
    wrapped = []
    for n, post in enumerate(items):
        if unit(seed, "wrap", post.get("uri", n)) >= share:
            wrapped.append(post)
            continue
        reason = (
            {"$type": "app.bsky.feed.defs#reasonRepost", "by": post.get("author")} if n % 3 == 0 else None
        )
        parent = {"uri": f"{post.get('uri', '')}-parent", "cid": "bafyparent"}
        reply = {"root": {"uri": f"{post.get('uri', '')}-root"}, "parent": parent} if n % 4 == 1 else None
        wrapped.append({"post": post, "reason": reason, "reply": reply})
    page.body[feed_list] = wrapped


def vary(ctx: Ctx, page: ServedPage) -> ServedPage:
    config = ctx.config
    if config.drift.interface_names:
        as_interface_names(ctx.endpoint.path, page)
    if config.observation:
        for records in page.records.values():
            for record in records:
                if isinstance(record, dict):
                    _grow_counters(record, config.observation)
                    _shrink_lists(record, config.observation)
    drift = config.drift
    if not drift.active:
        return page
    _platform_quirks(ctx, page, drift)
    if not isinstance(page.body, dict):
        return page
    _drift_records(ctx, page, drift)
    _rename_and_wrap(page, ctx.endpoint.path, drift)
    if drift.wrapped_feed and ctx.endpoint.feed_list is not None:
        _wrap_feed(page, ctx.endpoint.feed_list, drift.wrapped_feed, config.seed)
    asked = ctx.params.get("cursor")
    if ctx.endpoint.path in drift.stuck_cursor and asked is not None and "cursor" in page.body:
        page.body["cursor"] = asked
    _reshape_lists(page.body, ctx.endpoint.path, drift)
    return page


def _rename_and_wrap(page: ServedPage, path: str, drift: Drift) -> None:
    """Fields sent under a new name (every record of the path's answers), records sent wrapped."""
    renamed = drift.renamed_fields.get(path, {})
    for records in page.records.values() if renamed else ():
        for record in records:
            for old, new in renamed.items():
                if isinstance(record, dict) and old in record:
                    record[new] = record.pop(old)
    wrapped = drift.wrapped_records.get(path)
    if wrapped is not None and isinstance(page.body.get(wrapped[0]), list):
        page.body[wrapped[0]] = [{wrapped[1]: item} for item in page.body[wrapped[0]]]


def _reshape_lists(body: dict[str, Any], path: str, drift: Drift) -> None:
    renamed = drift.renamed_lists.get(path)
    if renamed is not None and renamed[0] in body:
        body[renamed[1]] = body.pop(renamed[0])
    nulled = drift.nulled_lists.get(path)
    if nulled is not None and nulled[0] in body:
        body[nulled[1]], body[nulled[0]] = body[nulled[0]], None
    keyed = drift.keyed_lists.get(path)
    if keyed is not None and isinstance(body.get(keyed), list):
        body[keyed] = {f"item{n}": item for n, item in enumerate(body[keyed])}
    if drift.omit_empty_lists:
        for key in [k for k, v in body.items() if isinstance(v, list) and not v]:
            del body[key]


def _platform_quirks(ctx: Ctx, page: ServedPage, drift: Drift) -> None:
    """What platforms send that strict JSON refuses or the catalog's shape does not foresee (`sandbox.wire.answering`
    writes such answers with Python's json, which can carry a lone surrogate and `NaN`)."""
    path = ctx.endpoint.path
    first = next((r for records in page.records.values() for r in records if isinstance(r, dict)), None)
    if first is not None and path in drift.cut_emoji:
        name = next((t for t in TEXTS if isinstance(first.get(t), str)), None)
        if name is not None:
            first[name] = first[name][: max(1, len(first[name]) // 2)] + HALF_EMOJI
    if first is not None and path in drift.latin1:
        name = next((t for t in TEXTS if isinstance(first.get(t), str)), None)
        if name is not None:
            first[name] += " café crème, naïve"  # Latin-1 writes these as bytes that are not UTF-8
    if first is not None and path in drift.nan_counts:
        for d in _dicts(first):
            for key in COUNTERS & d.keys():
                d[key] = float("nan")
