"""A spec's `export: {to: URL}`: the run's export, after its load, never at the cost of what landed.

A failed export fails the run's Prefect state and exit code (the warehouse did not get the night's data, and a
scheduled job must say so), but the run's data stays landed and loaded; `harvest export` sends it later.
"""

from __future__ import annotations

import contextlib
from typing import Any

from harvest.flows.console import harvest_line
from harvest.flows.run.interrupt import ExportInterrupted, StopOnSignal
from harvest.flows.spec import JobSpec
from harvest.tasks.output.layout import OutputLayout


def export_step(
    spec: JobSpec, layout: OutputLayout, loaded: bool, stop: StopOnSignal | None = None
) -> dict[str, Any] | None:
    """The export's report for the run's summary; `stop`: a second Ctrl-C meanwhile abandons it."""
    if spec.export is None:
        return None
    to, fmt = spec.export.to, spec.export.format
    words = ["export", layout.root, "--to", to, *(["--snapshot"] if spec.export.snapshot else [])]
    retry = harvest_line(*words, *(["--format", fmt] if fmt != "parquet" else []))
    if not loaded:
        load = harvest_line("load", layout.root)
        return {"to": to, "error": f"not exported: the run is not loaded yet; `{load}`, then `{retry}`"}
    try:
        with stop.exporting() if stop is not None else contextlib.nullcontext():
            if fmt != "parquet":
                return _tables(layout, to, fmt)
            from harvest.flows.handoff.export import export_increment, export_snapshot

            report = (export_snapshot if spec.export.snapshot else export_increment)(layout, to)
    except ExportInterrupted as exc:  # nothing is recorded: the retry sends (or merges) it all again
        return {"to": to, "interrupted": True, "error": f"export interrupted by {exc}; retry: `{retry}`"}
    except Exception as exc:  # landed data stays; the summary says what failed and how to send it later
        return {"to": to, "error": f"export failed ({type(exc).__name__}: {exc}); retry: `{retry}`"}
    return {"to": report.destination, "kind": report.kind, "runs": len(report.runs), "files": report.files,
            "rows": report.rows}  # fmt: skip


def _tables(layout: OutputLayout, to: str, fmt: str) -> dict[str, Any]:
    """An Iceberg or Delta export's report: the tables stand for files (one commit each)."""
    from harvest.flows.handoff.lakehouse.lakehouse_export import export_tables

    report = export_tables(layout, to, fmt)
    return {"to": report.destination, "kind": fmt, "runs": len(report.runs), "files": len(report.tables),
            "tables": len(report.tables), "rows": report.rows}  # fmt: skip
