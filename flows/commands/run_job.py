"""`harvest run`, `demo`, `serve` and `sql`: the commands that collect or read landed data (`load` and `runs`:
`flows.commands.runs`).

Only `run` and `demo` start Prefect; they start its temporary server and import it only after the spec, the
service URL, the output directory and the key have been checked, so that bad input is refused in about a
second, before anything is started or spent.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import typer
from rich.text import Text

from configs import spec_path
from connectors.errors import MissingApiKey
from flows import console
from flows.commands import quick_exit
from flows.spec import SpecError, UsageError, load_spec, resolve_base_url
from tasks.output.layout import OutputLayout

DEMO_SPEC = spec_path("demo.yaml")


out, err = console.out, console.err


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
    from flows.run.preflight import check_output_dir

    try:
        spec = load_spec(spec_path)
        resolved = resolve_base_url(spec, base_url)
        check_output_dir(output or spec.output, spec.min_free_mb)
        if resolved != "sandbox":
            from connectors.http.auth import load_api_key

            load_api_key(env_var=spec.service.api_key_env, secret_block=spec.service.api_key_secret)
    except (SpecError, UsageError, MissingApiKey) as exc:
        raise fail(str(exc), getattr(exc, "exit_code", 2)) from None


def _hold_lock(layout: OutputLayout, job: str, spec_path: Path, output: Path | None, mode: str) -> Any:
    """Take the job's lock before Prefect starts, so a second run is refused at once (exit 2); so is
    `--continue` while the job has an unfinished run."""
    from tasks.output.job_lock import JobLocked, acquire

    try:
        lock = acquire(layout.lock_file(job))
    except JobLocked as exc:
        raise fail(str(exc)) from None
    except OSError as exc:  # preflight found the directory creatable; it changed since
        raise fail(f"output: cannot create {layout.lock_file(job)}: {exc.strerror or exc}") from None
    if mode != "continue":  # flows.run.start imports the connectors (~0.3 s): only `--continue` needs it here
        return lock
    from flows.run.start import continue_refused, unfinished_run

    unfinished = unfinished_run(layout, job)
    if unfinished is not None:
        lock.release()
        command = f"{harvest_command()} run {spec_path}" + (f" --output {output}" if output else "")
        raise fail(str(continue_refused(unfinished, command)))
    return lock


def _start_prefect_server(lock: Any) -> Any:
    """Prefect's temporary server, when no Prefect API is configured (`flows.orchestrator.temporary_server`): started after
    every check (they take milliseconds), so refused input starts nothing, and before Prefect is imported, so
    it boots while harvest imports (~1.5 s of its ~3.5 s). The lock is released when it cannot start."""
    from flows.orchestrator.temporary_server import start_if_needed

    try:
        return start_if_needed()
    except Exception as exc:  # e.g. the interpreter could not be spawned: one line, not a traceback
        lock.release()
        raise fail(f"Prefect's temporary server did not start: {type(exc).__name__}: {exc}", 1) from None
    except BaseException:
        lock.release()
        raise


def run_job(
    spec_path: Path,
    base_url: str | None,
    budget: int | None,
    output: Path | None,
    mode: str = "auto",
    full: bool = False,
) -> dict[str, Any]:
    from flows.orchestrator.prefect_settings import apply_prefect_defaults, quiet_prefect_echoes

    started = time.monotonic()
    apply_prefect_defaults()
    preflight(spec_path, base_url, output)
    checked = load_spec(spec_path)
    job, layout = checked.name, OutputLayout(output or checked.output)
    lock = _hold_lock(layout, job, spec_path, output, mode)
    server = _start_prefect_server(lock)  # boots while harvest imports; killed on any exit
    from flows.run.interrupt import interrupted_outside_the_flow, run_marks  # the connectors: after the start

    before = run_marks(layout, job)
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")  # harvest shows its own progress
    # stamina logs a bare "retry_scheduled" per retry; every attempt is in the `requests` table instead
    stamina_log = logging.getLogger("stamina")
    stamina_level = stamina_log.level
    stamina_log.setLevel(logging.ERROR)
    from flows.run import progress

    reporter = progress.for_terminal()
    progress.install(reporter)
    try:
        from flows.collect import run_collect  # imports Prefect (a second or two)

        quiet_prefect_echoes()  # harvest prints the outcome and each failed query's reason itself
        if server is not None:
            server.wait_ready(float(os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"]))
        coro = run_collect(
            spec_path=str(spec_path),
            base_url=base_url,
            budget=budget,
            output=str(output) if output else None,
            mode=mode,
            full=full,
        )
        summary: dict[str, Any] = asyncio.run(coro)
        summary.setdefault("seconds", {})["total"] = round(time.monotonic() - started, 2)
    except KeyboardInterrupt:
        resume = f"{harvest_command()} run {spec_path}"
        load = f"{harvest_command()} load {layout.root}"
        raise fail(interrupted_outside_the_flow(layout, job, before, resume, load), 130) from None
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
    from tasks.output.manifest import failure_groups, who

    lines = [f"{who(ids)}: {reason}" for ids, reason in failure_groups(summary["queries"])]
    if summary.get("error") and summary["status"] != "interrupted":  # the resume line says it
        lines.append(f"the run stopped: {summary['error']}")
    return lines


def _extraction_lines(summary: dict[str, Any]) -> list[str]:
    """What the pages held that did not land as typed values: said once per run, never silently."""
    from connectors.reading.extraction import ExtractionReport
    from connectors.reading.json_body import describe_repairs

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
    if total.repairs:
        lines.append(
            f"{sum(total.repairs.values())} values were repaired to read answers strict JSON refuses "
            f"({describe_repairs(total.repairs)}); the answers are kept as sent in the raw store"
        )
    if total.new_fields:
        shown = ", ".join(total.new_fields[:15]) + (", ..." if len(total.new_fields) > 15 else "")
        lines.append(f"new fields the catalog does not read yet (kept in `raw`): {shown}")
    return lines


def print_summary(summary: dict[str, Any], output: Path) -> None:
    from connectors.paging.pager import OK_STATUSES

    queries = console.table(
        "query", "status", "pages", "records", "credits",
        title=f"run {summary['run_id']} ({summary['service']})", right=("pages", "records", "credits"),
    )  # fmt: skip
    for q in sorted(summary["queries"], key=lambda q: q["query_id"]):
        status = console.literal(q["status"], "" if q["status"] in OK_STATUSES else "red")
        console.add_row(queries, q["query_id"], status, q["pages"], q["records"], q["credits"])
    out.print(queries)
    for line in _error_lines(summary):
        err.print(console.literal(line, "red"), soft_wrap=True)
    for line in _extraction_lines(summary):
        err.print(console.literal(line, "yellow"), soft_wrap=True)
    exported = summary.get("export")
    if exported and exported.get("error"):
        err.print(console.literal(f"export to {exported['to']}: {exported['error']}", "red"), soft_wrap=True)
    elif exported:
        out.print(console.literal(
            f"exported to {exported['to']} ({exported['kind']}): {exported['runs']} run(s), {exported['files']} files"
        ), soft_wrap=True)  # fmt: skip
    if summary.get("load_interrupted"):
        pass  # the next step says how it gets loaded
    elif summary["loaded"]:
        rows = console.table(
            "table", "rows", title=f"rows per table in {output / 'harvest.duckdb'}", right=("rows",)
        )
        for name, n in sorted(summary["tables"].items()):
            console.add_row(rows, name, n)
        out.print(rows)
    elif not summary.get("machine_fault"):  # then the next step says why and how it gets loaded
        console.warning(
            f"not loaded into DuckDB yet: run `{harvest_command()} load {output}` when it is free"
        )
    console.say(
        f"credits spent: {summary['credits_spent']} of a budget of {summary['budget']}; "
        f"records: {summary['records']}; status: {summary['status']}"
    )
    if timing := took(summary.get("seconds", {})):
        console.say(timing)
    if rate := rate_line(summary.get("rate_limit")):
        console.say(rate)
    billed = summary.get("service_billed")
    if billed is not None and billed != summary["credits_spent"]:
        console.say(
            f"the service's bill: the account's balance fell by {billed} credits during the run; harvest "
            f"counted {summary['credits_spent']} (harvest counts a request whose answer was lost as spent; "
            "another job on the same key also makes these differ)"
        )
    elif billed is None and summary.get("bill_unknown") and summary["credits_spent"]:
        console.say(
            f"the service's bill: unknown ({summary['bill_unknown']}); harvest counted {summary['credits_spent']}"
        )


def rate_line(met: dict[str, Any] | None) -> str | None:
    """What the run met of the service's rate limit, when it met one (or paced to a known one)."""
    if not met or (not met.get("refused") and not met.get("limit")):
        return None
    requests, refused, pace = met["requests"], met["refused"], met.get("per_second")
    share = f" ({100 * refused / requests:.1f}%)" if requests else ""
    line = f"rate limit: the service answered {refused} of {requests} requests with 429{share}"
    if pace is not None:
        line += f"; harvest paced to {pace:.1f} requests a second"
    return line + (f" (the spec's limit: {met['limit']:g})" if met.get("limit") else "")


