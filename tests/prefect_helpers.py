"""Reading back what a run told Prefect: its flow runs and their task runs, always by the run's own ids.

The session's Prefect server (`prefect_harness`) holds every flow run of the worker's session, hundreds of
them; an unfiltered read returns only the first page of those (200), so a test reads its own runs by id. The
ids come from the run's manifest (`flow_run_id`, `flow_run_ids`). Needs `prefect_harness` (or a
PREFECT_API_URL).
"""

from __future__ import annotations

import asyncio
import sys
import threading
from typing import Any
from uuid import UUID


def flow_runs(ids: list[str]) -> dict[str, Any]:
    """Flow run id -> the flow run, read from the Prefect API."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async def read() -> dict[str, Any]:
        async with get_client() as client:
            found = await client.read_flow_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[UUID(i) for i in ids])),
                limit=len(ids),
            )
        return {str(r.id): r for r in found}

    return asyncio.run(read())


def flow_run(flow_run_id: str) -> Any:
    """One flow run, read from the Prefect API."""
    return flow_runs([flow_run_id])[flow_run_id]


def flow_run_states(ids: list[str]) -> dict[str, tuple[str, str]]:
    """Flow run id -> (state type, message)."""
    return {i: (r.state.type.value, r.state.message or "") for i, r in flow_runs(ids).items() if r.state}


def task_runs(flow_run_id: str) -> list[Any]:
    """Every task run of one flow run."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterFlowRunId

    async def read() -> list[Any]:
        async with get_client() as client:
            runs: list[Any] = []
            while True:  # pages of 200: a run may have more task runs than one read returns
                page = await client.read_task_runs(
                    task_run_filter=TaskRunFilter(
                        flow_run_id=TaskRunFilterFlowRunId(any_=[UUID(flow_run_id)])
                    ),
                    offset=len(runs),
                )
                runs += page
                if not page:
                    return runs

    return asyncio.run(read())


def run_log(flow_run_id: str) -> list[tuple[str, int, str]]:
    """The flow run's log in Prefect (its task runs' too), as (logger name, level, message), oldest first."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    async def read() -> list[tuple[str, int, str]]:
        async with get_client() as client:
            logs: list[Any] = []
            while True:
                page = await client.read_logs(
                    log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[UUID(flow_run_id)])),
                    offset=len(logs),
                )
                logs += page
                if not page:
                    return [(log.name, log.level, log.message) for log in logs]

    return asyncio.run(read())


SERVICES = ("EventsWorker", "APILogWorker", "ConcurrencySlotAcquisitionWithLeaseService")
"""Prefect's background services a flow run in this process starts (each in a thread named `<service>Thread`,
its work on Prefect's global event loop), which outlive the run."""


def service_threads() -> list[str]:
    """The threads of Prefect's background services alive in this process."""
    names = {f"{service}Thread" for service in SERVICES}
    return sorted(t.name for t in threading.enumerate() if t.name in names and t.is_alive())


def end_services(timeout: float = 10.0) -> None:
    """Stop Prefect's background services in this process, as the end of a `harvest run` process does: each
    sends what it holds first (`timeout` seconds at most), and the next flow run starts them again. Left
    running, they draw from the global `random` now and then (the events client's websocket pings, the API
    client's retry jitter), which a hypothesis test in this process reports when it happens while it draws an
    example (HypothesisDeprecationWarning: "Do not use the `random` module inside strategies")."""
    if "prefect" not in sys.modules:
        return
    from prefect.concurrency.services import ConcurrencySlotAcquisitionWithLeaseService
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for service in (EventsWorker, APILogWorker, ConcurrencySlotAcquisitionWithLeaseService):
        service.drain_all(timeout=timeout)
    # A drained service tells its thread to stop and does not wait for it (`WorkerThread.shutdown`): the thread
    # was seen alive by the next test's first line (`tests/test_prefect_services.py`, once in a whole run).
    names = {f"{service}Thread" for service in SERVICES}
    for thread in threading.enumerate():
        if thread.name in names:
            thread.join(timeout)
