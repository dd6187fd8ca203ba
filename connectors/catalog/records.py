"""Record kinds: where a page's records live, what shapes they may come in, how they are keyed, their columns.

A page is decoded once and turned straight into one Arrow table per record kind with an explicit schema
(`connectors.reading.extraction`), so every Parquet file of a table has the same schema and no long-lived Python objects
pile up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from harvest.connectors.catalog.fields import DESCRIPTION, SOURCE, TIMESTAMP, Field
from harvest.connectors.catalog.record_paths import MISSING, alternatives, compile_path, items_at, steps

if TYPE_CHECKING:
    from harvest.connectors.catalog.child_kinds import ChildKind


def _meta(name: str, type_: pa.DataType, description: str, source: str) -> pa.Field:
    return pa.field(name, type_, metadata={DESCRIPTION: description, SOURCE: source})


META_COLUMNS: tuple[pa.Field, ...] = (
    _meta("raw", pa.string(), "The record as the service sent it (JSON text): every field, read into a column "
          "or not (a record that is the whole answer without the billing fields every answer carries, "
          "`credits_remaining` and the like); DuckDB's json functions read it.", "the record, whole"),
    _meta("_endpoint", pa.string(), "The endpoint whose answer held the record (its documented path).",
          "the request"),
    _meta("_query_id", pa.string(), "The job spec's query that fetched it, with its fan-out value "
          "(`videos[handle=nasa]`): `query_state.query_id`.", "the job spec"),
    _meta("_run_id", pa.string(), "The run that fetched it: `runs.run_id`.", "harvest"),
    _meta("_fetched_at", TIMESTAMP, "When the page holding it was fetched (UTC): the newest fetch of a key "
          "wins the merge, and relative times (`created_at_text`: \"2 days ago\") count back from it.", "the request"),
)  # fmt: skip
"""Columns harvest adds to every record table, each described (`tasks.database.column_comments`)."""


ENVELOPE_KEYS = frozenset({"success", "credits_remaining", "credits_charged", "cached", "cached_at"})
"""What the service adds to every answer it bills (a cached one says `cached: true` and since when)."""


def without_envelope(record: Any) -> Any:
    """A record that is the whole answer, without what the service adds to every answer it bills: kept in `raw`,
    the balance after the fetch (`credits_remaining`) made each fetch's `raw` differ and put the account's
    figures into the data."""
    if not isinstance(record, dict) or ENVELOPE_KEYS.isdisjoint(record):
        return record
    return {key: value for key, value in record.items() if key not in ENVELOPE_KEYS}


@dataclass(frozen=True, slots=True)
class KnownFields:
    """The fields a kind reads, as a tree: `keys` at this level and the objects only partly read below it;
    `prefix` is this level's path, to name an unknown key."""

    keys: frozenset[str]
    partial: tuple[tuple[str, KnownFields], ...]
    prefix: str = ""


def known_tree(paths: Iterable[str], extra: Iterable[str] = (), prefix: str = "") -> KnownFields:
    """The tree of field paths. An object read whole (a JSON column, a list, an ignored path) is a leaf:
    nothing under it is unknown. `extra`: more known top-level keys."""
    tree: dict[str, Any] = dict.fromkeys(extra)
    for path in paths:
        for alternative in alternatives(path):
            node: dict[str, Any] = tree
            walk = steps(alternative)
            for n, (kind, name) in enumerate(walk):
                if kind != "key":
                    break  # a list's items are not objects whose keys are known
                if n == len(walk) - 1 or walk[n + 1][0] != "key":
                    node[name] = None  # read whole: a leaf wins over anything under it
                    break
                if name in node and node[name] is None:
                    break
                node = node.setdefault(name, {})

    def freeze(node: dict[str, Any], at: str) -> KnownFields:
        partial = tuple((k, freeze(v, f"{at}{k}.")) for k, v in node.items() if v is not None)
        return KnownFields(frozenset(node), partial, at)

    return freeze(tree, prefix)


