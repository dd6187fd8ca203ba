"""One Prefect task run per spec query: the record, in Prefect, of every query the spec entry expands to.

A Prefect task run per query cost ~20 ms of the event loop each (its task run, its events, a call to the server
for its tags' concurrency slots), so a fan-out over 2,000 accounts spent more time on Prefect than on the
service, and at 10,000 the server refused slots (503) and failed queries. A person reading the Prefect UI wants
one line per spec query (`videos`, `video_details`) with its state, not ten thousand; the per-value status is in
DuckDB's `query_state`.

The flow owns the order and the window (`flows.run.fanout`); a `QueryLine` runs what it is given, each query as
an asyncio task, from the moment the flow opens it, until the flow closes the line and every query ended. The
line's task run waits for that end and reports it (its state, the statuses by count). The queries do not wait
for the task run: its start is several calls to Prefect's server (create the run, set its state, take its tags'
concurrency slots), and a busy server answered one of them in 2.1 s where it usually takes 50 ms (a one-page
fan-out at 50 ms a page waited those seconds before its first request, one run in four); a task run Prefect
could not start at all (no slot, the server gone) never failed a query either.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.states import Failed, State

from harvest.connectors.paging.pager import QuerySpec, query_failed
from harvest.tasks.output.run_summary import unsendable
from harvest.tasks.run_context import lookup

log = logging.getLogger(__name__)

RunQuery = Callable[[QuerySpec], Awaitable[dict[str, Any]]]
"""Runs one query to its end, reports it, and returns its summary; never raises for the query's own failure."""


class QueryLine:
    """The queries of one spec entry: handed over by the flow, run by the task run that drains the line."""

    def __init__(self, name: str, run: RunQuery) -> None:
        self.name = name
        self._run = run
        self._ready: deque[QuerySpec] = deque()
        self._running: set[asyncio.Task[dict[str, Any]]] = set()
        self._wake = asyncio.Event()
        self.closed = False
        self.statuses: Counter[str] = Counter()
        self.unsent = 0
        """Its queries that could not send a request, their `max_credits` below one's price (`unsendable`)."""
        self.failure: str | None = None
        """The first failed (or unsent) query's id and error, for the task run's message."""
        self._ended_event = asyncio.Event()
        self.reported = False
        """Its task run saw it end: Prefect holds its state and counts."""
        self.task_run_id: str | None = None
        """The id the flow gave its task run (`flows.run.fanout`), known before Prefect heard of it."""

    def put(self, query: QuerySpec) -> None:
        if self.closed:
            raise RuntimeError(f"line {self.name} is closed")
        self._ready.append(query)
        self._wake.set()

    def close(self) -> None:
        """Nothing more will be handed over: the task run ends once the queries it has ended."""
        self.closed = True
        self._wake.set()

    async def drain(self) -> Counter[str]:
        """Run every query handed over until the line is closed and all have ended; their statuses by count."""
        try:
            while True:
                while self._ready:
                    query = self._ready.popleft()
                    job = asyncio.ensure_future(self._run(query))
                    job.set_name(query.query_id)
                    self._running.add(job)
                    job.add_done_callback(self._ended)
                if self.closed and not self._running:
                    return self.statuses
                self._wake.clear()
                await self._wake.wait()
        finally:
            self._ended_event.set()

    async def ended(self) -> None:
        """Wait for the drain to end (however it ended)."""
        await self._ended_event.wait()

    def _ended(self, job: asyncio.Task[dict[str, Any]]) -> None:
        self._running.discard(job)
        unsent = False
        if job.cancelled():
            status, error = "cancelled", "cancelled"
        elif (exc := job.exception()) is not None:  # the flow's own bookkeeping broke: say so, go on
            log.error("query %s: %s: %s", job.get_name(), type(exc).__name__, exc)
            status, error = "failed", f"{type(exc).__name__}: {exc}"
        else:
            summary = job.result()
            status, error = summary["status"], summary.get("error") or "no error text"
            unsent = unsendable(summary)
        self.statuses[status] += 1
        self.unsent += unsent
        if self.failure is None and (_ended_badly(status) or unsent):
            self.failure = f"{job.get_name()}: {status}: {error}"
        self._wake.set()

    def outcome(self) -> dict[str, Any]:
        return {"line": self.name, "queries": sum(self.statuses.values()), "statuses": dict(self.statuses)}


