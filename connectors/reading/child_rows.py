"""A page's child rows: each record's nested list as rows of its child table (`connectors.catalog.child_kinds`).

Read from the records the parent's table got, after the parent's columns are typed: each row carries its parent's
key as the parent's table has it (a blank key already NULL), and a record without a key has no child rows (it has
no row to belong to). A key twice on one page (an item repeated) gives the rows of its last occurrence, the one
the load keeps. What the items carry is accounted like a record's: values that do not fit their column, fields no
column reads, columns that came empty; but items are not records (a query's `records` count the service's
records). A list that is not a list (an object, a text) and an item that is not an object are values that do not
fit (`(list)` of the child table, with an example): the parent's `raw` keeps them. An `entries` child reads an
object instead, each of its fields an item `{name, value}`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa

from harvest.connectors.catalog.child_kinds import ChildKind
from harvest.connectors.catalog.record_paths import MISSING, compile_path
from harvest.connectors.catalog.records import RecordKind, connection_nodes
from harvest.connectors.reading.extraction_report import TableReport

NOT_A_LIST = "(list)"
"""The misfit name of a child list that is not a list of objects."""


def _lists(child: ChildKind) -> Callable[[Any], Any]:
    """Reads the child's list from a record: the first of its places that is there (MISSING when none is)."""
    return compile_path("|".join(child.at))


def _misfit(report: TableReport, example: str) -> None:
    report.misfits[NOT_A_LIST] = report.misfits.get(NOT_A_LIST, 0) + 1
    report.misfit_examples.setdefault(NOT_A_LIST, example)


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
) -> pa.Table:
    """The child rows of one page's `records` of `parent` (typed as `parent_rows`): parent key, position, the
    item's columns."""
    from harvest.connectors.reading.extraction import _example, to_arrow

    keys = [parent_rows.column(f.name) for f in child.parent_key]
    read = _lists(child)
    inner = parent.unwrap.inner if parent.unwrap is not None else None
    owners: list[int] = []
    positions: list[int] = []
    items: list[Any] = []
    for row in _last_rows(keys):
        record = inner(records[row]) if inner is not None else records[row]
        found = read(record) if isinstance(record, dict) else MISSING
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
    counted = TableReport()  # items are not records: `seen` and `kept` stay the records'
    data = to_arrow(child.item, items, params, counted, raw=False)
    counted.seen = counted.kept = 0
    report.add(counted)
    take = pa.array(owners, pa.int64())
    columns = [k.take(take) for k in keys] + [pa.array(positions, pa.int64()), *data.columns]
    return pa.Table.from_arrays(columns, names=[f.name for f in child.columns])