def unknown_paths(known: KnownFields, doc: dict[str, Any], out: set[str]) -> None:
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

    Columns read the record inside; `extras` are columns read from the wrapper, or from the item itself when it
    comes unwrapped (a path alternative then finds in the record what the wrapper says: a reply's
    `record.reply.parent.uri` for the wrapper's `reply.parent.uri`; null when neither holds it); `ignore` names
    wrapper paths known to come and left in `raw`. The microblog-b feed's native upstream shape is
    `{"post": {...}, "reason": ..., "reply": {"root": ..., "parent": ...}}`.
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
    """What a page holds at a kind's locations: the items, and whether the list (or object) was there."""

    items: list[Any]
    found: bool
    single: bool
    """The location held one object where the kind expects one (a detail answer): a keyless one means
    "not found"."""
    missing: str = ""
    """Why nothing was found: "absent", "null", or "an object, not a list" (a list turned into a keyed map)."""
    instead: Any = None
    """What was there instead of a list (an object, a string, ...), for an example."""
    where: str = ""
    """The location the items were found at (`...edges[].node` for a GraphQL connection's)."""
    parents: list[Any] | None = None
    """With `nested`: the item holding each of `items` (None for an item of the place itself)."""
    dropped: list[Any] = field(default_factory=list)
    """Items at the place that the kind's `where` left out: not records of the kind, counted."""


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
    objects: tuple[str, ...] = ()
    """Locations that hold one object (a detail answer, the shop beside its products); every other location
    holds a list, and an object found there is drift, not a record. The empty location (the answer itself) is
    always one object."""
    nested: str | None = None
    """Where in an item (or its wrapper) more items of this kind are, a record path (`replies`, `replies.items`):
    a thread's replies hold the replies to them, to any depth. They are records too, found depth first after the
    item that holds them, which a `$parent.` column reads (the id of the comment a reply answers)."""
    first_page_only: bool = False
    """The place is on a query's first page only (a post beside the first page of its comments): absent from a
    later page, it is no drift (`connectors.reading.missing_lists`)."""
    where: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    """(record path, values): an item is a record of the kind only if each path holds one of its values (null:
    the item has no such field). The others are left out and counted (a board's "Related Interests" module
    among its pins)."""
    children: tuple[ChildKind, ...] = ()
    """Lists of objects inside each record, each landing in a table of its own (`connectors.catalog.child_kinds`)."""
    schema: pa.Schema = field(init=False, compare=False, repr=False)
    known: KnownFields = field(init=False, compare=False, repr=False)
    """The fields some column reads: any other is a field the catalog does not know yet."""
    wrapped_known: tuple[KnownFields, KnownFields] | None = field(init=False, compare=False, repr=False)
    """(the wrapper's tree, the record's tree inside it)."""

    def __post_init__(self) -> None:
        names = [fld.name for fld in self.columns]
        missing = [k for k in self.primary_key if k not in names]
        if missing or len(set(names)) != len(names) or not set(self.objects) <= set(self.locations):
            raise ValueError(
                f"{self.table}: primary key {missing} not among fields, duplicate field names, or `objects` "
                "not among the locations"
            )
        schema = pa.schema([self._arrow_field(fld) for fld in self.columns] + list(META_COLUMNS))
        object.__setattr__(self, "schema", schema)
        own = [fld.path for fld in self.fields if fld.from_record] + list(self.ignore)
        own += [where for child in self.children for where in child.at]  # read whole, by the child
        own += [
            *([self.nested] if self.nested else []),
            *(path for path, _ in self.where),
        ]  # read, by harvest
        body_keys = ENVELOPE_KEYS if "" in self.locations else ()
        if self.unwrap is not None:  # extras are read from an item that comes unwrapped too
            own += [fld.path for fld in self.unwrap.extras]
        object.__setattr__(self, "known", known_tree(own, body_keys))
        wrapped = None
        if self.unwrap is not None:
            outer = [fld.path for fld in self.unwrap.extras] + list(self.unwrap.ignore)
            wrapped = (known_tree(outer, (self.unwrap.key,)), known_tree(own, prefix=f"{self.unwrap.key}."))
        object.__setattr__(self, "wrapped_known", wrapped)

    def _arrow_field(self, fld: Field) -> pa.Field:
        """A column's Arrow field; a JSON column a child table replaces says so in its description (kept one
        release, deprecated: the DuckDB comment, the Parquet metadata and the table docs tell the same)."""
        child = next((c for c in self.children if c.replaces == fld.name), None)
        if child is None:
            return fld.arrow_field()
        note = (
            f" Deprecated: the same {'fields' if child.entries else 'list'} as rows in `{child.table}`, with typed "
            "columns; removed in a later release."
        )
        return replace(fld, description=fld.described + note).arrow_field()

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
            return read  # the wrapper, or the item itself when it came unwrapped
        inner = self.unwrap.inner
        return lambda item: read(inner(item))

    def locate(self, body: Any) -> Located:
        """The items at the first location that resolves. A null there, or an object where a list belongs,
        is not found: whether that loses records depends on the rest of the page (`connectors.reading.extraction`)."""
        for path in self.locations:
            found = items_at(path)(body)
            if found is MISSING:
                continue
            if found is None:
                return Located([], False, False, "null")
            if isinstance(found, list):
                return self._located(found, path)
            nodes = connection_nodes(found)
            if nodes is not None:
                edges = "edges[].node" if "edges" in found else "nodes"
                return self._located(nodes, f"{path}.{edges}" if path else edges)
            if path == "" or path in self.objects:
                return self._located([found], path, single=True)
            return Located([], False, False, f"{_kind_of(found)}, not a list", found)
        return Located([], False, False, "absent")

    def _located(self, items: list[Any], where: str, single: bool = False) -> Located:
        """The records among the items of a place: nulls passed over, nested items added (`nested`), the items
        `where` leaves out apart."""
        parents: list[Any] | None = None
        if self.nested is None:
            items = [r for r in items if r is not None]
        else:
            items, parents = self._flat(items)
        if not self.where:
            return Located(items, True, single, where=where, parents=parents)
        keep = [self.matches(item) for item in items]
        dropped = [item for item, kept in zip(items, keep, strict=True) if not kept]
        if not dropped:
            return Located(items, True, single, where=where, parents=parents)
        kept_items = [item for item, kept in zip(items, keep, strict=True) if kept]
        if parents is not None:
            parents = [parent for parent, kept in zip(parents, keep, strict=True) if kept]
        return Located(kept_items, True, single, where=where, parents=parents, dropped=dropped)

    def matches(self, item: Any) -> bool:
        """Whether an item is a record of the kind by its `where` (read in the record, inside any wrapper)."""
        record = self.unwrap.inner(item) if self.unwrap is not None else item
        for path, values in self.where:
            got = compile_path(path)(record)
            got = None if got is MISSING else got
            if not any(got == v and isinstance(got, bool) == isinstance(v, bool) for v in values):
                return False
        return True

    def _flat(self, items: list[Any]) -> tuple[list[Any], list[Any]]:
        """The items without nulls, with the items nested in them (`nested`) depth first, and the item that holds
        each (None for those of the place itself)."""
        assert self.nested is not None
        inside = items_at(self.nested)
        out: list[Any] = []
        parents: list[Any] = []
        stack: list[tuple[Any, Any]] = [(iter(items), None)]
        while stack:
            level, holder = stack[-1]
            item = next(level, MISSING)
            if item is MISSING:
                stack.pop()
            elif item is not None:
                out.append(item)
                parents.append(holder)
                inner = inside(item) if isinstance(item, dict) else MISSING
                if isinstance(inner, list) and inner:
                    stack.append((iter(inner), item))
        return out, parents

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


def connection_nodes(value: Any) -> list[Any] | None:
    """The records of a GraphQL connection where a list belongs, else None.

    Platforms whose own API is GraphQL page lists as Relay connections, `{"edges": [{"node": {...}, "cursor":
    ...}], "pageInfo": {...}}`, or give the records directly as `{"nodes": [...]}`; the service passes such
    answers through. Each node is a record; the edge's cursor and `pageInfo` stay in the raw page."""
    if not isinstance(value, dict):
        return None
    edges = value.get("edges")
    if isinstance(edges, list) and all(
        edge is None or (isinstance(edge, dict) and "node" in edge) for edge in edges
    ):
        return [edge["node"] for edge in edges if edge is not None]
    nodes = value.get("nodes")
    if isinstance(nodes, list) and "edges" not in value:
        return nodes
    return None


def _kind_of(value: Any) -> str:
    return {dict: "an object", str: "a string", bool: "a boolean"}.get(type(value), "a number")


def keys_of(kind: RecordKind, records: Iterable[Any], params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """Primary-key tuples of items (wrapped or not)."""
    readers = [r for name in kind.primary_key if (r := kind.reader(name, params)) is not None]
    return [tuple(read(row) for read in readers) for row in records]