UNSENT = "could not send a request (one costs more than its max_credits or the run's budget)"


def _ended_badly(status: str) -> bool:
    return query_failed(status) or status == "cancelled"


def line_end(line: QueryLine) -> Any:
    """The task run's result: Failed (with the counts) when any of its queries failed or could not send a
    request (what fails the flow run, `flows.orchestrator.final_state`), so Prefect tells the truth on the line
    too; returned, not raised: its retries stay 0 (a retry would pay again, and sends no query no request fits
    in)."""
    outcome = line.outcome()
    failed = {s: n for s, n in line.statuses.items() if _ended_badly(s)}
    if line.unsent:
        failed[UNSENT] = line.unsent
    if not failed:
        return outcome
    said = ", ".join(f"{n} {s}" for s, n in sorted(failed.items()))
    return Failed(message=f"{said} of {outcome['queries']} queries; first {line.failure}", data=outcome)


_ENDED: dict[str, list[dict[str, Any]]] = {}
"""Run id -> its task runs as they ended, with their true states: what the flow's end hands Prefect again when
its API dropped a task run's events or could not start it (`flows.orchestrator.prefect_record`). A line's are
noted by `note_end`; a Dask round's by the flow that settled it (`flows.run.dask.rounds`), since its worker
reports it to Prefect on its own and the flow cannot see whether Prefect heard."""

LINE_TASK = "collect_queries"
ROUND_TASK = "collect_round"
"""The harvest task a noted task run is a run of (`task`): what Prefect is told it was, if it never heard of it."""


def note_task_run(
    run_id: str, task_run_id: str, name: str, state: State[Any] | None, reported: bool, task: str = LINE_TASK
) -> None:
    """A task run of the run ended in `state` (None: Completed). `reported`: Prefect is known to hold its end."""
    kind, message = (state.type.value, state.message or "") if state is not None else ("COMPLETED", "")
    _ENDED.setdefault(run_id, []).append(
        {
            "id": task_run_id,
            "name": name,
            "state": kind,
            "message": message,
            "reported": reported,
            "task": task,
        }
    )


def note_round(run_id: str, task_run_id: object, query_id: str, round_no: int, state: State[Any]) -> None:
    """A Dask round's task run and its true end: its worker reports it to Prefect itself, and an outage drops
    that report where the flow cannot see it, so the run's record of what Prefect is owed holds it too."""
    if state.is_final():
        name = f"{query_id} round {round_no}"  # the task's `task_run_name`
        note_task_run(run_id, str(task_run_id), name, state, False, ROUND_TASK)


def note_end(run_id: str, line: QueryLine) -> None:
    """The line ended: its task run (id given by the flow), the state it ends in, whether Prefect reported it."""
    if line.task_run_id is None:
        return
    end = line_end(line)
    note_task_run(run_id, line.task_run_id, line.name, end if isinstance(end, State) else None, line.reported)


def ended_task_runs(run_id: str) -> list[dict[str, Any]]:
    """The task runs of the run that ended in this process (once: they are forgotten here)."""
    return _ENDED.pop(run_id, [])


@task(
    name="collect_queries",
    task_run_name="{line}",
    retries=0,
    cache_policy=NO_CACHE,
    log_prints=False,
)
async def collect_queries(run_id: str, line: str) -> Any:
    the_line = lookup(run_id).lines[line]
    await the_line.ended()
    the_line.reported = True
    return line_end(the_line)
