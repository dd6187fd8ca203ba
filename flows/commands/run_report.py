"""What `harvest run` and `demo` print when a run ends, and the exit code that tells its outcome. Every line quotes
the service or the spec literally (`flows.console`): a reason with brackets in it is text, never markup. Each
distinct reason is said once, and a run that did not finish says how to go on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harvest.connectors.plurals import counted
from harvest.flows import console
from harvest.flows.commands.history_note import say_history
from harvest.flows.console import harvest_line
from harvest.flows.run.run_again import RunAgain
from harvest.tasks.output.manifest import lowered_budget
from harvest.tasks.output.run_summary import (
    NoRun,
    RunSummary,
    account_short,
    never_started,
    never_started_line,
    query_rows,
    unsendable,
    unsendable_line,
)

out, err = console.out, console.err


def _error_lines(summary: RunSummary) -> list[str]:
    """Why queries did not end well, each distinct reason once (30 queries stopped by one refused key: one line)."""
    from harvest.tasks.output.manifest import failure_groups, who

    lines = [f"{who(ids)}: {reason}" for ids, reason in failure_groups(summary.queries)]
    if summary.error and summary.status != "interrupted":  # the resume line says it
        lines.append(f"the run stopped: {summary.error}")
    return lines


def _extraction_lines(summary: RunSummary, output: Path) -> list[str]:
    """What the pages held that did not land as typed values: said once per run, never silently."""
    from harvest.connectors.reading.extraction import ExtractionReport
    from harvest.connectors.reading.json_body import describe_repairs

    total = ExtractionReport()
    for q in summary.queries:
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
    return (
        lines
        + _new_field_lines(total, output)
        + _left_out_lines(total)
        + _unread_cursor_lines(summary)
        + _empty_column_lines(summary)
    )


NEW_FIELDS_SHOWN = 15


def _new_field_lines(total: Any, output: Path) -> list[str]:
    """Fields the answers held that no column reads: how many, the first few, where the rest are, and how to leave
    one in `raw` on purpose. A table that kept none of its records (or lost some) comes first: its new fields
    may say why (a key renamed), so the cut never hides them behind a table that landed well."""
    tables = total.tables

    def urgency(name: str) -> tuple[int, str]:
        table = tables[name.split(".", 1)[0]]
        return (0 if not table.kept else 1 if table.kept < table.seen else 2), name

    fields = sorted(total.new_fields, key=urgency)
    if not fields:
        return []
    shown = ", ".join(fields[:NEW_FIELDS_SHOWN])
    if len(fields) > NEW_FIELDS_SHOWN:
        where = harvest_line("sql", output, "SELECT query_id, new_fields FROM query_state")
        shown += f", and {len(fields) - NEW_FIELDS_SHOWN} more (every query's: `{where}`)"
    return [
        f"{counted(len(fields), 'new field')} no column reads (kept in `raw`; a record kind's `ignore:` leaves "
        f"one there on purpose): {shown}"
    ]


def _left_out_lines(total: Any) -> list[str]:
    """Items a record kind's `where` left out: counted per table, with the first as an example."""
    said = [
        f"{name}: {table.dropped} (e.g. {table.dropped_example})"
        for name, table in sorted(total.tables.items())
        if table.dropped
    ]
    if not said:
        return []
    one = total.dropped == 1
    return [
        f"{counted(total.dropped, 'item')} the pages held did not match {'its' if one else 'their'} record "
        f"kind's `where` and {'was' if one else 'were'} left out (kept in the raw pages): " + "; ".join(said)
    ]


def _unread_cursor_lines(summary: RunSummary) -> list[str]:
    """Queries whose paging ended where the answer held a cursor the declaration does not read: a night that
    looks complete and stopped short, said once per endpoint and field."""
    from harvest.connectors.reading.unread_cursors import unread_cursor_words
    from harvest.tasks.output.manifest import who

    by_field: dict[tuple[str, str, str], list[str]] = {}
    for q in summary.queries:
        unread = (q.get("extraction") or {}).get("unread_cursor")
        if unread:
            key = (q["endpoint"], unread["field"], unread.get("param", ""))
            by_field.setdefault(key, []).append(q["query_id"])
    return [
        f"{who(ids)} ({endpoint}): {unread_cursor_words({'field': field, 'param': param})}"
        for (endpoint, field, param), ids in sorted(by_field.items())
    ]


