"""What an incremental query already has: the primary keys it landed in earlier runs.

A newest-first listing only needs paging until it reaches items seen before. The rule is deliberately the
cautious one: paging stops after the first page whose records are *all* already known, so a page that mixes new
and known items (a pinned old post at the top, a repost of an old item) never ends the query early.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from connectors.records import RecordKind, keys_of

Key = tuple[str | None, ...]


def key_text(value: Any) -> str | None:
    """Keys compared as text: string columns store wire integers as their decimal text."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class KnownKeys:
    def __init__(self, by_table: Mapping[str, set[Key]]) -> None:
        self.by_table = {table: set(keys) for table, keys in by_table.items()}

    @property
    def size(self) -> int:
        return sum(len(keys) for keys in self.by_table.values())

    def all_known(
        self, kinds: Iterable[RecordKind], records: Mapping[str, list[Any]], params: Mapping[str, Any]
    ) -> bool:
        """True when the page holds at least one record and every record's key was landed before."""
        seen = 0
        for kind in kinds:
            known = self.by_table.get(kind.table, set())
            for key in keys_of(kind, records.get(kind.table, []), params):
                text = tuple(key_text(v) for v in key)
                if None in text or text not in known:
                    return False
                seen += 1
        return seen > 0
