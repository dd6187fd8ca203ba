"""Starting queries: the planned ones, and a dependent query for each new value its parent's records carry.

Dependent queries are found as their parents' pages land, not after the parent ends. Every start and end is
written to the run journal first, so a resumed run knows which queries existed and which ended.

The planned queries start at once (a short budget is shared breadth-first among them). Dependent queries wait in
line and start in the order they were found, at most `DEPENDENTS_PER_SLOT` per connection slot at a time: a
parent with thousands of records would otherwise start thousands of Prefect tasks, each costing the event loop
its Prefect bookkeeping, and after a Ctrl-C each would have to end through Prefect (half a minute for a few
hundred). Once the run is stopping (Ctrl-C, a refused key), nothing more starts: the queries still in line are
journaled and listed as stopped at their start cursor without a Prefect task, so a resume or `--continue` runs
them; one found after the stop is listed the same way.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Iterator, Mapping
from dataclasses import asdict
from typing import Any, cast

from prefect import tags
from prefect.states import State

from connectors.catalog.endpoints import Endpoint
from connectors.paging.pager import QuerySpec
from flows.run import progress
from flows.run.discovery import Discovery
from flows.run.plan import DependentQuery, Plan
from flows.run.start import RunStart
from tasks.landing import collect_query, task_result
from tasks.output.journal import RunJournal
from tasks.output.layout import OutputLayout
from tasks.output.query_summary import QuerySummary
from tasks.output.replay import replay
from tasks.run_context import RunContext

DEPENDENTS_PER_SLOT = 2
"""Dependent queries running at once per connection slot (`concurrency`): one sending, one ready to send as soon
as the slot frees, so the slots never wait on a task's Prefect bookkeeping."""


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
        self.discovery = Discovery(the_plan, start, ctx.incremental)
        self.started: set[str] = set()
        self.parts = 0
        self.summaries: list[dict[str, Any]] = list(start.kept.values())
        self.waiting: deque[QuerySpec] = deque()
        """Dependent queries found and not started yet, in the order they were found."""
        self.from_line: set[str] = set()
        """Queries started from `waiting` that are still running."""
        self.window = DEPENDENTS_PER_SLOT * ctx.client.max_in_flight

    @property
    def stopping(self) -> bool:
        return self.ctx.ledger.stopped is not None

    def start(self, query: QuerySpec, wait: bool = False) -> None:
        """Start a query unless it ran already; the run start decides how (fresh, resumed, continued).

        `wait`: a dependent (or continued) query, started in turn. One with raw pages from before a crash starts
        at once: it lands them without sending anything, and the run's manifest needs them."""
        if query.query_id in self.started:
            return
        self.started.add(query.query_id)
        for child in self.discovery.left_over(self.ctx.layout.db, query):
            self.start(child, wait=True)
        decided = self.start_info.decide(query)
        if decided is None:
            return
        has_pages = decided.resume and self.ctx.layout.raw_file(self.ctx.run_id, decided.query_id).exists()
        if wait and not has_pages:
            self.waiting.append(decided)
            self._fill()
        elif has_pages or not self.stopping:  # paid pages land even after a stop: replaying sends nothing
            self._launch(decided)

    def _fill(self) -> None:
        """Start waiting queries while the window has room; once stopping, list them as never started."""
        if self.stopping:
            while self.waiting:
                self._not_started(self.waiting.popleft())
            return
        while self.waiting and len(self.from_line) < self.window:
            query = self.waiting.popleft()
            self.from_line.add(query.query_id)
            self._launch(query)

    def _not_started(self, query: QuerySpec) -> None:
        """What the query's task would have said had it started after the stop, without a Prefect task."""
        stopped = self.ctx.ledger.stopped
        assert stopped is not None
        self.journal.query_started(asdict(query))
        credits = self.ctx.ledger.per_query_spent.get(query.query_id, 0)
        summary = QuerySummary.not_started(query, stopped.kind, credits).as_dict()
        self.journal.query_ended(summary)
        self.summaries.append(summary)

    def _launch(self, decided: QuerySpec) -> None:
        self.journal.query_started(asdict(decided))
        self.ctx.ledger.expect(decided.query_id)  # its task may start late: the budget's share waits for it
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
        self, query: QuerySpec, records: Mapping[str, list[Any]], kept: int, credits: int, replayed: bool
    ) -> None:
        if not replayed:
            progress.current().page_landed(query.query_id, kept, credits)
        endpoint = self.ctx.endpoints[query.endpoint]
        for dep in self.discovery.dependents_of(query.query_id):
            for child in self.discovery.children(query, dep, _values(dep, endpoint, query, records)):
                self.start(child, wait=True)

    def rediscover(self, layout: OutputLayout) -> None:
        """Children of queries kept from before the crash: found again in their parents' raw pages."""
        for query_id, summary in self.start_info.kept.items():
            if not self.discovery.dependents_of(query_id):
                continue
            endpoint = self.ctx.endpoints[summary["endpoint"]]
            spec = QuerySpec(**self.start_info.journal.started[query_id])
            for page in replay(layout.raw_file(self.ctx.run_id, query_id), endpoint):
                self.on_records(spec, page.records, page.kept, page.raw.credits, True)

    async def run(self, layout: OutputLayout) -> list[dict[str, Any]]:
        for query in self.plan.queries:
            self.start(query)
        for query in self.start_info.continue_at.values():
            self.start(query, wait=True)  # continued children whose parents ended for good
        self.rediscover(layout)
        self._fill()
        while self.tasks:
            done, _ = await asyncio.wait(self.tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                self.tasks.discard(task)
                self.ctx.ledger.finish(task.get_name())  # a task that broke before paging was still expected
                self.from_line.discard(task.get_name())
                summary = self._summary(task)
                self.journal.query_ended(summary)
                progress.current().query_finished(summary["query_id"], summary["status"])
                self.summaries.append(summary)
            self._fill()
        return self.summaries

    def _summary(self, task: asyncio.Task[dict[str, Any]]) -> dict[str, Any]:
        try:
            return task.result()
        except Exception as exc:  # a broken task must not take the other queries' landed data with it
            query_id, layout, run_id = task.get_name(), self.ctx.layout, self.ctx.run_id
            stopped = self.ctx.faults.caught(exc)  # the machine's (a full disk): resumable, not a failure
            return QuerySummary(
                query_id=query_id, endpoint=self.endpoint_of[query_id],
                status="interrupted" if stopped else "failed", pages=0,
                records=0, credits=self.ctx.ledger.per_query_spent.get(query_id, 0), next_cursor=None,
                error=self.ctx.client.scrub(f"{type(exc).__name__}: {exc}"),
                raw_file=layout.relative(layout.raw_file(run_id, query_id)),
                requests_file=layout.relative(layout.requests_file(run_id, query_id)),
            ).as_dict()  # fmt: skip


def _values(
    dep: DependentQuery, endpoint: Endpoint, query: QuerySpec, records: Mapping[str, list[Any]]
) -> Iterator[Any]:
    """The values of the field a dependent query starts from, in the parent's records of its kind."""
    read = endpoint.field_reader(dep.kind, dep.field, query.params)
    if read is not None:
        yield from map(read, records.get(dep.kind, []))
