"""From one page body to Arrow tables, and an account of what did not make it.

Nothing silent: after each page, what the service sent is compared with what was extracted. Per table: items
seen at the kind's location vs records kept (with a primary key that is not empty), values that did not fit their
column (null in the column, still in `raw`), fields no column reads. Per page: a list that was expected but not
there while the page had content (`connectors.reading.missing_lists` says which). Records that could not be kept, lists
that went missing and kinds whose conversion broke are *lost*: the pager ends such a query with status `drift`,
and the raw page stays for a rebuild once the catalog is fixed.
`convert_page` never raises on what the service sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from connectors.catalog.fields import TIMESTAMP, Field, coercer
from connectors.catalog.records import Located, RecordKind
from connectors.reading.column_readers import columns_reader
from connectors.reading.missing_lists import lost_lists

EXAMPLE_CHARS = 80
NEW_FIELDS_CAP = 50


def _example(value: Any) -> str:
    try:
        text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    except TypeError:  # an integer beyond 64 bits (orjson parses none, but a caller may hand one over)
        text = repr(value)
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
    failed: int = 0
    """Items lost because converting them broke (at least 1 when it did): a case no rule foresaw."""
    failure: str | None = None
    """The first such error, as `<type>: <message>`."""

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
        self.failed += other.failed
        self.failure = self.failure or other.failure

    def as_dict(self) -> dict[str, Any]:
        return {
            "seen": self.seen, "kept": self.kept, "no_key": self.no_key, "no_key_example": self.no_key_example,
            "misfits": self.misfits, "misfit_examples": self.misfit_examples,
            "new_fields": sorted(self.new_fields), "not_found": self.not_found, "failed": self.failed,
            "failure": self.failure,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TableReport:
        return cls(
            seen=data.get("seen", 0), kept=data.get("kept", 0), no_key=data.get("no_key", 0),
            no_key_example=data.get("no_key_example"), misfits=dict(data.get("misfits", {})),
            misfit_examples=dict(data.get("misfit_examples", {})), new_fields=set(data.get("new_fields", [])),
            not_found=data.get("not_found", 0), failed=data.get("failed", 0), failure=data.get("failure"),
        )  # fmt: skip


@dataclass
class ExtractionReport:
    tables: dict[str, TableReport] = field(default_factory=dict)
    missing_lists: dict[str, int] = field(default_factory=dict)
    """`table: location` -> pages where the list was missing although the page had content."""
    missing_why: dict[str, str] = field(default_factory=dict)
    """`table: location` -> how it was missing on the first such page (absent, null, an object, not a list)
    and the unread list of objects its records may have moved to, with an example."""
    top_keys: list[str] = field(default_factory=list)
    """The top-level keys of the first page that missed its lists (what the service sent instead)."""
    repairs: dict[str, int] = field(default_factory=dict)
    """Kind of repair -> values the pages' bodies needed repaired to be read (`connectors.reading.json_body`): a lone
    surrogate, NaN, bytes that are not UTF-8, ..."""
    read_at: dict[str, str] = field(default_factory=dict)
    """Table -> the one record path where the answer holds a list of objects nothing reads, when its own list
    went missing: the spec's `shapes` override that would read it."""

    def table(self, name: str) -> TableReport:
        return self.tables.setdefault(name, TableReport())

    def add(self, other: ExtractionReport) -> None:
        for name, rep in other.tables.items():
            self.table(name).add(rep)
        for where, n in other.missing_lists.items():
            self.missing_lists[where] = self.missing_lists.get(where, 0) + n
        for where, why in other.missing_why.items():
            self.missing_why.setdefault(where, why)
        for kind, n in other.repairs.items():
            self.repairs[kind] = self.repairs.get(kind, 0) + n
        for table, path in other.read_at.items():
            self.read_at.setdefault(table, path)
        self.top_keys = self.top_keys or other.top_keys

    @property
    def lost(self) -> int:
        """Records that could not be kept (no key, or their conversion broke) plus pages whose list was
        missing: each ends the query as drift."""
        return sum(t.no_key + t.failed for t in self.tables.values()) + sum(self.missing_lists.values())

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
            "values_repaired": sum(self.repairs.values()),
            "lists_missing": sum(self.missing_lists.values()),
            "new_fields": self.new_fields,
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "tables": {n: t.as_dict() for n, t in sorted(self.tables.items())},
            "missing_lists": self.missing_lists,
            "missing_why": self.missing_why,
            "top_keys": self.top_keys,
            "repairs": self.repairs,
            "read_at": self.read_at,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ExtractionReport:
        data = data or {}
        return cls(
            {n: TableReport.from_dict(t) for n, t in data.get("tables", {}).items()},
            dict(data.get("missing_lists", {})),
            dict(data.get("missing_why", {})),
            list(data.get("top_keys", [])),
            dict(data.get("repairs", {})),
            dict(data.get("read_at", {})),
        )


