"""Which lists a page lost: a list (or object) of records that is not where the catalog expects it, while the
page had content.

Every list at once (none of the places the page should hold is there): lost, absent, null or an object. One
list among others may be left out by the service (a search with no lives, a page with no comments), so it is
lost only on a signal that its records went elsewhere: it came as an object (a keyed map where a list belongs),
or the object that should hold it carries a non-empty list of objects under a key no kind of the endpoint reads
(a renamed list), or, for a kind that is one object (`one: true`), an unread object holding the kind's key. The order in which the kinds are declared never matters.

A place the service sends on a query's first page only (a post beside the first page of its comments) is not
expected on a later page: declared `first_page_only`, or found on an earlier page of the query and absent now.
Such a place counts towards "every list at once" only when the page holds a list of objects nothing reads (the
records went somewhere). `connectors.reading.extraction` turns each lost list into a `drift` count and one line
of the drift message.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from harvest.connectors.catalog.record_paths import MISSING, alternatives, dig, first
from harvest.connectors.catalog.records import ENVELOPE_KEYS, Located, RecordKind, connection_nodes

MAX_NODES_SEARCHED = 20_000
"""Objects and lists visited when looking for where a lost list went: an answer is searched to this many (a
page of records has a few hundred), so a huge answer's drift costs milliseconds, not a walk of all of it."""


@dataclass(frozen=True)
class LostList:
    table: str
    where: str
    """`table: location or location`."""
    how: str
    """absent, null, "an object, not a list", ..."""
    instead: Any
    """What was there instead of the list, if anything."""
    moved: tuple[str, Any] | None
    """The unread key the records may have moved to, and its items (a list, or the one object)."""
    near: str | None = None
    """What the answer holds at the nearest place above the location that is there: `[0].data` holds ..."""
    read_at: str | None = None
    """The one record path in the whole answer holding a list of objects no kind reads, when there is one: the
    `shapes` override that would read this list there."""


def lost_lists(
    kinds: tuple[RecordKind, ...],
    located: Mapping[str, Located],
    body: Any,
    earlier: Collection[str] = (),
    later: bool = False,
) -> list[LostList]:
    """The kinds whose list this page lost (see the module docstring); empty when nothing was lost. `earlier`:
    the tables whose place an earlier page of the query held; `later`: the page is not the query's first."""
    expected = [k for k in kinds if k.table in located and not (later and k.first_page_only)]
    missing = [k for k in expected if not located[k.table].found]
    if not missing or not has_content(body):
        return []
    out = []
    elsewhere: list[str] | None = None
    all_gone = len(missing) == len(expected)
    if all_gone and all(k.table in earlier and located[k.table].missing == "absent" for k in missing):
        elsewhere = unread_list_paths(kinds, located, body)
        all_gone = bool(elsewhere)  # left out again, unless their records went somewhere
    for kind in missing:
        place = located[kind.table]
        unread = _unread_lists(kinds, kind, body)
        reshaped = isinstance(place.instead, dict) and bool(place.instead)
        if all_gone or unread or reshaped:
            where = f"{kind.table}: {' or '.join(kind.locations) or '(the answer)'}"
            moved = next(iter(unread.items())) if unread else None
            if elsewhere is None:
                elsewhere = unread_list_paths(kinds, located, body)
            only = elsewhere[0] if len(elsewhere) == 1 else None
            near = next(filter(None, (nearest(body, loc) for loc in kind.locations)), None)
            out.append(LostList(kind.table, where, place.missing, place.instead, moved, near, only))
    return out