def took(seconds: dict[str, float]) -> str | None:
    """Where a run's time went: a nightly job that got slower shows whether the service, the load, the export
    or the start-up (imports, Prefect, the run's setup and end) did."""
    if "total" not in seconds or "paging" not in seconds:
        return None
    total, paging, loading = seconds["total"], seconds["paging"], seconds.get("loading", 0.0)
    exporting = seconds.get("exporting")
    rest = max(0.0, total - paging - loading - (exporting or 0.0))
    return (
        f"took {total:.1f} s: {paging:.1f} s paging, {loading:.1f} s loading into DuckDB, "
        + (f"{exporting:.1f} s exporting, " if exporting is not None else "")
        + f"{rest:.1f} s starting and ending (imports, Prefect, the run's bookkeeping)"
    )


def _loaded_first(summary: dict[str, Any]) -> None:
    """One line for the earlier runs the run loaded into DuckDB before it started paying."""
    runs = summary.get("loaded_first") or []
    if runs:
        named = ", ".join(f"{r['run_id']} ({r['status']}, {r['rows']} rows)" for r in runs)
        console.note(
            f"loaded {len(runs)} earlier run(s) into DuckDB first, which had landed but were not loaded: {named}"
        )


def _next_step(summary: dict[str, Any], spec: Path, output: Path) -> str | None:
    """One line saying how to go on after a run that did not finish its work (or its load)."""
    cmd = f"{harvest_command()} run {spec}"
    if fault := summary.get("machine_fault"):
        pages = sum(int(q["pages"]) for q in summary["queries"])
        kept = f"the {pages} pages paid are kept"
        if summary["status"] == "interrupted":
            return f"stopped: {fault}. Nothing more was paid; {kept}. Fix it, then `{cmd}` resumes the run"
        return f"not loaded: {fault}. {kept.capitalize()}; fix it, then `{cmd}` loads the run before it pays"
    if summary["status"] == "interrupted":
        pages = sum(int(q["pages"]) for q in summary["queries"])
        return f"interrupted: run {summary['run_id']} stopped cleanly with {pages} pages landed; `{cmd}` resumes it"
    if summary.get("load_interrupted"):
        return (
            f"interrupted during the load: run {summary['run_id']} ended ({summary['status']}) and its data is in "
            f"Parquet; `{harvest_command()} load {output}` loads it into DuckDB"
        )
    stopped = [
        q for q in summary["queries"] if q["status"] in ("budget_exhausted", "rate_limited", "stopped")
    ]
    if stopped:
        return f"{len(stopped)} queries stopped with their cursors kept: `{cmd} --continue` picks them up"
    return None