_EXACT: dict[pa.DataType, frozenset[type]] = {
    pa.int64(): frozenset({int, type(None)}),
    pa.float64(): frozenset({int, float, type(None)}),
    pa.bool_(): frozenset({bool, type(None)}),
    pa.string(): frozenset({str, type(None)}),
}
"""Python types Arrow converts to a column type exactly as `connectors.catalog.fields` would: such a column is built in
one call; any other value sends the column through the per-value conversion that counts what does not fit."""
_EPOCH_SECONDS = 10**11
_SECONDS = pa.timestamp("s", tz="UTC")


def _fast_array(fld: Field, values: list[Any]) -> pa.Array | None:
    """The column in one Arrow call when every value is of a type that needs no conversion, else None."""
    if fld.json:
        return None
    kinds = set(map(type, values))
    if fld.type == TIMESTAMP:
        if not kinds <= _EXACT[pa.int64()]:
            return None
        ints = [v for v in values if v is not None]
        if ints and (min(ints) < 0 or max(ints) >= _EPOCH_SECONDS):
            return None  # milliseconds, beyond 64 bits, or something odd: the per-value rules decide
        return pa.array(values, type=_SECONDS).cast(TIMESTAMP)
    allowed = _EXACT.get(fld.type)
    if allowed is None or not kinds <= allowed:
        return None
    try:
        return pa.array(values, type=fld.type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return None


def _converted(fld: Field, values: list[Any], report: TableReport) -> pa.Array:
    """The column value by value: what does not fit is NULL, counted, with its first example."""
    coerce = coercer(fld)
    out = []
    for got in values:
        value = None if got is None else coerce(got)
        if value is None and got is not None:
            report.misfits[fld.name] = report.misfits.get(fld.name, 0) + 1
            report.misfit_examples.setdefault(fld.name, f"{fld.path} = {_example(got)}")
        out.append(value)
    return pa.array(out, type=fld.type)


def to_arrow(
    kind: RecordKind, items: list[Any], params: Mapping[str, Any], report: TableReport, single: bool = False
) -> pa.Table:
    """One page's items of one kind as Arrow data columns plus `raw`, counting what did not fit."""
    report.seen += len(items)
    columns: list[pa.Array] = []
    unknown: set[str] | None = set() if len(report.new_fields) < NEW_FIELDS_CAP else None
    read = columns_reader(kind)(items, params, unknown)
    for fld, values in zip(kind.columns, read, strict=True):
        array = _fast_array(fld, values)
        columns.append(array if array is not None else _converted(fld, values, report))
    columns.append(raw_column(items))
    names = [f.name for f in kind.columns]
    key_nulls = [False] * len(items)
    for name in kind.primary_key:
        at = names.index(name)
        if not _never_blank(read[at]):
            columns[at] = _blank_as_null(columns[at])
        if columns[at].null_count:
            nulls = columns[at].is_null().to_pylist()
            key_nulls = [a or b for a, b in zip(key_nulls, nulls, strict=True)]
    _count_keys(report, items, key_nulls, single)
    if unknown:
        report.new_fields |= set(
            sorted(unknown - report.new_fields)[: NEW_FIELDS_CAP - len(report.new_fields)]
        )
    return pa.Table.from_arrays(columns, names=[*names, "raw"])


RAW_CHUNK = 2_000
"""Records whose `raw` JSON is built at a time. orjson returns each record's JSON in a buffer of at least ~4 KB
that the allocator keeps: 100,000 records held at once cost ~400 MB for 50 MB of JSON. A page of a few hundred
records is one chunk, as before."""


def raw_column(items: list[Any]) -> pa.Array | pa.ChunkedArray:
    """Each record's JSON as received (`raw`), built a chunk of records at a time."""
    if len(items) <= RAW_CHUNK:
        return pa.array([orjson.dumps(r) for r in items], type=pa.string())
    return pa.chunked_array(
        [
            pa.array([orjson.dumps(r) for r in items[at : at + RAW_CHUNK]], type=pa.string())
            for at in range(0, len(items), RAW_CHUNK)
        ],
        type=pa.string(),
    )


def _never_blank(values: list[Any]) -> bool:
    """True when no value can be blank text: each is not text, or starts with a letter or digit (a blank one
    is all whitespace, whatever a Unicode table counts as such). Spares the Arrow kernels on typical keys."""
    return all(type(v) is not str or v[:1].isalnum() for v in values)


def _blank_as_null(column: pa.Array) -> pa.Array:
    """A key column with empty (or blank) text as null: such records have no key, like a missing one, instead
    of merging into one row keyed `""`."""
    if not pa.types.is_string(column.type) or len(column) == 0:
        return column
    blank = pc.fill_null(pc.equal(pc.utf8_trim_whitespace(column), ""), False)
    if not pc.any(blank).as_py():
        return column
    return pc.if_else(blank, pa.scalar(None, column.type), column)


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


@dataclass
class ConvertedPage:
    records: dict[str, list[Any]]
    """Table -> the page's items as the service sent them (for dependent queries and incremental checks)."""
    tables: dict[str, pa.Table]
    """Table -> data columns and `raw`; `with_meta` adds the run's columns when it lands."""
    report: ExtractionReport


def convert_page(
    kinds: Iterable[RecordKind],
    body: Any,
    params: Mapping[str, Any],
    repairs: Mapping[str, int] | None = None,
) -> ConvertedPage:
    """One page's records per kind, and the account of what did not make it (with what reading the body
    `repairs`). Never raises on a body: a kind whose conversion breaks gets no rows and counts its items as
    lost (drift), the other kinds still land."""
    kinds = tuple(kinds)
    report = ExtractionReport(repairs=dict(repairs or {}))
    records: dict[str, list[Any]] = {}
    tables: dict[str, pa.Table] = {}
    located: dict[str, Located] = {}
    for kind in kinds:
        items: list[Any] = []
        try:
            if body is not None:
                located[kind.table] = kind.locate(body)
                items = located[kind.table].items
            single = kind.table in located and located[kind.table].single
            tables[kind.table] = to_arrow(kind, items, params, report.table(kind.table), single)
            records[kind.table] = items
        except Exception as exc:  # a shape no rule foresaw: lost, said, and the raw page is kept
            report.tables[kind.table] = TableReport(
                seen=len(items), failed=max(1, len(items)), failure=_example(f"{type(exc).__name__}: {exc}")
            )
            tables[kind.table] = _empty(kind)
            records[kind.table] = []
    if body is not None:
        _account_lists(kinds, located, body, report)
    return ConvertedPage(records, tables, report)


def _empty(kind: RecordKind) -> pa.Table:
    fields = [pa.field(fld.name, fld.type) for fld in kind.columns]
    return pa.schema([*fields, pa.field("raw", pa.string())]).empty_table()


def _account_lists(
    kinds: tuple[RecordKind, ...], located: Mapping[str, Located], body: Any, report: ExtractionReport
) -> None:
    """Lists that went missing although the page had content (`connectors.reading.missing_lists`), with an example."""
    try:
        lost = lost_lists(kinds, located, body)
    except Exception as exc:  # e.g. a body nested deeper than Python recurses: say so, keep the page
        report.missing_lists["(the page)"] = 1
        report.missing_why["(the page)"] = _example(f"{type(exc).__name__}: {exc}")
        return
    for gone in lost:
        why = gone.how if gone.instead is None else f"{gone.how}: {_example(gone.instead)}"
        if gone.moved is not None:
            key, items = gone.moved
            why += f"; `{key}` holds {len(items)} unread items, e.g. {_example(items[0])}"
        report.missing_lists[gone.where] = 1
        report.missing_why[gone.where] = why
        if gone.read_at is not None:
            report.read_at[gone.table] = gone.read_at
    if lost:
        report.top_keys = sorted(body)[:20] if isinstance(body, dict) else []


@dataclass(frozen=True)
class PageMeta:
    endpoint: str
    query_id: str
    run_id: str
    fetched_at: datetime


def with_meta(kind: RecordKind, data: pa.Table, meta: PageMeta) -> pa.Table:
    """The page's table with the run's columns, in the kind's schema."""
    n = data.num_rows
    constants = (
        pa.scalar(meta.endpoint, pa.string()),
        pa.scalar(meta.query_id, pa.string()),
        pa.scalar(meta.run_id, pa.string()),
        pa.scalar(meta.fetched_at, TIMESTAMP),
    )
    return pa.Table.from_arrays([*data.columns, *(pa.repeat(c, n) for c in constants)], schema=kind.schema)
