"""Follow-up requests of one query, and the order its requests go in.

An endpoint whose records carry cursors of their own (`paging.follow`: a comment thread's `replies.more.cursor`)
is paged as a tree: the top-level pages follow the endpoint's next cursor, and every cursor a record hands out is
one more request of the same query (its answer read with the same declaration, its own next cursor and its
records' cursors more follow-ups). Each is a paid page like any other: reserved by the ledger under the query's
budget and caps, kept in the raw store before it is read, counted in the query's pages and credits.

The order (docs/decisions.md, "Follow-up cursors"): the top-level pages and the follow-ups take turns, one
each, while both have a request waiting; follow-ups go in the order they were found (breadth-first: the threads
of page 1 before those of page 2, a thread's first replies before the replies to them). So a short budget
spreads over the comments of many pages and the first replies of many threads instead of one deep thread.

The state is rebuilt from the raw pages alone after a crash (`tasks.output.replay`): a stored page whose
request cursor is among the waiting follow-ups answered that follow-up, any other page was a top-level one, and
the same transitions run again; so a resume neither pays a follow-up twice nor skips one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.catalog.paging_styles import Cursor

CursorKey = tuple[tuple[str, str], ...]


def cursor_key(cursor: Cursor) -> CursorKey:
    return tuple(sorted(cursor.items()))


@dataclass
class FollowUps:
    """The follow-up requests waiting, and whose turn it is."""

    waiting: deque[Cursor] = field(default_factory=deque)
    """Follow-ups found and not answered yet, in the order found."""
    top_ended: bool = False
    """The top-level pages have ended (no next cursor, or an empty page): only follow-ups are left."""
    turn: bool = False
    """A follow-up goes next (when one waits): after each top-level page."""
    asked: int = 0
    """Follow-up requests answered (paid pages of the query)."""

    def choose(self, top: Cursor | None) -> tuple[Cursor | None, bool] | None:
        """The next request: (its cursor, whether it is a follow-up); None when nothing is left."""
        if self.waiting and (self.turn or self.top_ended):
            return self.waiting[0], True
        if not self.top_ended:
            return top, False
        return None

    def __post_init__(self) -> None:
        self._keys = {cursor_key(c) for c in self.waiting}
        """The waiting follow-ups' keys: a page's cursors are checked against them in constant time."""

    def is_waiting(self, cursor: Mapping[str, Any] | None) -> bool:
        return cursor is not None and cursor_key(dict(cursor)) in self._keys

    def found(self, cursors: Iterable[Cursor], used: set[CursorKey]) -> None:
        """Add the follow-ups a page handed out; one asked before, or waiting already, is the same request."""
        for cursor in cursors:
            key = cursor_key(cursor)
            if key not in used and key not in self._keys:
                self.waiting.append(cursor)
                self._keys.add(key)

    def answered(self, cursor: Mapping[str, Any], used: set[CursorKey]) -> None:
        """A follow-up's page was paid and kept: it is asked no more, and the top-level pages go next."""
        asked = dict(cursor)
        key = cursor_key(asked)
        if self.waiting and self.waiting[0] == asked:  # the oldest waiting, as the pager asks them
            self.waiting.popleft()
        elif key in self._keys:
            self.waiting.remove(asked)
        self._keys.discard(key)
        used.add(key)
        self.asked += 1
        self.turn = False

    def plain(self) -> dict[str, Any]:
        """What a later run (`--continue`) or round goes on from: the waiting follow-ups, whether the top-level
        pages had ended, whose turn it is."""
        return {"waiting": [dict(c) for c in self.waiting], "top_ended": self.top_ended, "turn": self.turn}

    @classmethod
    def from_plain(cls, plain: Mapping[str, Any] | None, asked: int = 0) -> FollowUps:
        if not plain:
            return cls(asked=asked)
        waiting = deque(dict(c) for c in plain.get("waiting", ()))
        return cls(waiting, bool(plain.get("top_ended")), bool(plain.get("turn")), asked)

    @property
    def left(self) -> bool:
        """Something is left to ask for a later run: a follow-up waits."""
        return bool(self.waiting)


def follow_cursors(endpoint: Endpoint, records: Mapping[str, Sequence[Any]]) -> list[Cursor]:
    """The follow-up cursors a page's records carry (every record of the declared kind, at every nesting
    level: the page's records hold the nested ones too), each as the request parameters it is sent in."""
    follow = endpoint.paging.follow
    if follow is None:
        return []
    kind = next((k for k in endpoint.kinds if k.table == follow.kind), None)
    if kind is None:
        return []
    unwrap = kind.unwrap
    out: list[Cursor] = []
    for item in records.get(kind.table, ()):
        record = unwrap.inner(item) if unwrap is not None and unwrap.is_wrapped(item) else item
        value = follow.cursor_of(record)
        if value is not None and value not in endpoint.paging.end_values:
            out.append({follow.param: value})
    return out
