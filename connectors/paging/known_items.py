"""What an incremental query already has, and which part of it may end paging.

A newest-first listing only needs paging until it reaches items seen before, but only if everything older than
those items was collected too. So the keys a query landed are of two kinds:

- **trusted**: landed in runs up to the one where the query's history last became complete (a pass went from
  the top to the end of the listing, or down to items that were already trusted). Everything older than a
  trusted item was collected.
- **the rest**: landed by a pass that has not reached the end yet (a budget stop, `max_pages`, a failure, a
  killed run). Older items below them may never have been paid for.

The rule is deliberately the cautious one: paging stops after the first page whose records are *all* known, so
a page that mixes new and known items (a pinned old post at the top, a repost of an old item) never ends a
query early. A query whose history is partial pages in two phases (`backfill_after_head`): from the top until a
page is all known (any key: it has reached the region the unfinished pass covered), then on from the cursor
where that pass stopped until a page is all *trusted* (or the listing ends).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from harvest.connectors.catalog.paging_styles import Cursor
from harvest.connectors.catalog.records import RecordKind, keys_of

Key = tuple[str | None, ...]
History = Literal["complete", "partial"]
CLOSING = frozenset({"complete", "caught_up"})
"""Statuses of a pass that reached the end of the listing or items that were already trusted."""


def key_text(value: Any) -> str | None:
    """Keys compared as text: string columns store wire integers as their decimal text."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class KnownKeys:
    """Keys per table the query landed before; `untrusted` are those a pass landed that never closed."""

    def __init__(
        self, by_table: Mapping[str, set[Key]], untrusted: Mapping[str, set[Key]] | None = None
    ) -> None:
        self.by_table = {table: set(keys) for table, keys in by_table.items()}
        self.untrusted = None if untrusted is None else {t: set(k) for t, k in untrusted.items()}
        """None: no key is trusted (the query's history was never complete, or its state is unknown)."""

    @property
    def size(self) -> int:
        return sum(len(keys) for keys in self.by_table.values())

    def as_plain(self) -> dict[str, Any]:
        """As JSON-able data, for a worker that cannot read the job's database (`tasks.staged_known`)."""

        def lists(keys: Mapping[str, set[Key]]) -> dict[str, list[list[str | None]]]:
            return {table: [list(key) for key in table_keys] for table, table_keys in keys.items()}

        return {
            "by_table": lists(self.by_table),
            "untrusted": None if self.untrusted is None else lists(self.untrusted),
        }

    @classmethod
    def from_plain(cls, plain: Mapping[str, Any]) -> KnownKeys:
        def sets(keys: Mapping[str, list[list[str | None]]]) -> dict[str, set[Key]]:
            return {table: {tuple(key) for key in table_keys} for table, table_keys in keys.items()}

        untrusted = plain["untrusted"]
        return cls(sets(plain["by_table"]), None if untrusted is None else sets(untrusted))

    def _is_known(self, table: str, key: Key, trusted: bool) -> bool:
        if key not in self.by_table.get(table, ()):
            return False
        if not trusted:
            return True
        return self.untrusted is not None and key not in self.untrusted.get(table, ())

    def all_known(
        self,
        kinds: Iterable[RecordKind],
        records: Mapping[str, Sequence[Any]],
        params: Mapping[str, Any],
        trusted: bool = False,
    ) -> bool:
        """True when the page holds at least one record and every record's key was landed before (by a pass
        that closed, when `trusted`)."""
        seen = 0
        for kind in kinds:
            for key in keys_of(kind, records.get(kind.table, []), params):
                text = tuple(key_text(v) for v in key)
                if None in text or not self._is_known(kind.table, text, trusted):
                    return False
                seen += 1
        return seen > 0


def backfill_after_head(
    history: History | None, backfill: Cursor | None, start_cursor: Cursor | None
) -> Cursor | None:
    """Where paging goes on once the head has caught up, or None when the query pages in one phase: a
    continued query (`start_cursor`), or a history that is complete, unknown or partial without a cursor."""
    if history == "partial" and start_cursor is None:
        return backfill
    return None


def history_after(
    status: str,
    backfilling: bool,
    next_cursor: Cursor | None,
    origin: Cursor | None,
    before: tuple[History | None, Cursor | None],
) -> tuple[History | None, Cursor | None]:
    """The query's history once this run's pass ended: (complete, None) or (partial, where older items begin).

    - closed (`complete`, `caught_up`): complete.
    - in the backfill phase: partial, the backfill goes on at the pass's next cursor.
    - in the first phase (from the top, or a continued query from its start cursor): when the pass never got
      past where it began (stopped before its first page, "not found"), the history is what it was; otherwise
      partial at the pass's next cursor. Items between that cursor and an older unfinished pass are then
      paged again later (never lost): only one place per query is remembered.
    - a loop (`loop_detected`) keeps no cursor: partial without one, so the next run pages from the top until
      it meets trusted items.
    """
    if status in CLOSING:
        return "complete", None
    if status == "loop_detected":
        return "partial", None
    if backfilling:
        return "partial", next_cursor
    if status == "not_found" or next_cursor == origin:
        return before
    return "partial", next_cursor
