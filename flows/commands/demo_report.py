"""What `harvest demo` shows of its run: one row per platform instead of one per query and one per table.

The demo asks every endpoint of the catalog, well over a hundred queries landing some 160 tables: a row for each
would fill several screens and hide the two things a first look wants, that every platform's queries ended
well and what they landed. So the demo's end counts, per platform (the path's second segment, as table names
start with it), its queries by how they ended, what they paid and landed, and its tables and their rows; a query
that did not end well is still named on a line of its own (`run_report`'s error lines), and the closing hints
show how to list every table.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rich.table import Table

from harvest.flows import console
from harvest.tasks.output.run_summary import RunSummary


def platform_of(endpoint: str) -> str:
    """An endpoint's platform, its path's second segment, as the catalog's file and table names say it."""
    return endpoint.split("/")[2]


@dataclass
class PlatformLine:
    """One platform's queries and tables, summed."""

    statuses: Counter[str] = field(default_factory=Counter)
    endpoints: set[str] = field(default_factory=set)
    pages: int = 0
    records: int = 0
    credits: int = 0
    tables: int = 0
    rows: int = 0


def platform_lines(
    queries: Iterable[Mapping[str, Any]], tables: Mapping[str, int]
) -> dict[str, PlatformLine]:
    """Per platform, sorted by name: its queries' statuses, pages, records and credits, and its tables' rows. A
    table belongs to the platform whose name (`-` as `_`) is its longest prefix."""
    lines: dict[str, PlatformLine] = {}
    for q in queries:
        line = lines.setdefault(platform_of(q["endpoint"]), PlatformLine())
        line.statuses[q["status"]] += 1
        line.endpoints.add(q["endpoint"])
        line.pages += int(q["pages"])
        line.records += int(q["records"])
        line.credits += int(q["credits"])
    prefixes = sorted(lines, key=len, reverse=True)
    for table, rows in tables.items():
        owner = next((p for p in prefixes if table.startswith(p.replace("-", "_") + "_")), None)
        if owner is not None:
            lines[owner].tables += 1
            lines[owner].rows += rows
    return dict(sorted(lines.items()))


def platform_table(summary: RunSummary, ok_statuses: Iterable[str]) -> Table:
    """The run's queries and tables by platform, with a total; a platform with a query that did not end well
    shows its count in red."""
    ok = set(ok_statuses)
    lines = platform_lines(summary.queries, summary.tables if summary.loaded else {})
    loaded = summary.loaded
    columns = ["platform", "endpoints", "queries", "credits", "records"] + (
        ["tables", "rows"] if loaded else []
    )
    title = f"run {summary.run_id} ({summary.service}), by platform"
    shown = console.table(*columns, title=title, right=columns[1:])
    for name, line in lines.items():
        bad = sum(n for status, n in line.statuses.items() if status not in ok)
        queries = str(sum(line.statuses.values())) + (f" ({bad} not ok)" if bad else "")
        cells: list[object] = [name, len(line.endpoints), console.literal(queries, "red" if bad else "")]
        cells += [line.credits, line.records] + ([line.tables, line.rows] if loaded else [])
        console.add_row(shown, *cells)
    total = [
        "all",
        sum(len(line.endpoints) for line in lines.values()),
        len(summary.queries),
        sum(line.credits for line in lines.values()),
        sum(line.records for line in lines.values()),
    ] + ([len(summary.tables), sum(summary.tables.values())] if loaded else [])
    shown.add_section()
    console.add_row(shown, *total)
    return shown
