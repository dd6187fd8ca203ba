"""`harvest runs` and `harvest load`: the runs of an output directory, and loading those DuckDB lacks.

What these print must be true of the files: a run is called loaded only when its manifest says so, a killed run
is never called loaded, and `harvest load` names the database only when it exists.
"""

from __future__ import annotations

import contextlib
import itertools
from pathlib import Path
from typing import Any

from harvest.connectors.plurals import counted
from harvest.flows import console
from harvest.flows.cli_errors import Failed
from harvest.flows.commands.output_arg import landed_output, missing_database, not_a_database_file
from harvest.flows.console import harvest_line
from harvest.flows.run.run_again import resume_hint
from harvest.tasks.output.layout import OutputLayout


def _unfinished_note(row: Any, output: Path) -> str:
    """How an unfinished run stands and how to go on, in words that match its manifest."""
    m = row.manifest
    so_far = f"{counted(row.pages, 'page')}, {counted(row.credits, 'credit')}"
    if row.state == "running":
        return f"run {m.run_id} is still running ({so_far} so far): not loaded yet"
    ways = resume_hint(m, output)
    if row.state == "killed":
        return f"run {m.run_id} of job {m.job} was killed ({so_far}); not loaded: {ways} (its data is then loaded)"
    if m.loaded:
        return f"run {m.run_id} of job {m.job} was interrupted ({so_far}); what it landed is loaded: {ways}"
    return (
        f"run {m.run_id} of job {m.job} was interrupted ({so_far}); not loaded yet: `{harvest_line('load', output)}` "
        f"loads what it landed, {ways}"
    )


def _job_lock(layout: OutputLayout, job: str) -> Any:
    """The job's lock, or None while a run of the job holds it (its manifests may be rewritten meanwhile)."""
    from harvest.tasks.output.job_lock import JobLocked, acquire

    try:
        return acquire(layout.lock_file(job))
    except JobLocked:
        return None


def _nothing_to_load(layout: OutputLayout, output: Path, runs: list[Any]) -> None:
    """Say why nothing was loaded, naming the database only if it exists. Whether anything waits is the
    manifests' to say, so a database another process holds (a notebook) is no error here: only pointing the
    history views at a moved directory needs its lock, and that waits for the next load."""
    from harvest.flows.run.load_step import refresh_views
    from harvest.tasks.database.connection import DatabaseBusy

    landed = [r for r in runs if r.status != "running"]  # heads: no run's queries read for it
    if not landed:
        console.prose(f"nothing to load in {output}: no run there has finished or been interrupted yet")
        return
    if not layout.db.exists():
        console.warning(
            f"nothing to load in {output}, but {layout.db} does not exist although its runs were loaded into it: "
            f"`{harvest_line('rebuild', output)}` builds it again from the raw pages"
        )
        return
    # An output directory moved: the history views follow it. Busy, they follow at the next load (`harvest
    # sql` follows them meanwhile): nothing waits to be loaded.
    with contextlib.suppress(DatabaseBusy):
        refresh_views(layout)
    console.prose(f"nothing to load in {output}: every finished or interrupted run is in {layout.db}")


def load(output: Path) -> None:
    """Load every run whose data landed and is not in DuckDB; say what each is."""
    from harvest.flows.run.load_step import load_manifest_into_duckdb
    from harvest.tasks.database.load_settings import check_load_settings
    from harvest.tasks.output.manifest import pending_manifests, run_heads
    from harvest.tasks.output.run_list import run_rows

    check_load_settings()
    layout = landed_output(output, "load", database_will_do=True)
    for row in run_rows(layout):
        if row.state in ("running", "killed"):
            console.note(_unfinished_note(row, output))
    pending = pending_manifests(layout)
    first = next(pending, None)
    if first is None:
        _nothing_to_load(layout, output, run_heads(layout))
        return
    for manifest in itertools.chain([first], pending):
        lock = _job_lock(layout, manifest.job)
        if lock is None:
            console.note(
                f"run {manifest.run_id} of job {manifest.job} is not loaded: a run of that job is running now; "
                f"run `{harvest_line('load', output)}` again when it has ended"
            )
            continue
        try:
            tables = load_manifest_into_duckdb(layout, manifest)
        finally:
            lock.release()
        console.prose(
            f"loaded run {manifest.run_id} ({manifest.status}): {counted(manifest.records, 'record')} into "
            f"{len(tables)} tables"
        )
        if manifest.status == "interrupted":
            console.note(f"run {manifest.run_id} is still unfinished: {resume_hint(manifest, output)}")


def _unread_database(layout: OutputLayout, output: Path, rows: list[Any]) -> str | None:
    """Why no run is in the database although manifests say loaded (it is gone, a directory, damaged), with
    the rebuild that makes it again; None when it can be read. A manifest says what its load did, not what
    the file still holds: `loaded yes` over a file no query can read sent users to `harvest sql` for nothing."""
    from harvest.tasks.database.connection import database_damage

    rebuild = f"`{harvest_line('rebuild', output)}`"
    if not layout.db.exists():
        return missing_database(layout, output, rows) if any(row.manifest.loaded for row in rows) else None
    if not layout.db.is_file():
        return not_a_database_file(layout.db, also="no run is loaded; ")
    if (damage := database_damage(layout.db)) is None:
        return None
    return f"{damage}: no run is loaded; {rebuild} makes it again from the landed pages"


def runs(output: Path) -> None:
    from harvest.tasks.output.manifest import lowered_budget
    from harvest.tasks.output.run_list import run_rows

    # a typo: exit 2, as `load` and `export`
    layout = landed_output(output, "runs", database_will_do=True, reads_database_itself=True)
    rows = run_rows(layout)
    if not rows:
        raise Failed(f"no runs found under {output}", 1)
    unread = _unread_database(layout, output, rows)
    table = console.table(
        "run id", "job", "started", "status", "pages", "credits", "records", "loaded", "service",
        title=f"runs in {output}", right=("pages", "credits", "records"),
    )  # fmt: skip
    for row in rows:
        m = row.manifest
        lowered = lowered_budget(row.credits, m.budget, m.budget_before)
        credits = (
            f"{row.credits}/{m.budget}"
            if lowered is None
            else f"{row.credits}/{m.budget_before}, then {m.budget}"
        )
        console.add_row(
            table, m.run_id, m.job, m.started[:19], row.state, row.pages, credits,
            row.records if row.state not in ("running", "killed") else "-", "no" if unread or not m.loaded else "yes",
            m.service,
        )  # fmt: skip
    console.out.print(table)
    if unread is not None:
        console.warning(unread)
    for row in rows:
        if lowered := lowered_budget(row.credits, row.manifest.budget, row.manifest.budget_before):
            console.note(f"run {row.manifest.run_id}: credits spent: {lowered}")
        if row.unfinished and row.state != "running":
            console.note(_unfinished_note(row, output))
        if layout.prefect_owed_file(row.manifest.run_id).exists():
            console.note(
                f"run {row.manifest.run_id}: Prefect has not been told how it ended (its API did not answer); "
                "the job's next run or `harvest serve` tells it"
            )
