"""`harvest run`, `demo`, `serve` and `sql`: the commands that collect or read landed data (`load` and `runs`:
`flows.commands.runs`).

Only `run` and `demo` start Prefect; they start its temporary server and import it only after the spec, the
service URL, the output directory and the key have been checked, so that bad input is refused in about a
second, before anything is started or spent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import typer
from rich.text import Text

from harvest.configs import spec_path
from harvest.connectors.errors import MissingApiKey
from harvest.flows import console, stop_signals
from harvest.flows.cli_errors import Failed, refused_write, with_mend
from harvest.flows.commands import quick_exit
from harvest.flows.console import harvest_line, note, runnable
from harvest.flows.run.run_again import RunAgain
from harvest.flows.spec import JobSpec, UsageError, load_spec, resolve_base_url
from harvest.flows.stop_signals import INTERRUPTED, interrupts, signal_name
from harvest.tasks.output.layout import OutputLayout

if TYPE_CHECKING:
    from harvest.flows.run.interrupt import RunMarks
    from harvest.flows.run.start import Mode
    from harvest.tasks.output.run_summary import NoRun, RunSummary

DEMO_SPEC = spec_path("demo.yaml")
EX_TEMPFAIL = 75
"""Try again later (sysexits.h): Prefect's API did not answer and the run did not start."""


out, err = console.out, console.err


def preflight(spec_path: Path, base_url: str | None, output: Path | None = None) -> tuple[JobSpec, str, Any]:
    """Everything that can be refused without starting Prefect or sending a request (exit 2); the spec, parsed
    once for the whole run (the flow gets it with the lock, `flows.run.start.Prepared`), its service URL, and what
    `check_service` needs of the service (None for the embedded sandbox)."""
    from harvest.flows.orchestrator.prefect_outage import start_wait_seconds
    from harvest.flows.run.preflight import check_output_dir, declared_by

    start_wait_seconds()  # refused here, not only once Prefect's API failed to answer
    spec = load_spec(spec_path)
    for warning in spec.replaced_params():
        note(warning)
    resolved = resolve_base_url(spec, base_url)
    check_output_dir(
        output or spec.output, spec.min_free_mb, spec.catalog().kinds(), declared_by(spec, spec_path)
    )
    if resolved == "sandbox":
        return spec, resolved, None
    from harvest.connectors.http.auth import load_api_key
    from harvest.flows.spec.key_in_spec import refuse_key_in

    service = spec.service
    key = load_api_key(
        env_var=service.api_key_env, secret_block=service.api_key_secret, places=spec.key_places()
    )
    refuse_key_in(spec_path, resolved, key, spec.catalogs)
    return spec, resolved, (resolved, key, key.source)


def service_answers(service: Any, layout: OutputLayout, job: str) -> None:
    """The service answers as the service does and accepts the key (`flows.run.preflight.check_service`):
    after the lock (a second run of the job is refused without a request), before Prefect starts."""
    if service is None:
        return
    from harvest.flows.run.preflight import answered_before, check_service
    from harvest.flows.run.service_access import service_label

    url, key, source = service
    check_service(url, key, source, lambda: answered_before(layout, job, service_label(url)))


def _decide(spec: JobSpec, layout: OutputLayout, service_url: str, mode: str, again: RunAgain) -> Any:
    """How the run starts (`flows.run.start.decide`, which the flow then takes as it is): decided while
    Prefect's server boots, under the lock; refused (`--continue` with an unfinished run, a resume after the
    queries or the service changed: exit 2) before anything is sent."""
    from harvest.flows.run.service_access import service_label
    from harvest.flows.run.start import decide

    return decide(spec, layout, service_label(service_url), cast("Mode", mode), again)


