"""A cursor the answer holds where the declaration does not look: paging would end short, and must say so.

A paged declaration reads the next page's cursor at its `next` paths. When none of them is in an answer, paging
ends there, as it must on the last page; but if the answer still carries a field named like a cursor (`cursor`,
`continuationToken`, `max_id`, ...) with a value, or a flag saying there is more (`has_more: true`), the `next`
path is most likely wrong, and a night that looked complete stopped after one page. That field's path is kept in
the page's account (`ExtractionReport.unread_cursor`), and the query's line, `query_state` and the run summary
name it with the `next` to declare. Only the answer's top level and the objects one level down are looked at
(`more.cursor`, `paging_info.max_id`, `pagination.has_more`): cursors deeper in are the records' own (a comment's
replies' cursor).
"""

from __future__ import annotations

from typing import Any

from harvest.connectors.catalog.paging_styles import Paging
from harvest.connectors.catalog.record_paths import MISSING, first

CURSOR_NAMES = (
    "cursor", "next_cursor", "nextCursor", "continuationToken", "continuation_token", "next_page_id",
    "next_page_token", "nextPageToken", "max_id", "next_max_id", "max_cursor", "after", "end_cursor",
    "endCursor", "min_time",
)  # fmt: skip
"""Field names that hold the next page's cursor in the service's answers, the likeliest first."""
MORE_FLAGS = ("has_more", "hasMore", "more_available", "moreAvailable", "has_next_page", "hasNextPage")
"""Field names of a flag saying there are more pages."""


def unread_cursor(paging: Paging, body: Any) -> dict[str, str] | None:
    """`{"field": path, "param": name}`: a field that looks like the next page's cursor (else a true "more"
    flag) when none of the declared `next` paths is in the answer and its declared `more` flag does not say there
    is no more, and the request parameter that would take it (the declared one; empty when there are several);
    None otherwise, and for a paging that reads no cursor from the answer (a single page)."""
    if not paging.cursor or paging.page is not None or not isinstance(body, dict):
        return None  # no `next` path declared (one page, or pages counted by the client): none to be wrong
    if any(first(body, paths) is not MISSING for paths in paging.cursor.values()):
        return None  # the declared cursor is there (a null or a sentinel ends paging as it should)
    if paging.more:
        flag = first(body, paging.more)
        if flag is not MISSING and not flag:
            return None
    cursors: list[tuple[int, str]] = []
    flags: list[tuple[int, str]] = []
    for prefix, holder in _holders(body):
        for name, value in holder.items():
            if name in CURSOR_NAMES and _live_cursor(value, paging.end_values):
                cursors.append((CURSOR_NAMES.index(name), prefix + name))
            elif name in MORE_FLAGS and (value is True or (type(value) is int and value == 1)):
                flags.append((MORE_FLAGS.index(name), prefix + name))
    found = min(cursors) if cursors else min(flags) if flags else None
    if found is None:
        return None
    params = paging.request_params
    return {"field": found[1], "param": params[0] if len(params) == 1 else ""}


def _holders(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The answer and each object directly in it, with the path prefix of their fields."""
    return [("", body), *((f"{key}.", value) for key, value in body.items() if isinstance(value, dict))]


def _live_cursor(value: Any, end_values: tuple[str, ...]) -> bool:
    """A value a cursor could be: text that is not empty nor a sentinel, or a number other than 0."""
    if isinstance(value, str):
        return bool(value.strip()) and value not in end_values
    return type(value) is int and value != 0


def unread_cursor_words(unread: dict[str, str]) -> str:
    """What a query whose paging ended at an unread cursor says, with the `next` to declare."""
    path, param = unread["field"], unread.get("param") or "PARAMETER"
    if path.rsplit(".", 1)[-1] in MORE_FLAGS:
        return (
            f"paging ended where the answer had no cursor at the declared `paging.next`, while `{path}` said "
            "there were more pages: the declaration's `next` may be wrong"
        )
    return (
        f"paging ended where the answer had no cursor at the declared `paging.next`, while it held `{path}`: "
        f"if that is the next page's cursor, declare `next: {{{param}: {path}}}`"
    )
