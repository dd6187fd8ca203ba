"""The `collect_job` flow: spec -> plan -> connector tasks under one credit ledger -> files -> tables.

One Prefect task run per spec query (`tasks.query_line`; never per page or per fanned-out value: a task run
costs the event loop ~20 ms and the server a record and a slot call). Queries run as concurrent asyncio tasks
in the flow's event loop and share one connection pool and one ledger; `concurrency` bounds the HTTP requests
in flight. A run holds its job's lock, loads the job's earlier runs that never reached DuckDB,
starts new, resumes an unfinished run or continues a stopped one (`flows.run.start`), and ends in the Prefect state
that tells the truth (`flows.orchestrator.final_state`).
"""

from __future__ import annotations

import logging
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harvest.flows.orchestrator.prefect_settings import apply_prefect_defaults, harvest_warnings_to_run_logs

apply_prefect_defaults()

from harvest.connectors.catalog.endpoints import above_the_list  # noqa: E402
from harvest.connectors.credits.ledger import CreditLedger  # noqa: E402
from harvest.connectors.http.client import ServiceClient  # noqa: E402
from harvest.flows.handoff.export_after_run import export_step  # noqa: E402
from harvest.flows.orchestrator import prefect_outage  # noqa: E402
from harvest.flows.orchestrator.final_state import (  # noqa: E402
    RunFailed,
    not_begun,
    tell_the_end,
)
from harvest.flows.orchestrator.plain_flow import plain_flow  # noqa: E402
from harvest.flows.orchestrator.prefect_record import (  # noqa: E402
    ENDED,
    Ended,
    NotTold,
    body_started,
    owe,
    tell_owed,
)
from harvest.flows.run import progress  # noqa: E402
from harvest.flows.run.begin import Begun, RunArguments, flow_run_facts, ready_to_pay, run_facts  # noqa: E402
from harvest.flows.run.bill import (  # noqa: E402
    carry_over,
    note_bill,
    one_account,
    probe_balance,
    read_after,
    settle_refusals,
)
from harvest.flows.run.dask.killed_rounds import killed_rounds_ended  # noqa: E402
from harvest.flows.run.dask.rounds import Rounds  # noqa: E402
from harvest.flows.run.dask.worker_run import run_info  # noqa: E402
from harvest.flows.run.fanout import Fanout  # noqa: E402
from harvest.flows.run.interrupt import StopOnSignal  # noqa: E402
from harvest.flows.run.load_step import load_run, write_end_manifest  # noqa: E402
from harvest.flows.run.memory import quiet_gc  # noqa: E402
from harvest.flows.run.plan import Plan, plan  # noqa: E402
from harvest.flows.run.preflight import check_output_dir, declared_by, lock_job  # noqa: E402
from harvest.flows.run.service_access import ServiceAccess, client_settings, open_service  # noqa: E402
from harvest.flows.run.start import (  # noqa: E402
    Mode,
    Prepared,
    Resume,
    RunStart,
    decide,
    handed,
    handed_over,
)
from harvest.flows.spec import JobSpec, UsageError, load_spec, parse_spec  # noqa: E402
from harvest.flows.spec.key_in_spec import keyless_parameters  # noqa: E402
from harvest.tasks import run_context  # noqa: E402
from harvest.tasks.landing import fresh_parts, open_run_sink, publish  # noqa: E402
from harvest.tasks.output import job_lock  # noqa: E402
from harvest.tasks.output.journal import RunJournal  # noqa: E402
from harvest.tasks.output.layout import OutputLayout  # noqa: E402
from harvest.tasks.output.machine_fault import FaultStop  # noqa: E402
from harvest.tasks.output.manifest import RunManifest, run_status  # noqa: E402
from harvest.tasks.output.packed_summaries import PackedSummaries  # noqa: E402
from harvest.tasks.output.raw_store import RawIndex, RawPageWriter  # noqa: E402
from harvest.tasks.output.run_summary import NoRun, RunSummary  # noqa: E402
from harvest.tasks.run_context import service_client  # noqa: E402

harvest_warnings_to_run_logs()

log = logging.getLogger(__name__)


