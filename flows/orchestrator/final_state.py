"""How a run's end is told to Prefect: the final state and its message, and the run's artifacts.

The state tells the truth a scheduler acts on: Completed (a budget stop says so in its message), Failed when a
query failed (the message names the failed queries and the first error of each kind, so an alert says what
broke without opening the logs) or when a query's own `max_credits` is below what one request costs (no run
fetches it until the spec changes; named with its cap and the price, and not retried: a retry cannot) or when
another process still held the DuckDB file after the load waited for it (a session left open: a person closes it),
Cancelled when the run or its load into DuckDB was interrupted, Crashed when this machine could not write the
run (a full disk: resumable once space is freed).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from prefect.context import FlowRunContext
from prefect.states import Cancelled, Completed, Crashed, Failed, State

from harvest.connectors.http.auth import ApiKey, redact
from harvest.connectors.paging.pager import OK_STATUSES, base_id
from harvest.connectors.plurals import counted
from harvest.flows.orchestrator.prefect_outage import WATCH, api_away, bounded_client, caused_by_api, said
from harvest.flows.orchestrator.prefect_record import (
    ENDED,
    Ended,
    NotTold,
    Owed,
    create_artifacts,
    missed_task_runs,
    owe,
)
from harvest.flows.run.interrupt import StopOnSignal
from harvest.flows.run.service_access import ServiceAccess
from harvest.flows.run.start import Resume, RunStart
from harvest.flows.spec.service_url import EMBEDDED_SANDBOX
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.machine_fault import MachineFault
from harvest.tasks.output.manifest import RunManifest, failure_groups, who
from harvest.tasks.output.run_summary import (
    NoRun,
    RunSummary,
    account_short,
    never_started,
    query_rows,
    unsendable_named,
    unstarted_words,
)
from harvest.tasks.query_line import LINE_TASK, ended_task_runs

REASONS_SHOWN = 3
"""Distinct failure reasons named in a Failed state's message; the rest are counted."""
REASON_CHARS = 300
"""A reason (the service's own text, quoted as is) is cut to this length in the message."""


class RunFailed(Exception):
    """A run that did not complete, carrying its summary (`summary`) and the state's message: the data of its
    Failed, Cancelled or Crashed state, so a flow of a user's own awaiting `collect_job` gets this (`harvest.
    RunFailed`) raised, not Prefect's TypeError about a result that is no exception; raised instead of returning
    a Failed state when the flow has retries, so that Prefect retries it (and the retry resumes the run)."""

    def __init__(self, summary: RunSummary | NoRun, message: str) -> None:
        super().__init__(message)
        self.summary = summary


def _failures(summary: RunSummary, key: ApiKey | None) -> str:
    groups = failure_groups(summary.queries)
    parts = []
    for ids, reason in groups[:REASONS_SHOWN]:
        text = redact(reason, key)
        if len(text) > REASON_CHARS:
            text = text[: REASON_CHARS - 3] + "..."
        parts.append(f"{who(ids)}: {text}")
    if len(groups) > REASONS_SHOWN:
        parts.append(f"and {len(groups) - REASONS_SHOWN} more reasons")
    return "; ".join(parts)


def headline(summary: RunSummary, key: ApiKey | None = None) -> str:
    """One line for the Prefect state message and logs; a failed run's names its failed queries and why."""
    text = (
        f"{summary.status}: {counted(len(summary.queries), 'query')}, {counted(summary.records, 'record')}, "
        f"{summary.credits_spent}/{summary.budget} credits (run {summary.run_id})"
    )
    failures = _failures(summary, key)
    if failures:
        text += f"; failed: {failures}"
    if stuck := unsendable_named(summary):
        text += f"; could not send a request: {stuck}"
    if unstarted := unstarted_words(summary):
        text += f"; {unstarted}"
    text += f"; {summary.error}" if summary.error else ""
    text += f"; not loaded into DuckDB: {summary.load_held}" if summary.load_held else ""
    if summary.machine_fault and summary.machine_fault not in (summary.error or ""):
        text += f"; {summary.machine_fault}"
    text += "; the load into DuckDB was interrupted" if summary.load_interrupted else ""
    return text + ("; the export was interrupted" if interrupted_export(summary) else "")


