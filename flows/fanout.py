"""Starting queries: the planned ones, and a dependent query for each new value its parent's records carry.

Dependent queries start as their parents' pages land, not after the parent ends. Every start and end is written
to the run journal first, so a resumed run knows which queries existed and which ended. Once the run is
stopping (Ctrl-C, a refused key), no new query starts: a resume finds them again in the parents' raw pages.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from dataclasses import asdict
from typing import Any, cast

from prefect import tags
from prefect.states import State

from connectors.catalog import Endpoint
from connectors.pager import QuerySpec
from flows import progress
from flows.plan import DependentQuery, Plan, base_id, instantiate
from flows.resume import RunStart
from tasks.collect import QuerySummary, collect_query, task_result
from tasks.journal import RunJournal
from tasks.layout import OutputLayout
from tasks.replay import replay
from tasks.run_context import RunContext


class Fanout:
    def __init__(
        self, ctx: RunContext, the_plan: Plan, start: RunStart, journal: RunJournal, job: str
    ) -> None:
        self.ctx = ctx
        self.plan = the_plan
        self.start_info = start
        self.journal = journal
        self.tags = ("harvest", f"job:{job}")
        self.tasks: set[asyncio.Task[dict[str, Any]]] = set()
        self.endpoint_of: dict[str, str] = {}
        self.children: dict[str, list[DependentQuery]] = {}
        for dep in the_plan.dependents:
            self.children.setdefault(dep.parent, []).append(dep)
        self.seen: dict[str, set[Any]] = {dep.template_id: set() for dep in the_plan.dependents}
        self.started: set[str] = set()
        self.parts = 0
        self.summaries: list[dict[str, Any]] = list(start.kept.values())
        self.skipped: list[str] = []

    @property
    def stopping(self) -> bool:
        return self.ctx.ledger.stopped is not None

    def start(self, query: QuerySpec) -> None:
        """Start a query unless it ran already; the run start decides how (fresh, resumed, continued)."""
        if query.query_id in self.started:
            return
        self.started.add(query.query_id)
        decided = self.start_info.decide(query)
        if decided is None or self.stopping:
            return
        self.journal.query_started(asdict(decided))
        self.endpoint_of[decided.query_id] = decided.endpoint
        self.parts += 1
        with tags(*self.tags):  # the asyncio task copies this context: its task run gets the tags
            coro = self._collect(asdict(decided), self.parts)
            task: asyncio.Task[dict[str, Any]] = asyncio.ensure_future(coro)
        task.set_name(decided.query_id)
        self.tasks.add(task)
        progress.current().query_started(decided.query_id, decided.endpoint)

    async def _collect(self, query: dict[str, Any], part: int) -> dict[str, Any]:
        """One query's task run; its summary whether the task run ended Completed or Failed."""
        call = collect_query(self.ctx.run_id, query, part, return_state=True)
        state = await cast(Awaitable[State[Any]], call)  # an async task called with return_state
        summary: dict[str, Any] = await task_result(state)
        return summary

    def on_records(
        self, query: QuerySpec, records: Mapping[str, list[Any]], credits: int, replayed: bool
    ) -> None:
        if not replayed:
            progress.current().page_landed(query.query_id, sum(map(len, records.values())), credits)
        endpoint = self.ctx.endpoints[query.endpoint]
        for dep in self.children.get(base_id(query.query_id), []):
            self._discover(dep, endpoint, query, records)

    def _discover(
        self, dep: DependentQuery, endpoint: Endpoint, query: QuerySpec, records: Mapping[str, list[Any]]
    ) -> None:
        for kind in endpoint.kinds:
            read = kind.reader(dep.field, query.params)
            if read is None or (dep.kind is not None and kind.table != dep.kind):
                continue
            for value in (read(record) for record in records.get(kind.table, [])):
                if value in (None, "") or value in self.seen[dep.template_id]:
                    continue
                self.seen[dep.template_id].add(value)
                try:
                    child = instantiate(dep, value)
                except ValueError as exc:  # one odd parent value must not stop the run
                    self.skipped.append(f"{dep.template_id}: {exc}")
                    continue
                self.start(child)

    def rediscover(self, layout: OutputLayout) -> None:
        """Children of queries kept from before the crash: found again in their parents' raw pages."""
        for query_id, summary in self.start_info.kept.items():
            if not self.children.get(base_id(query_id)):
                continue
            endpoint = self.ctx.endpoints[summary["endpoint"]]
            spec = QuerySpec(**self.start_info.journal.started[query_id])
            for page in replay(layout.raw_file(self.ctx.run_id, query_id), endpoint):
                self.on_records(spec, page.records, page.raw.credits, True)

    async def run(self, layout: OutputLayout) -> list[dict[str, Any]]:
        for query in self.plan.queries:
            self.start(query)
        for query in self.start_info.continue_at.values():
            self.start(query)  # continued children whose parents ended for good
        self.rediscover(layout)
        while self.tasks:
            done, _ = await asyncio.wait(self.tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                self.tasks.discard(task)
                summary = self._summary(task)
                self.journal.query_ended(summary)
                progress.current().query_finished(summary["query_id"], summary["status"])
                self.summaries.append(summary)
        return self.summaries

    def _summary(self, task: asyncio.Task[dict[str, Any]]) -> dict[str, Any]:
        try:
            return task.result()
        except Exception as exc:  # a broken task must not take the other queries' landed data with it
            query_id = task.get_name()
            return QuerySummary(
                query_id=query_id, endpoint=self.endpoint_of[query_id], status="failed", pages=0,
                records=0, credits=self.ctx.ledger.per_query_spent.get(query_id, 0), next_cursor=None,
                error=f"{type(exc).__name__}: {exc}",
            ).as_dict()  # fmt: skip