async def _pay_and_land(
    spec: JobSpec,
    begun: Begun,
    the_plan: Plan,
    layout: OutputLayout,
    client: ServiceClient,
    ledger: CreditLedger,
    journal: RunJournal,
    attempts: run_context.AttemptLogs,
    full: bool,
    service: ServiceAccess,
    stop: StopOnSignal,
) -> tuple[PackedSummaries, list[str]]:
    """The paid part of a run: the key check, every query (in this process or on Dask), the bill read after."""
    manifest, start = begun.manifest, begun.start
    progress.current().watch_pace(client.pace.report)
    progress.current().run_began(
        run_facts(
            begun, the_plan, spec.endpoints(), lambda: ledger.spent, lambda: ledger.refused_this_session
        )
    )
    with stop.collecting(ledger, client):
        settles = spec.runner.address is None or (  # a given cluster's rounds outlive a kill: they end first
            isinstance(start, Resume)
            and await killed_rounds_ended(
                spec.runner.address, manifest.run_id, lambda: ledger.stopped is not None
            )
        )
        before = await stop.unless_stopped(probe_balance(client, ledger))  # a stop cuts a silent service
        if before is not None:
            journal.balance("before", before)  # durable: a resume after a kill knows where the run began
        if settles:
            carry_over(ledger, client, begun.start.journal, before, one_account(service.label))
        if spec.runner.kind == "dask":
            info = run_info(spec, service, layout, manifest.run_id, manifest.started, full)
            rounds = Rounds(
                spec,
                the_plan,
                start,
                journal,
                ledger,
                layout,
                info,
                client.scrub,
                client.balance.settle_refusals,
            )
            summaries, skipped = await rounds.run(), rounds.discovery.skipped
        else:
            ctx = run_context.RunContext(
                manifest.run_id, datetime.fromisoformat(manifest.started), layout, spec.endpoints(), client,
                ledger, attempts, incremental=not full, faults=attempts.faults or FaultStop(ledger),
            )  # fmt: skip
            summaries, skipped = await _fan_out(ctx, the_plan, begun, journal, spec.name)
    after = await read_after(client) if before is not None else None
    if after is not None:
        journal.balance("after", after)
        settle_refusals(ledger, summaries, client.balance.billed(after))
    note_bill(begun.manifest, begun.start.journal.balances, before, after)
    manifest.rate_limit = client.pace.report().as_dict()
    return summaries, skipped


async def _fan_out(
    ctx: run_context.RunContext, the_plan: Plan, begun: Begun, journal: RunJournal, job: str
) -> tuple[PackedSummaries, list[str]]:
    """Every query in this process, into the run's one Parquet writer; its files go into the manifest (none when
    the machine could not write them: the run stops, and its resume lands the raw pages again)."""
    layout, run_id = ctx.layout, ctx.run_id
    resuming = isinstance(begun.start, Resume)  # a new run id has no files yet: no glob, no index
    removed = fresh_parts(layout, run_id, ctx.started) if resuming else []  # its raw pages land again
    ctx.raw_index = (begun.start.raw_index or RawIndex(layout.raw_files(run_id))) if resuming else None
    session = journal.session or layout.next_session(run_id)  # the number the journal's session line names
    ctx.sink = open_run_sink(layout, run_id, ctx.started)
    fan = Fanout(ctx, the_plan, begun.start, journal, job)
    ctx.on_records = fan.on_records
    run_context.register(ctx)
    try:
        with RawPageWriter(layout.session_raw_file(run_id, session), fsync=ctx.fsync) as ctx.raw:
            ctx.attempts.share(layout.session_requests_file(run_id, session))
            summaries = await fan.run(layout)
    finally:
        run_context.unregister(run_id)
        ctx.attempts.end_sharing()
        files = publish(ctx, ctx.sink, layout.raw_files(run_id))
    begun.manifest.files = layout.listed(files or [])
    begun.manifest.files_rewritten(removed)
    return summaries, fan.discovery.skipped


