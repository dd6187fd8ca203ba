"""The `collect_job` flow: spec -> plan -> connector tasks under one credit ledger -> files -> tables.

One Prefect task per query (never per page: Prefect costs 3-6 ms and a server record per task). Queries run as
concurrent tasks in the flow's event loop and share one connection pool and one ledger; `concurrency` bounds the
HTTP requests in flight. A run holds its job's lock, loads the job's earlier runs that never reached DuckDB,
starts new, resumes an unfinished run or continues a stopped one (`flows.run.start`), and ends in the Prefect state
that tells the truth (`flows.orchestrator.final_state`).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flows.orchestrator.prefect_settings import apply_prefect_defaults

apply_prefect_defaults()

from prefect import flow, get_run_logger  # noqa: E402
from prefect.context import FlowRunContext  # noqa: E402
from prefect.states import Completed, Crashed, State  # noqa: E402

from connectors.catalog.shape_overrides import shapes_data  # noqa: E402
from connectors.credits.ledger import CreditLedger  # noqa: E402
from connectors.errors import HarvestError  # noqa: E402
from connectors.http.client import RetryPolicy, ServiceClient, Timeouts  # noqa: E402
from connectors.http.pace import Pace  # noqa: E402
from flows.handoff.export_after_run import export_step  # noqa: E402
from flows.orchestrator.final_state import RunFailed, final_state, publish_artifact  # noqa: E402
from flows.orchestrator.prefect_runs import crash_stale_flow_runs  # noqa: E402
from flows.run import progress  # noqa: E402
from flows.run.abandon import abandon_run  # noqa: E402
from flows.run.bill import first_reading, run_bill  # noqa: E402
from flows.run.dask_rounds import Rounds, run_info  # noqa: E402
from flows.run.fanout import Fanout  # noqa: E402
from flows.run.interrupt import LoadInterrupted, StopOnSignal  # noqa: E402
from flows.run.load_step import load_earlier_runs, load_manifest_into_duckdb  # noqa: E402
from flows.run.memory import quiet_gc, release_memory  # noqa: E402
from flows.run.plan import Plan, plan  # noqa: E402
from flows.run.preflight import check_output_dir  # noqa: E402
from flows.run.service_access import ServiceAccess, open_service  # noqa: E402
from flows.run.start import (  # noqa: E402
    Mode,
    RunStart,
    continue_refused,
    continue_start,
    job_coverage,
    resume_start,
    retried_run,
    unfinished_run,
)
from flows.spec import JobSpec, UsageError, load_spec, parse_spec  # noqa: E402
from flows.spec.identity import plan_key  # noqa: E402
from tasks import run_context  # noqa: E402
from tasks.database.connection import DatabaseBusy  # noqa: E402
from tasks.output import job_lock  # noqa: E402
from tasks.output.journal import RunJournal  # noqa: E402
from tasks.output.layout import OutputLayout  # noqa: E402
from tasks.output.machine_fault import FaultStop, MachineFault, as_machine_fault  # noqa: E402
from tasks.output.manifest import RunManifest, run_status, write_manifest  # noqa: E402


def new_run_id(now: datetime) -> str:
    return f"{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


@dataclass
class Begun:
    start: RunStart
    manifest: RunManifest
    abandoned: RunManifest | None = None
    """The unfinished run `--fresh` abandoned first."""


def _flow_run() -> tuple[str | None, int, int]:
    """(flow run id, run count, retries) of the current Prefect flow run."""
    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        return None, 1, 0
    retries = ctx.flow_run.empirical_policy.retries or (ctx.flow.retries if ctx.flow else 0) or 0
    return str(ctx.flow_run.id), ctx.flow_run.run_count, retries


def _begin(
    spec: JobSpec,
    the_plan: Plan,
    layout: OutputLayout,
    service: ServiceAccess,
    mode: Mode,
    budget: int | None,
) -> Begun:
    """Decide what this run is (new, resumed, continued) and write its `running` manifest."""
    flow_run_id, run_count, _ = _flow_run()
    key = plan_key(spec)
    previous = retried_run(layout, spec.name, flow_run_id) if run_count > 1 else None
    if previous is None:
        previous = unfinished_run(layout, spec.name)
        if previous is not None and mode == "continue":
            raise continue_refused(previous)
    abandoned = None
    if previous is not None and mode == "fresh":
        abandoned = abandon_run(layout, previous, spec.endpoints())
        previous = None
    if previous is not None:
        start = resume_start(layout, previous, key, service.label)
        manifest = replace(
            previous,
            status="running",
            finished=None,
            flow_run_id=flow_run_id,
            flow_run_ids=previous.flow_runs(flow_run_id),
            resumes=previous.resumes + 1,
            budget=previous.budget if budget is None else budget,
            loaded=False,
            error=None,
            shapes=shapes_data(spec.shape_overrides()),
        )
    else:
        start = continue_start(layout, spec.name) if mode == "continue" else RunStart("new")
        now = datetime.now(UTC)
        manifest = RunManifest(
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
        )
    start.coverage = job_coverage(layout, spec.name, manifest.run_id)
    return Begun(start, manifest, abandoned)


async def _crash_stale_flow_runs(begun: Begun) -> None:
    """Earlier flow runs of the resumed or abandoned run that a killed process left Running: Crashed."""
    current = begun.manifest.flow_run_id
    if begun.abandoned is not None:
        why = f"harvest abandoned run {begun.abandoned.run_id} (--fresh) in flow run {current}"
        await crash_stale_flow_runs(begun.abandoned.flow_runs(), current, why)
    if begun.start.kind == "resume":
        why = (
            f"harvest resumed run {begun.manifest.run_id} in flow run {current}: the process that ran this flow "
            "run stopped without ending it (killed)"
        )
        await crash_stale_flow_runs(begun.manifest.flow_run_ids, current, why)


async def _probe_balance(client: ServiceClient, ledger: CreditLedger) -> int | None:
    """The account balance before anything is paid; a refused key stops the run here, at no cost."""
    try:
        return await client.credit_balance()
    except HarvestError as exc:
        ledger.stop("stopped", f"the service refused the API key before anything was paid: {exc}")
        return None


async def _read_after(client: ServiceClient) -> int | None:
    """The balance after the run; a refusal now (an emptied account) only makes the bill unknown."""
    try:
        return await client.credit_balance()
    except HarvestError:
        return None


def _note_bill(begun: Begun, before: int | None, after: int | None) -> None:
    """What the service billed the run over all its sessions, from the balance readings (`flows.run.bill`)."""
    manifest, earlier = begun.manifest, begun.start.journal.balances
    bill = run_bill(earlier, before, after)
    manifest.service_billed, manifest.bill_unknown = bill.credits, bill.unknown_because
    manifest.balance_before, manifest.balance_after = first_reading(earlier, before), after


def _client(
    spec: JobSpec, service: ServiceAccess, ledger: CreditLedger, attempts: run_context.AttemptLogs
) -> ServiceClient:
    timeout = spec.service.timeout_seconds
    return ServiceClient(
        service.url,
        service.api_key,
        ledger,
        timeouts=Timeouts(read=timeout, total=2 * timeout),
        retry=RetryPolicy(attempts=spec.service.attempts),
        on_attempt=attempts.log,
        max_answer_bytes=int(spec.service.max_answer_mb * 2**20),
        max_in_flight=spec.concurrency,
        pace=Pace(spec.rate_limit.per_second, spec.rate_limit.max_wait_seconds),
    )


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
) -> tuple[list[dict[str, Any]], list[str]]:
    """The paid part of a run: the key check, every query (in this process or on Dask), the bill read after."""
    manifest, start = begun.manifest, begun.start
    progress.current().watch_pace(client.pace.report)
    with stop.collecting(ledger, client):
        before = await _probe_balance(client, ledger)
        if before is not None:
            journal.balance("before", before)  # durable: a resume after a kill knows where the run began
        if spec.runner.kind == "dask":
            info = run_info(spec, service, layout, manifest.run_id, manifest.started, full)
            rounds = Rounds(spec, the_plan, start, journal, ledger, layout, info, scrub=client.scrub)
            summaries, skipped = await rounds.run(), rounds.skipped
        else:
            ctx = run_context.RunContext(
                manifest.run_id, datetime.fromisoformat(manifest.started), layout, spec.endpoints(), client,
                ledger, attempts, incremental=not full, faults=attempts.faults or FaultStop(ledger),
            )  # fmt: skip
            fan = Fanout(ctx, the_plan, start, journal, spec.name)
            ctx.on_records = fan.on_records
            run_context.register(ctx)
            try:
                summaries, skipped = await fan.run(layout), fan.skipped
            finally:
                run_context.unregister(ctx.run_id)
    after = await _read_after(client) if before is not None else None
    if after is not None:
        journal.balance("after", after)
        if spec.runner.kind == "local":
            _settle_refusals(ledger, summaries, before - after if before is not None else None)
    _note_bill(begun, before, after)
    manifest.rate_limit = client.pace.report().as_dict()
    return summaries, skipped


def _settle_refusals(ledger: CreditLedger, summaries: list[dict[str, Any]], billed: int | None) -> None:
    """The refusals counted at their reservation, settled against the session's bill (the balance read before
    and after): what it was not billed goes back, and each query's credits say what the service charged it."""
    if billed is None or not ledger.reconcile(billed):
        return
    spent = ledger.per_query_spent
    for summary in summaries:
        summary["credits"] = spent.get(summary["query_id"], 0)


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
    journal = RunJournal(layout.journal_file(manifest.run_id), fsync=fsync, faults=faults)
    policy = spec.budget
    ledger = CreditLedger(
        manifest.budget, policy.min_balance, policy.policy, opening=start.journal.spent, journal=journal
    )
    faults.ledger = ledger
    attempts = run_context.AttemptLogs(fsync=fsync, faults=faults)
    try:
        async with _client(spec, service, ledger, attempts) as client:
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
        get_run_logger().warning("dependent query not started: %s", note)
    manifest.status = run_status([s["status"] for s in summaries], stopped.kind if stopped else None)
    manifest.finished = datetime.now(UTC).isoformat()
    manifest.credits_spent = ledger.spent
    manifest.queries = summaries
    if faults.fault is not None:
        manifest.machine_fault = str(faults.fault)
    return manifest