def _start_prefect_server() -> Any:
    """Prefect's temporary server, when no Prefect API is configured (`flows.orchestrator.temporary_server`): started after
    every check (they take milliseconds), so refused input starts nothing, and before Prefect is imported, so
    it boots while harvest imports (~1.5 s of its ~3.5 s)."""
    from harvest.flows.orchestrator.temporary_server import start_if_needed

    try:
        return start_if_needed()
    except Exception as exc:  # e.g. the interpreter could not be spawned: one line, not a traceback
        raise Failed(f"Prefect's temporary server did not start: {type(exc).__name__}: {exc}", 1) from None


@dataclass
class _Begun:
    """What `harvest run` holds once its checks passed and Prefect's server is starting."""

    job: str
    layout: OutputLayout
    lock: Any
    prepared: Any
    """What the flow is handed (`flows.run.start.Prepared`): the spec, the output, the lock, the start."""
    server: Any
    before: RunMarks
    """Each run's marks before this one started: which run a later interrupt touched."""
    again: RunAgain
    """How to run it again, as printed for pasting."""


def _begin(
    spec_path: Path, base_url: str | None, output: Path | None, mode: str, budget: int | None, full: bool
) -> _Begun:
    """The checks, the job's lock, Prefect's start and the run's start decided. A signal meanwhile (Ctrl-C, or
    SIGTERM and SIGHUP as Ctrl-C: `flows.stop_signals`) comes before the run exists: one line, exit 130, the lock
    let go; refused (exit 2: `flows.cli_errors`), the lock let go too."""
    from harvest.flows.run.preflight import lock_job

    lock, server = None, None
    try:
        spec, service_url, service = preflight(spec_path, base_url, output)
        again = RunAgain.of(spec_path, spec, service_url, output, budget, full)
        job, layout = spec.name, OutputLayout(output or spec.output)
        lock = lock_job(layout, job)  # before Prefect starts: a second run is refused at once
        service_answers(service, layout, job)
        server = _start_prefect_server()  # boots while harvest imports; killed on any exit
        start = _decide(spec, layout, service_url, mode, again)
        if start.kind == "resume":  # its commands keep the night's budget, given to an earlier session
            again = again.resuming(start.run.budget, spec.budget.credits)
            lock.holds(start.run, resumed=True)  # a second run refused while Prefect starts names it
        from harvest.flows.run.interrupt import run_marks
        from harvest.flows.run.start import Prepared

        prepared = Prepared(spec, layout, lock, start)
        return _Begun(job, layout, lock, prepared, server, run_marks(layout, job), again)
    except KeyboardInterrupt:
        _let_go(lock, server)
        nothing = f"interrupted by {signal_name()} before the run started: nothing was sent"
        raise Failed(nothing, INTERRUPTED) from None
    except BaseException:
        _let_go(lock, server)
        raise


def _let_go(lock: Any, server: Any) -> None:
    """A run refused or interrupted before it started: its lock released, Prefect's server stopped."""
    if lock is not None:
        lock.release()
    if server is not None:
        server.stop()