async def _collect(
    spec: JobSpec,
    layout: OutputLayout,
    begun: Begun,
    the_plan: Plan,
    service: ServiceAccess,
    full: bool,
    stop: StopOnSignal,
) -> RunManifest:
    manifest, start = begun.manifest, begun.start
    fsync = spec.durability == "fsync"
    faults = FaultStop()
    journal_file, session = layout.journal_file(manifest.run_id), layout.next_session(manifest.run_id)
    journal = RunJournal(journal_file, fsync=fsync, faults=faults, run=manifest.identity(), session=session)
    policy = spec.budget
    ledger = CreditLedger(
        manifest.budget, policy.min_balance, policy.policy, opening=start.journal.spent, journal=journal,
        fanouts=start.fanout_caps(the_plan.caps), prices=above_the_list(start.prices, spec.endpoints()),
        charged=start.journal.prices,
    )  # fmt: skip
    faults.ledger = ledger
    attempts = run_context.AttemptLogs(fsync=fsync, faults=faults)
    try:
        async with service_client(
            service.url, service.api_key, ledger, attempts, client_settings(spec)
        ) as client:
            summaries, skipped = await _pay_and_land(
                spec, begun, the_plan, layout, client, ledger, journal, attempts, full, service, stop
            )
    finally:
        journal.close()
    stopped = ledger.stopped
    if stopped is not None:
        summaries += start.unstarted(the_plan.queries, summaries, stopped.kind)
        manifest.error = stopped.reason
    for note in skipped:
        log.warning("dependent query not started: %s", note)
    if isinstance(start, Resume) and start.lost:
        log.warning(
            "paid again for %d pages of %d queries whose raw pages the disk had lost (they were paid before)",
            start.paid_again(summaries), len(start.lost),
        )  # fmt: skip
    manifest.status = run_status([s["status"] for s in summaries], stopped.kind if stopped else None)
    manifest.finished = datetime.now(UTC).isoformat()
    manifest.credits_spent = ledger.spent
    manifest.queries = summaries
    if faults.fault is not None:
        manifest.machine_fault = str(faults.fault)
    return manifest


@plain_flow(keyless_parameters, name="collect_job", log_prints=False, validate_parameters=True)
async def collect_job(
    spec_path: str | None = None,
    base_url: str | None = None,
    budget: int | None = None,
    output: str | None = None,
    mode: Mode = "auto",
    full: bool = False,
    spec_text: str | None = None,
    export_to: str | None = None,
) -> Any:
    """Collect one job; the final state carries the run summary (also in DuckDB's `runs` and an artifact).

    `spec_text`: the spec's YAML itself (a deployment's runs then need no file where the worker runs;
    `spec_path` only names it in messages). Without it the spec is read from `spec_path`, which a deployment
    should give as an absolute path. `mode`: `auto` resumes an unfinished run of the job or starts a new one;
    `fresh` abandons an unfinished run first; `continue` picks up the queries earlier runs stopped. `full`:
    incremental queries page fully. `export_to`: the spec's `export.to` made absolute where the deployment was
    made (`harvest serve`), as `output` is: a relative one would land wherever the worker happens to run.
    Called by `harvest run` (`run_collect` with what it prepared: `flows.run.start.handed`), the spec, output and
    export arguments are not read again.
    """
    body_started()
    with quiet_gc():
        ready = handed()  # not a ContextVar here: Dask pickles this function by value, with what it names
        if ready is not None:
            run = RunArguments(base_url, budget, mode, full, _absolute(spec_path))
            return await _collect_job(ready.spec, ready.layout, ready.lock, run, ready.start)
        spec = _spec(spec_path, spec_text)
        if export_to is not None and spec.export is not None:
            spec = spec.model_copy(update={"export": spec.export.model_copy(update={"to": export_to})})
        layout, path = OutputLayout(Path(output or spec.output)), None if spec_text else _absolute(spec_path)
        check_output_dir(layout.root, spec.min_free_mb, spec.catalog().kinds(), declared_by(spec, path))
        lock = lock_job(layout, spec.name)
        try:
            run = RunArguments(base_url, budget, mode, full, path)
            return await _collect_job(spec, layout, lock, run, None)
        finally:
            lock.release()


def _spec(spec_path: str | None, spec_text: str | None) -> JobSpec:
    if spec_text is not None:
        return parse_spec(spec_text, file=spec_path or "<spec_text>")
    if spec_path is None:
        raise UsageError("collect_job needs spec_text (the spec's YAML) or spec_path (an absolute path)")
    return load_spec(spec_path)


def _absolute(spec_path: str | None) -> str | None:
    return None if spec_path is None else os.path.abspath(spec_path)


