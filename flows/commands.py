"""`harvest run`, `demo`, `load`, `runs` and `sql`: the commands that collect, load or read landed data.

Only `run` and `demo` start Prefect; they import it after the spec has been validated, so that a bad spec is
refused in about a second, before anything is started or spent.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from connectors.errors import MissingApiKey
from connectors.pager import OK_STATUSES
from flows.spec import SpecError, UsageError, load_spec, resolve_base_url
from tasks.layout import OutputLayout

DEMO_SPEC = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"


def _console(stderr: bool = False) -> Console:
    """Tables keep their shape in cron logs and pipes: without a terminal (and without COLUMNS) rich would
    squeeze them into 80 columns."""
    stream = sys.stderr if stderr else sys.stdout
    wide = not stream.isatty() and "COLUMNS" not in os.environ
    return Console(stderr=stderr, width=200 if wide else None)


out = _console()
err = _console(stderr=True)


def harvest_command() -> str:
    """How the user can call harvest again: `harvest` when it is on PATH, else the path they just used."""
    if shutil.which("harvest"):
        return "harvest"
    exe = Path(sys.argv[0])
    try:
        return str(exe.resolve().relative_to(Path.cwd())) if exe.name == "harvest" else "harvest"
    except ValueError:
        return str(exe)


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def preflight(spec_path: Path, base_url: str | None) -> None:
    """Everything that can be refused without starting Prefect or sending a request (exit 2)."""
    try:
        spec = load_spec(spec_path)
        resolved = resolve_base_url(spec, base_url)
        if resolved != "sandbox":
            from connectors.auth import load_api_key

            load_api_key(env_var=spec.service.api_key_env, secret_block=spec.service.api_key_secret)
    except (SpecError, UsageError, MissingApiKey) as exc:
        raise fail(str(exc)) from None


def _hold_lock(spec_path: Path, output: Path | None) -> Any:
    """Take the job's lock before Prefect starts, so a second run is refused at once (exit 2)."""
    from flows.lock import JobLocked, acquire

    spec = load_spec(spec_path)
    layout = OutputLayout(output or spec.output)
    try:
        return acquire(layout.lock_file(spec.name))
    except JobLocked as exc:
        raise fail(str(exc)) from None


def run_job(
    spec_path: Path,
    base_url: str | None,
    budget: int | None,
    output: Path | None,
    mode: str = "auto",
    full: bool = False,
) -> dict[str, Any]:
    preflight(spec_path, base_url)
    lock = _hold_lock(spec_path, output)
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")  # harvest shows its own progress
    # stamina logs a bare "retry_scheduled" per retry; every attempt is in the `requests` table instead
    stamina_log = logging.getLogger("stamina")
    stamina_level = stamina_log.level
    stamina_log.setLevel(logging.ERROR)
    from flows import progress
    from flows.collect import run_collect

    reporter = progress.for_terminal()
    progress.install(reporter)
    try:
        coro = run_collect(
            spec_path=str(spec_path),
            base_url=base_url,
            budget=budget,
            output=str(output) if output else None,
            mode=mode,
            full=full,
        )
        summary: dict[str, Any] = asyncio.run(coro)
    except KeyboardInterrupt:
        raise fail(
            "interrupted while Prefect was starting or stopping; a started run resumes next time", 130
        ) from None
    except (SpecError, UsageError, MissingApiKey) as exc:
        raise fail(str(exc)) from None
    except Exception as exc:  # the run itself broke: say what, without a traceback; landed data stays
        raise fail(f"the run failed: {type(exc).__name__}: {exc}", 1) from None
    finally:
        reporter.close()
        stamina_log.setLevel(stamina_level)
        lock.release()
    return summary


def _error_lines(summary: dict[str, Any]) -> list[str]:
    """Why queries did not end well, each distinct reason once (30 queries stopped by one refused key: one line)."""
    by_reason: dict[str, list[str]] = {}
    for q in summary["queries"]:
        if q["status"] in OK_STATUSES or q["status"] in ("interrupted", "stopped"):
            continue
        by_reason.setdefault(q.get("error") or q["status"], []).append(q["query_id"])
    lines = []
    for reason, ids in by_reason.items():
        who = ids[0] if len(ids) == 1 else f"{len(ids)} queries ({ids[0]}, ...)"
        lines.append(f"{who}: {reason}")
    if summary.get("error"):
        lines.append(f"the run stopped: {summary['error']}")
    return lines