def _lock(layout: OutputLayout, job: str) -> job_lock.JobLock:
    try:
        return job_lock.acquire(layout.lock_file(job))
    except job_lock.JobLocked as exc:
        raise UsageError(str(exc)) from None


@flow(name="collect_job", log_prints=False, validate_parameters=True)
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
    """
    spec = _spec(spec_path, spec_text)
    if export_to is not None and spec.export is not None:
        spec = spec.model_copy(update={"export": spec.export.model_copy(update={"to": export_to})})
    with quiet_gc():
        return await _collect_job(spec, base_url, budget, output, mode, full)


def _spec(spec_path: str | None, spec_text: str | None) -> JobSpec:
    if spec_text is not None:
        return parse_spec(spec_text, file=spec_path or "<spec_text>")
    if spec_path is None:
        raise UsageError("collect_job needs spec_text (the spec's YAML) or spec_path (an absolute path)")
    return load_spec(spec_path)


async def _collect_job(
    spec: JobSpec, base_url: str | None, budget: int | None, output: str | None, mode: Mode, full: bool
) -> Any:
    the_plan = plan(spec)
    layout = OutputLayout(Path(output or spec.output))
    check_output_dir(layout.root, spec.min_free_mb)  # the CLI checked already; a deployment's run has not
    stop = StopOnSignal()
    with stop.installed():
        lock = _lock(layout, spec.name)
        try:
            async with open_service(spec, base_url) as service:
                begun = _begin(spec, the_plan, layout, service, mode, budget)
                await _crash_stale_flow_runs(begun)
                try:
                    loaded_first = _load_earlier(layout, spec.name, begun.manifest.run_id, stop)
                except MachineFault as fault:
                    return _not_started(fault, layout)
                if begun.start.kind == "continue" and not begun.start.has_work(the_plan):
                    return _nothing_to_continue(begun, loaded_first)
                write_manifest(layout, begun.manifest)
                lock.describe(run_id=begun.manifest.run_id, job=spec.name)
                paying = time.monotonic()
                manifest = await _collect(spec, layout, begun, the_plan, service, full, stop)
                key = service.api_key
            written = _write_manifest(layout, manifest)
            loading = time.monotonic()
            loaded = _load(layout, manifest, stop) if written else None
            loaded_at = time.monotonic()
            exported = export_step(spec, layout, loaded is not None, stop)
            exported_at = time.monotonic()
        finally:
            lock.release()
        summary = manifest.summary(loaded)
        summary["seconds"] = {"paging": round(loading - paying, 2), "loading": round(loaded_at - loading, 2)}
        if exported is not None:
            summary["seconds"]["exporting"] = round(exported_at - loaded_at, 2)
        summary["loaded_first"] = loaded_first
        if stop.abandoned_load:
            summary["load_interrupted"] = True
        if exported is not None:
            summary["export"] = exported
        await publish_artifact(spec.name, summary)
    return final_state(summary, _flow_run()[2], key)


def _write_manifest(layout: OutputLayout, manifest: RunManifest) -> bool:
    """The run's end, on disk; False when this machine could not write it (the manifest on disk still says the
    run is going, so the next `harvest run` resumes it, and nothing is loaded now)."""
    try:
        write_manifest(layout, manifest)
    except OSError as exc:
        fault = as_machine_fault(exc, layout.manifest_file(manifest.run_id))
        if fault is None:
            raise
        manifest.machine_fault = manifest.machine_fault or str(fault)
        return False
    return True


def _load(layout: OutputLayout, manifest: RunManifest, stop: StopOnSignal) -> dict[str, int] | None:
    """Rows per table after loading the run into DuckDB; None when DuckDB is busy, a second Ctrl-C abandoned the
    load, or this machine could not write it (a full disk): the run is then loaded by `harvest load`, or by the
    job's next run before it pays."""
    release_memory()
    try:
        with stop.load():
            return load_manifest_into_duckdb(layout, manifest)
    except DatabaseBusy as exc:
        get_run_logger().warning("%s", exc)
    except LoadInterrupted:
        pass
    except Exception as exc:
        fault = as_machine_fault(exc, layout.db)
        if fault is None:
            raise
        manifest.machine_fault = (
            manifest.machine_fault or f"{fault}; the run is landed, not loaded into DuckDB"
        )
    return None


