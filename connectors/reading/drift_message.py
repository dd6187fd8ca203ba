"""What a user reads when a page lost records to a change of shape: where, what, an example, and that the
paid pages are kept (`connectors.reading.extraction` counts; this says it)."""

from __future__ import annotations

import json

from connectors.catalog.endpoints import Endpoint
from connectors.reading.extraction import ExtractionReport

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
    return message


def override_hint(path: str, read_at: dict[str, str]) -> str:
    """The spec lines that would read the records where the answer holds them (JSON is valid YAML)."""
    shapes = {path: {table: {"records": where} for table, where in sorted(read_at.items())}}
    places = ", ".join(f"`{where}`" for where in read_at.values())
    return (
        f"The answer holds one unread list of objects, at {places}: to read it there without waiting for a "
        f"release, add to the job spec `shapes: {json.dumps(shapes)}`, then `harvest rebuild OUTPUT --spec SPEC` "
        "lands the pages already paid"
    )