def _empty_column_lines(summary: RunSummary) -> list[str]:
    """Columns that came empty while the records carried their values under other names: once per endpoint."""
    from harvest.connectors.reading.drift_message import empty_columns_message
    from harvest.connectors.reading.extraction import ExtractionReport

    by_endpoint: dict[str, ExtractionReport] = {}
    for q in summary.queries:
        report = ExtractionReport.from_dict(q.get("extraction"))
        if report.empty_columns:
            by_endpoint.setdefault(q["endpoint"], ExtractionReport()).add(report)
    said = (empty_columns_message(path, report) for path, report in sorted(by_endpoint.items()))
    return [line for line in said if line]


def _query_table(summary: RunSummary) -> Any:
    from harvest.connectors.paging.pager import OK_STATUSES

    queries = console.table(
        "query", "status", "pages", "records", "credits",
        title=f"run {summary.run_id} ({summary.service})", right=("pages", "records", "credits"),
    )  # fmt: skip
    for name, status_text, ok, pages, records, credits in query_rows(summary.queries, OK_STATUSES):
        status = console.literal(status_text, "" if ok else "red")
        console.add_row(queries, name, status, pages, records, credits)
    return queries


def print_summary(summary: RunSummary, output: Path, by_platform: bool = False) -> None:
    """The run's queries and tables, each on a row of its own, or (`by_platform`, the demo's every endpoint)
    summed per platform (`flows.commands.demo_report`)."""
    from harvest.connectors.paging.pager import OK_STATUSES

    if by_platform:
        from harvest.flows.commands.demo_report import platform_table

        out.print(platform_table(summary, OK_STATUSES))
    else:
        out.print(_query_table(summary))
    for line in _error_lines(summary):
        console.tell(err, console.literal(line, "red"), console.HANG)
    if stuck := unsendable_line(summary):
        console.tell(err, console.literal(stuck, "red"))
    if unstarted := never_started_line(summary):  # ids are long: a terminal breaks it between them
        console.tell(err, console.literal(unstarted, "yellow"))
    for line in _extraction_lines(summary, output):
        console.tell(err, console.literal(line, "yellow"), console.HANG)
    exported = summary.export
    if exported and exported.get("error"):
        said = console.literal(f"export to {exported['to']}: {exported['error']}", "red")
        console.tell(err, said, console.HANG)
    elif exported:
        console.prose(
            f"exported to {exported['to']} ({exported['kind']}): {counted(exported['runs'], 'run')}, "
            + (f"{exported['tables']} tables" if "tables" in exported else f"{exported['files']} files")
        )
    if summary.load_interrupted:
        pass  # the next step says how it gets loaded
    elif summary.loaded:
        if not by_platform:
            rows = console.table(
                "table", "rows", title=f"rows per table in {output / 'harvest.duckdb'}", right=("rows",)
            )
            for name, n in sorted(summary.tables.items()):
                console.add_row(rows, name, n)
            out.print(rows)
        say_history(summary.tables, output)
    elif summary.load_refused:
        console.warning(f"not loaded into DuckDB yet: {summary.load_refused}")
    elif not summary.machine_fault:  # then the next step says why and how it gets loaded
        console.warning(f"not loaded into DuckDB yet: run `{harvest_line('load', output)}` when it is free")
    spent = lowered_budget(summary.credits_spent, summary.budget, summary.budget_before)
    console.prose(
        f"credits spent: {spent or f'{summary.credits_spent} of a budget of {summary.budget}'}; "
        f"records: {summary.records}; status: {summary.status}"
    )
    for closing in (took(summary.seconds), rate_line(summary.rate_limit), bill_line(summary)):
        if closing:
            console.prose(closing)


