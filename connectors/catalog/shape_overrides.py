"""A job's own reading of a changed answer: where a record kind's records are, and alternative paths for its
columns, tried before the catalog's.

When the service changes shape, drift stops the query loudly and keeps the paid pages. A user who can see where
the records went need not wait for a release of harvest: the spec's `shapes` names the new place, `harvest run`
reads it, and `harvest rebuild` lands the pages already paid with it (no request). The catalog's own locations
and paths stay behind the spec's, so an answer that changes back is still read.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from harvest.connectors.catalog.record_paths import PATH_WORDS, alternatives, path_problem
from harvest.connectors.catalog.records import RecordKind


@dataclass(frozen=True)
class KindShape:
    """One record kind's overrides: record locations, and per column the paths tried before its own."""

    records: tuple[str, ...] = ()
    fields: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> KindShape:
        """From plain data (`{records: [...], fields: {column: [...]}}`, a string for a list of one)."""
        records = data.get("records") or ()
        fields = data.get("fields") or {}
        return cls(
            _paths(records),
            {column: _paths(paths) for column, paths in fields.items()},
        )

    def as_dict(self) -> dict[str, Any]:
        return {"records": list(self.records), "fields": {c: list(p) for c, p in self.fields.items()}}

    def apply(self, kind: RecordKind) -> RecordKind:
        """The kind reading its records at `records` first and each named column at its paths first."""
        locations = tuple(dict.fromkeys((*self.records, *kind.locations)))
        objects = kind.objects
        if all(loc == "" or loc in objects for loc in kind.locations):
            # a kind that is one object wherever it is (a detail answer): the new places hold one object too
            objects = tuple(dict.fromkeys((*self.records, *objects)))
        fields = tuple(
            replace(fld, path="|".join(dict.fromkeys((*self.fields[fld.name], *alternatives(fld.path)))))
            if fld.name in self.fields
            else fld
            for fld in kind.fields
        )
        return replace(kind, locations=locations, objects=objects, fields=fields)


Shapes = Mapping[str, Mapping[str, KindShape]]
"""Endpoint path -> record table (or child table) -> its overrides."""


def overridden_kind(kind: RecordKind, tables: Mapping[str, KindShape]) -> RecordKind:
    """The kind with its own overrides and its child tables' (a child's `fields`, read inside each item)."""
    if kind.table in tables:
        kind = tables[kind.table].apply(kind)
    if not any(c.table in tables for c in kind.children):
        return kind
    children = tuple(
        replace(c, item=tables[c.table].apply(c.item)) if c.table in tables else c for c in kind.children
    )
    return replace(kind, children=children)


def _paths(value: str | Sequence[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def shapes_of(data: Mapping[str, Mapping[str, Mapping[str, Any]]] | None) -> dict[str, dict[str, KindShape]]:
    """Overrides from plain data, as a spec or a run manifest holds them."""
    return {
        path: {table: KindShape.of(shape) for table, shape in tables.items()}
        for path, tables in (data or {}).items()
    }


def shapes_data(shapes: Shapes) -> dict[str, dict[str, dict[str, Any]]]:
    return {path: {table: s.as_dict() for table, s in tables.items()} for path, tables in shapes.items()}


Problem = tuple[tuple[str, ...], str, str]
"""(where inside `shapes`, what is wrong, what is allowed)."""


def shape_problems(
    path: str, kinds: Sequence[RecordKind], tables: Mapping[str, KindShape]
) -> Iterator[Problem]:
    """What an endpoint's overrides get wrong: unknown tables or columns, paths that are no record paths. A
    child table (`children:`) takes `fields` only: the columns of its items, read inside each item."""
    by_table = {k.table: k for k in kinds}
    children = {c.table: c.item for k in kinds for c in k.children}
    for table, shape in tables.items():
        kind = by_table.get(table) or children.get(table)
        if kind is None:
            yield (
                (table,),
                f"{path} has no record or child table {table!r}",
                ", ".join([*by_table, *children]),
            )
            continue
        if table in children and shape.records:
            yield (
                (table, "records"),
                "a child table's items are read where its `at` says",
                "`fields: {column: PATH}`",
            )
        if not shape.records and not shape.fields:
            yield (
                (table,),
                "names neither `records` nor `fields`",
                "`records: PATH` and/or `fields: {column: PATH}`",
            )
        for n, where in enumerate(shape.records):
            problem = path_problem(where)
            if problem:
                yield (table, "records", str(n)), problem, PATH_WORDS
        columns = [f.name for f in kind.fields]
        for column, paths in shape.fields.items():
            if column not in columns:
                yield (table, "fields", column), f"{column!r} is not a column of {table}", ", ".join(columns)
                continue
            for n, where in enumerate(paths):
                problem = path_problem(where)
                if problem:
                    yield (table, "fields", column, str(n)), problem, PATH_WORDS
