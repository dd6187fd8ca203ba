"""Reading back what a run told Prefect: its flow runs and their task runs, always by the run's own ids.

The session's Prefect server (`prefect_harness`) holds every flow run of the worker's session, hundreds of
them; an unfiltered read returns only the first page of those (200), so a test reads its own runs by id. The
ids come from the run's manifest (`flow_run_id`, `flow_run_ids`). Needs `prefect_harness` (or a
PREFECT_API_URL).
"""

from __future__ import annotations

import asyncio
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