def bill_line(summary: RunSummary) -> str | None:
    """The service's bill beside harvest's count, when they differ. Another user of the key is named only when
    the balance fell by more than harvest's own requests explain: its count holds every request that may have
    been billed (answers lost, requests in flight at a stop or a kill), so a bill below it is harvest's own."""
    billed, spent = summary.service_billed, summary.credits_spent
    if billed is not None and billed > spent:
        return (
            f"the service's bill: the account's balance fell by {billed} credits during the run, "
            f"{billed - spent} more than the {spent} harvest's own requests can have been billed: something "
            "else used the account meanwhile (another job on the same key)"
        )
    if billed is not None and billed < 0:
        return (
            f"the service's bill: the account's balance rose by {-billed} credits during the run (topped up "
            f"meanwhile), so it does not show what the run cost; harvest counted {spent}"
        )
    if billed is not None and billed < spent:
        return (
            f"the service's bill: the account's balance fell by {billed} credits during the run; harvest "
            f"counted {spent} (a request whose answer was lost, or that was in flight at a stop, counts as "
            "spent: the service did not bill all of them)"
        )
    if billed is None and summary.bill_unknown and spent:
        return f"the service's bill: unknown ({summary.bill_unknown}); harvest counted {spent}"
    return None


def rate_line(met: dict[str, Any] | None) -> str | None:
    """What the run met of the service's rate limit (or a known one): how often it refused, how long the run went
    below its concurrency, and why (a blip, a limit it found, with the spec's line for it, the spec's limit)."""
    if not met or (not met.get("refused") and not met.get("limit")):
        return None
    requests, refused, pace = met["requests"], met["refused"], met.get("per_second")
    share = f" ({100 * refused / requests:.1f}%)" if requests else ""
    line = f"rate limit: the service answered {refused} of {requests} requests with 429{share}"
    slowed = met.get("slowed_s")
    line += "" if slowed is None else f"; below its concurrency for {slowed:.1f} s"
    if met.get("limit"):
        return line + f", paced to {pace:.1f} requests a second (the spec's limit: {met['limit']:g})"
    if met.get("limited", pace is not None) and pace is not None:
        held = met.get("held")  # None in a manifest older than it
        return line + f", paced to {pace:.1f} requests a second (a limit the service showed)" + (
            f"; `rate_limit: {{per_second: {held:g}}}` in the spec starts a night there, without the refusals "
            "that find it (and never goes faster)" if held else ""
        )  # fmt: skip
    return line + (", then back at full speed (a blip, not a limit)" if slowed is not None else "")


def took(seconds: dict[str, float]) -> str | None:
    """Where a run's time went, in one line of at most 80 columns: a nightly job that got slower shows whether
    the service (paging), the load into DuckDB, the export or the start and end (imports, Prefect, the run's
    setup and bookkeeping) did."""
    if "total" not in seconds or "paging" not in seconds:
        return None
    total, paging, loading = seconds["total"], seconds["paging"], seconds.get("loading", 0.0)
    exporting = seconds.get("exporting")
    rest = max(0.0, total - paging - loading - (exporting or 0.0))
    return (
        f"took {total:.1f} s: {paging:.1f} s paging, {loading:.1f} s loading, "
        + (f"{exporting:.1f} s exporting, " if exporting is not None else "")
        + f"{rest:.1f} s start and end"
    )


def loaded_first_line(summary: RunSummary | NoRun) -> None:
    """One line for the earlier runs the run loaded into DuckDB before it started paying."""
    runs = summary.loaded_first or []
    if runs:
        named = ", ".join(f"{r['run_id']} ({r['status']}, {counted(r['records'], 'record')})" for r in runs)
        console.note(
            f"loaded {counted(len(runs), 'earlier run')} into DuckDB first, which had landed but were not loaded: "
            f"{named}"
        )


