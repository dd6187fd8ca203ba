"""From one page body to Arrow tables, and an account of what did not make it.

Nothing silent: after each page, what the service sent is compared with what was extracted. Per table: items
seen at the kind's location vs records kept (with a primary key that is not empty), values that did not fit their
column (null in the column, still in `raw`), fields no column reads. Per page: a list that was expected but not
there while the page had content (`connectors.reading.missing_lists` says which). Records that could not be kept, lists
that went missing and kinds whose conversion broke are *lost*: the pager ends such a query with status `drift`,
and the raw page stays for a rebuild once the catalog is fixed. `convert_page` never raises on what the service sent.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from harvest.connectors.catalog.child_kinds import ChildKind
from harvest.connectors.catalog.fields import HOLDER_PREFIX, TIMESTAMP, Field, coercer, json_texts
from harvest.connectors.catalog.paging_styles import Paging
from harvest.connectors.catalog.records import Located, RecordKind, without_envelope
from harvest.connectors.plurals import counted
from harvest.connectors.reading.child_rows import child_table
from harvest.connectors.reading.column_readers import columns_reader
from harvest.connectors.reading.empty_columns import empty_columns, key_override
from harvest.connectors.reading.extraction_report import NEW_FIELDS_CAP, ExtractionReport, TableReport
from harvest.connectors.reading.large_body import Land, convert_slices, spans_in, with_items
from harvest.connectors.reading.missing_lists import lost_lists
from harvest.connectors.reading.unread_cursors import unread_cursor

EXAMPLE_CHARS = 80


def _example(value: Any) -> str:
    try:
        text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    except TypeError:  # an integer beyond 64 bits (orjson parses none, but a caller may hand one over)
        text = repr(value)
    return text if len(text) <= EXAMPLE_CHARS else text[: EXAMPLE_CHARS - 1] + "…"


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
        return json_texts(values, fld.type)
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


def converted(fld: Field, values: list[Any], report: TableReport) -> pa.Array:
    """The column value by value: what does not fit is NULL, counted, with its first example. The one-call
    Arrow path (`_fast_array`) must give the same column wherever it applies (tests/test_extraction_paths.py)."""
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
    kind: RecordKind,
    items: list[Any],
    params: Mapping[str, Any],
    report: TableReport,
    single: bool = False,
    where: str = "",
    raw: bool = True,
    parents: list[Any] | None = None,
) -> pa.Table:
    """One page's items of one kind (found at the location `where`) as Arrow data columns plus `raw` (unless
    not `raw`: a child table's items, whose parent keeps them), counting what did not fit. `parents`: the item
    holding each (`nested`), which its `$parent.` columns read."""
    report.seen += len(items)
    columns: list[pa.Array] = []
    unknown: set[str] | None = set() if len(report.new_fields) < NEW_FIELDS_CAP else None
    read = columns_reader(kind)(items, params, unknown)
    if parents is not None:
        _read_holders(kind, read, parents, params)
    for fld, values in zip(kind.columns, read, strict=True):
        array = _fast_array(fld, values)
        columns.append(array if array is not None else converted(fld, values, report))
    names = [f.name for f in kind.columns]
    key_nulls = [False] * len(items)
    for name in kind.primary_key:
        at = names.index(name)
        if not _never_blank(read[at]):
            columns[at] = _blank_as_null(columns[at])
        if columns[at].null_count:
            nulls = columns[at].is_null().to_pylist()
            key_nulls = [a or b for a, b in zip(key_nulls, nulls, strict=True)]
    if _count_keys(kind, where, report, items, key_nulls, single):  # the service's "not found": no row
        columns, unknown = [c.slice(0, 0) for c in columns], None  # nor its fields
        items = []
    if items and not any(key_nulls) and any(column.null_count == len(items) for column in columns):
        for name, hints in empty_columns(kind, items, columns, unknown or set(), report.misfits).items():
            report.empty[name] = report.empty.get(name, 0) + len(items)
            report.empty_hints.setdefault(name, hints)
    if unknown:
        room = NEW_FIELDS_CAP - len(report.new_fields)
        report.new_fields |= set(sorted(unknown - report.new_fields)[:room])
    if not raw:
        return pa.Table.from_arrays(columns, names=names)
    records = items if where else [without_envelope(item) for item in items]  # the answer itself
    return pa.Table.from_arrays([*columns, raw_column(records)], names=[*names, "raw"])


def _read_holders(
    kind: RecordKind, read: list[list[Any]], parents: list[Any], params: Mapping[str, Any]
) -> None:
    """The `$parent.NAME` columns: column NAME of the item that holds each record (null at the place's top)."""
    for n, fld in enumerate(kind.columns):
        if fld.path.startswith(HOLDER_PREFIX):
            holder = kind.reader(fld.path[len(HOLDER_PREFIX) :], params)
            if holder is not None:
                read[n] = [None if parent is None else holder(parent) for parent in parents]


RAW_CHUNK = 2_000
"""Records whose `raw` JSON is built at a time. orjson returns each record's JSON in a buffer of at least ~4 KB
that the allocator keeps: 100,000 records held at once cost ~400 MB for 50 MB of JSON. A page of a few hundred
records is one chunk."""


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


def _count_keys(
    kind: RecordKind, where: str, report: TableReport, items: list[Any], key_nulls: list[bool], single: bool
) -> bool:
    """Records kept, and those without a key: lost (drift), or, for the one object of a detail answer, the
    service's "not found" unless its key came under another name (then it is lost like any other) or the page
    kept other records (`ExtractionReport.found_after_all`). True for the not found: the raw page keeps the
    answer, and no row holds it (a row without its key would only be skipped by the load, with a warning that
    says nothing of why)."""
    missing = sum(key_nulls)
    report.kept += len(items) - missing
    if not missing:
        return False
    keyless = items[key_nulls.index(True)]
    override = key_override(kind, where, keyless)
    report.no_key_example = report.no_key_example or _example(keyless)  # a "not found" may yet be lost
    if single and override is None:
        report.not_found += missing
        return True
    report.no_key += missing
    report.no_key_override = report.no_key_override or override
    return False


@dataclass
class ConvertedPage:
    records: dict[str, Sequence[Any]]
    """Table -> the page's items as the service sent them (for dependent queries and incremental checks); a
    large answer's are decoded again whenever they are read (`connectors.reading.large_body.SpanRecords`)."""
    tables: dict[str, pa.Table]
    """Table -> data columns and `raw`; `with_meta` adds the run's columns when it lands. A `landed` page's:
    the primary key columns only."""
    report: ExtractionReport
    landed: bool = False
    """Its tables went to the writer while they were converted (a large answer's, `convert_page`'s `land`)."""


def convert_page(
    kinds: Iterable[RecordKind],
    body: Any,
    params: Mapping[str, Any],
    repairs: Mapping[str, int] | None = None,
    *,
    earlier: Collection[str] = (),
    later: bool = False,
    paging: Paging | None = None,
    land: Land | None = None,
) -> ConvertedPage:
    """One page's records per kind, and the account of what did not make it (with what reading the body
    `repairs`). Never raises on a body: a kind whose conversion breaks gets no rows and counts its items as
    lost (drift), the other kinds still land. `earlier`: the tables whose place the query's earlier pages held;
    `later`: the page is not the query's first (`connectors.reading.missing_lists`); `paging`: the endpoint's,
    to notice a cursor it does not read (`connectors.reading.unread_cursors`). A large answer's records are
    read a slice at a time (`connectors.reading.large_body`); with `land`, each slice's tables go to it as they
    are converted, and the page comes back `landed` (its tables: their primary key columns only)."""
    kinds = tuple(kinds)
    report = ExtractionReport(repairs=dict(repairs or {}))
    spans = spans_in(body)
    if spans is not None:
        sliced = convert_slices(kinds, body, spans, params, report, _convert, land)
        if sliced is not None:
            first_body, located, records, tables = sliced
            _finish(kinds, located, first_body, report, earlier, later, paging)
            return ConvertedPage(records, tables, report, landed=land is not None)
        report.repairs = dict(repairs or {})
        body = with_items(body, spans.path, spans.whole(report.repairs))
    located, whole_records, tables = _convert(kinds, body, params, report)
    _finish(kinds, located, body, report, earlier, later, paging)
    return ConvertedPage(dict(whole_records), tables, report)


def _convert(
    kinds: tuple[RecordKind, ...], body: Any, params: Mapping[str, Any], report: ExtractionReport
) -> tuple[dict[str, Located], dict[str, list[Any]], dict[str, pa.Table]]:
    """Each kind's items in `body` (a page, or a slice of a large one) as Arrow, counted into `report`."""
    records: dict[str, list[Any]] = {}
    tables: dict[str, pa.Table] = {}
    located: dict[str, Located] = {}
    for kind in kinds:
        items: list[Any] = []
        before = copy.deepcopy(report.tables.get(kind.table))
        try:
            place = None
            if body is not None:
                place = located[kind.table] = kind.locate(body)
                items = place.items
                _count_dropped(place, report.table(kind.table))
            single, where = (place.single, place.where) if place is not None else (False, "")
            parents = place.parents if place is not None else None
            table = report.table(kind.table)
            tables[kind.table] = to_arrow(kind, items, params, table, single, where, parents=parents)
            records[kind.table] = items
        except Exception as exc:  # a shape no rule foresaw: lost, said, and the raw page is kept
            failed = before or TableReport()
            failed.seen += len(items)
            failed.failed += max(1, len(items))
            failed.failure = failed.failure or _example(f"{type(exc).__name__}: {exc}")
            report.tables[kind.table] = failed
            tables[kind.table] = _empty(kind)
            records[kind.table] = []
        _children(kind, records[kind.table], tables, params, report)
    return located, records, tables


def _finish(
    kinds: tuple[RecordKind, ...],
    located: dict[str, Located],
    body: Any,
    report: ExtractionReport,
    earlier: Collection[str],
    later: bool,
    paging: Paging | None,
) -> None:
    """What the page says beyond its records: the places found, an unread cursor, lists gone missing."""
    report.found = {table for table, place in located.items() if place.found}
    report.found_after_all()  # a keyless single object beside other records: lost, not "not found"
    if paging is not None:
        report.unread_cursor = unread_cursor(paging, body)
    if body is not None:
        _account_lists(kinds, located, body, report, set(earlier), later)


def _count_dropped(place: Located, report: TableReport) -> None:
    """The items a kind's `where` left out: counted, the first as an example, never silently."""
    if place.dropped:
        report.dropped += len(place.dropped)
        report.dropped_example = report.dropped_example or _example(place.dropped[0])


def _empty(kind: RecordKind | ChildKind) -> pa.Table:
    fields = [pa.field(fld.name, fld.type) for fld in kind.columns]
    if isinstance(kind, ChildKind):
        return pa.schema(fields).empty_table()
    return pa.schema([*fields, pa.field("raw", pa.string())]).empty_table()


def _children(
    kind: RecordKind,
    records: list[Any],
    tables: dict[str, pa.Table],
    params: Mapping[str, Any],
    report: ExtractionReport,
) -> None:
    """The page's rows of the kind's child tables (`connectors.reading.child_rows`). A child whose conversion
        breaks gets no rows, and its parents count as lost (drift), as a kind's records would; a child list lost to a
    rename counts as a lost list."""
    for child in kind.children:
        lost: dict[str, str] = {}
        try:
            tables[child.table] = child_table(
                child, kind, records, tables[kind.table], params, report.table(child.table), lost
            )
            for where, why in lost.items():
                report.missing_lists[where] = 1  # once per page, as a record kind's lost list
                report.missing_why.setdefault(where, why)
        except Exception as exc:
            failed = report.table(child.table)
            failed.failed += max(1, len(records))
            failed.failure = failed.failure or _example(f"{type(exc).__name__}: {exc}")
            tables[child.table] = _empty(child)


def _account_lists(
    kinds: tuple[RecordKind, ...],
    located: Mapping[str, Located],
    body: Any,
    report: ExtractionReport,
    earlier: set[str],
    later: bool,
) -> None:
    """Lists that went missing although the page had content (`connectors.reading.missing_lists`), with an example."""
    try:
        lost = lost_lists(kinds, located, body, earlier, later)
    except Exception as exc:  # e.g. a body nested deeper than Python recurses: say so, keep the page
        report.missing_lists["(the page)"] = 1
        report.missing_why["(the page)"] = _example(f"{type(exc).__name__}: {exc}")
        return
    for gone in lost:
        why = gone.how if gone.instead is None else f"{gone.how}: {_example(gone.instead)}"
        if gone.moved is not None:
            key, items = gone.moved
            if isinstance(items, dict):
                why += f"; `{key}` holds an unread object: {_example(items)}"
            else:
                why += f"; `{key}` holds {counted(len(items), 'unread item')}, e.g. {_example(items[0])}"
        if gone.near is not None:
            why += f"; {gone.near}"
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


def with_meta(kind: RecordKind | ChildKind, data: pa.Table, meta: PageMeta) -> pa.Table:
    """The page's table with the run's columns, in the kind's schema (a child's rows get their parent's page's:
    the same `_fetched_at`, which ties them to that fetch of the parent)."""
    n = data.num_rows
    constants = (
        pa.scalar(meta.endpoint, pa.string()),
        pa.scalar(meta.query_id, pa.string()),
        pa.scalar(meta.run_id, pa.string()),
        pa.scalar(meta.fetched_at, TIMESTAMP),
    )
    return pa.Table.from_arrays([*data.columns, *(pa.repeat(c, n) for c in constants)], schema=kind.schema)
