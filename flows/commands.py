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
from rich.markup import escape
from rich.table import Table

from connectors.errors import MissingApiKey
from connectors.pager import OK_STATUSES
from flows import console
from flows.spec import SpecError, UsageError, load_spec, resolve_base_url
from tasks.layout import OutputLayout

DEMO_SPEC = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"
out = Console()
err = Console(stderr=True)


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
    """Print `error: <message>` literally (messages quote specs and answers) and return the exit to raise."""
    console.error(message)
    return typer.Exit(code)


def preflight(spec_path: Path, base_url: str | None, output: Path | None = None) -> None:
    """Everything that can be refused without starting Prefect or sending a request (exit 2)."""
    from flows.preflight import check_output_dir

    try:
        spec = load_spec(spec_path)
        resolved = resolve_base_url(spec, base_url)
        check_output_dir(output or spec.output)
        if resolved != "sandbox":
            from connectors.auth import load_api_key

            load_api_key(env_var=spec.service.api_key_env, secret_block=spec.service.api_key_secret)
    except (SpecError, UsageError, MissingApiKey) as exc:
        raise fail(str(exc)) from None


def run_job(spec_path: Path, base_url: str | None, budget: int | None, output: Path | None) -> dict[str, Any]:
    preflight(spec_path, base_url, output)
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")  # harvest shows its own progress
    # stamina logs a bare "retry_scheduled" per retry; every attempt is in the `requests` table instead
    stamina_log = logging.getLogger("stamina")
    stamina_level = stamina_log.level
    stamina_log.setLevel(logging.ERROR)
    from flows import progress
    from flows.collect import collect_job

    reporter = progress.for_terminal()
    progress.install(reporter)
    try:
        coro = collect_job(
            spec_path=str(spec_path),
            base_url=base_url,
            budget=budget,
            output=str(output) if output else None,
        )
        summary: dict[str, Any] = asyncio.run(coro)
    except (SpecError, UsageError, MissingApiKey) as exc:
        raise fail(str(exc)) from None
    except Exception as exc:  # the run itself broke: say what, without a traceback; landed data stays
        raise fail(f"the run failed: {type(exc).__name__}: {exc}", 1) from None
    finally:
        reporter.close()
        stamina_log.setLevel(stamina_level)
    return summary


def print_summary(summary: dict[str, Any], output: Path) -> None:
    table = Table(title=f"run {summary['run_id']} ({summary['service']})")
    for name in ("query", "status", "pages", "records", "credits"):
        table.add_column(name, justify="left" if name in ("query", "status") else "right")
    for q in sorted(summary["queries"], key=lambda q: q["query_id"]):
        status = q["status"] if q["status"] in OK_STATUSES else f"[red]{q['status']}[/red]"
        table.add_row(escape(q["query_id"]), status, str(q["pages"]), str(q["records"]), str(q["credits"]))
    out.print(table)
    for q in summary["queries"]:
        if q["status"] not in OK_STATUSES and q.get("error"):
            err.print(f"[red]{escape(q['query_id'])}[/red]: {escape(q['error'])}", highlight=False)
    if summary["loaded"]:
        rows = Table(title=f"rows per table in {output / 'harvest.duckdb'}")
        rows.add_column("table")
        rows.add_column("rows", justify="right")
        for name, n in sorted(summary["tables"].items()):
            rows.add_row(name, str(n))
        out.print(rows)
    else:
        err.print(
            f"[yellow]not loaded into DuckDB yet[/yellow]: run `{harvest_command()} load {output}` when it is free"
        )
    out.print(
        f"credits spent: [bold]{summary['credits_spent']}[/bold] of a budget of {summary['budget']}; "
        f"records: {summary['records']}; status: {summary['status']}"
    )


def exit_code(summary: dict[str, Any]) -> int:
    return 0 if all(q["status"] in OK_STATUSES for q in summary["queries"]) else 1


def run(spec: Path, base_url: str | None, budget: int | None, output: Path | None) -> None:
    summary = run_job(spec, base_url, budget, output)
    target = output or Path(load_spec(spec).output)
    print_summary(summary, target)
    raise typer.Exit(exit_code(summary))


def demo(output: Path | None) -> None:
    summary = run_job(DEMO_SPEC, "sandbox", None, output)
    target = output or Path(load_spec(DEMO_SPEC).output)
    print_summary(summary, target)
    db = target / "harvest.duckdb"
    out.print("\n[bold]Query it[/bold] (DuckDB SQL, read-only):")
    out.print(
        f'  {harvest_command()} sql {target} "SELECT caption, play_count, digg_count FROM short_video_videos '
        f'ORDER BY play_count DESC LIMIT 5"',
        highlight=False,
        soft_wrap=True,
    )
    out.print(
        f"  {_relative(Path(sys.executable))} -c \"import duckdb; print(duckdb.connect('{db}', read_only=True)"
        f".sql('SELECT query_id, status, pages, credits FROM query_state'))\"",
        highlight=False,
        soft_wrap=True,
    )
    out.print(
        f"  Parquet for a warehouse: {target / 'parquet'}/<table>/date=YYYY-MM-DD/*.parquet", highlight=False
    )
    raise typer.Exit(exit_code(summary))


def load(output: Path) -> None:
    from flows.load import load_manifest_into_duckdb, pending_manifests
    from tasks.duckdb_load import DatabaseBusy

    layout = OutputLayout(output)
    pending = pending_manifests(layout)
    if not pending:
        out.print(f"nothing to load in {output}: every run is already in {layout.db}")
        return
    for manifest in pending:
        try:
            tables = load_manifest_into_duckdb(layout, manifest)
        except DatabaseBusy as exc:
            raise fail(str(exc), 1) from None
        out.print(f"loaded run {manifest.run_id}: {sum(tables.values())} rows in {len(tables)} tables")


def runs(output: Path) -> None:
    from flows.load import all_manifests

    manifests = all_manifests(OutputLayout(output))
    if not manifests:
        raise fail(f"no runs found under {output}", 1)
    table = Table(title=f"runs in {output}")
    for name in ("run id", "job", "started", "status", "credits", "records", "loaded", "service"):
        table.add_column(name, justify="right" if name in ("credits", "records") else "left")
    for m in manifests:
        table.add_row(
            m.run_id, m.job, m.started[:19], m.status, f"{m.credits_spent}/{m.budget}", str(m.records),
            "yes" if m.loaded else "no", m.service,
        )  # fmt: skip
    out.print(table)


def sql(output: Path, query: str, limit: int = 200, fmt: str = "table") -> None:
    """One read statement; refused statements exit 2, queries DuckDB cannot run exit 1."""
    from flows.sql_command import QueryFailed, sql_command

    try:
        sql_command(output, query, limit, fmt)
    except UsageError as exc:
        raise fail(str(exc)) from None
    except QueryFailed as exc:
        raise fail(str(exc), exc.exit_code) from None