def _prefect_ready(server: Any) -> None:
    """Prefect answers before the run starts: the temporary server once booted; a configured API within
    `prefect_outage.START_WAIT_SECONDS` (a restart), else the run is refused before anything is sent (exit 75:
    try again later). Also folds Prefect's client errors into one line each from here on."""
    from harvest.flows.orchestrator import prefect_outage

    prefect_outage.install(cli=True)
    if server is not None:
        server.wait_ready(float(os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"]))
        return
    why = asyncio.run(prefect_outage.api_away())
    if why is None:
        return
    stop_signals.lost_on_its_way()  # a signal lost in `import prefect`: stopped now, not after the wait
    seconds = prefect_outage.start_wait_seconds()
    console.warning(
        f"Prefect's API at {_api_url()} does not answer ({why}); waiting up to {seconds:g} s before the run "
        f"starts ({prefect_outage.START_WAIT_ENV}), nothing is sent meanwhile"
    )
    why = asyncio.run(prefect_outage.wait_for_api(seconds))
    if why is not None:
        raise _prefect_away(why)


def _api_url() -> str:
    from prefect.settings import PREFECT_API_URL

    return str(PREFECT_API_URL.value())


def _prefect_away(why: str) -> Failed:
    return Failed(
        f"Prefect's API at {_api_url()} did not answer ({why}): the run did not start, nothing was sent to the "
        "service or paid; run it again once Prefect answers (without PREFECT_API_URL, harvest runs on a "
        "temporary Prefect server of its own)",
        EX_TEMPFAIL,
    )


def _broken(exc: Exception) -> Failed:
    """The run broke outside its data: Prefect's API failing before the flow's body began (creating the flow
    run) refused it before anything was paid (exit 75), as does a write this machine could not make (a full
    disk) that escaped the run's own handling; anything else is a failed run (exit 1)."""
    from harvest.flows.orchestrator.prefect_outage import NotStarted

    if isinstance(exc, NotStarted):
        return _prefect_away(str(exc))
    if (said := refused_write(exc, "the run stopped: ")) is not None:  # a write no step made the run's stop
        return said
    if (mended := with_mend(exc)) is not None:  # what landed stays; the command it names mends the rest
        return Failed(f"the run failed: {mended}", 1)
    return Failed(f"the run failed: {type(exc).__name__}: {exc}", 1)


def _interrupted(begun: _Begun, how: str = "") -> Failed:
    """A signal outside the flow body: one true line on what the run left and how to go on (exit 130)."""
    from harvest.flows.run.interrupt import interrupted_outside_the_flow

    load = harvest_line("load", begun.layout.root)
    said = interrupted_outside_the_flow(begun.layout, begun.job, begun.before, begun.again.command(), load)
    return Failed(said + how, INTERRUPTED)


def run_job(
    spec_path: Path,
    base_url: str | None,
    budget: int | None,
    output: Path | None,
    mode: str = "auto",
    full: bool = False,
) -> tuple[RunSummary | NoRun, OutputLayout, RunAgain]:
    """The run's summary, where it landed, and how to run it again."""
    from harvest.flows.orchestrator import prefect_settings

    started = time.monotonic()
    prefect_settings.apply_prefect_defaults()
    prefect_settings.harvest_warnings_as_lines()
    stamina_back = _quiet_stamina()
    try:
        begun = _begin(spec_path, base_url, output, mode, budget, full)
    except BaseException:
        stamina_back()
        raise
    layout = begun.layout
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")  # harvest shows its own progress
    from harvest.flows.run import progress

    reporter = progress.for_terminal()
    progress.install(reporter)
    try:
        from harvest.flows.collect import run_collect  # imports Prefect (a second or two)
        from harvest.tasks.output.run_summary import NoRun

        prefect_settings.quiet_prefect_echoes()  # harvest prints the outcome and each failed query's reason itself
        _prefect_ready(begun.server)
        coro = run_collect(
            spec_path=str(spec_path),
            base_url=base_url,
            budget=budget,
            mode=mode,
            full=full,
            prepared=begun.prepared,
        )
        summary = asyncio.run(coro)
        if not isinstance(summary, NoRun):
            summary.seconds["total"] = round(time.monotonic() - started, 2)
    except interrupts():  # Ctrl-C, SIGTERM or SIGHUP outside the flow body (Prefect's start or report)
        raise _interrupted(begun) from None
    except (Failed, UsageError, MissingApiKey):  # refused: said by `flows.cli_errors`
        raise
    except Exception as exc:  # the run itself broke: say what, without a traceback; landed data stays
        if stop_signals.came_as_another_error(exc):
            # the signal's interrupt, turned into a library's own error on its way out (raised inside a
            # pydantic callback, it comes out as PydanticSerializationError): the run was stopped, not broken
            raise _interrupted(begun, f" ({type(exc).__name__} on its way out)") from None
        raise _broken(exc) from None
    finally:
        reporter.close()
        stamina_back()
        begun.lock.release()
    return summary, layout, begun.again


def _quiet_stamina() -> Callable[[], None]:
    """stamina logs a bare "retry_scheduled" per retry, the balance check's own too (a 503 before the run); every
    attempt is in the `requests` table instead. Returns what sets its level back."""
    stamina_log = logging.getLogger("stamina")
    level = stamina_log.level
    stamina_log.setLevel(logging.ERROR)
    return lambda: stamina_log.setLevel(level)


def run(
    spec: Path,
    base_url: str | None,
    budget: int | None,
    output: Path | None,
    mode: str = "auto",
    full: bool = False,
) -> None:
    with quick_exit.on_exit():  # ends the process without finalizing the interpreter (~0.6 s)
        summary, layout, again = run_job(spec, base_url, budget, output, mode, full)
        from harvest.flows.commands.run_report import report  # after: a refused run imports no HTTP client

        code = report(summary, again, output or layout.root)
        if getattr(summary, "prefect_untold", None):
            quick_exit.leave_now(code)  # Prefect's queues would wait for an API that does not answer
        raise typer.Exit(code)


def demo(output: Path | None) -> None:
    with quick_exit.on_exit():
        _demo(output)


def _demo(output: Path | None) -> None:
    summary, layout, again = run_job(DEMO_SPEC, "sandbox", None, output)
    from harvest.flows.commands.run_report import report

    target = output or layout.root
    code = report(summary, again, target, by_platform=True)  # every endpoint: a row per platform
    db = target / "harvest.duckdb"
    out.print()
    out.print(Text("Query it", style="bold") + Text(" (DuckDB SQL, read-only):"))
    top = """
      SELECT caption, play_count, like_count FROM short_video_videos
      ORDER BY play_count DESC LIMIT 5"""  # on lines of their own: a terminal of 80 columns cuts none of them
    console.say(f"  {harvest_line('sql', target, top)}")
    out.print(
        Text("Every table", style="bold") + Text(" and its rows (`harvest schema --tables` describes them):")
    )
    tables = """
      SELECT table_name, estimated_size AS row_count
      FROM duckdb_tables() WHERE schema_name = current_schema()
      ORDER BY table_name"""  # no quote inside: the shell's single quotes around it stay readable
    console.say(f"  {harvest_line('sql', target, tables, '--limit', 0)}")
    out.print(Text("From Python", style="bold") + Text(" (the duckdb package, read-only):"))
    python = (  # Python's lines at the margin, as `-c` wants them; double quotes inside the shell's single ones
        f"import duckdb\ndb = duckdb.connect({json.dumps(str(db))}, read_only=True)\n"
        'print(db.sql("SELECT query_id, status, pages, credits FROM query_state"))'
    )
    console.say(f"  {runnable(Path(sys.executable))} -c {shlex.quote(python)}")
    export = harvest_line("export", target, "--to", "DIR")  # a loader goes by its manifests (docs/handoff.md)
    console.prose(
        f"For a warehouse: {export} sends the runs not sent there yet, with a manifest of the new files"
    )
    raise typer.Exit(code)


def serve(paths: list[Path], base_url: str | None) -> None:
    from harvest.flows.orchestrator import prefect_outage
    from harvest.flows.orchestrator.deployments import serve as serve_jobs
    from harvest.flows.orchestrator.prefect_settings import apply_prefect_defaults

    apply_prefect_defaults()
    prefect_outage.install(whole_process=True)  # every Prefect line of this process is a served job's
    how = ""
    try:
        serve_jobs(paths, base_url)  # until stopped: Ctrl-C, SIGTERM or SIGHUP (`flows.stop_signals`)
    except interrupts():
        pass
    except Exception as exc:
        if not stop_signals.came_as_another_error(exc):
            raise
        how = f" ({type(exc).__name__} on its way out)"  # stopped as asked, not broken: exit 0, no traceback
    err.print(f"stopped serving{how}; the deployments' schedules are paused until `harvest serve` runs again")