def exit_code(summary: dict[str, Any]) -> int:
    from connectors.paging.pager import OK_STATUSES
    from flows.orchestrator.final_state import cut_short, failed_export
    from tasks.output.machine_fault import EXIT_CODE

    if summary.get("machine_fault"):
        return EXIT_CODE  # stopped by this machine (a full disk): try again once it is fixed
    if cut_short(summary):
        return 130
    if failed_export(summary):
        return 1
    return 0 if all(q["status"] in OK_STATUSES for q in summary["queries"]) else 1


def _report(summary: dict[str, Any], spec: Path, output: Path) -> int:
    _loaded_first(summary)
    if summary.get("status") == "nothing_to_continue":
        console.say(summary["message"])
        return 0
    if summary.get("status") == "not_started":
        console.error(
            f"{summary['message']}; once fixed, `{harvest_command()} run {spec}` loads them and runs"
        )
        return exit_code(summary)
    print_summary(summary, output)
    step = _next_step(summary, spec, output)
    if step:
        console.note(step)
    return exit_code(summary)


def run(
    spec: Path,
    base_url: str | None,
    budget: int | None,
    output: Path | None,
    mode: str = "auto",
    full: bool = False,
) -> None:
    with quick_exit.on_exit():  # ends the process without finalizing the interpreter (~0.6 s)
        summary = run_job(spec, base_url, budget, output, mode, full)
        target = output or Path(load_spec(spec).output)
        raise typer.Exit(_report(summary, spec, target))


def demo(output: Path | None) -> None:
    with quick_exit.on_exit():
        _demo(output)


def _demo(output: Path | None) -> None:
    summary = run_job(DEMO_SPEC, "sandbox", None, output)
    target = output or Path(load_spec(DEMO_SPEC).output)
    code = _report(summary, DEMO_SPEC, target)
    db = target / "harvest.duckdb"
    out.print()
    out.print(Text("Query it", style="bold") + Text(" (DuckDB SQL, read-only):"))
    console.say(
        f'  {harvest_command()} sql {target} "SELECT caption, play_count, digg_count FROM short_video_videos '
        f'ORDER BY play_count DESC LIMIT 5"'
    )
    console.say(
        f"  {_relative(Path(sys.executable))} -c \"import duckdb; print(duckdb.connect('{db}', read_only=True)"
        f".sql('SELECT query_id, status, pages, credits FROM query_state'))\""
    )
    console.say(f"  Parquet for a warehouse: {target / 'parquet'}/<table>/date=YYYY-MM-DD/*.parquet")
    raise typer.Exit(code)


def serve(paths: list[Path], base_url: str | None) -> None:
    from flows.orchestrator.deployments import serve as serve_jobs
    from flows.orchestrator.prefect_settings import apply_prefect_defaults

    apply_prefect_defaults()
    try:
        serve_jobs(paths, base_url)  # returns when stopped: prefect.serve handles Ctrl-C itself
    except (SpecError, UsageError, MissingApiKey) as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        pass
    err.print("stopped serving; the deployments' schedules are paused until `harvest serve` runs again")


def sql(output: Path, query: str, limit: int = 200, fmt: str = "table") -> None:
    """One read statement; refused statements exit 2, queries DuckDB cannot run exit 1."""
    from flows.commands.sql import QueryFailed, sql_command

    try:
        sql_command(output, query, limit, fmt)
    except UsageError as exc:
        raise fail(str(exc)) from None
    except QueryFailed as exc:
        raise fail(str(exc), exc.exit_code) from None
