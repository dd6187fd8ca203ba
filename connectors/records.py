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
from connectors.fields import PARAM_PREFIX, TIMESTAMP, Field

META_COLUMNS: tuple[pa.Field, ...] = (
    pa.field("raw", pa.string()),
    pa.field("_endpoint", pa.string()),
    pa.field("_query_id", pa.string()),
    pa.field("_run_id", pa.string()),
    pa.field("_fetched_at", TIMESTAMP),
)


ENVELOPE_KEYS = frozenset({"success", "credits_remaining", "credits_charged", "cached"})


@dataclass(frozen=True, slots=True)
class Known:
    """The fields a kind reads, as a tree: `keys` at this level and the objects only partly read below it;
    `prefix` is this level's path, to name an unknown key."""

    keys: frozenset[str]
    partial: tuple[tuple[str, Known], ...]
    prefix: str = ""


def known_tree(paths: Iterable[str], extra: Iterable[str] = (), prefix: str = "") -> Known:
    """The tree of field paths. An object read whole (a JSON column, a list, an ignored path) is a leaf:
    nothing under it is unknown. `extra`: more known top-level keys."""
    tree: dict[str, Any] = dict.fromkeys(extra)
    for path in paths:
        for alternative in path.split("|"):
            node: dict[str, Any] = tree
            parts = alternative.split(".")
            for n, part in enumerate(parts):
                name, bracket, _ = part.partition("[")
                if bracket or n == len(parts) - 1:
                    node[name] = None  # read whole: a leaf wins over anything under it
                    break
                if name in node and node[name] is None:
                    break
                node = node.setdefault(name, {})

    def freeze(node: dict[str, Any], at: str) -> Known:
        partial = tuple((k, freeze(v, f"{at}{k}.")) for k, v in node.items() if v is not None)
        return Known(frozenset(node), partial, at)

    return freeze(tree, prefix)


def unknown_paths(known: Known, doc: dict[str, Any], out: set[str]) -> None:
    """Add the paths in `doc` that `known` does not know (hot path: one subset test per object)."""
    if not known.keys.issuperset(doc):
        out.update(known.prefix + k for k in doc.keys() - known.keys)
    for key, sub in known.partial:
        child = doc.get(key)
        if type(child) is dict:
            unknown_paths(sub, child, out)


@dataclass(frozen=True)
class Unwrap:
    """An alternative shape: an item may come wrapped as `{key: <record>, ...}`.

    Columns read the record inside; `extras` are columns read from the wrapper (null for unwrapped items);
    `ignore` names wrapper paths known to come and left in `raw`. The microblog-b feed's native upstream shape
    is `{"post": {...}, "reason": ..., "reply": {"root": ..., "parent": ...}}`.
    """

    key: str
    extras: tuple[Field, ...] = ()
    ignore: tuple[str, ...] = ()

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
    ignore: tuple[str, ...] = ()
    """Record paths known to come and deliberately left in `raw` (not reported as new fields)."""
    schema: pa.Schema = field(init=False, compare=False, repr=False)
    known: Known = field(init=False, compare=False, repr=False)
    """The fields some column reads: any other is a field the catalog does not know yet."""
    wrapped_known: tuple[Known, Known] | None = field(init=False, compare=False, repr=False)
    """(the wrapper's tree, the record's tree inside it)."""

    def __post_init__(self) -> None:
        names = [fld.name for fld in self.columns]
        missing = [k for k in self.primary_key if k not in names]
        if missing or len(set(names)) != len(names):
            raise ValueError(
                f"{self.table}: primary key {missing} not among fields, or duplicate field names"
            )
        schema = pa.schema([pa.field(fld.name, fld.type) for fld in self.columns] + list(META_COLUMNS))
        object.__setattr__(self, "schema", schema)
        own = [fld.path for fld in self.fields if not fld.path.startswith(PARAM_PREFIX)] + list(self.ignore)
        body_keys = ENVELOPE_KEYS if "" in self.locations else ()
        object.__setattr__(self, "known", known_tree(own, body_keys))
        wrapped = None
        if self.unwrap is not None:
            outer = [fld.path for fld in self.unwrap.extras] + list(self.unwrap.ignore)
            wrapped = (known_tree(outer, (self.unwrap.key,)), known_tree(own, prefix=f"{self.unwrap.key}."))
        object.__setattr__(self, "wrapped_known", wrapped)

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

    def unknown_fields(self, item: Any, out: set[str]) -> None:
        """Add the paths of `item` that no column reads and `ignore` does not list."""
        if type(item) is not dict:
            return
        if self.unwrap is not None and self.wrapped_known is not None and self.unwrap.is_wrapped(item):
            unknown_paths(self.wrapped_known[0], item, out)
            unknown_paths(self.wrapped_known[1], item[self.unwrap.key], out)
        else:
            unknown_paths(self.known, item, out)


def keys_of(kind: RecordKind, records: Iterable[Any], params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """Primary-key tuples of items (wrapped or not)."""
    readers = [r for name in kind.primary_key if (r := kind.reader(name, params)) is not None]
    return [tuple(read(row) for read in readers) for row in records]
