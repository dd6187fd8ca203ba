"""From one page body to Arrow tables, and an account of what did not make it.

Nothing silent: after each page, what the service sent is compared with what was extracted. Per table: items
seen at the kind's location vs records kept (with a primary key), values that did not fit their column (null in
the column, still in `raw`), fields no column reads. Per page: a list that was expected but missing while the
page had content (a renamed list key). Records that could not be kept, and missing lists, are *lost*: the pager
ends such a query with status `drift`, and the raw page stays for a rebuild once the catalog is fixed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
import pyarrow as pa

from connectors.fields import TIMESTAMP, coercer
from connectors.records import ENVELOPE_KEYS, RecordKind

EXAMPLE_CHARS = 80
NEW_FIELDS_CAP = 50


def _example(value: Any) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    return text if len(text) <= EXAMPLE_CHARS else text[: EXAMPLE_CHARS - 1] + "…"


@dataclass
class TableReport:
    seen: int = 0
    """Items at the kind's location (wrapped or not)."""
    kept: int = 0
    """Records with a primary key: the rows the table gets."""
    no_key: int = 0
    no_key_example: str | None = None
    misfits: dict[str, int] = field(default_factory=dict)
    """Column -> values that did not fit its type (null in the column, kept in `raw`)."""
    misfit_examples: dict[str, str] = field(default_factory=dict)
    """Column -> `<field path> = <first value that did not fit>`."""
    new_fields: set[str] = field(default_factory=set)
    """Record fields no column reads (capped): the service added something the catalog does not know."""
    not_found: int = 0
    """Single-object answers without a key: the service's "not found" (a mostly empty object)."""

    def add(self, other: TableReport) -> None:
        self.seen += other.seen
        self.kept += other.kept
        self.no_key += other.no_key
        self.no_key_example = self.no_key_example or other.no_key_example
        for col, n in other.misfits.items():
            self.misfits[col] = self.misfits.get(col, 0) + n
        for col, ex in other.misfit_examples.items():
            self.misfit_examples.setdefault(col, ex)
        self.new_fields |= set(sorted(other.new_fields)[: max(0, NEW_FIELDS_CAP - len(self.new_fields))])
        self.not_found += other.not_found

    def as_dict(self) -> dict[str, Any]:
        return {
            "seen": self.seen, "kept": self.kept, "no_key": self.no_key, "no_key_example": self.no_key_example,
            "misfits": self.misfits, "misfit_examples": self.misfit_examples,
            "new_fields": sorted(self.new_fields), "not_found": self.not_found,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TableReport:
        return cls(
            seen=data.get("seen", 0), kept=data.get("kept", 0), no_key=data.get("no_key", 0),
            no_key_example=data.get("no_key_example"), misfits=dict(data.get("misfits", {})),
            misfit_examples=dict(data.get("misfit_examples", {})), new_fields=set(data.get("new_fields", [])),
            not_found=data.get("not_found", 0),
        )  # fmt: skip


@dataclass
class ExtractionReport:
    tables: dict[str, TableReport] = field(default_factory=dict)
    missing_lists: dict[str, int] = field(default_factory=dict)
    """`table: location` -> pages where the list was missing although the page had content."""
    top_keys: list[str] = field(default_factory=list)
    """The top-level keys of the first page that missed its lists (what the service sent instead)."""

    def table(self, name: str) -> TableReport:
        return self.tables.setdefault(name, TableReport())

    def add(self, other: ExtractionReport) -> None:
        for name, rep in other.tables.items():
            self.table(name).add(rep)
        for where, n in other.missing_lists.items():
            self.missing_lists[where] = self.missing_lists.get(where, 0) + n
        self.top_keys = self.top_keys or other.top_keys

    @property
    def lost(self) -> int:
        """Records that could not be kept plus pages whose list was missing: each ends the query as drift."""
        return sum(t.no_key for t in self.tables.values()) + sum(self.missing_lists.values())

    @property
    def kept(self) -> int:
        return sum(t.kept for t in self.tables.values())

    @property
    def seen(self) -> int:
        return sum(t.seen for t in self.tables.values())

    @property
    def misfits(self) -> int:
        return sum(sum(t.misfits.values()) for t in self.tables.values())

    @property
    def new_fields(self) -> list[str]:
        return sorted(f"{name}.{f}" for name, t in self.tables.items() for f in t.new_fields)

    @property
    def not_found(self) -> bool:
        return any(t.not_found for t in self.tables.values()) and self.kept == 0

    def totals(self) -> dict[str, Any]:
        """The counts a run's bookkeeping tables keep (`query_state`, `runs`)."""
        return {
            "items_seen": self.seen,
            "records_without_key": sum(t.no_key for t in self.tables.values()),
            "values_misfit": self.misfits,
            "lists_missing": sum(self.missing_lists.values()),
            "new_fields": self.new_fields,
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "tables": {n: t.as_dict() for n, t in sorted(self.tables.items())},
            "missing_lists": self.missing_lists,
            "top_keys": self.top_keys,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ExtractionReport:
        data = data or {}
        return cls(
            {n: TableReport.from_dict(t) for n, t in data.get("tables", {}).items()},
            dict(data.get("missing_lists", {})),
            list(data.get("top_keys", [])),
        )


def _has_content(body: Any) -> bool:
    """Whether a page carries something beyond the envelope, cursors and flags: a non-empty list or object."""
    if isinstance(body, list):
        return bool(body)
    if not isinstance(body, dict):
        return False
    return any(isinstance(v, list | dict) and v for k, v in body.items() if k not in ENVELOPE_KEYS)


def to_arrow(
    kind: RecordKind, items: list[Any], params: Mapping[str, Any], report: TableReport, single: bool = False
) -> pa.Table:
    """One page's items of one kind as Arrow data columns plus `raw`, counting what did not fit."""
    report.seen += len(items)
    columns: list[pa.Array] = []
    key_nulls = [False] * len(items)
    keys = set(kind.primary_key)
    for fld in kind.columns:
        coerce, read = coercer(fld), kind.reader(fld.name, params)
        assert read is not None
        values = []
        for n, item in enumerate(items):
            got = read(item)
            value = None if got is None else coerce(got)
            if value is None and got is not None:
                report.misfits[fld.name] = report.misfits.get(fld.name, 0) + 1
                report.misfit_examples.setdefault(fld.name, f"{fld.path} = {_example(got)}")
            if value is None and fld.name in keys:
                key_nulls[n] = True
            values.append(value)
        columns.append(pa.array(values, type=fld.type))
    columns.append(pa.array([orjson.dumps(r).decode() for r in items], type=pa.string()))
    _count_keys(report, items, key_nulls, single)
    _new_fields(kind, items, report)
    names = [f.name for f in kind.columns] + ["raw"]
    return pa.Table.from_arrays(columns, names=names)


def _count_keys(report: TableReport, items: list[Any], key_nulls: list[bool], single: bool) -> None:
    missing = sum(key_nulls)
    report.kept += len(items) - missing
    if not missing:
        return
    if single:
        report.not_found += missing
        return
    report.no_key += missing
    if report.no_key_example is None:
        report.no_key_example = _example(items[key_nulls.index(True)])


def _new_fields(kind: RecordKind, items: list[Any], report: TableReport) -> None:
    if len(report.new_fields) >= NEW_FIELDS_CAP:
        return
    found: set[str] = set()
    for item in items:
        kind.unknown_fields(item, found)
    if found:
        report.new_fields |= set(sorted(found - report.new_fields)[: NEW_FIELDS_CAP - len(report.new_fields)])


@dataclass
class ConvertedPage:
    records: dict[str, list[Any]]
    """Table -> the page's items as the service sent them (for dependent queries and incremental checks)."""
    tables: dict[str, pa.Table]
    """Table -> data columns and `raw`; `with_meta` adds the run's columns when it lands."""
    report: ExtractionReport


def convert_page(kinds: Iterable[RecordKind], body: Any, params: Mapping[str, Any]) -> ConvertedPage:
    kinds = tuple(kinds)
    report = ExtractionReport()
    records: dict[str, list[Any]] = {}
    tables: dict[str, pa.Table] = {}
    located = {kind.table: kind.locate(body) for kind in kinds} if body is not None else {}
    for kind in kinds:
        place = located.get(kind.table)
        items = place.items if place else []
        records[kind.table] = items
        tables[kind.table] = to_arrow(
            kind, items, params, report.table(kind.table), bool(place and place.single)
        )
    missing = [k for k in kinds if k.table in located and not located[k.table].found]
    if missing and (missing[0] is kinds[0] or len(missing) == len(kinds)) and _has_content(body):
        for kind in missing:  # the endpoint's main list (its first kind) is gone, or every list is
            report.missing_lists[f"{kind.table}: {' or '.join(kind.locations) or '(the answer)'}"] = 1
        report.top_keys = sorted(body)[:20] if isinstance(body, dict) else []
    return ConvertedPage(records, tables, report)


@dataclass(frozen=True)
class PageMeta:
    endpoint: str
    query_id: str
    run_id: str
    fetched_at: datetime


def with_meta(kind: RecordKind, data: pa.Table, meta: PageMeta) -> pa.Table:
    """The page's table with the run's columns, in the kind's schema."""
    n = data.num_rows
    columns = [*data.columns]
    columns.append(pa.array([meta.endpoint] * n, type=pa.string()))
    columns.append(pa.array([meta.query_id] * n, type=pa.string()))
    columns.append(pa.array([meta.run_id] * n, type=pa.string()))
    columns.append(pa.array([meta.fetched_at] * n, type=TIMESTAMP))
    return pa.Table.from_arrays(columns, schema=kind.schema)
