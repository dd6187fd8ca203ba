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
from typing import Any

from connectors.catalog.record_paths import MISSING, first

Cursor = dict[str, str]
"""Request parameters that ask for the next page, e.g. {"cursor": "abc"}; plain strings, JSON-serialisable."""

END_OF_PAGES: tuple[str, ...] = ("-end-",)
"""Cursor values that mean "no more pages" for every paging style unless its declaration names others: pin
search's last page answers `"cursor": "-end-"`, and no real cursor of the service looks like it."""


STYLE_DEFAULTS: dict[str, tuple[dict[str, tuple[str, ...]], tuple[str, ...]]] = {
    "single": ({}, ()),
    "cursor": ({"cursor": ("cursor",)}, ()),
    "continuation_token": ({"continuationToken": ("continuationToken",)}, ()),
    "envelope_cursor": ({"cursor": ("metadata.cursor",)}, ()),
    "page_id_and_cursor": ({"next_page_id": ("next_page_id",), "cursor": ("cursor",)}, ()),
    "max_id": ({"max_id": ("paging_info.max_id", "max_id")}, ("paging_info.more_available",)),
    "max_cursor": ({"max_cursor": ("max_cursor",)}, ("has_more",)),
}
"""Each style harvest knows: (request parameter -> the response paths of its next value, the "more" flag's
paths), what a declaration gets when it names the style alone. Creative search's cursor is in the envelope's
`metadata`; page photos send `next_page_id` and `cursor` back together (either missing ends paging); reels read
`paging_info.max_id` (full answer) or `max_id` (trimmed), ended by `more_available: false`; the short-video
profile's integer `max_cursor` is ended by `has_more: 0` (absent when trimmed) or a falsy cursor. The sandbox
names its traps after these styles."""


@dataclass(frozen=True)
class Paging:
    style: str
    cursor: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    more: tuple[str, ...] = ()
    end_values: tuple[str, ...] = END_OF_PAGES
    """Cursor values that end paging instead of being sent back (sentinels)."""

    @property
    def single(self) -> bool:
        return not self.cursor

    @property
    def request_params(self) -> tuple[str, ...]:
        return tuple(self.cursor)

    def next_cursor(self, body: Any) -> Cursor | None:
        """The parameters of the next request, or None at the end of pages."""
        if self.single:
            return None
        if self.more:
            flag = first(body, self.more)
            if flag is not MISSING and not flag:
                return None
        out: Cursor = {}
        for param, paths in self.cursor.items():
            value = first(body, paths)
            if value is MISSING or value is None or value == "" or value == 0 or value is False:
                return None
            if str(value) in self.end_values:
                return None
            out[param] = str(value)
        return out


def single() -> Paging:
    return Paging("single")


def cursor(
    request: str = "cursor",
    response: str = "cursor",
    more: str | None = None,
    end: tuple[str, ...] = END_OF_PAGES,
) -> Paging:
    """`end`: the cursor values that mean "no more" (`-end-` unless given)."""
    return Paging("cursor", {request: (response,)}, (more,) if more else (), end)


def continuation_token() -> Paging:
    return Paging("continuation_token", {"continuationToken": ("continuationToken",)})


def envelope_cursor() -> Paging:
    """Creative search: the cursor is in the envelope's `metadata`."""
    return Paging("envelope_cursor", {"cursor": ("metadata.cursor",)})


def page_id_and_cursor() -> Paging:
    """Page photos: both `next_page_id` and `cursor` go back together; either missing ends paging."""
    return Paging("page_id_and_cursor", {"next_page_id": ("next_page_id",), "cursor": ("cursor",)})


def max_id() -> Paging:
    """Reels: `paging_info.max_id` (full answer) or `max_id` (trimmed), ended by `more_available: false`."""
    return Paging("max_id", {"max_id": ("paging_info.max_id", "max_id")}, ("paging_info.more_available",))


def max_cursor() -> Paging:
    """Short-video profile: integer `max_cursor`, ended by `has_more: 0` (absent when trimmed) or a falsy cursor."""
    return Paging("max_cursor", {"max_cursor": ("max_cursor",)}, ("has_more",))
