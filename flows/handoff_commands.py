"""`harvest rebuild` and `harvest export`: what an output directory hands to others, printed for people.

Neither starts Prefect nor sends a request to the service.
"""

from __future__ import annotations

from pathlib import Path

import typer

from flows import console
from flows.spec import UsageError
from tasks.database import DatabaseBusy
from tasks.layout import OutputLayout


def _fail(message: str, code: int = 2) -> typer.Exit:
    console.error(message)
    return typer.Exit(code)


def rebuild(output: Path, run_id: str | None) -> None:
    from flows.rebuild import rebuild as rebuild_output

    try:
        report = rebuild_output(OutputLayout(output), run_id)
    except UsageError as exc:
        raise _fail(str(exc)) from None
    except DatabaseBusy as exc:
        raise _fail(str(exc), 1) from None
    for line in report.skipped:
        console.note(line)
    console.say(
        f"landed {report.pages} stored pages of {len(report.runs)} run(s) again: {report.records} records; "
        f"no request sent"
    )
    rows = console.table(
        "table", "rows", title=f"rows per table in {OutputLayout(output).db}", right=("rows",)
    )
    for name, n in sorted(report.tables.items()):
        console.add_row(rows, name, n)
    console.out.print(rows)
