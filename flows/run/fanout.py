"""Starting queries: the planned ones, and a dependent query for each new value its parent's records carry.

Dependent queries are found as their parents' pages land, not after the parent ends. Every start and end is
written to the run journal first, so a resumed run knows which queries existed and which ended.

Each spec query is one line (`tasks.query_line`), reported by one Prefect task run: the queries it expands to
are handed over to it as they start and run at once, and the line closes once nothing can start another of them
(no query of it or of its parents is running or waiting). The planned queries start at once (a short budget is
shared breadth-first among them), but at most `FIRST_PAGES_PER_SLOT` per connection slot are before their first
page at a time (below). Dependent queries wait in line and start in the order they were found, at most
`DEPENDENTS_PER_SLOT` per connection slot at a time; those of a fan-out with `max_credits_total` start at once
instead, so that the ledger shares the cap breadth-first among all of them (one waiting in line would find the cap
spent by the pages of those started before it). Once the run is stopping (Ctrl-C, a refused key), nothing
more starts: the queries still in line are journaled and listed as stopped at their start cursor, so a resume
or `--continue` runs them; one found after the stop is listed the same way.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from collections.abc import Awaitable, Iterator, Mapping, Sequence
from typing import Any, cast
from uuid import uuid4

from prefect import tags
from prefect.states import State
from prefect.task_engine import run_task

from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.paging.pager import QuerySpec
from harvest.flows.orchestrator.prefect_outage import WATCH, caused_by_api, said
from harvest.flows.run import progress
from harvest.flows.run.discovery import Discovery
from harvest.flows.run.plan import DependentQuery, Plan, base_id
from harvest.flows.run.start import RunStart
from harvest.tasks.landing import land_raw_pages, page_query
from harvest.tasks.output.journal import RunJournal
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.packed_summaries import PackedSummaries
from harvest.tasks.output.query_summary import QuerySummary
from harvest.tasks.query_line import QueryLine, collect_queries, note_end
from harvest.tasks.run_context import RunContext

log = logging.getLogger(__name__)

TASK_RUN_GRACE = 30.0
"""Seconds a line's task run may take to report the line once it ended (it takes milliseconds) before the run
gives it up: Prefect's client retries an API that went away for ~62 s per call."""
DEPENDENTS_PER_SLOT = 2
"""Dependent queries running at once per connection slot (`concurrency`): one sending, one ready to send as soon
as the slot frees, so the slots never wait on a task's Prefect bookkeeping."""
FIRST_PAGES_PER_SLOT = 2
"""Started queries that have not landed their first page, at most, per connection slot (`concurrency`). The ledger
expects every started query from its start, so a short budget is still shared among all of them breadth-first;
what waits is the query's paging machinery (its pager, its reservation, its request: ~10 KB), built when the gate
lets it in instead of for 10,000 queries at once, which left the allocator's arenas holding ~12 KB a query after
they ended (`docs/performance.md`, memory and the number of queries). Held only until the first page: a first
page never waits for other queries (breadth-first waits start at the second page), so a query behind the gate
can never be what a query holding it waits for."""


