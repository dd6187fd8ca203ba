"""The `harvest` command line. Commands that run no flow (validate, plan, endpoints, schema, runs) import no
Prefect, so they answer in about a second: Prefect and the flow are imported by the commands that need them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import typer
from typer.models import CommandFunctionType

from harvest.connectors.credits import MAX_CREDITS
from harvest.flows import stop_signals
from harvest.flows.cli_errors import Failed, handled
from harvest.flows.help_text import NamedArguments, paragraphs
from harvest.flows.orchestrator.prefect_settings import SERVER_START
from harvest.sandbox import drift_shapes

if TYPE_CHECKING:
    from harvest.flows.spec import JobSpec


class _Harvest(typer.Typer):
    """Every command's body runs with SIGTERM and SIGHUP as Ctrl-C (`flows.stop_signals`) and ends with
    harvest's errors said and made exit codes in one place (`flows.cli_errors`); its help is its docstring,
    wrapped between words at the terminal's width."""

    def command(self, *args: Any, **kwargs: Any) -> Callable[[CommandFunctionType], CommandFunctionType]:
        def registered(function: CommandFunctionType) -> CommandFunctionType:
            text = kwargs.get("help") or function.__doc__ or ""
            options = {"cls": NamedArguments, **kwargs, "help": paragraphs(text)}
            register = super(_Harvest, self).command(*args, **options)
            register(cast(CommandFunctionType, stop_signals.as_ctrl_c(handled(function))))
            return function  # called directly (tests), a command is the plain function

        return registered


app = _Harvest(
    name="harvest",
    help="Collect data from the retrieval service into Parquet and DuckDB, under a hard credit budget.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # an unforeseen error's traceback: a local may hold the key
)


REPLAY_HELP = (
    "Answer every request to PATH with FILE's bytes as they are (an answer recorded from the service, or its "
    "published sample); billed as usual; repeat for more paths."
)
CATALOG_HELP = "Also serve the endpoints a catalog file declares (docs/declaring-endpoints.md); repeatable."


@app.command(
    epilog="Example: harvest sandbox --port 8765 --api-key demo-key --credits 1000 --fault-rate 0.1 --seed 7\n\n"
    "Benchmark scale: harvest sandbox --pages 200 200 --page-size 100 --credits 1000000\n\n"
    "A job's declared endpoints too: harvest sandbox --spec my-job.yaml\n\n"
    "A service change: harvest sandbox --drift renamed-list. Shapes (--drift NAME, repeat to combine):\n\n"
    + drift_shapes.described().replace("\n", "\n\n")
)
def sandbox(
    port: int = typer.Option(8765, help="Port on 127.0.0.1 to serve on."),
    api_key: str = typer.Option("sandbox-key", help="The API key the sandbox accepts."),
    credits: int = typer.Option(1000, help="Starting credit balance of that key."),
    fault_rate: float = typer.Option(0.0, help="Share of requests answered with an injected fault (0..1)."),
    seed: int = typer.Option(0, help="Seed of the fault schedule and of the synthetic data."),
    pages: tuple[int, int] = typer.Option((1, 4), help="Min and max pages of a paged query."),
    page_size: int = typer.Option(10, help="Records per full page (group posts stay at 3)."),
    quirks: bool = typer.Option(
        True,
        "--quirks/--no-quirks",
        help="The real service's awkward behaviours (ignored unknown parameters, ...).",
    ),
    fault_kinds: str = typer.Option(
        "rate_limit,server_error,unavailable,slow,drop,truncated,malformed,cut",
        help="Comma-separated fault kinds the random schedule picks from.",
    ),
    rate: float = typer.Option(
        0.0, help="Data requests a second the sandbox accepts; past it, 429 with Retry-After (0: no limit)."
    ),
    slow_seconds: float = typer.Option(2.0, help="Delay of a `slow` fault."),
    retry_after: str = typer.Option("1", help="Retry-After header of a 429 fault, in seconds."),
    cache_pages: bool = typer.Option(False, "--cache-pages", help="Serve repeated pages from memory."),
    latency: float = typer.Option(
        0.0, help="Seconds added to every data answer, as a real service takes its time (not the balance)."
    ),
    drift: list[str] = typer.Option(
        [],
        "--drift",
        metavar="NAME",
        help="Serve answers changed in shape (listed below); repeat to combine.",
    ),
    replay: list[str] = typer.Option([], "--replay", metavar="PATH=FILE", help=REPLAY_HELP),
    catalog: list[Path] = typer.Option([], "--catalog", metavar="FILE", help=CATALOG_HELP),
    spec: Path | None = typer.Option(None, "--spec", help="Also serve the endpoints a job spec declares."),
) -> None:
    """Serve the local emulation of the service on 127.0.0.1 until interrupted."""
    options = {k: v for k, v in locals().items() if k not in ("drift", "replay", "catalog", "spec")}
    from harvest.flows.commands.sandbox_serve import serve_sandbox
    from harvest.flows.spec import UsageError

    try:
        serve_sandbox((drift, replay, catalog, spec), **options)  # every other option is the sandbox's own
    except UsageError as exc:  # a declaration's problems, each starting with its file and line
        raise Failed(str(exc), plain=True) from None