def interrupted_export(summary: RunSummary) -> bool:
    return bool((summary.export or {}).get("interrupted"))


def failed_export(summary: RunSummary) -> bool:
    """The spec's export did not happen (failed, interrupted, or the run was not loaded): the run says so."""
    return bool((summary.export or {}).get("error"))


def cut_short(summary: RunSummary) -> bool:
    """A signal stopped the run, its load or its export: Prefect's Cancelled, exit code 130."""
    return summary.status == "interrupted" or summary.load_interrupted or interrupted_export(summary)


def final_state(summary: RunSummary, retries: int, key: ApiKey | None = None) -> State[Any]:
    message = headline(summary, key)
    failed = RunFailed(summary, message)
    if summary.machine_fault:  # the machine could not write (a full disk): resumable, not the code's fault
        return Crashed(message=message, data=failed)
    if cut_short(summary):
        return Cancelled(message=message, data=failed)
    if summary.status == "failed" or failed_export(summary):
        if retries:  # Prefect retries only a raised failure; the retry resumes this run
            raise failed
        return Failed(message=message, data=failed)
    if unsendable_named(summary) or account_short(summary.queries):  # exit 1 too; not raised for retries:
        return Failed(message=message, data=failed)  # no run fetches them until a person acts
    if summary.load_held:  # exit 1 too; not raised: a retry cannot close the session holding it
        return Failed(message=message, data=failed)
    if summary.unstarted_exit_code and never_started(summary.queries):  # exit 3: the spec asks to hear it
        return Failed(message=message, data=failed)
    return Completed(message=message, data=summary)


