"""`harvest rebuild`, `export` and `raw`: what an output directory hands to others, printed for people.

None starts Prefect nor sends a request to the service.
"""

from __future__ import annotations

from pathlib import Path

from harvest.connectors.plurals import counted
from harvest.flows import console
from harvest.flows.cli_errors import Failed, or_try_later
from harvest.flows.commands.output_arg import landed_output
from harvest.flows.spec import JobSpec
from harvest.tasks.output.layout import OutputLayout


def rebuild(output: Path, run_id: str | None, spec: JobSpec | None = None) -> None:
    from harvest.flows.handoff.rebuild import rebuild as rebuild_output

    report = rebuild_output(landed_output(output, "rebuild"), run_id, spec)
    for line in report.skipped:
        console.note(line)
    console.prose(
        f"landed {report.pages} stored pages of {counted(len(report.runs), 'run')} again: {report.records} records; "
        f"no request sent"
    )
    rows = console.table(
        "table", "rows", title=f"rows per table in {OutputLayout(output).db}", right=("rows",)
    )
    for name, n in sorted(report.tables.items()):
        console.add_row(rows, name, n)
    console.out.print(rows)
    if report.kept:
        console.note(f"kept what you made in the database: {report.kept}")
    for line in report.lost:
        console.warning(f"not in the rebuilt database: {line}")
    for line in report.lacking:  # last, where a reader looks: the rebuild is not whole
        console.warning(line)


def export(output: Path, to: str, snapshot: bool, fmt: str = "parquet") -> None:
    import duckdb

    from harvest.flows.handoff.export import export_increment, export_snapshot
    from harvest.flows.handoff.export_ledger import NotRecorded
    from harvest.flows.spec.job_options import format_problem

    layout = landed_output(output, "export")
    problem = format_problem(fmt, snapshot)
    if problem:
        raise Failed(f"--format {fmt}: {problem}")
    if fmt != "parquet":
        export_tables(layout, to, fmt)
        return
    try:
        report = (export_snapshot if snapshot else export_increment)(layout, to)
    except NotRecorded as exc:
        raise Failed(f"exported to {to} and committed, but {exc}", or_try_later(exc, 1)) from None
    except (
        OSError,
        duckdb.Error,
    ) as exc:  # pyarrow's errors for an unreachable or refusing store are OSErrors
        raise Failed(
            f"export to {to} failed, nothing was committed (no _SUCCESS): {exc}", or_try_later(exc, 1)
        ) from None
    if report.recovered:
        console.prose(
            f"{counted(report.recovered, 'run')} found committed at {report.destination}: recorded, not sent again"
        )
    if report.gone:
        console.prose(
            f"{counted(report.gone, 'run')} recorded as sent to {report.destination} no longer there (its "
            "_exports/<id>/_SUCCESS is gone): sent again"
        )
    if report.kind == "increment" and not report.runs:
        console.prose(f"nothing new to export to {report.destination}: every loaded run is there")
        return
    marker = "_SUCCESS" if report.kind == "snapshot" else f"_exports/{report.export_id}/_SUCCESS"
    console.prose(
        f"exported {counted(len(report.runs), 'run')}, {report.files} files, {report.rows} rows to {report.destination} "
        f"({report.kind}); committed: {marker}"
    )


def export_tables(layout: OutputLayout, to: str, fmt: str) -> None:
    """`--format iceberg|delta`: a failed table is named with those committed before it (exit 1)."""
    import duckdb

    from harvest.flows.handoff.export_ledger import NotRecorded
    from harvest.flows.handoff.lakehouse.lakehouse_export import ExportFailed
    from harvest.flows.handoff.lakehouse.lakehouse_export import export_tables as merge_tables

    try:
        report = merge_tables(layout, to, fmt)
    except NotRecorded as exc:
        raise Failed(f"merged into the {fmt} tables at {to}, but {exc}", or_try_later(exc, 1)) from None
    except (ExportFailed, OSError, duckdb.Error) as exc:
        raise Failed(f"{fmt} export to {to} failed: {exc}", or_try_later(exc, 1)) from None
    if report.gone:
        console.prose(
            f"{counted(report.gone, 'run')} recorded as merged into {report.destination} no longer there (its "
            "runs table is gone): merged again"
        )
    if not report.runs:
        console.prose(
            f"nothing new to export to {report.destination}: every loaded run is in its {fmt} tables"
        )
        return
    rows = console.table("table", "rows in", "inserted", "updated", "new columns", "version",
                         title=f"{fmt} tables at {report.destination}", right=("rows in", "inserted", "updated"))  # fmt: skip
    for name, merged in report.tables.items():
        added = ", ".join(merged.columns_added)
        console.add_row(rows, name, merged.rows_in, merged.inserted, merged.updated, added, merged.version)
    console.out.print(rows)
    console.prose(
        f"merged {counted(len(report.runs), 'run')}, {report.rows} rows into "
        f"{counted(len(report.tables), f'{fmt} table')} at {report.destination}; one commit per table"
    )


def raw(output: Path, run_id: str | None, query_id: str | None) -> None:
    from harvest.flows.handoff.raw_pages import raw_lines

    for line in raw_lines(landed_output(output, "raw"), run_id, query_id):
        print(line)