class Fanout:
    def __init__(
        self, ctx: RunContext, the_plan: Plan, start: RunStart, journal: RunJournal, job: str
    ) -> None:
        self.ctx = ctx
        self.plan = the_plan
        self.start_info = start
        self.journal = journal
        self.tags = ("harvest", f"job:{job}")
        self.runners: set[asyncio.Task[None]] = set()
        """One per line: its Prefect task run, then the line drained here if Prefect could not run it."""
        self.line_of: dict[str, str] = {}
        """The open line of each spec query, by the spec query's id."""
        self.pending: Counter[str] = Counter()
        """Queries of each spec query started or waiting and not ended yet."""
        self.parent_of = {dep.template_id: dep.parent for dep in the_plan.dependents}
        self.opening = True
        """The run's first starts (planned, continued, rediscovered) are still being handed over."""
        self.discovery = Discovery(the_plan, start, ctx.incremental)
        self.started: set[str] = set()
        # a kept query's Parquet files are written again by `rediscover`: none yet
        self.summaries = PackedSummaries({**s, "files": []} for s in start.kept.values())
        self.waiting: deque[QuerySpec] = deque()
        """Dependent queries found and not started yet, in the order they were found."""
        self.from_line: set[str] = set()
        """Queries started from `waiting` that are still running."""
        self.window = DEPENDENTS_PER_SLOT * ctx.client.max_in_flight
        self.first_pages = asyncio.Semaphore(FIRST_PAGES_PER_SLOT * ctx.client.max_in_flight)
        self.before_first_page: set[str] = set()
        """Queries holding a place of `first_pages`: let in, no page landed yet."""

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
        index = self.ctx.raw_index
        has_pages = decided.resume and index is not None and index.has(decided.query_id)
        self.pending[base_id(decided.query_id)] += 1
        capped = base_id(decided.query_id) in self.plan.caps  # its fan-out's cap is shared by all: no line
        if wait and not has_pages and not capped:
            self.waiting.append(decided)
            self._fill()
        elif has_pages or not self.stopping:  # paid pages land even after a stop: replaying sends nothing
            self._launch(decided)
        elif wait:
            self._not_started(decided)  # a dependent found after the stop: listed, as those in line are
        else:
            self.pending[base_id(decided.query_id)] -= 1

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
        self.journal.query_started(query.as_dict())
        credits = self.ctx.ledger.per_query_spent.get(query.query_id, 0)
        summary = QuerySummary.not_started(query, stopped.kind, credits).as_dict()
        self.journal.query_ended(summary)
        self.summaries.append(summary)
        self.pending[base_id(query.query_id)] -= 1

    def _launch(self, decided: QuerySpec) -> None:
        self.journal.query_started(decided.as_dict())
        self.ctx.ledger.expect(decided.query_id)  # it may start late: the budget's share waits for it
        self._line(base_id(decided.query_id)).put(decided)
        progress.current().query_started(decided.query_id, decided.endpoint)

    def _line(self, spec_query: str) -> QueryLine:
        """The spec query's open line, opened with its Prefect task run on first use."""
        key = self.line_of.get(spec_query)
        if key is not None:
            return self.ctx.lines[key]
        key = spec_query if spec_query not in self.ctx.lines else f"{spec_query} ({len(self.ctx.lines)})"
        line = self.ctx.lines[key] = QueryLine(key, self._run_query)
        self.line_of[spec_query] = key
        with tags(*self.tags):  # the asyncio task copies this context: its task run gets the tags
            runner = asyncio.ensure_future(self._drive(line))
        self.runners.add(runner)
        return line

    async def _drive(self, line: QueryLine) -> None:
        """The line runs at once; its task run reports it. When Prefect could not run that task run (no slot,
        the server gone), the queries ran all the same and the run says once that Prefect has no record of the
        line: Prefect's trouble never delays or fails a query, and holds the run at most `TASK_RUN_GRACE`
        seconds after the line ended (a task run stuck in Prefect's retries is given up: the run's record tells
        Prefect its end later, `flows.orchestrator.prefect_record`)."""
        draining = asyncio.ensure_future(line.drain())
        # the task run's id, known before Prefect hears of it: the run's record names it if Prefect misses it
        task_run_id = uuid4()
        line.task_run_id = str(task_run_id)
        call = run_task(
            collect_queries, task_run_id, parameters={"run_id": self.ctx.run_id, "line": line.name},
            return_type="state",
        )  # fmt: skip
        reporting = asyncio.ensure_future(cast(Awaitable[State[Any]], call))  # `collect_queries(...)`
        await asyncio.wait([reporting, draining], return_when=asyncio.FIRST_COMPLETED)
        if not reporting.done():  # the line ended: its task run reports it at once, unless Prefect is stuck
            await asyncio.wait([reporting], timeout=TASK_RUN_GRACE)
        trouble: str | None = None
        if not reporting.done():
            reporting.cancel()  # its cleanup may call Prefect too: not waited for
            WATCH.notice(
                "task runs", f"the task run of {line.name} did not end {TASK_RUN_GRACE:g} s after its line"
            )
        else:
            try:
                state = reporting.result()
                trouble = f"its task run ended {state.type.value}: {state.message}"
            except Exception as exc:
                trouble = f"{type(exc).__name__}: {exc}"
                if caused_by_api(exc):  # Prefect's API away: said once, told later (prefect_record)
                    WATCH.notice("task runs", f"the task run of {line.name}: {said(exc)}")
                    trouble = None
        if not line.reported and trouble is not None:
            log.warning("Prefect could not run the task run of %s (%s): its queries run without one",
                        line.name, self.ctx.client.scrub(str(trouble)))  # fmt: skip
        await draining
        note_end(self.ctx.run_id, line)

    async def _run_query(self, query: QuerySpec) -> dict[str, Any]:
        """One query to its end, in its line; its summary, whatever broke."""
        await self.first_pages.acquire()
        self.before_first_page.add(query.query_id)
        try:
            summary = (await page_query(self.ctx, query)).summary.as_dict()
        except Exception as exc:  # a broken query must not take the other queries' landed data with it
            summary = self._broken(query, exc)
        finally:
            self._past_first_page(query.query_id)
        self._ended(summary)
        return summary

    def _past_first_page(self, query_id: str) -> None:
        if query_id in self.before_first_page:
            self.before_first_page.discard(query_id)
            self.first_pages.release()

    def _ended(self, summary: dict[str, Any]) -> None:
        query_id = summary["query_id"]
        self.ctx.ledger.finish(query_id)  # a query that broke before paging was still expected
        self.from_line.discard(query_id)
        self.journal.query_ended(summary)
        notes = progress.query_notes(summary, self.ctx.ledger.refused_of(query_id))
        before = self.start_info.journal.spent.get(query_id, 0)  # earlier sessions: the line says this one
        progress.current().query_finished(query_id, summary["status"], notes, summary["credits"] - before)
        self.summaries.append(summary)
        self.pending[base_id(query_id)] -= 1
        self._fill()
        self._close_idle()

    def _close_idle(self) -> None:
        """Close every line nothing can hand another query to: none of its own or its parents' queries is
        running or waiting (dependents are found only in their parents' pages)."""
        if self.opening:
            return
        for spec_query, key in list(self.line_of.items()):
            if not any(self.pending[q] for q in self._lineage(spec_query)):
                self.ctx.lines[key].close()
                del self.line_of[spec_query]

    def _lineage(self, spec_query: str) -> Iterator[str]:
        current: str | None = spec_query
        while current is not None:
            yield current
            current = self.parent_of.get(current)

    def on_records(
        self,
        query: QuerySpec,
        records: Mapping[str, Sequence[Any]],
        kept: int,
        credits: int,
        replayed: bool,
        pages: int,
    ) -> None:
        # a damaged answer (`pages` 0) is billed and no page, as the run's summary counts it
        self._past_first_page(query.query_id)
        if not replayed:
            progress.current().page_landed(query.query_id, kept, credits, pages)
        endpoint = self.ctx.endpoints[query.endpoint]
        for dep in self.discovery.dependents_of(query.query_id):
            for child in self.discovery.children(query, dep, _values(dep, endpoint, query, records)):
                self.start(child, wait=True)

    def rediscover(self, layout: OutputLayout) -> None:
        """Queries kept from before the crash: their raw pages land again into the run's writer (its earlier
        files are gone, `tasks.landing.fresh_parts`), and their children are found again in them."""
        ctx = self.ctx
        assert ctx.sink is not None  # the run's writer (`flows.collect`)
        for query_id, summary in self.start_info.kept.items():
            spec = QuerySpec(**self.start_info.journal.started[query_id])
            endpoint = ctx.endpoints[summary["endpoint"]]
            land_raw_pages(
                layout,
                ctx.run_id,
                ctx.started,
                spec,
                endpoint,
                ctx.sink,
                self.on_records,
                False,
                ctx.raw_index,
            )

    async def run(self, layout: OutputLayout) -> PackedSummaries:
        for query in self.plan.queries:
            self.start(query)
        for query in self.start_info.continue_at.values():
            self.start(query, wait=True)  # continued children whose parents ended for good
        self.rediscover(layout)
        self._fill()
        self.opening = False
        self._close_idle()
        while self.runners:
            done, _ = await asyncio.wait(self.runners, return_when=asyncio.FIRST_COMPLETED)
            self.runners -= done
            for runner in done:
                runner.result()
        return self.summaries

    def _broken(self, query: QuerySpec, exc: Exception) -> dict[str, Any]:
        ctx, query_id = self.ctx, query.query_id
        stopped = ctx.faults.caught(exc)  # the machine's (a full disk): resumable, not a failure
        return QuerySummary(
            query_id=query_id, endpoint=query.endpoint, status="interrupted" if stopped else "failed", pages=0,
            records=0, credits=ctx.ledger.per_query_spent.get(query_id, 0), next_cursor=None,
            error=ctx.client.scrub(f"{type(exc).__name__}: {exc}"),
            raw_file=ctx.layout.relative(ctx.raw_path(query_id)),
            requests_file=ctx.layout.relative(ctx.requests_path(query_id)),
        ).as_dict()  # fmt: skip


def _values(
    dep: DependentQuery, endpoint: Endpoint, query: QuerySpec, records: Mapping[str, Sequence[Any]]
) -> Iterator[Any]:
    """The values of the field a dependent query starts from, in the parent's records of its kind."""
    read = endpoint.field_reader(dep.kind, dep.field, query.params)
    if read is not None:
        yield from map(read, records.get(dep.kind, []))
