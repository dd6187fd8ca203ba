"""Record kinds: where a page's records live, what shapes they may come in, how they are keyed, their columns.

A page is decoded once and turned straight into one Arrow table per record kind with an explicit schema
(`connectors.extraction`), so every Parquet file of a table has the same schema and no long-lived Python objects
pile up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from connectors.dig import MISSING, first
from connectors.fields import TIMESTAMP, Field

META_COLUMNS: tuple[pa.Field, ...] = (
    pa.field("raw", pa.string()),
    pa.field("_endpoint", pa.string()),
    pa.field("_query_id", pa.string()),
    pa.field("_run_id", pa.string()),
    pa.field("_fetched_at", TIMESTAMP),
)


@dataclass(frozen=True)
class Unwrap:
    """An alternative shape: an item may come wrapped as `{key: <record>, ...}`.

    Columns read the record inside; `extras` are columns read from the wrapper (null for unwrapped items). The
    microblog-b feed's native upstream shape is `{"post": {...}, "reason": ..., "reply": ...}`.
    """

    key: str
    extras: tuple[Field, ...] = ()

    def inner(self, item: Any) -> Any:
        if isinstance(item, dict):
            got = item.get(self.key)
            if isinstance(got, dict):
                return got
        return item

    def is_wrapped(self, item: Any) -> bool:
        return isinstance(item, dict) and isinstance(item.get(self.key), dict)


@dataclass(frozen=True)
class Located:
    """What a page holds at a kind's locations: the items, and whether the location was there at all."""

    items: list[Any]
    found: bool
    single: bool
    """The location held one object, not a list (a detail answer): a keyless one means "not found"."""


@dataclass(frozen=True)
class RecordKind:
    """One kind of record, landing in one table.

    `locations` are tried in order; the first that resolves holds the records (a list, or one object). Several
    endpoints may share a kind (the microblog-b single post and the user feed both yield posts): one table.
    """

    table: str
    locations: tuple[str, ...]
    primary_key: tuple[str, ...]
    fields: tuple[Field, ...]
    unwrap: Unwrap | None = None
    schema: pa.Schema = field(init=False, compare=False, repr=False)
    heads: frozenset[str] = field(init=False, compare=False, repr=False)
    """Top-level record keys some column reads: any other key is a field the catalog does not know yet."""

    def __post_init__(self) -> None:
        names = [fld.name for fld in self.columns]
        missing = [k for k in self.primary_key if k not in names]
        if missing or len(set(names)) != len(names):
            raise ValueError(
                f"{self.table}: primary key {missing} not among fields, or duplicate field names"
            )
        schema = pa.schema([pa.field(fld.name, fld.type) for fld in self.columns] + list(META_COLUMNS))
        object.__setattr__(self, "schema", schema)
        object.__setattr__(self, "heads", frozenset().union(*(fld.heads for fld in self.fields)))

    @property
    def columns(self) -> tuple[Field, ...]:
        """Every typed column: the record's fields, then those read from a wrapper."""
        return self.fields + (self.unwrap.extras if self.unwrap else ())

    def field(self, name: str) -> Field | None:
        return next((fld for fld in self.columns if fld.name == name), None)

    def reader(self, name: str, params: Mapping[str, Any]) -> Callable[[Any], Any] | None:
        """Reads column `name` from an item as the page holds it (wrapped or not); None if no such column."""
        fld = self.field(name)
        if fld is None:
            return None
        read = fld.reader(params)
        if self.unwrap is None or fld in self.unwrap.extras:
            if self.unwrap is not None:
                unwrap = self.unwrap
                return lambda item: read(item) if unwrap.is_wrapped(item) else None
            return read
        inner = self.unwrap.inner
        return lambda item: read(inner(item))

    def locate(self, body: Any) -> Located:
        found = first(body, self.locations)
        if found is MISSING or found is None:
            return Located([], found is not MISSING, False)
        if isinstance(found, list):
            return Located([r for r in found if r is not None], True, False)
        return Located([found], True, True)

    def extract(self, body: Any) -> list[Any]:
        """The items of this kind in one page body (empty when the page has none)."""
        return self.locate(body).items


def keys_of(kind: RecordKind, records: Iterable[Any], params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """Primary-key tuples of items (wrapped or not)."""
    readers = [r for name in kind.primary_key if (r := kind.reader(name, params)) is not None]
    return [tuple(read(row) for read in readers) for row in records]
