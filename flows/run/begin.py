"""The run a decided start (`flows.run.start.decide`) makes, before anything is paid: its `running` manifest (a
new run's, or the resumed run's again), after `--fresh` abandoned the unfinished run.

A resume or a `--fresh` abandon also ends, as Crashed, the Prefect flow runs a killed process left Running.

`harvest run --fresh` with an unfinished run lands what that run paid for, marks it abandoned and loads it.
Abandoning never throws paid data away: the queries that were still running land their raw pages (no request
is sent), the run's Parquet files are written again from its raw pages, and the run is loaded into DuckDB like any
other.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from prefect.context import FlowRunContext
from prefect.states import State

from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.catalog.shape_overrides import shapes_data
from harvest.connectors.paging.pager import QuerySpec
from harvest.flows import console
from harvest.flows.orchestrator.final_state import not_started, nothing_to_continue
from harvest.flows.orchestrator.prefect_record import tell_owed, told_line
from harvest.flows.orchestrator.prefect_runs import crash_stale_flow_runs
from harvest.flows.run.chain import say_added
from harvest.flows.run.dask.round_files import land_kept_again
from harvest.flows.run.interrupt import StopOnSignal
from harvest.flows.run.load_step import load_earlier, load_manifest_into_duckdb
from harvest.flows.run.plan import Plan, pages_at_most
from harvest.flows.run.progress import RunFacts
from harvest.flows.run.service_access import ServiceAccess
from harvest.flows.run.start import Continue, Mode, New, Resume, RunStart, job_coverage
from harvest.flows.spec import JobSpec
from harvest.flows.spec.identity import plan_key
from harvest.tasks.database.connection import DatabaseBusy
from harvest.tasks.landing import fresh_parts, land_raw_pages, open_run_sink
from harvest.tasks.output.attempt_log import record_in_flight
from harvest.tasks.output.job_lock import JobLock
from harvest.tasks.output.journal import JournalState, read_journal
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.machine_fault import MachineFault, as_machine_fault
from harvest.tasks.output.manifest import RunManifest, run_heads, write_manifest
from harvest.tasks.output.parquet_sink import MultiTableSink
from harvest.tasks.output.query_summary import QuerySummary, history_fields
from harvest.tasks.output.raw_store import RawIndex

log = logging.getLogger(__name__)


def abandon_run(
    layout: OutputLayout, run: RunManifest, endpoints: dict[str, Endpoint], in_flight: bool = True
) -> RunManifest:
    """Every raw page the run paid lands again into one writer (its earlier files go first: a crash left the
    run's own file unfinished), the queries still running as `abandoned`. `in_flight`: its stopped sessions'
    requests in flight are its attempts (`record_in_flight`; a Dask round's grant is not a request)."""
    journal = read_journal(layout.journal_file(run.run_id))
    if in_flight:
        record_in_flight(layout, run.run_id, journal)
    started = datetime.fromisoformat(run.started)
    summaries = [{**s, "files": []} for s in journal.ended.values()]
    removed = fresh_parts(layout, run.run_id, started)
    index = RawIndex(layout.raw_files(run.run_id))
    sink = open_run_sink(layout, run.run_id, started)
    try:
        for s in summaries:
            spec = QuerySpec(**journal.started[s["query_id"]])
            endpoint = endpoints[spec.endpoint]
            land_raw_pages(layout, run.run_id, started, spec, endpoint, sink, None, False, index)
        for query_id, query in journal.started.items():
            if query_id not in journal.ended:
                summaries.append(_abandoned(layout, run, journal, query, endpoints, sink, index))
    finally:
        files = sink.close()
    done = replace(
        run,
        status="abandoned",
        finished=datetime.now(UTC).isoformat(),
        credits_spent=journal.total_spent,
        queries=summaries,
        files=layout.listed(files),
    )
    done.files_rewritten(removed)
    write_manifest(layout, done)
    try:
        load_manifest_into_duckdb(layout, done)
    except DatabaseBusy as exc:
        log.warning("%s", exc)
    return done


def _abandoned(
    layout: OutputLayout,
    run: RunManifest,
    journal: JournalState,
    query: dict[str, Any],
    endpoints: dict[str, Endpoint],
    sink: MultiTableSink,
    index: RawIndex,
) -> dict[str, Any]:
    """A query the run was still paging: its raw pages land, and it ends `abandoned` where they stop."""
    spec = QuerySpec(**{**query, "resume": True})
    run_id, started = run.run_id, datetime.fromisoformat(run.started)
    start = land_raw_pages(layout, run_id, started, spec, endpoints[spec.endpoint], sink, None, False, index)
    where = index.at.get(spec.query_id)
    return QuerySummary(
        query_id=spec.query_id, endpoint=spec.endpoint, status="abandoned", pages=start.pages,
        records=start.records, credits=journal.spent.get(spec.query_id, 0),
        next_cursor=None if start.ended else start.cursor,
        error="the run was abandoned (--fresh) while this query was running",
        extraction=start.extraction.as_dict(), pages_before=spec.pages_before,
        raw_file=layout.relative(where[-1][0] if where else layout.raw_file(run_id, spec.query_id)),
        **history_fields(spec, start, start.ended or "abandoned", None if start.ended else start.cursor),
    ).as_dict()  # fmt: skip


def new_run_id(now: datetime) -> str:
    """`<UTC second>-<6 hex digits>`: the microsecond in 16 us steps (4 digits), then 2 random ones, so ids sort
    in the order their runs started even within one second (an analyst's `ORDER BY run_id`; a random suffix
    reversed two runs of one second half the time), and two processes that start in the same 16 us still
    differ, but for 1 in 256."""
    return f"{now:%Y%m%dT%H%M%SZ}-{now.microsecond // 16:04x}{secrets.randbelow(256):02x}"


@dataclass(frozen=True)
class RunArguments:
    """The flow's arguments that say how to run the job."""

    base_url: str | None
    budget: int | None
    mode: Mode
    full: bool
    spec_file: str | None  # the spec's absolute path, when read from a file (`RunManifest.spec_file`)


@dataclass
class Begun:
    start: RunStart
    manifest: RunManifest
    abandoned: RunManifest | None = None
    """The unfinished run `--fresh` abandoned first."""


def flow_run_facts() -> tuple[str | None, int, int]:
    """(flow run id, run count, retries) of the current Prefect flow run."""
    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        return None, 1, 0
    retries = ctx.flow_run.empirical_policy.retries or (ctx.flow.retries if ctx.flow else 0) or 0
    return str(ctx.flow_run.id), ctx.flow_run.run_count, retries


def begin(
    spec: JobSpec,
    layout: OutputLayout,
    service: ServiceAccess,
    start: RunStart,
    budget: int | None,
    spec_file: str | None = None,
    lock: JobLock | None = None,
) -> Begun:
    """Abandon what `--fresh` abandons, then write the run's `running` manifest. `spec_file`: the spec's absolute
    path, when the run read it from a file. `lock`: the job's, which names a resumed run at once (its manifest is
    on disk), so a second run refused meanwhile names it; a new run is named once its manifest is written.

    Raises `MachineFault` when this machine cannot write what a start writes before it pays (a Dask resume lands
    its kept queries again, `--fresh` lands and loads the abandoned run): the run stops before it pays, as a
    full disk stops any run, and the next `harvest run` begins again from what is on disk."""
    try:
        return _begin(spec, layout, service, start, budget, spec_file, lock)
    except Exception as exc:
        fault = as_machine_fault(exc, layout.root)
        if fault is None:
            raise
        raise fault from exc


def _begin(
    spec: JobSpec,
    layout: OutputLayout,
    service: ServiceAccess,
    start: RunStart,
    budget: int | None,
    spec_file: str | None,
    lock: JobLock | None,
) -> Begun:
    flow_run_id = flow_run_facts()[0]
    abandoned = None
    if isinstance(start, New) and start.abandon is not None:
        abandoned = abandon_run(layout, start.abandon, spec.endpoints(), spec.runner.kind == "local")
        start = replace(start, coverage=job_coverage(layout, spec.name))  # its histories count now
    if isinstance(start, Resume):
        if lock is not None:
            lock.holds(start.run, resumed=True)
        _say_lost(start)
        if spec.runner.kind == "local":  # a Dask round's grant is not a request: its worker logged its own
            record_in_flight(layout, start.run.run_id, start.own)
        manifest = _resumed(start.run, spec, flow_run_id, budget, spec_file, start.own.total_spent)
        if start.added:
            say_added(manifest)
        if spec.runner.kind == "dask":  # a flow retry of a merged run: its kept queries' files are no more
            land_kept_again(layout, manifest, start.ended, start.own.started, spec.endpoints())
    else:
        _say_first_of_job(layout, spec.name)
        manifest = _new(spec, plan_key(spec), service, start, flow_run_id, budget, spec_file)
    return Begun(start, manifest, abandoned)


def _say_first_of_job(layout: OutputLayout, job: str) -> None:
    """A job's first run in an output that holds other jobs' runs: a job renamed in its spec (`name:`) starts
    over there without a word, paying again for all its earlier runs collected."""
    heads = run_heads(layout)
    others = sorted({h.job for h in heads} - {job})
    if others and not any(h.job == job for h in heads):
        log.warning(
            "%s holds runs of job %s but none of job %r: this run goes on from nothing they collected "
            "(incremental queries page fully, dependents start for every record). If the spec's `name:` was "
            "changed, setting it back goes on from those runs",
            layout.root, ", ".join(repr(o) for o in others[:5]), job,
        )  # fmt: skip


async def ready_to_pay(
    spec: JobSpec,
    layout: OutputLayout,
    service: ServiceAccess,
    start: RunStart,
    the_plan: Plan,
    run: RunArguments,
    lock: JobLock,
    stop: StopOnSignal,
) -> tuple[Begun, list[dict[str, Any]]] | State[Any]:
    """The run begun (`begin`), the job's earlier runs loaded first, and its `running` manifest on disk: the
    run and what `load_earlier` loaded, or the state a run ends in that does not go on to pay (nothing left to
    `--continue`; this machine could not write what comes before paying, a full disk: nothing paid, and the
    next `harvest run` goes on from the disk)."""
    try:
        begun = begin(spec, layout, service, start, run.budget, run.spec_file, lock)
    except MachineFault as fault:
        return not_started(fault, layout, start)
    begun.manifest.full = run.full or begun.manifest.full  # a resume goes on as its run began
    await crash_stale(begun)
    for told in await tell_owed(layout, spec.name):  # what Prefect missed of earlier runs
        console.note(told_line(told))
    try:
        loaded_first = load_earlier(layout, spec.name, begun.manifest.run_id, stop)
    except MachineFault as fault:
        return not_started(fault, layout, None)
    if isinstance(begun.start, Continue) and not begun.start.has_work(the_plan):
        assert begun.start.previous is not None
        return nothing_to_continue(begun.start.previous, loaded_first)
    path = layout.manifest_file(begun.manifest.run_id)
    try:
        write_manifest(layout, begun.manifest)
    except OSError as exc:  # a new run's first write: nothing of it is on disk yet
        if (failed := as_machine_fault(exc, path)) is None:
            raise
        return not_started(failed, layout, begun.start)
    lock.holds(begun.manifest, resumed=isinstance(begun.start, Resume))
    return begun, loaded_first


def _budget_before(previous: RunManifest, budget: int, spent: int) -> int | None:
    """The earlier budget that capped what the run `spent` before this session, when this session's `budget` is
    below that spending (a resume with a lower `--budget`, or one after it): the run's end and `harvest runs`
    then say so instead of `25 of a budget of 10`. None when the budget holds what was spent."""
    if budget >= spent:
        return None
    if budget == previous.budget:
        return previous.budget_before  # an overcharge past an unchanged budget is said as one (the ledger's)
    return max(previous.budget, previous.budget_before or 0)


def _resumed(
    previous: RunManifest,
    spec: JobSpec,
    flow_run_id: str | None,
    budget: int | None,
    spec_file: str | None,
    spent: int,
) -> RunManifest:
    """The manifest of a run resumed by this session, which `spent` before it: running again, under this flow
    run."""
    budget = previous.budget if budget is None else budget
    return replace(
        previous,
        status="running",
        finished=None,
        flow_run_id=flow_run_id,
        flow_run_ids=previous.flow_runs(flow_run_id),
        resumes=previous.resumes + 1,
        budget=budget,
        budget_before=_budget_before(previous, budget, spent),
        loaded=False,
        error=None,
        machine_fault=None,  # the fault that stopped it was the last session's, not this one's
        shapes=shapes_data(spec.shape_overrides()),
        spec_file=spec_file or previous.spec_file,
        declared=spec.declared(),
        # queries the spec added since (`Resume.added`): a later resume compares with them
        plan_key=plan_key(spec),
    )


def _new(
    spec: JobSpec,
    key: str,
    service: ServiceAccess,
    start: RunStart,
    flow_run_id: str | None,
    budget: int | None,
    spec_file: str | None,
) -> RunManifest:
    """The manifest of a new run (or one continuing `start.previous`)."""
    now = datetime.now(UTC)
    return RunManifest(
        run_id=new_run_id(now),
        job=spec.name,
        spec_hash=spec.spec_hash(),
        service=service.label,
        started=now.isoformat(),
        finished=None,
        status="running",
        budget=spec.budget.credits if budget is None else budget,
        credits_spent=0,
        plan_key=key,
        flow_run_id=flow_run_id,
        flow_run_ids=[flow_run_id] if flow_run_id else [],
        continues=start.previous.run_id if start.previous else None,
        shapes=shapes_data(spec.shape_overrides()),
        spec_file=spec_file,
        declared=spec.declared(),
    )


def _say_lost(start: Resume) -> None:
    """One line when the resume found ended queries whose raw pages the disk lost (`resume_start`)."""
    run = start.run
    if start.lost:
        log.warning(
            "run %s: %d queries journaled as ended lack %d of their raw pages (the disk lost them: a power cut "
            "before they were written); fetching the missing pages again, paid a second time",
            run.run_id, len(start.lost), start.lost_pages(),
        )  # fmt: skip


async def crash_stale(begun: Begun) -> None:
    """Earlier flow runs of the resumed or abandoned run that a killed process left Running: Crashed."""
    current = begun.manifest.flow_run_id
    if begun.abandoned is not None:
        why = f"harvest abandoned run {begun.abandoned.run_id} (--fresh) in flow run {current}"
        await crash_stale_flow_runs(begun.abandoned.flow_runs(), current, why)
    if isinstance(begun.start, Resume):
        why = (
            f"harvest resumed run {begun.manifest.run_id} in flow run {current}: the process that ran this flow "
            "run stopped without ending it (killed)"
        )
        await crash_stale_flow_runs(begun.manifest.flow_run_ids, current, why)


def run_facts(
    begun: Begun,
    the_plan: Plan,
    endpoints: Mapping[str, Endpoint],
    spent: Callable[[], int],
    provisional: Callable[[], int] = lambda: 0,
) -> RunFacts:
    """The facts of a run about to pay: what it starts from, and the pages its queries can take at most."""
    start, manifest = begun.start, begun.manifest
    to_run = [d for q in the_plan.queries if (d := start.decide(q)) is not None]
    planned = {q.query_id for q in the_plan.queries}
    to_run += [d for q in start.continue_at.values() if q.query_id not in planned and (d := start.decide(q))]
    bounds = {
        q.query_id: pages_at_most(e, q.max_pages, q.max_credits, e.price_of(q.params))
        for q in to_run
        for e in [endpoints[q.endpoint]]
    }
    known = not the_plan.dependents and None not in bounds.values()
    kept = start.kept.values()
    return RunFacts(
        run_id=manifest.run_id, job=manifest.job, budget=manifest.budget, spent=spent, provisional=provisional,
        kind=start.kind,
        previous=start.previous.run_id if start.previous else None,
        previous_status=start.previous.status if start.previous else None,
        ended_before=len(start.kept), pages_before=sum(int(s.get("pages", 0)) for s in kept),
        records_before=sum(int(s.get("records", 0)) for s in kept), spent_before=start.journal.total_spent,
        going_on=len(start.going_on),
        planned=None if the_plan.dependents else len(to_run),
        page_bounds={q: b for q, b in bounds.items() if b is not None} if known else None,
        exact=known and all(endpoints[q.endpoint].paging.single for q in to_run),
    )  # fmt: skip