async def _collect_job(
    spec: JobSpec, layout: OutputLayout, lock: job_lock.JobLock, run: RunArguments, start: RunStart | None
) -> Any:
    """The run under the job's lock, which its caller took and releases. `start`: as `harvest run` decided it
    (None: decided here); a Prefect retry of the flow decides again, to resume what the earlier attempt made."""
    the_plan = plan(spec)
    stop = StopOnSignal()
    mark = prefect_outage.WATCH.mark()  # Prefect's failures from here on are this run's
    with stop.installed(), prefect_outage.condensing():
        async with open_service(spec, run.base_url) as service:
            if start is None and (away := await not_begun(service, layout, spec.name, stop)) is not None:
                return away  # the service away, or a stop while it was asked: no run made, nothing sent
            flow_run_id, attempt, _ = flow_run_facts()
            if start is None or attempt > 1:
                retry_of = flow_run_id if attempt > 1 else None
                start = decide(spec, layout, service.label, run.mode, retry_of=retry_of)
            ready = await ready_to_pay(spec, layout, service, start, the_plan, run, lock, stop)
            if not isinstance(ready, tuple):
                return ready  # nothing to continue, or the disk would not take the run's first writes
            begun, loaded_first = ready
            paying = time.monotonic()
            manifest = await _collect(spec, layout, begun, the_plan, service, begun.manifest.full, stop)
            key = service.api_key
        written = write_end_manifest(layout, manifest)
        loading = time.monotonic()
        loaded, load_refused, held = load_run(layout, manifest, stop) if written else (None, None, None)
        loaded_at = time.monotonic()
        exported = export_step(spec, layout, loaded is not None, stop)
        exported_at = time.monotonic()
        summary = RunSummary.of(manifest, loaded)
        summary.unstarted_exit_code = spec.budget.unstarted_exit_code
        summary.seconds = {"paging": round(loading - paying, 2), "loading": round(loaded_at - loading, 2)}
        if exported is not None:
            summary.seconds["exporting"] = round(exported_at - loaded_at, 2)
        summary.loaded_first, summary.load_interrupted = loaded_first, stop.abandoned_load
        summary.load_refused, summary.load_held, summary.ended_on_disk = load_refused, held, written
        summary.export = exported
    return await tell_the_end(spec.name, layout, summary, flow_run_facts()[2], key, mark)


async def run_collect(prepared: Prepared | None = None, **parameters: Any) -> RunSummary | NoRun:
    """Run the flow in this process and return the run summary whatever the final state, and whatever Prefect
    made of it: a run whose body ended is reported by its data when Prefect's API let it down at the end (its
    record waits in the output directory, `flows.orchestrator.prefect_record`); a record the run left because
    Prefect missed events on the way is told as soon as the flow run ended. `prepared`: what `harvest run`
    prepared for the flow (`flows.run.start.handed_over`)."""
    token = ENDED.set(ended := Ended())
    try:
        with handed_over(prepared):
            state = await collect_job(**parameters, return_state=True)
    except NotTold:
        return _untold(ended, None)
    except Exception as exc:
        if not prefect_outage.caused_by_api(exc):  # Prefect's client wraps some ("Failed to reach API")
            raise
        if not ended.started:
            raise prefect_outage.NotStarted(prefect_outage.said(exc)) from exc
        if ended.summary is None:
            raise
        return _untold(ended, exc)  # the engine could not report the final state the body returned
    finally:
        ENDED.reset(token)
    if ended.owed is not None and ended.layout is not None and ended.owed.why:
        await tell_owed(ended.layout, ended.owed.job)
    result = await state.aresult(raise_on_failure=False)
    if isinstance(result, RunFailed):
        return result.summary
    if isinstance(result, BaseException):
        raise result
    if not isinstance(result, RunSummary | NoRun):
        raise RuntimeError(
            f"the flow ended in state {state.type.value} without a run summary: {state.message}"
        )
    return result


def _untold(ended: Ended, exc: Exception | None) -> RunSummary:
    """The run's summary when Prefect could not be told its end: the record is on disk (written now when the
    flow engine failed after the body returned its state)."""
    summary, owed = ended.summary, ended.owed
    assert isinstance(summary, RunSummary) and owed is not None and ended.layout is not None
    if exc is not None and ended.final is not None:
        owed.state, owed.message = ended.final
        owed.why = prefect_outage.said(exc)
        owe(ended.layout, owed)
    summary.prefect_untold = owed.why
    return summary
