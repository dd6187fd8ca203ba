"""The identity of a query and the shape of its result set (how many pages, how many records of each kind).

Everything is derived from a stable hash of (seed, path, identity), where the identity is the canonical text
of the parameters that decide which records exist (handle, url, query, sort order, region, ...). So the answer
to a request depends only on the request and the config, and a test can compute what a full crawl must
collect."""

from __future__ import annotations

import calendar
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from harvest.sandbox.emulation.emulated import EmulatedEndpoint
from harvest.sandbox.emulation.stablehash import hexid, hnum, span
from harvest.sandbox.wire.validation import RequestParams

ANCHOR = calendar.timegm((2026, 11, 1, 12, 0, 0))
"""Epoch seconds a `Scope` made without a clock counts back from (2026-11-01T12:00:00Z)."""
NEWEST_WITHIN = 2 * 86400
"""How long before the sandbox's clock a query's newest record is, at most: listings lead with recent items."""
_WINDOWS = {"hour": 3600, "day": 86400, "today": 86400, "yesterday": 2 * 86400, "week": 7 * 86400,
            "month": 30 * 86400, "3_months": 90 * 86400, "6_months": 180 * 86400, "year": 365 * 86400}  # fmt: skip
"""How recent the items are of a request asking for a time window by one of these words (`uploadDate: today`,
`date_posted: last-week`, `timeframe: month`), read without their `last_`/`this_`/`past_`."""

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_B36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def iso(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def b64int(n: int, length: int) -> str:
    """`n` written in the URL-safe base64 alphabet, left-padded to `length` (ids like "dQw4w9WgXcQ")."""
    out = []
    for _ in range(length):
        n, r = divmod(n, 64)
        out.append(_B64[r])
    return "".join(reversed(out))


def b36(n: int) -> str:
    out = []
    while True:
        n, r = divmod(n, 36)
        out.append(_B36[r])
        if n == 0:
            return "".join(reversed(out))


@lru_cache(maxsize=4096)
def _id_base(key: str, kind: str, digits: int) -> int:
    low = 10 ** (digits - 1)
    return low + hnum(key, kind) % (8 * low)


@dataclass(frozen=True)
class Scope:
    """One query: what it is about, and the clock its records' timestamps count back on."""

    path: str
    identity: str
    key: str
    anchor: int
    step: int
    seed: int = 0
    """The sandbox's seed: what a request names has the same id on every endpoint of one seed (`subjects`)."""
    now: int = ANCHOR
    """The sandbox's clock (`SandboxConfig.clock`): what a time in words ("2 days ago") counts back from."""

    def time(self, pos: int) -> int:
        """Epoch seconds of the record at position `pos` (strictly decreasing: newest first)."""
        return self.anchor - pos * self.step

    def age(self, at: int) -> int:
        """How long before a fetch `at` is, as a time in words says it: counted from the middle of the clock's
        day (a run on the day its config is made fetches within half a day of it)."""
        return self.now + 43200 - at

    def numid(self, kind: str, pos: int, digits: int = 16) -> str:
        """A numeric id, unique per (query, kind, position)."""
        return str(_id_base(self.key, kind, digits) + pos)

    def tag(self) -> str:
        """A short digest binding a cursor to its query."""
        return hexid(6, self.key)


def _window_word(value: str) -> str:
    word = value.lower().replace("-", "_")
    for prefix in ("last_", "this_", "past_"):
        word = word.removeprefix(prefix)
    return word


def asked_window(endpoint: EmulatedEndpoint, params: RequestParams) -> int | None:
    """Seconds back the request asks its items to be from (None: no window): the value of a parameter whose
    `enum` offers time windows (two words of `_WINDOWS` at least), when it is one of them."""
    for p in endpoint.params:
        if sum(_window_word(v) in _WINDOWS for v in p.enum) < 2:
            continue
        value = params.get(p.name)
        if value is not None and _window_word(value) in _WINDOWS:
            return _WINDOWS[_window_word(value)]
    return None


def make_scope(
    endpoint: EmulatedEndpoint,
    params: RequestParams,
    seed: int,
    identity: str | None = None,
    now: int = ANCHOR,
) -> Scope:
    """The scope of a validated request. `identity` overrides the parameter-derived one (comment replies are
    about the root continuation token, whatever page the request asks for). The newest record is at most
    `NEWEST_WITHIN` before `now`; a request asking for a window (`asked_window`) has its newest record in the
    window's first quarter and its records a 1600th of the window apart (a minute at least)."""
    if identity is None:
        parts = []
        given = [name for name in endpoint.one_of if params.get(name) is not None]
        ignored = set(given[1:])
        for p in endpoint.params:
            if not p.identity or p.name in ignored:
                continue
            if p.check == "multi":
                vals = params.many(p.name)
                if vals:
                    parts.append(f"{p.name}={','.join(sorted(vals))}")
            else:
                value = params.get(p.name)
                if value is not None:
                    parts.append(f"{p.name}={value}")
        identity = "&".join(parts)
    key = f"{seed}|{endpoint.path}|{identity}"
    window = asked_window(endpoint, params)
    newest = NEWEST_WITHIN if window is None else window // 4
    anchor = now - span(0, newest, key, "anchor")
    step = span(60, 3600 if window is None else max(60, min(3600, window // 1600)), key, "step")
    return Scope(endpoint.path, identity, key, anchor, step, seed, now)


@dataclass(frozen=True)
class PagePlan:
    """How many pages a query has and how many records of each kind each page holds.

    Every page but the last holds `per_page[kind]` records of a kind; the last holds `last[kind]` (at least
    one record of the primary kind). Positions run on per kind: page p starts at p * per_page[kind]."""

    n_pages: int
    per_page: Mapping[str, int]
    last: Mapping[str, int]

    def count(self, kind: str, page: int) -> int:
        if page < 0 or page >= self.n_pages:
            return 0
        return self.last[kind] if page == self.n_pages - 1 else self.per_page[kind]

    def start(self, kind: str, page: int) -> int:
        return page * self.per_page[kind]

    def total(self, kind: str) -> int:
        return (self.n_pages - 1) * self.per_page[kind] + self.last[kind]


def make_page_plan(
    scope: Scope, pages: tuple[int, int], per_page: Mapping[str, int], primary: str
) -> PagePlan:
    n_pages = span(pages[0], pages[1], scope.key, "pages")
    last = {}
    for kind, size in per_page.items():
        lo = 1 if kind == primary and size > 0 else 0
        last[kind] = span(lo, size, scope.key, "last", kind)
    return PagePlan(n_pages, dict(per_page), last)
