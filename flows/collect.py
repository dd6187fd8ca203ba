"""The `collect_job` flow: spec -> plan -> connector tasks under one credit ledger -> files -> tables.

One Prefect task per query (never per page: Prefect costs 3-6 ms and a server record per task). Queries run as
concurrent tasks in the flow's event loop and share one connection pool and one ledger; `concurrency` bounds the
HTTP requests in flight. Dependent queries start as their parents' pages land, not after the parent ends.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flows.settings import apply_prefect_defaults

apply_prefect_defaults()

from prefect import flow, get_run_logger  # noqa: E402
from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact  # noqa: E402

from connectors import catalog  # noqa: E402
from connectors.client import ServiceClient  # noqa: E402
from connectors.ledger import CreditLedger  # noqa: E402
from connectors.pager import OK_STATUSES, Page, QuerySpec  # noqa: E402
from flows import progress  # noqa: E402
from flows.load import RunManifest, load_manifest_into_duckdb, write_manifest  # noqa: E402
from flows.plan import DependentQuery, Plan, instantiate, plan  # noqa: E402
from flows.service import open_service  # noqa: E402
from flows.spec import JobSpec, load_spec  # noqa: E402
from tasks import run_context  # noqa: E402
from tasks.collect import QuerySummary, collect_query  # noqa: E402
from tasks.duckdb_load import DatabaseBusy  # noqa: E402
from tasks.layout import OutputLayout  # noqa: E402


def run_status(statuses: list[str]) -> str:
    """`failed` if any query failed, `budget_exhausted` if any stopped at a cap, else `complete`."""
    if any(s not in OK_STATUSES for s in statuses):
        return "failed"
    if "budget_exhausted" in statuses:
        return "budget_exhausted"
    return "complete"


def new_run_id(now: datetime) -> str:
    return f"{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


class Fanout:
    """Starts the planned queries, and a dependent query for each new value its parent's records carry."""

    def __init__(self, ctx: run_context.RunContext, the_plan: Plan) -> None:
        self.ctx = ctx
        self.plan = the_plan
        self.tasks: set[asyncio.Task[dict[str, Any]]] = set()
        self.template_of: dict[str, str] = {}
        self.endpoint_of: dict[str, str] = {}
        self.children: dict[str, list[DependentQuery]] = {}
        for dep in the_plan.dependents:
            self.children.setdefault(dep.parent, []).append(dep)
        self.seen: dict[str, set[Any]] = {dep.template_id: set() for dep in the_plan.dependents}
        self.parts = 0
        self.summaries: list[dict[str, Any]] = []
        self.skipped: list[str] = []

    def start(self, query: QuerySpec, template_id: str) -> None:
        self.template_of[query.query_id] = template_id
        self.endpoint_of[query.query_id] = query.endpoint
        self.parts += 1
        coro = collect_query(self.ctx.run_id, asdict(query), self.parts)
        task: asyncio.Task[dict[str, Any]] = asyncio.ensure_future(coro)
        task.set_name(query.query_id)
        self.tasks.add(task)
        progress.current().query_started(query.query_id, query.endpoint)

    def on_page(self, query: QuerySpec, page: Page) -> None:
        progress.current().page_landed(query.query_id, page.record_count, page.credits)
        endpoint = self.ctx.endpoints[query.endpoint]
        for dep in self.children.get(self.template_of.get(query.query_id, ""), []):
            for kind in endpoint.kinds:
                fld = kind.field(dep.field)
                if fld is None or (dep.kind is not None and kind.table != dep.kind):
                    continue
                read = fld.reader(query.params)
                for value in (read(record) for record in page.records.get(kind.table, [])):
                    if value in (None, "") or value in self.seen[dep.template_id]:
                        continue
                    self.seen[dep.template_id].add(value)
                    try:
                        child = instantiate(dep, value)
                    except ValueError as exc:  # one odd parent value must not stop the run
                        self.skipped.append(f"{dep.template_id}: {exc}")
                        continue
                    self.start(child, dep.template_id)

    async def run(self) -> list[dict[str, Any]]:
        for query in self.plan.queries:
            self.start(query, self.plan.template_of(query.query_id))
        while self.tasks:
            done, _ = await asyncio.wait(self.tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                self.tasks.discard(task)
                try:
                    summary = task.result()
                except Exception as exc:  # a broken task must not take the other queries' landed data with it
                    query_id = task.get_name()
                    summary = QuerySummary(
                        query_id=query_id, endpoint=self.endpoint_of[query_id], status="failed", pages=0,
                        records=0, credits=self.ctx.ledger.per_query_spent.get(query_id, 0), next_cursor=None,
                        error=f"{type(exc).__name__}: {exc}",
                    ).as_dict()  # fmt: skip
                progress.current().query_finished(summary["query_id"], summary["status"])
                self.summaries.append(summary)
        return self.summaries


@flow(name="collect_job", log_prints=False, validate_parameters=True)
async def collect_job(
    spec_path: str,
    base_url: str | None = None,
    budget: int | None = None,
    output: str | None = None,
) -> dict[str, Any]:
    """Collect one job. Returns the run summary (also stored in DuckDB's `runs` and as a Prefect artifact)."""
    logger = get_run_logger()
    spec: JobSpec = load_spec(spec_path)
    the_plan = plan(spec)
    credits_cap = spec.budget.credits if budget is None else budget
    layout = OutputLayout(Path(output or spec.output))
    started = datetime.now(UTC)
    run_id = new_run_id(started)
    endpoints = catalog.endpoints(spec.costs or None)
    ledger = CreditLedger(credits_cap, min_balance=spec.budget.min_balance, policy=spec.budget.policy)
    attempts = run_context.AttemptLogs(fsync=spec.durability == "fsync")
    async with (
        open_service(spec, base_url) as service,
        ServiceClient(
            service.url, service.api_key, ledger, on_attempt=attempts.log, max_in_flight=spec.concurrency
        ) as client,
    ):
        ctx = run_context.RunContext(run_id, started, layout, endpoints, client, ledger, attempts)
        fan = Fanout(ctx, the_plan)
        ctx.on_page = fan.on_page
        run_context.register(ctx)
        try:
            logger.info(
                "run %s: %d planned queries, budget %d credits", run_id, len(the_plan.queries), credits_cap
            )
            summaries = await fan.run()
            for note in fan.skipped:
                logger.warning("dependent query not started: %s", note)
        finally:
            run_context.unregister(run_id)
    finished = datetime.now(UTC)
    manifest = RunManifest(
        run_id=run_id,
        job=spec.name,
        spec_hash=spec.spec_hash(),
        service=service.label,
        started=started.isoformat(),
        finished=finished.isoformat(),
        status=run_status([s["status"] for s in summaries]),
        budget=credits_cap,
        credits_spent=ledger.spent,
        queries=summaries,
    )
    write_manifest(layout, manifest)
    try:
        loaded: dict[str, int] | None = load_manifest_into_duckdb(layout, manifest)
    except DatabaseBusy as exc:
        logger.warning("%s", exc)
        loaded = None
    summary = manifest.summary(loaded)
    await _publish_artifact(spec.name, summary)
    return summary


async def _publish_artifact(job: str, summary: dict[str, Any]) -> None:
    key = "".join(c if c.isalnum() else "-" for c in f"harvest-{job}".lower())
    await acreate_table_artifact(
        table=[
            {k: q[k] for k in ("query_id", "endpoint", "status", "pages", "records", "credits")}
            for q in summary["queries"]
        ],
        key=key,
        description=f"harvest run {summary['run_id']}: {summary['status']}, "
        f"{summary['credits_spent']}/{summary['budget']} credits",
    )
    rows = "\n".join(f"| {t} | {n} |" for t, n in sorted(summary["tables"].items()))
    await acreate_markdown_artifact(
        markdown=f"# {job}: rows per table\n\n| table | rows |\n|---|---|\n{rows}\n", key=f"{key}-tables"
    )