# ------------------------------------------------------------------------------------- spec commands
SPEC_ARG = typer.Argument(..., help="Path of the YAML job spec.", show_default=False, metavar="SPEC")


def _load(path: Path) -> JobSpec:
    """The validated spec, or exit 2 with every problem on stderr (nothing is sent or spent)."""
    from harvest.connectors.plurals import counted
    from harvest.flows.console import note
    from harvest.flows.spec import SpecError, load_spec

    try:
        job = load_spec(path)
    except SpecError as exc:  # said as it is: each problem starts with the file and line it names
        problems = counted(len(exc.problems), "problem")
        raise Failed(f"{exc}\n{problems} in {path}; nothing was sent.", plain=True) from None
    for warning in job.replaced_params():
        note(warning)
    return job


@app.command(epilog="Example: harvest validate configs/examples/brand-watch.yaml")
def validate(spec: Path = SPEC_ARG) -> None:
    """Check a job spec completely (keys, endpoints, parameters, fan-out, parents); exit 2 when invalid."""
    import os

    from harvest.connectors.plurals import counted
    from harvest.flows.console import note, prose
    from harvest.flows.run.plan import plan
    from harvest.flows.spec import BASE_URL_ENV

    job = _load(spec)
    fanned = sum(1 for q in job.queries if q.static)
    dependent = sum(1 for q in job.queries if q.dependent)
    prose(f"ok: {counted(len(job.queries), 'query')} ({fanned} fanned out, {dependent} dependent)")
    expanded = len(plan(job).queries)
    more = ", plus the dependent ones per parent record" if dependent else ""
    prose(f"{counted(expanded, 'query')} to run after fan-out{more}")
    if not job.service.base_url and not os.environ.get(BASE_URL_ENV):
        note(
            f"note: no service URL in the spec; `harvest run` needs {BASE_URL_ENV} or --base-url "
            "(or `service.base_url: sandbox` for synthetic data)"
        )


@app.command(
    "plan",
    epilog="Example: harvest plan configs/examples/creative-research.yaml --budget 200\n\n"
    "In a script or before a nightly run: harvest plan nightly.yaml --check || exit",
)
def plan_command(
    spec: Path = SPEC_ARG,
    budget: int | None = typer.Option(
        None, min=1, max=MAX_CREDITS, help="Price against this budget instead of the spec's."
    ),
    output: Path | None = typer.Option(
        None, "--output", help="The job's output directory, whose last nights the plan learns from."
    ),
    check: bool = typer.Option(
        False, "--check", help="Exit 3 when the budget does not cover the worst case."
    ),
    check_expected: bool = typer.Option(
        False, "--check-expected", help="Exit 3 when the budget does not cover the expected case."
    ),
) -> None:
    """Show the queries a run would execute, their expected and worst-case credits against the budget, and which
    queries the budget would leave unstarted if the worst case happens; sends no request."""
    from harvest.flows.commands.plan_report import show_plan

    code = show_plan(_load(spec), budget, output, check, check_expected)
    if code:
        raise typer.Exit(3)


DECLARING_SPEC = typer.Option(None, "--spec", help="With the endpoints this job spec declares.")