def _extraction_lines(summary: dict[str, Any]) -> list[str]:
    """What the pages held that did not land as typed values: said once per run, never silently."""
    from connectors.extraction import ExtractionReport

    total = ExtractionReport()
    for q in summary["queries"]:
        total.add(ExtractionReport.from_dict(q.get("extraction")))
    lines = []
    if total.seen != total.kept:
        lines.append(f"extraction: {total.seen} items seen, {total.kept} kept")
    misfits = [
        f"{name}.{col}: {n} ({table.misfit_examples.get(col, '')})"
        for name, table in sorted(total.tables.items())
        for col, n in sorted(table.misfits.items())
    ]
    if misfits:
        lines.append(
            f"{total.misfits} values did not fit their column and are NULL there (the value stays in `raw`): "
            + "; ".join(misfits[:10])
            + ("; ..." if len(misfits) > 10 else "")
        )
    if total.new_fields:
        shown = ", ".join(total.new_fields[:15]) + (", ..." if len(total.new_fields) > 15 else "")
        lines.append(f"new fields the catalog does not read yet (kept in `raw`): {shown}")
    return lines


def print_summary(summary: dict[str, Any], output: Path) -> None:
    table = Table(title=Text(f"run {summary['run_id']} ({summary['service']})"))
    for name in ("query", "status", "pages", "records", "credits"):
        table.add_column(name, justify="left" if name in ("query", "status") else "right")
    for q in sorted(summary["queries"], key=lambda q: q["query_id"]):
        status = Text(q["status"], style="" if q["status"] in OK_STATUSES else "red")
        table.add_row(Text(q["query_id"]), status, str(q["pages"]), str(q["records"]), str(q["credits"]))
    out.print(table)
    for line in _error_lines(summary):
        err.print(Text(line, style="red"), soft_wrap=True)
    for line in _extraction_lines(summary):
        err.print(Text(line, style="yellow"), soft_wrap=True)
    if summary["loaded"]:
        rows = Table(title=Text(f"rows per table in {output / 'harvest.duckdb'}"))
        rows.add_column("table")
        rows.add_column("rows", justify="right")
        for name, n in sorted(summary["tables"].items()):
            rows.add_row(name, str(n))
        out.print(rows)
    else:
        err.print(
            Text(f"not loaded into DuckDB yet: run `{harvest_command()} load {output}` when it is free"),
            style="yellow",
        )
    out.print(
        Text(
            f"credits spent: {summary['credits_spent']} of a budget of {summary['budget']}; "
            f"records: {summary['records']}; status: {summary['status']}"
        )
    )
    billed = summary.get("service_billed")
    if billed is not None and billed != summary["credits_spent"]:
        out.print(
            Text(
                f"the service's bill: the account's balance fell by {billed} credits during the run; harvest "
                f"counted {summary['credits_spent']} (harvest counts a request whose answer was lost as spent; "
                "another job on the same key also makes these differ)"
            )
        )


def _next_step(summary: dict[str, Any], spec: Path) -> str | None:
    """One line saying how to go on after a run that did not finish its work."""
    cmd = f"{harvest_command()} run {spec}"
    if summary["status"] == "interrupted":
        pages = sum(int(q["pages"]) for q in summary["queries"])
        return f"interrupted: run {summary['run_id']} stopped cleanly with {pages} pages landed; `{cmd}` resumes it"
    stopped = [q for q in summary["queries"] if q["status"] in ("budget_exhausted", "stopped")]
    if stopped:
        return f"{len(stopped)} queries stopped with their cursors kept: `{cmd} --continue` picks them up"
    return None


def exit_code(summary: dict[str, Any]) -> int:
    if summary["status"] == "interrupted":
        return 130
    return 0 if all(q["status"] in OK_STATUSES for q in summary["queries"]) else 1


def _report(summary: dict[str, Any], spec: Path, output: Path) -> int:
    if summary.get("status") == "nothing_to_continue":
        out.print(Text(summary["message"]))
        return 0
    print_summary(summary, output)
    step = _next_step(summary, spec)
    if step:
        err.print(Text(step), soft_wrap=True)
    return exit_code(summary)


