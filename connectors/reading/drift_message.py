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
    "the paid pages are kept in the raw store: once the catalog reads the new shape, a rebuild lands them and "
    "the job run with `--continue` goes on from the next page (the run's last line gives both commands)"
)


KEPT_DECLARED = (
    "the paid pages are kept in the raw store: once the declaration reads them, a rebuild lands them and the "
    "job run with `--continue` goes on from the next page (the run's last line gives both commands)"
)


def drift_message(endpoint: Endpoint, report: ExtractionReport) -> str:
    """One message for records a page could not keep: where, what, an example, and that nothing is lost. For
    an endpoint the job declares, the fix is in its own file: the message names the file, line and place."""
    declared = endpoint.declared_at
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
        why = report.missing_why.get(where, "absent")
        said = report.top_keys and "`(the answer)` holds" not in why  # the top's keys said already
        sent = f"; the answer's keys: {', '.join(report.top_keys)}" if said else ""
        name = where.split(":", 1)[0]
        what = "object" if _one_object(endpoint, name) else "list"
        part = f"{where}: the {what} is missing although the page had content ({why}{sent})"
        if declared is not None and name in {k.table for k in endpoint.landed_kinds}:
            place = _at(endpoint, name)
            part += f"; the declaration's `{'.'.join(place)}` is in {declared.where(*place)}"
            if what == "list" and why.startswith("an object, not a list"):
                part += ": if that object is the one record the answer holds, declare the kind `one: true`"
        parts.append(part)
    if declared is None:
        head = f"the answers of {endpoint.path} changed shape: "
    else:
        head = f"the answers of {endpoint.path} do not match its declaration in {declared.file}: "
    message = head + "; ".join(parts) + f". Stopped; {KEPT if declared is None else KEPT_DECLARED}"
    if report.read_at:
        hint = override_hint if declared is None else _declared_hint
        message += ". " + hint(endpoint, report.read_at)
    keyed = {
        name: t.no_key_override for name, t in sorted(report.tables.items()) if t.no_key and t.no_key_override
    }
    if keyed and declared is None:
        message += (
            ". The records without their key have it elsewhere: to read them there without waiting for a "
            f"release, add to the job spec `shapes: {_shapes(endpoint.path, keyed)}`, then {REBUILD} lands the "
            "pages already paid"
        )
    elif keyed:
        message += ". The records without their key have it elsewhere: " + "; ".join(
            _declared_fix(endpoint, name, override) for name, override in keyed.items()
        )
    return message


def _one_object(endpoint: Endpoint, table: str) -> bool:
    kind = next((k for k in endpoint.kinds if k.table == table), None)
    return kind is not None and bool(kind.locations) and all(loc in kind.objects for loc in kind.locations)


def _at(endpoint: Endpoint, table: str) -> tuple[str, ...]:
    """Where in an endpoint's declaration a table's `at` is (a child table's under its parent's `children`)."""
    for kind in endpoint.kinds:
        if any(child.table == table for child in kind.children):
            return ("records", kind.table, "children", table, "at")
    return ("records", table, "at")


def _declared_hint(endpoint: Endpoint, read_at: dict[str, str]) -> str:
    return "The answer holds one unread list of objects: " + "; ".join(
        _declared_fix(endpoint, table, {"records": where}) for table, where in sorted(read_at.items())
    )


def _declared_fix(endpoint: Endpoint, table: str, override: dict[str, Any]) -> str:
    """The change to a job's own declaration that reads what a `shapes` override would: its place and line."""
    assert endpoint.declared_at is not None
    if "records" in override:
        place = _at(endpoint, table)
        return (
            f"to read it, set `at: {json.dumps(override['records'])}` for {table} in "
            f"{endpoint.declared_at.where(*place)}, then {REBUILD} lands the pages already paid"
        )
    fixes = []
    for column, path in override.get("fields", {}).items():
        place = ("records", table, "columns", column)
        fixes.append(
            f"to read {table}.{column} there, set its `path: {path}` in {endpoint.declared_at.where(*place)}"
        )
    return "; ".join(fixes) + f", then {REBUILD} lands the pages already paid"


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


def override_hint(endpoint: Endpoint, read_at: dict[str, str]) -> str:
    """The spec lines that would read the records where the answer holds them (JSON is valid YAML)."""
    path = endpoint.path
    shapes = {path: {table: {"records": where} for table, where in sorted(read_at.items())}}
    places = ", ".join(f"`{where}`" for where in read_at.values())
    return (
        f"The answer holds one unread list of objects, at {places}: to read it there without waiting for a "
        f"release, add to the job spec `shapes: {json.dumps(shapes)}`, then {REBUILD} lands the pages already paid"
    )