@app.command(epilog="Example: harvest endpoints video comments")
def endpoints(
    words: list[str] = typer.Argument(None, help="Only the ones holding every word.", metavar="WORD"),
    as_json: bool = typer.Option(False, "--json", help="Print JSON for machines instead of text."),
    spec: Path | None = DECLARING_SPEC,
    markdown: Path | None = typer.Option(None, metavar="DIR", help="Write docs/endpoints/ into DIR."),
) -> None:
    """List the endpoints by platform; WORDs keep those whose path, summary, parameter or table names hold all."""
    from harvest.flows.commands.endpoint_list import show_endpoints

    raise typer.Exit(show_endpoints(as_json, _load(spec).catalog() if spec else None, words, markdown))


@app.command(epilog="Example: harvest schema > jobspec.schema.json")
def schema(
    tables: bool = typer.Option(False, "--tables", help="Print the tables as Markdown (docs/tables.md)."),
    spec: Path | None = DECLARING_SPEC,
) -> None:
    """Print the JSON Schema of a job spec (for editors that validate YAML as you type)."""
    if tables:
        from harvest.flows.commands.tables_doc import render_tables

        typer.echo(render_tables(_load(spec).catalog() if spec else None), nl=False)
        return
    from harvest.flows.spec import JobSpec

    typer.echo(json.dumps(JobSpec.model_json_schema(), indent=2))


OUTPUT_ARG = typer.Argument(
    ..., help="The job's output directory (holds harvest.duckdb, parquet/ and raw/).", metavar="OUTPUT"
)


@app.command(
    epilog="Example: HARVEST_API_KEY=... harvest run configs/examples/brand-watch.yaml "
    "--base-url https://api.example --budget 200",
)
def run(
    spec: Path = SPEC_ARG,
    base_url: str | None = typer.Option(
        None, "--base-url", help="Service URL (or `sandbox`); beats the spec."
    ),
    budget: int | None = typer.Option(
        None, "--budget", min=1, max=MAX_CREDITS, help="Credit cap for this run; beats the spec."
    ),
    output: Path | None = typer.Option(None, "--output", help="Output directory; beats the spec."),
    fresh: bool = typer.Option(
        False,
        "--fresh",
        help="Abandon an unfinished run of the job (what it paid for landed and loaded first); start anew.",
    ),
    continue_: bool = typer.Option(
        False,
        "--continue",
        help="A new run that picks up the queries earlier runs stopped (budget, refused key) at their cursors.",
    ),
    full: bool = typer.Option(False, "--full", help="Incremental queries page fully this once."),
) -> None:
    """Run a job: collect every query within the budget, land Parquet, load DuckDB.

    An unfinished run of the job in the output directory (killed, Ctrl-C) is resumed: queries that ended are
    not repeated, the others go on from their last paid page. Exit codes: 0 every query ended normally or
    stopped at its budget; 1 a query failed (or the account could not pay); 2 invalid spec or usage (or the job is already running);
    3 the budget left queries unstarted and the spec asks to say so (budget.unstarted_exit_code); 75 stopped by
    this machine (a full disk) or Prefect's API did not answer: try again later; 130 interrupted (run it again
    to resume)."""
    from harvest.flows.commands import run_job as commands

    if fresh and continue_:
        raise typer.BadParameter("--fresh and --continue exclude each other")
    mode = "fresh" if fresh else "continue" if continue_ else "auto"
    commands.run(spec, base_url, budget, output, mode, full)


@app.command(
    epilog="Example: PREFECT_API_URL=http://127.0.0.1:4200/api harvest serve configs/\n\n"
    f"Needs a running `{SERVER_START}`; stop with Ctrl-C (the schedules pause until served again)."
)
def serve(
    specs: list[Path] = typer.Argument(
        ..., help="Job spec files, or directories of them (*.yaml).", metavar="SPEC"
    ),
    base_url: str | None = typer.Option(
        None, "--base-url", help="Service URL for every job (or `sandbox`); beats the specs."
    ),
) -> None:
    """Deploy each job to Prefect with its spec's schedule, and run the deployments' runs until stopped.

    One deployment per job (collect_job/<name>), carrying the spec's content and its absolute output
    directory; runs of one job never overlap (concurrency limit 1, queued).
    """
    from harvest.flows.commands import run_job as commands

    commands.serve(specs, base_url)


@app.command(epilog="Example: harvest demo")
def demo(
    output: Path | None = typer.Option(None, "--output", help="Where to land the demo (default data/demo)."),
) -> None:
    """Run the demo job (every endpoint of the catalog) against the embedded sandbox, then show what landed."""
    from harvest.flows.commands import run_job as commands

    commands.demo(output)