def run(
    spec: Path,
    base_url: str | None,
    budget: int | None,
    output: Path | None,
    mode: str = "auto",
    full: bool = False,
) -> None:
    summary = run_job(spec, base_url, budget, output, mode, full)
    target = output or Path(load_spec(spec).output)
    raise typer.Exit(_report(summary, spec, target))


def demo(output: Path | None) -> None:
    summary = run_job(DEMO_SPEC, "sandbox", None, output)
    target = output or Path(load_spec(DEMO_SPEC).output)
    code = _report(summary, DEMO_SPEC, target)
    db = target / "harvest.duckdb"
    out.print("\n[bold]Query it[/bold] (DuckDB SQL, read-only):")
    out.print(
        f'  {harvest_command()} sql {target} "SELECT caption, play_count, digg_count FROM short_video_videos '
        f'ORDER BY play_count DESC LIMIT 5"',
        highlight=False,
        soft_wrap=True,
        markup=False,
    )
    out.print(
        f"  {_relative(Path(sys.executable))} -c \"import duckdb; print(duckdb.connect('{db}', read_only=True)"
        f".sql('SELECT query_id, status, pages, credits FROM query_state'))\"",
        highlight=False,
        soft_wrap=True,
        markup=False,
    )
    out.print(
        f"  Parquet for a warehouse: {target / 'parquet'}/<table>/date=YYYY-MM-DD/*.parquet",
        highlight=False,
        markup=False,
    )
    raise typer.Exit(code)


def _unfinished_note(row: Any) -> str:
    m = row.manifest
    if row.state == "running":
        return f"run {m.run_id} is still running ({row.pages} pages, {row.credits} credits so far): not loaded yet"
    return (
        f"run {m.run_id} of job {m.job} is unfinished ({row.state}: {row.pages} pages, {row.credits} credits); "
        f"not loaded: `{harvest_command()} run SPEC` resumes it, `--fresh` abandons it (its data is then loaded)"
    )


def load(output: Path) -> None:
    from flows.load import load_manifest_into_duckdb
    from flows.manifest import pending_manifests
    from flows.run_list import run_rows
    from tasks.duckdb_load import DatabaseBusy

    layout = OutputLayout(output)
    for row in run_rows(layout):
        if row.unfinished and row.state != "interrupted":
            err.print(Text(_unfinished_note(row)), soft_wrap=True)
    pending = pending_manifests(layout)
    if not pending:
        out.print(Text(f"nothing to load in {output}: every finished run is in {layout.db}"))
        return
    for manifest in pending:
        try:
            tables = load_manifest_into_duckdb(layout, manifest)
        except DatabaseBusy as exc:
            raise fail(str(exc), 1) from None
        out.print(Text(f"loaded run {manifest.run_id}: {sum(tables.values())} rows in {len(tables)} tables"))


def runs(output: Path) -> None:
    from flows.run_list import run_rows

    rows = run_rows(OutputLayout(output))
    if not rows:
        raise fail(f"no runs found under {output}", 1)
    table = Table(title=Text(f"runs in {output}"))
    for name in ("run id", "job", "started", "status", "pages", "credits", "records", "loaded", "service"):
        right = name in ("pages", "credits", "records")
        table.add_column(name, justify="right" if right else "left", no_wrap=name != "service")
    for row in rows:
        m = row.manifest
        table.add_row(
            m.run_id, Text(m.job), m.started[:19], row.state, str(row.pages), f"{row.credits}/{m.budget}",
            str(m.records) if not row.unfinished else "-", "yes" if m.loaded else "no", Text(m.service),
        )  # fmt: skip
    out.print(table)
    for row in rows:
        if row.unfinished and row.state != "running":
            err.print(Text(_unfinished_note(row)), soft_wrap=True)


def sql(output: Path, query: str) -> None:
    import duckdb

    db = OutputLayout(output).db
    if not db.exists():
        raise fail(f"{db} does not exist: run a job first", 1)
    try:
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.Error as exc:
        raise fail(f"cannot open {db} read-only: {exc}", 1) from None
    try:
        result = con.execute(query)
        names = [d[0] for d in result.description or []]
        rows = result.fetchmany(200)
    except duckdb.Error as exc:
        raise fail(f"{exc}", 1) from None
    finally:
        con.close()
    table = Table()
    for name in names:
        table.add_column(name)
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row))
    out.print(table)
