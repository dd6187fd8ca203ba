"""A page's child rows: each record's nested list as rows of its child table (`connectors.catalog.child_kinds`).

Read from the records the parent's table got, after the parent's columns are typed: each row carries its parent's
key as the parent's table has it (a blank key already NULL), and a record without a key has no child rows (it has
no row to belong to). A key twice on one page (an item repeated) gives the rows of its last occurrence, the one
the load keeps. What the items carry is accounted like a record's: values that do not fit their column, fields no
column reads, columns that came empty; but items are not records (a query's `records` count the service's
records). A list that is not a list (an object, a text) and an item that is not an object are values that do not
fit (`(list)` of the child table, with an example): the parent's `raw` keeps them. An `entries` child reads an
object instead, each of its fields an item `{name, value}`.

A record without the child's place (or with null there) has no items: a post without comments. But a record that
lacks the place while it holds, beside it, a non-empty list of objects that nothing of its kind reads has lost its
items to a rename (`topComments` read as `topComment`): that is drift, as for a record kind's list
(`connectors.reading.missing_lists`), counted once per page with the first such record's unread list.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa

from harvest.connectors.catalog.child_kinds import ChildKind
from harvest.connectors.catalog.record_paths import MISSING, compile_path, dig
from harvest.connectors.catalog.records import RecordKind, connection_nodes, unknown_paths
from harvest.connectors.reading.extraction_report import TableReport

NOT_A_LIST = "(list)"
"""The misfit name of a child list that is not a list of objects."""


def _lists(child: ChildKind) -> Callable[[Any], Any]:
    """Reads the child's list from a record: the first of its places that is there (MISSING when none is)."""
    return compile_path("|".join(child.at))


def _misfit(report: TableReport, example: str) -> None:
    report.misfits[NOT_A_LIST] = report.misfits.get(NOT_A_LIST, 0) + 1
    report.misfit_examples.setdefault(NOT_A_LIST, example)


def unread_lists(child: ChildKind, parent: RecordKind, record: dict[str, Any]) -> dict[str, int]:
    """The record's non-empty lists of objects beside the child's place that no column or child of `parent`
    reads: unread path -> its items."""
    unknown: set[str] = set()
    unknown_paths(parent.known, record, unknown)
    out: dict[str, int] = {}
    for location in child.at:
        if not location or "[" in location:
            continue
        holder_path = location.rsplit(".", 1)[0] if "." in location else ""
        holder = dig(record, holder_path) if holder_path else record
        if not isinstance(holder, dict):
            continue
        for key, value in holder.items():
            path = f"{holder_path}.{key}" if holder_path else key
            if path in unknown and isinstance(value, list) and any(isinstance(v, dict) for v in value):
                out.setdefault(path, len(value))
    return out


def _last_rows(keys: list[pa.ChunkedArray]) -> list[int]:
    """The rows of the page's records with a whole key, the last of each key only, in page order."""
    last: dict[tuple[Any, ...], int] = {}
    for row, key in enumerate(zip(*(k.to_pylist() for k in keys), strict=True)):
        if None not in key:
            last[key] = row
    return sorted(last.values())


def child_table(
    child: ChildKind,
    parent: RecordKind,
    records: list[Any],
    parent_rows: pa.Table,
    params: Mapping[str, Any],
    report: TableReport,
    lost: dict[str, str] | None = None,
) -> pa.Table:
    """The child rows of one page's `records` of `parent` (typed as `parent_rows`): parent key, position, the
    item's columns. Records that lost their list to a rename (see the module docstring) are said in `lost`:
    `table: place` -> how many of the page's records, and where their items are instead."""
    from harvest.connectors.reading.extraction import _example, to_arrow

    keys = [parent_rows.column(f.name) for f in child.parent_key]
    read = _lists(child)
    inner = parent.unwrap.inner if parent.unwrap is not None else None
    owners: list[int] = []
    positions: list[int] = []
    items: list[Any] = []
    renamed: list[dict[str, int]] = []
    for row in _last_rows(keys):
        record = inner(records[row]) if inner is not None else records[row]
        found = read(record) if isinstance(record, dict) else MISSING
        if found is MISSING and isinstance(record, dict) and record is records[row]:
            unread = unread_lists(child, parent, record)
            if unread:
                renamed.append(unread)
        if found is MISSING or found is None:
            continue
        if child.entries and isinstance(found, dict):
            found = [{"name": name, "value": value} for name, value in found.items()]
        elif not isinstance(found, list) or child.entries:
            nodes = None if child.entries else connection_nodes(found)
            if nodes is None:
                _misfit(report, f"{'|'.join(child.at)} = {_example(found)}")
                continue
            found = nodes
        for position, item in enumerate(found):
            if item is None:
                continue
            if not isinstance(item, dict):
                _misfit(report, f"{'|'.join(child.at)}[{position}] = {_example(item)}")
                continue
            owners.append(row)
            positions.append(position)
            items.append(item)
    if renamed and lost is not None:
        path, count = next(iter(renamed[0].items()))
        lost[f"{child.table}: {' or '.join(child.at)}"] = (
            f"absent from {len(renamed)} record(s) of {parent.table} that hold an unread list of objects: "
            f"`{path}` ({count} items in the first)"
        )
    counted = TableReport()  # items are not records: `seen` and `kept` stay the records'
    data = to_arrow(child.item, items, params, counted, raw=False)
    counted.seen = counted.kept = 0
    report.add(counted)
    take = pa.array(owners, pa.int64())
    columns = [k.take(take) for k in keys] + [pa.array(positions, pa.int64()), *data.columns]
    return pa.Table.from_arrays(columns, names=[f.name for f in child.columns])