@app.command(epilog="Example: harvest load data/brand-watch")
def load(output: Path = OUTPUT_ARG) -> None:
    """Load every run whose data landed but is not in DuckDB (DuckDB was busy, the load was cut off, Ctrl-C);
    idempotent: loading twice changes nothing."""
    from harvest.flows.commands import runs as run_commands

    run_commands.load(output)


@app.command(epilog="Example: harvest runs data/demo")
def runs(
    output: Path = typer.Argument(Path("data/demo"), help="The job's output directory.", metavar="OUTPUT"),
) -> None:
    """History of the runs in an output directory: status, credits, records."""
    from harvest.flows.commands import runs as run_commands

    run_commands.runs(output)


@app.command(epilog="Example: harvest rebuild data/brand-watch --spec configs/examples/brand-watch.yaml")
def rebuild(
    output: Path = OUTPUT_ARG,
    run: str | None = typer.Option(
        None, "--run", help="Land only this run's raw pages again (default: every run)."
    ),
    spec: Path | None = typer.Option(
        None,
        "--spec",
        help="Read the pages with this job spec's `shapes` (default: each run's own, as it was read).",
    ),
) -> None:
    """Derive Parquet and DuckDB again from the stored raw pages, without a single request.

    How a catalog fix or a spec's `shapes` (a new column, a changed type, a shape the service changed to)
    reaches old data, and how a lost harvest.duckdb or parquet/ comes back. The database is always rebuilt from
    every finished run.
    """
    from harvest.flows.commands import warehouse

    warehouse.rebuild(output, run, None if spec is None else _load(spec))


@app.command(epilog="Example: harvest raw data/brand-watch --query videos | head -1")
def raw(
    output: Path = OUTPUT_ARG,
    run: str | None = typer.Option(None, "--run", help="Only this run's pages (default: every run)."),
    query: str | None = typer.Option(None, "--query", help="Only this query id's pages."),
) -> None:
    """Print the stored raw pages as JSON lines: query, page, cursors, status, credits and body. No request."""
    from harvest.flows.commands import warehouse

    warehouse.raw(output, run, query)


@app.command(
    epilog="Example: AWS_ENDPOINT_URL=http://127.0.0.1:9000 harvest export data/brand-watch --to s3://lake/brand-watch"
)
def export(
    output: Path = OUTPUT_ARG,
    to: str = typer.Option(
        ..., "--to", help="Destination: a directory, s3://bucket/prefix, gs://bucket/prefix."
    ),
    snapshot: bool = typer.Option(
        False, "--snapshot", help="Export the merged tables as they are now instead of the new runs' files."
    ),
    format: str = typer.Option(
        "parquet",
        "--format",
        help="parquet: the new runs' files and a manifest; iceberg or delta: one table per record kind, "
        "merged on the primary key.",
    ),
) -> None:
    """Hand the runs not exported to a destination yet to a warehouse's storage, as files or as tables.

    parquet (default) copies the landed files, then writes _exports/<id>/_manifest.json (keys, rows, schemas,
    run ids, primary keys) and last _SUCCESS. iceberg and delta merge them into one table per record kind (and
    runs, query_state), newest fetch per key, one commit per table. Credentials come from the standard
    variables (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL, ...).
    """
    from harvest.flows.commands import warehouse

    warehouse.export(output, to, snapshot, format)


@app.command(
    epilog='Example: harvest sql data/demo "SELECT count(*) FROM forum_posts"\n\n'
    'For scripts: harvest sql data/demo "FROM runs" --format csv --limit 0 > runs.csv'
)
def sql(
    output: Path = OUTPUT_ARG,
    query: str = typer.Argument(
        ..., help="One read-only DuckDB statement (SELECT, DESCRIBE, SHOW, ...).", metavar="QUERY"
    ),
    limit: int = typer.Option(200, "--limit", min=0, help="Rows to show; 0 shows all. Cut rows are counted."),
    fmt: str = typer.Option(
        "table", "--format", help="table (for people), csv or json (for scripts: data only on stdout)."
    ),
) -> None:
    """Run one read-only SQL statement on a job's tables and Parquet; writes and other files are refused (exit 2)."""
    from harvest.flows.commands.sql import sql_command

    sql_command(output, query, limit, fmt)


if __name__ == "__main__":
    app()