def _artifact_rows(queries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A wide fan-out is one row and its queries that did not end well, as on the terminal."""
    endpoints = {base_id(q["query_id"]): q["endpoint"] for q in queries}
    return [  # a row's name is a query id or `<spec query> (<n> queries)`
        {"query_id": name, "endpoint": endpoints.get(base_id(name).split(" (", 1)[0], ""),
         "status": status, "pages": pages, "records": records, "credits": credits}
        for name, status, _ok, pages, records, credits in query_rows(queries, OK_STATUSES)
    ]  # fmt: skip


def artifacts(job: str, summary: RunSummary) -> list[dict[str, Any]]:
    """The run's two artifacts as Prefect's API takes them: its queries (a table) and its rows per table."""
    key = "".join(c if c.isalnum() else "-" for c in f"harvest-{job}".lower())
    rows = "\n".join(f"| {t} | {n} |" for t, n in sorted(summary.tables.items()))
    return [
        {"key": key, "type": "table", "data": json.dumps(_artifact_rows(summary.queries)),
         "description": f"harvest run {summary.run_id}: {summary.status}, "
         f"{summary.credits_spent}/{summary.budget} credits"},
        {"key": f"{key}-tables", "type": "markdown",
         "data": f"# {job}: rows per table\n\n| table | rows |\n|---|---|\n{rows}\n"},
    ]  # fmt: skip


async def tell_the_end(
    job: str, layout: OutputLayout, summary: RunSummary, retries: int, key: ApiKey | None, mark: int
) -> State[Any]:
    """The flow's final state, once its artifacts are in Prefect; when Prefect's API does not answer, the run's
    record of what Prefect is owed is written and the flow run let go without another call (`NotTold`). A run
    during which Prefect dropped events (`WATCH` since `mark`), or whose Dask rounds' ends Prefect does not hold
    (their workers report them), writes the record of its task runs too, told once the flow run ended
    (`flows.orchestrator.prefect_record`). Waits at most one bounded health check and three bounded calls
    (`prefect_outage.bounded_client`)."""
    flow_run = FlowRunContext.get()
    if flow_run is None or flow_run.flow_run is None:
        return final_state(summary, retries, key)
    state = final_state(summary, 0, key)  # what Prefect should say, whatever the flow's retries
    owed = Owed(summary.run_id, job, str(flow_run.flow_run.id), why="", artifacts=artifacts(job, summary))
    owed.task_runs = ended_task_runs(summary.run_id)
    ended = ENDED.get() or Ended()
    ended.layout, ended.summary, ended.owed = layout, summary, owed
    ended.final = (state.type.value, state.message or "")
    why = await api_away()
    if why is None:
        try:
            async with bounded_client() as client:
                await create_artifacts(client, owed.flow_run_id, owed.artifacts)
            owed.artifacts = []
        except Exception as exc:
            if not caused_by_api(exc):
                raise
            why = said(exc)
    if why is None:
        troubles = WATCH.since(mark) + [f"Prefect did not run the task run of {t['name']}" for t in owed.task_runs
                                        if not t["reported"] and t["task"] == LINE_TASK]  # fmt: skip
        troubles = troubles or await missed_task_runs(owed)  # a Dask round's worker reported it, or not
        if troubles and owed.task_runs:
            owed.why = troubles[0]
            owe(layout, owed)
        return final_state(summary, retries, key)
    owed.state, owed.message, owed.why = state.type.value, state.message or "", why
    owe(layout, owed)
    ended.why = why
    raise NotTold(why)


def not_started(fault: MachineFault, layout: OutputLayout, start: RunStart | None) -> State[Any]:
    """This machine could not write what comes before paying (a full disk): nothing is paid, and the next
    `harvest run` goes on from what is on disk. `start`: the run that was beginning (a resume's kept queries
    landed again, `--fresh`'s abandoned run), or None when the job's earlier runs could not be loaded first."""
    if start is None:
        message, then = (
            f"not started: {fault}; the job's earlier runs wait to be loaded into {layout.db}",
            None,
        )
    elif isinstance(start, Resume):
        message = f"not resumed: {fault}; run {start.run.run_id} stays as it stopped, nothing was paid"
        then = "resumes it"
    else:
        message, then = f"not started: {fault}; nothing was paid", "runs the job"
    no_run = NoRun("not_started", message, machine_fault=str(fault), then=then or NoRun.then)
    return Crashed(message=message, data=RunFailed(no_run, message))


async def not_begun(
    service: ServiceAccess, layout: OutputLayout, job: str, stop: StopOnSignal
) -> State[Any] | None:
    """A run the flow starts itself (a deployment's, a team's own flow; `harvest run` checked before Prefect
    started) ends before it begins, making no run, when nothing answers where the service answered the job
    before (`flows.run.preflight.away_for_now`): Crashed, as `harvest run`'s exit 75 (try again later), never a
    failed run of 0 pages whose every query tried 5 times. A stop while that check waits ends it Cancelled."""
    from harvest.flows.run.preflight import away_for_now

    if service.label == EMBEDDED_SANDBOX or stop.first is not None:
        return None
    away = await stop.unless_stopped(away_for_now(service.url, service.api_key, layout, job, service.label))
    if away is not None:
        message = f"not started: {away}"
        return Crashed(message=message, data=RunFailed(NoRun("not_started", message, then="runs"), message))
    if stop.first is not None:  # it cut the check short
        message = f"not started: {stop.first}: stopped while the service was checked; nothing was sent"
        return Cancelled(message=message, data=RunFailed(NoRun("not_started", message, then="runs"), message))
    return None


def nothing_to_continue(previous: RunManifest, loaded_first: list[dict[str, Any]]) -> State[Any]:
    """`--continue` after a run that finished everything: no new run, nothing spent."""
    message = f"nothing to continue: run {previous.run_id} left no stopped query"
    caps: dict[str, int] = {}
    for query in previous.queries:
        if query.get("capped"):
            caps[query["capped"]] = caps.get(query["capped"], 0) + 1
    if caps:  # they stopped at a cap that holds across the chain: said, as the run's end said it
        at = " and ".join(
            f"{counted(n, 'query')} at {'its' if n == 1 else 'their'} {cap}"
            for cap, n in sorted(caps.items())
        )
        message = (
            f"nothing to continue: run {previous.run_id} stopped {at}, a cap that holds across the runs "
            "`--continue` makes; raise it in the spec, then `--continue` picks them up"
        )
    return Completed(message=message, data=NoRun("nothing_to_continue", message, loaded_first))
