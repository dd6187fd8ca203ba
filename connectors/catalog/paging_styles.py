"""Pagination styles: how a page's answer names the next page, and when there is none.

One mechanism covers every style the service uses: each request parameter that carries the cursor is read from
one of a few response paths, and an optional "more" flag ends paging when falsy even if a cursor is still
there (the real service's last pages sometimes carry one). A cursor value that is missing, null, empty or 0
means "no next page": other clients kept the old cursor in that case and paid for the last page forever. So does
a sentinel, a value the service puts where the cursor goes to say "no more" (pin search's `"-end-"`): sent back,
it would be a paid request for nothing, so paging ends on the page that carries it, records or not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from harvest.connectors.catalog.record_paths import MISSING, alternatives, compile_path, first, steps

Cursor = dict[str, str]
"""Request parameters that ask for the next page, e.g. {"cursor": "abc"}; plain strings, JSON-serialisable."""

END_OF_PAGES: tuple[str, ...] = ("-end-",)
"""Cursor values that mean "no more pages" for every paging style unless its declaration names others: pin
search's last page answers `"cursor": "-end-"`, and no real cursor of the service looks like it."""


PagingStyle = Literal[
    "single",
    "cursor",
    "continuation_token",
    "envelope_cursor",
    "page_id_and_cursor",
    "max_id",
    "max_cursor",
    "page_number",
]
"""The paging styles harvest knows, listed once: a declaration's `paging.style` is one of them, each has its
defaults below, and the sandbox serves each with its traps."""

STYLE_DEFAULTS: dict[PagingStyle, tuple[dict[str, tuple[str, ...]], tuple[str, ...]]] = {
    "single": ({}, ()),
    "cursor": ({"cursor": ("cursor",)}, ()),
    "continuation_token": ({"continuationToken": ("continuationToken",)}, ()),
    "envelope_cursor": ({"cursor": ("metadata.cursor",)}, ()),
    "page_id_and_cursor": ({"next_page_id": ("next_page_id",), "cursor": ("cursor",)}, ()),
    "max_id": ({"max_id": ("paging_info.max_id", "max_id")}, ("paging_info.more_available",)),
    "max_cursor": ({"max_cursor": ("max_cursor",)}, ("has_more",)),
    "page_number": ({}, ()),
}
"""Each style harvest knows: (request parameter -> the response paths of its next value, the "more" flag's
paths), what a declaration gets when it names the style alone. Creative search's cursor is in the envelope's
`metadata`; page photos send `next_page_id` and `cursor` back together (either missing ends paging); reels read
`paging_info.max_id` (full answer) or `max_id` (trimmed), ended by `more_available: false`; the short-video
profile's integer `max_cursor` is ended by `has_more: 0` (absent when trimmed) or a falsy cursor. The sandbox
names its traps after these styles."""


@dataclass(frozen=True)
class PageNumbers:
    """Pages the client counts (`page=1, 2, ...`): the answer names no next page, so harvest adds `step` to the
    number it sent. Paging ends on a page with no records (as for every style), a falsy `more` flag, once the
    number `last` was asked (the service answers 400 past it), or once the answer's count of pages (at
    `pages`) is reached."""

    param: str = "page"
    first: int = 1
    step: int = 1
    last: int | None = None
    pages: str | None = None

    def after(self, body: Any, sent: Mapping[str, Any] | None) -> Cursor | None:
        asked = (sent or {}).get(self.param, self.first)
        try:
            current = int(asked)
        except (TypeError, ValueError):
            return None  # a number harvest did not send cannot be counted on
        nxt = current + self.step
        if self.last is not None and nxt > self.last:
            return None
        count = first(body, (self.pages,)) if self.pages is not None else None
        if (
            isinstance(count, int | float)
            and not isinstance(count, bool)
            and (nxt - self.first) // self.step >= count
        ):
            return None  # the answer's count of pages is reached
        return {self.param: str(nxt)}


@dataclass(frozen=True)
class Follow:
    """Follow-up cursors per item: each record of `kind` (at every nesting level) may carry one at `path`,
    asked for as a request of the same query with the cursor in `param` (a comment thread's more replies)."""

    param: str
    path: str
    kind: str

    def cursor_of(self, record: Any) -> str | None:
        """The record's follow-up cursor, or None (absent, null, empty, 0 or false: no more behind it)."""
        value = compile_path(self.path)(record)
        if value is MISSING or value is None or value == "" or value == 0 or value is False:
            return None
        return str(value)


@dataclass(frozen=True)
class Paging:
    style: str
    cursor: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    more: tuple[str, ...] = ()
    end_values: tuple[str, ...] = END_OF_PAGES
    """Cursor values that end paging instead of being sent back (sentinels)."""
    page: PageNumbers | None = None
    """Set for the page-number style: harvest counts the next page's number (`cursor` names its parameter)."""
    follow: Follow | None = None
    """Follow-up cursors its records carry: more requests of the same query (`connectors.paging.follow_ups`)."""

    @property
    def single(self) -> bool:
        return not self.cursor

    @property
    def request_params(self) -> tuple[str, ...]:
        follow = (self.follow.param,) if self.follow and self.follow.param not in self.cursor else ()
        return (*self.cursor, *follow)

    def reads_into(self, keys: tuple[str, ...]) -> bool:
        """Whether a path the next request is read from passes the value at `keys` (object keys from the top):
        an answer whose records there are kept unread (`connectors.reading.large_body`) must be read whole for
        it, or paging would end where the service has more."""
        paths = [*(p for alts in self.cursor.values() for p in alts), *self.more]
        if self.page is not None and self.page.pages:
            paths.append(self.page.pages)
        wanted = tuple(("key", key) for key in keys)
        for path in paths:
            for alternative in alternatives(path):
                walked = steps(alternative.strip())
                if len(walked) > len(wanted) and walked[: len(wanted)] == wanted:
                    return True
        return False

    def first_request(self) -> Cursor | None:
        """What the first page is asked with beyond the query's parameters: a page number, its first."""
        return None if self.page is None else {self.page.param: str(self.page.first)}

    def next_cursor(self, body: Any, sent: Mapping[str, Any] | None = None) -> Cursor | None:
        """The parameters of the next request, or None at the end of pages; `sent`: the parameters the page
        was asked with (a page number counts on from them)."""
        if self.single:
            return None
        if self.more:
            flag = first(body, self.more)
            if flag is not MISSING and not flag:
                return None
        if self.page is not None:
            return self.page.after(body, sent)
        out: Cursor = {}
        for param, paths in self.cursor.items():
            value = first(body, paths)
            if value is MISSING or value is None or value == "" or value == 0 or value is False:
                return None
            if str(value) in self.end_values:
                return None
            out[param] = str(value)
        return out