def _load_earlier(layout: OutputLayout, job: str, current: str, stop: StopOnSignal) -> list[dict[str, Any]]:
    """The job's runs that landed but never reached DuckDB (killed in the load step, DuckDB busy), loaded
    before this run pays: cheap (their Parquet is written) and incremental queries then see their keys."""
    loaded, busy = load_earlier_runs(layout, job, current, stop)
    logger = get_run_logger()
    for run in loaded:
        logger.info(
            "loaded earlier run %s (%s) into DuckDB first: %s rows", run["run_id"], run["status"], run["rows"]
        )
    if busy is not None:
        logger.warning("earlier runs not loaded yet: %s", busy)
    return loaded


def _not_started(fault: MachineFault, layout: OutputLayout) -> State[Any]:
    """This machine could not finish loading the job's earlier runs (a full disk): no run starts, nothing is
    paid; the next `harvest run` loads them first."""
    message = f"not started: {fault}; the job's earlier runs wait to be loaded into {layout.db}"
    data = {"status": "not_started", "message": message, "machine_fault": str(fault)}
    return Crashed(message=message, data=data)


def _nothing_to_continue(begun: Begun, loaded_first: list[dict[str, Any]]) -> State[Any]:
    """`--continue` after a run that finished everything: no new run, nothing spent."""
    previous = begun.start.previous
    assert previous is not None
    message = f"nothing to continue: run {previous.run_id} left no stopped query"
    data = {"status": "nothing_to_continue", "message": message, "loaded_first": loaded_first}
    return Completed(message=message, data=data)


async def run_collect(**parameters: Any) -> dict[str, Any]:
    """Run the flow in this process and return the run summary whatever the final state."""
    state = await collect_job(**parameters, return_state=True)
    result = await state.aresult(raise_on_failure=False)
    if isinstance(result, RunFailed):
        return result.summary
    if isinstance(result, BaseException):
        raise result
    if not isinstance(result, dict):
        raise RuntimeError(
            f"the flow ended in state {state.type.value} without a run summary: {state.message}"
        )
    return result
