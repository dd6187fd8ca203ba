"""Named service changes the sandbox can serve (`harvest sandbox --drift NAME`), to watch what harvest does when
the service changes shape: which changes it reads, which it counts, and which stop a query as `drift`.

Each name is one `Drift` (`sandbox.config`); several names combine. Tests use the same shapes by name or build a
`Drift` of their own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from harvest.sandbox.config import Drift
from harvest.sandbox.served_paths import FORUM_SEARCH, MB_FEED, PINS, TWEETS, VIDEO_SEARCH


@dataclass(frozen=True)
class DriftShape:
    what: str
    """What the answers look like, and what harvest does about it."""
    drift: Drift


SHAPES: dict[str, DriftShape] = {
    "wrapped-feed": DriftShape(
        "microblog-b feed items come wrapped the native upstream way, {post, reason, reply}: read (an "
        "alternative shape of the kind)",
        Drift(wrapped_feed=1.0),
    ),
    "renamed-list": DriftShape(
        "the microblog-b feed's list `feed` is sent as `items`: drift",
        Drift(renamed_lists={MB_FEED: ("feed", "items")}),
    ),
    "null-list": DriftShape(
        "the microblog-b feed's `feed` is null, its posts under `items`: drift",
        Drift(nulled_lists={MB_FEED: ("feed", "items")}),
    ),
    "keyed-list": DriftShape(
        "the microblog-b feed's `feed` is an object keyed item0, item1, ... instead of a list: drift",
        Drift(keyed_lists={MB_FEED: "feed"}),
    ),
    "renamed-secondary": DriftShape(
        "forum search's `comments` is sent as `replies`, video search's `channels` as `channel_results`: drift",
        Drift(
            renamed_lists={
                FORUM_SEARCH: ("comments", "replies"),
                VIDEO_SEARCH: ("channels", "channel_results"),
            }
        ),
    ),
    "omitted-lists": DriftShape(
        "lists with nothing in them are left out of answers, as the real service may: nothing is lost, no message",
        Drift(omit_empty_lists=True),
    ),
    "missing-keys": DriftShape(
        "3 in 10 list records come without their primary key: drift", Drift(missing_keys=0.3)
    ),
    "empty-keys": DriftShape("3 in 10 list records have an empty primary key: drift", Drift(empty_keys=0.3)),
    "text-numbers": DriftShape(
        'counters come as text ("1.2K", "1,234", "42", "twelve"), timestamps as "yesterday": converted where '
        "unambiguous, else NULL and counted",
        Drift(bad_values=1.0),
    ),
    "odd-values": DriftShape(
        'timestamps come as "²" or beyond 64 bits, counters 5000 digits long: NULL and counted',
        Drift(odd_values=1.0),
    ),
    "new-fields": DriftShape(
        "every record carries fields the interface does not name: named once", Drift(new_fields=True)
    ),
    "cut-emoji": DriftShape(
        "a community tweet's text is cut in the middle of an emoji (a lone `\\ud83d`): read, the half emoji "
        "as U+FFFD, counted as repaired",
        Drift(cut_emoji=frozenset({TWEETS})),
    ),
    "nan-counts": DriftShape(
        "a community tweet's counters come as `NaN`: read as NULL, counted as repaired",
        Drift(nan_counts=frozenset({TWEETS})),
    ),
    "latin1": DriftShape(
        "community tweets come encoded in Latin-1, not UTF-8: read, each such byte as U+FFFD, counted",
        Drift(latin1=frozenset({TWEETS})),
    ),
    "byte-order-mark": DriftShape(
        "community tweets start with a UTF-8 byte order mark: read, counted",
        Drift(byte_order_mark=frozenset({TWEETS})),
    ),
    "interface-names": DriftShape(
        "answers name their fields as the service's interface does, not as its published answers do (`views`, "
        "replies unwrapped with `parent_uri`, the clip's other clips a plain list, no `-end-` ending pin "
        "search): read, the catalog reads both",
        Drift(interface_names=True),
    ),
    "renamed-field": DriftShape(
        "video search results send their view count as `viewCount` instead of `viewCountInt`: every record "
        "lands, `views` comes empty, and the run names it with the `shapes:` override that reads it",
        Drift(renamed_fields={VIDEO_SEARCH: {"viewCountInt": "viewCount"}}),
    ),
    "wrapped-tweets": DriftShape(
        'community tweets come wrapped, {"tweet": {...}}, as the platform wraps tweets with visibility '
        "results: drift, with the `shapes:` override that reads them",
        Drift(wrapped_records={TWEETS: ("tweets", "tweet")}),
    ),
    "sentinel-with-pins": DriftShape(
        'pin search\'s last page of pins itself carries `"cursor": "-end-"`: paging ends there, the sentinel '
        "is never sent back",
        Drift(sentinel_with_records=True),
    ),
    "unreadable-tweets": DriftShape(
        "community tweets are answered 200 (billed) with an HTML maintenance page: paid once, kept in the raw "
        "store, drift",
        Drift(unreadable=frozenset({TWEETS})),
    ),
    "stuck-cursor": DriftShape(
        "the microblog-b feed and pin search hand back the cursor they were asked with: loop_detected",
        Drift(stuck_cursor=frozenset({MB_FEED, PINS})),
    ),
}


def combine(names: Iterable[str]) -> Drift:
    """The drift of several named shapes at once; raises KeyError naming an unknown one."""
    merged: dict[str, Any] = {}
    for name in names:
        if name not in SHAPES:
            raise KeyError(name)
        for fld in dataclasses.fields(Drift):
            value = getattr(SHAPES[name].drift, fld.name)
            if not value:
                continue
            have = merged.get(fld.name)
            if isinstance(value, Mapping):
                merged[fld.name] = {**(have or {}), **value}
            elif isinstance(value, frozenset):
                merged[fld.name] = (have or frozenset()) | value
            else:
                merged[fld.name] = max(have or value, value)
    return Drift(**merged)


def described() -> str:
    """One line per shape: its name and what it does."""
    return "\n".join(f"{name}: {shape.what}" for name, shape in SHAPES.items())