def unread_list_paths(kinds: tuple[RecordKind, ...], located: Mapping[str, Located], body: Any) -> list[str]:
    """Record paths (`connectors.catalog.record_paths`) of the lists of objects in the answer that no kind read: a list, or a
    GraphQL connection (`...edges[].node`). Neither what a kind reads nor what is inside such a list (records'
    own lists) is searched; a body that is a list is searched item by item (the clip answer's three parts)."""
    read = {loc for k in kinds if k.table in located and located[k.table].found for loc in k.locations}
    found: list[str] = []
    queue: deque[tuple[str, Any]] = deque([("", body)])
    visited = 0
    while queue and visited < MAX_NODES_SEARCHED:
        path, value = queue.popleft()
        visited += 1
        if path in read:
            continue
        if isinstance(value, dict):
            if path and connection_nodes(value) is not None:
                found.append(f"{path}.edges[].node" if "edges" in value else f"{path}.nodes")
                continue
            queue.extend(
                (f"{path}.{key}" if path else key, v)
                for key, v in value.items()
                if path or key not in ENVELOPE_KEYS
            )
        elif isinstance(value, list):
            if path and any(isinstance(item, dict) for item in value):
                found.append(path)
            elif not path:
                queue.extend((f"[{n}]", item) for n, item in enumerate(value))
    return found


def has_content(body: Any) -> bool:
    """Whether a page carries something beyond the envelope, cursors and flags: a list or object holding some
    value other than null (`[{"data": {"clip": null}}, ...]`, a "not found" answer, holds none)."""
    if isinstance(body, list):
        return _holds_value(body)
    if not isinstance(body, dict):
        return False
    return any(
        isinstance(v, list | dict) and _holds_value(v) for k, v in body.items() if k not in ENVELOPE_KEYS
    )


def _holds_value(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_holds_value(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_value(v) for v in value)
    return value is not None


def nearest(body: Any, location: str) -> str | None:
    """What the nearest place above a missing location holds (its keys and their kinds, or a list's first
    items): where a user reading the message looks for what the declaration should name."""
    if not location or "[]" in location:
        return None
    place = location
    while place:
        place = _parent(place)
        held = dig(body, place) if place else body
        if isinstance(held, dict | list):
            return f"`{place or '(the answer)'}` holds: {_described(held)}"
    return None


def _described(value: Any) -> str:
    """A dict's keys with the kind of each value; a list's length and its first items' keys."""
    if isinstance(value, dict):
        return _keys(value, _kind) or "no keys"
    first = "; ".join(
        f"[{n}] an object ({_keys(item, None) or 'no keys'})"
        if isinstance(item, dict)
        else f"[{n}] {_kind(item)}"
        for n, item in enumerate(value[:3])
    )
    return f"a list of {len(value)}" + (f": {first}" if first else "")


def _keys(value: dict[str, Any], kind: Any) -> str:
    keys = list(value)
    more = f", and {len(keys) - 12} more" if len(keys) > 12 else ""
    return ", ".join(f"{key} ({kind(value[key])})" if kind else key for key in keys[:12]) + more


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if value is None:
        return "null"
    return {bool: "true/false", str: "text"}.get(type(value), "a number")


def _parent(location: str) -> str:
    return location.rsplit(".", 1)[0] if "." in location else ""


def _unread_lists(kinds: tuple[RecordKind, ...], kind: RecordKind, body: Any) -> dict[str, Any]:
    """Non-empty lists of objects beside where `kind` should be (in the object holding its location) under
    keys that no kind of the endpoint, nor the envelope, names. Lists of plain values are not records. Where the
    kind is one object (`one: true`), an unread object holding the kind's key is its record moved too."""
    out: dict[str, Any] = {}
    for location in kind.locations:
        if not location or "[]" in location:
            continue
        parent = _parent(location)
        holder = dig(body, parent)
        if not isinstance(holder, dict):
            continue
        named = {
            loc.rsplit(".", 1)[-1] for k in kinds for loc in k.locations if loc and _parent(loc) == parent
        }
        one = location in kind.objects
        for key, value in holder.items():
            if key in named or key in ENVELOPE_KEYS or key in out:
                continue
            listed = isinstance(value, list) and any(isinstance(item, dict) for item in value)
            if listed or (one and isinstance(value, dict) and _carries_key(kind, value)):
                out[key] = value
    return out


def _carries_key(kind: RecordKind, value: dict[str, Any]) -> bool:
    """Whether an object holds every field of the kind's primary key: one record of a `one: true` kind."""
    paths = [f.path for f in kind.fields if f.name in kind.primary_key]
    found = [first(value, tuple(alternatives(path))) for path in paths]
    return bool(paths) and all(v is not MISSING and v is not None for v in found)
