"""What a user reads when a page lost records to a change of shape (where, what, an example, and that the paid
pages are kept), or when a column came empty while its value came under another name; with the spec's
`shapes` override that reads the new place when harvest can tell it (`connectors.reading.extraction` counts;
this says it)."""

from __future__ import annotations

import json
from typing import Any

from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.reading.extraction import ExtractionReport

KEPT = (
    "the paid pages are kept in the raw store: once the catalog reads the new shape, `harvest rebuild` lands "
    "them and `harvest run --continue` goes on from the next page"
)


def drift_message(endpoint: Endpoint, report: ExtractionReport) -> str:
    """One message for records a page could not keep: where, what, an example, and that nothing is lost."""
    parts = []
    for name, table in sorted(report.tables.items()):
        if table.no_key:
            pk = ", ".join(endpoint.kind(name).primary_key)
            parts.append(
                f"{name}: {table.no_key} record(s) without their primary key ({pk}) or with an empty one, "
                f"e.g. {table.no_key_example}"
            )
        if table.failed:
            parts.append(f"{name}: {table.failed} record(s) could not be read ({table.failure})")
    for where in report.missing_lists:
        sent = ", ".join(report.top_keys) or "no keys"
        why = report.missing_why.get(where, "absent")
        parts.append(
            f"{where}: the list is missing although the page had content ({why}; the answer's keys: {sent})"
        )
    message = f"the answers of {endpoint.path} changed shape: " + "; ".join(parts) + f". Stopped; {KEPT}"
    if report.read_at:
        message += ". " + override_hint(endpoint.path, report.read_at)
    keyed = {
        name: t.no_key_override for name, t in sorted(report.tables.items()) if t.no_key and t.no_key_override
    }
    if keyed:
        message += (
            ". The records without their key have it elsewhere: to read them there without waiting for a "
            f"release, add to the job spec `shapes: {_shapes(endpoint.path, keyed)}`, then {REBUILD} lands the "
            "pages already paid"
        )
    return message


REBUILD = "`harvest rebuild OUTPUT --spec SPEC`"


def _shapes(path: str, tables: dict[str, Any]) -> str:
    """A spec's `shapes` entry for one endpoint, as one line a user can paste (JSON is valid YAML)."""
    return json.dumps({path: tables})


def empty_columns_message(path: str, report: ExtractionReport) -> str | None:
    """One message for the columns of an endpoint's tables that came empty while their records carried unread
    fields that may hold them (`connectors.reading.empty_columns`), with the override reading the likeliest;
    None when there are none."""
    parts, tables = [], {}
    for name, table in sorted(report.tables.items()):
        fields = {}
        for column, records in sorted(table.empty.items()):
            hints = table.empty_hints.get(column, [])
            if not hints:
                continue
            unread = " or ".join(f"`{h}`" for h in hints)
            parts.append(f"{name}.{column} was NULL in {records} records that carry {unread}, not read")
            fields[column] = hints[0]
        if fields:
            tables[name] = {"fields": fields}
    if not parts:
        return None
    return (
        f"columns left empty by the answers of {path}: "
        + "; ".join(parts)
        + ". The values are kept in `raw`; "
        f"to read them, add to the job spec `shapes: {_shapes(path, tables)}`, then {REBUILD} fills the columns "
        "from the pages already paid"
    )


def override_hint(path: str, read_at: dict[str, str]) -> str:
    """The spec lines that would read the records where the answer holds them (JSON is valid YAML)."""
    shapes = {path: {table: {"records": where} for table, where in sorted(read_at.items())}}
    places = ", ".join(f"`{where}`" for where in read_at.values())
    return (
        f"The answer holds one unread list of objects, at {places}: to read it there without waiting for a "
        f"release, add to the job spec `shapes: {json.dumps(shapes)}`, then {REBUILD} lands the pages already paid"
    )