def _next_step(summary: RunSummary, again: RunAgain, output: Path) -> str | None:
    """One line saying how to go on after a run that did not finish its work (or its load), with the command
    that does it as it can be pasted (`flows.run.run_again`)."""
    cmd = again.command()
    if fault := summary.machine_fault:
        pages = sum(int(q["pages"]) for q in summary.queries)
        kept = f"the {counted(pages, 'page')} paid are kept"
        if summary.status == "interrupted":
            return f"stopped: {fault}. Nothing more was paid; {kept}. Fix it, then `{cmd}` resumes the run"
        if not summary.ended_on_disk:  # its manifest says `running`: only its resume lands and loads it
            return (
                f"not loaded: {fault}. {kept.capitalize()}; fix it, then `{cmd}` resumes the run: it asks "
                "nothing it has, lands and loads it"
            )
        return (
            f"not loaded: {fault}. {kept.capitalize()}; fix it, then `{harvest_line('load', output)}` loads "
            f"the run without paying (`{cmd}` loads it too, then pays for a new run of the job)"
        )
    if summary.status == "interrupted":
        pages = sum(int(q["pages"]) for q in summary.queries)
        return f"interrupted: run {summary.run_id} stopped cleanly with {counted(pages, 'page')} landed; `{cmd}` resumes it"
    if summary.load_interrupted:
        return (
            f"interrupted during the load: run {summary.run_id} ended ({summary.status}) and its data is in "
            f"Parquet; `{harvest_line('load', output)}` loads it into DuckDB"
        )
    if drifted := [q for q in summary.queries if q["status"] == "drift"]:
        their = "their" if len(drifted) != 1 else "its"
        rebuild = harvest_line("rebuild", output, "--spec", again.spec)
        return (
            f"{counted(len(drifted), 'query')} stopped on answers harvest could not read, {their} paid pages "
            f"kept: once it reads them (the line above says how), `{rebuild}` lands them and "
            f"`{again.command('--continue')}` goes on from the next page"
        )
    stopped = [
        q
        for q in summary.queries
        if q["status"] in ("budget_exhausted", "rate_limited", "stopped", "failed")
        and not unsendable(q)
        and not q.get("refused_for_good")
        and not q.get("capped")
    ]  # a failed query too (the service away, a page that kept failing): a plain rerun is a new night
    if stopped:
        many = len(stopped) != 1
        first = (
            "once the account is topped up or budget.min_balance lowered, " if account_short(stopped) else ""
        )
        return (
            f"{counted(len(stopped), 'query')} stopped with {'their cursors' if many else 'its cursor'} kept: "
            f"{first}`{again.command('--continue')}` picks {'them' if many else 'it'} up"
        )
    if capped := sorted({q["capped"] for q in summary.queries if q.get("capped")}):
        return (
            f"{counted(sum(bool(q.get('capped')) for q in summary.queries), 'query')} reached the spec's cap "
            f"({', '.join(capped)}), which holds across the runs `--continue` makes: raised in the spec, "
            f"`{again.command('--continue')}` picks them up (`{cmd}` starts a new night from page 1)"
        )
    return None


def exit_code(summary: RunSummary) -> int:
    from harvest.connectors.paging.pager import OK_STATUSES
    from harvest.flows.orchestrator.final_state import cut_short, failed_export
    from harvest.tasks.output.machine_fault import EXIT_CODE

    if summary.machine_fault:
        return EXIT_CODE  # stopped by this machine (a full disk): try again once it is fixed
    if cut_short(summary):
        return 130
    if failed_export(summary):
        return 1
    if not all(q["status"] in OK_STATUSES for q in summary.queries):
        return 1
    if any(unsendable(q) for q in summary.queries):
        return 1  # no night fetches them until the spec changes (docs/decisions.md): a cron job must hear it
    if account_short(summary.queries):
        return 1  # nor until the account is topped up or its floor lowered
    if summary.load_held:
        return 1  # the file was held past the wait: a session someone left open, which cron must hear of
    if summary.unstarted_exit_code and never_started(summary.queries):
        return 3  # the spec asked for a night whose budget left queries unstarted to say so
    return 0


def report(summary: RunSummary | NoRun, again: RunAgain, output: Path, by_platform: bool = False) -> int:
    loaded_first_line(summary)
    if isinstance(summary, NoRun):
        return _no_run(summary, again)
    print_summary(summary, output, by_platform)
    step = _next_step(summary, again, output)
    if step:
        console.note(step)
    if summary.prefect_untold:
        console.warning(
            f"Prefect could not be told how run {summary.run_id} ended ({summary.prefect_untold}); the exit "
            f"code follows the run's data. What Prefect is owed waits in {output / '.prefect-owed' / summary.run_id}.json"
            " and is told when the job's next run or `harvest serve` starts"
        )
    return exit_code(summary)


def _no_run(summary: NoRun, again: RunAgain) -> int:
    from harvest.tasks.output.machine_fault import EXIT_CODE

    if summary.status == "nothing_to_continue":
        console.prose(summary.message)
        return 0
    console.error(f"{summary.message}; once fixed, `{again.command()}` {summary.then}")
    return EXIT_CODE  # this machine could not load the earlier runs: try again once it is fixed
