"""What a run owes Prefect when Prefect's API did not answer: kept in the output directory, told once it answers.

Prefect is the record of a run, never the reason it fails or is paid again: a run whose data is complete exits by
its data even when Prefect could not be told how it ended (a scheduler retrying an exit 1 paid all its pages a
second time). What Prefect missed is written to `.prefect-owed/<run id>.json` in the output directory
(`owed_file`): the flow run's final state and message when the run could not report it, the true final state of
every task run of its query lines and Dask rounds (their states travel as events, which Prefect drops when its
API is away; a round's come from its worker, so the run's end reads what Prefect holds of them), and the run's
two artifacts.
It is told by the first of: the run itself, once the flow engine let go of the flow run (`harvest run`); the
job's next run, before it pays; `harvest serve`, when it starts. Telling is idempotent (a state already right is
left alone, a task run Prefect never heard of is created with its id) and bounded
(`flows.orchestrator.prefect_outage.bounded_client`); a record is deleted once told.
"""

from __future__ import annotations

import contextvars
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
from prefect.exceptions import Abort

from harvest.flows.orchestrator.prefect_outage import WATCH, bounded_client, caused_by_api, said
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.query_line import ROUND_TASK

log = logging.getLogger(__name__)

READ_LIMIT = 200
"""Task runs read per call: the most Prefect's API returns at once (`PREFECT_API_DEFAULT_LIMIT`); a Dask run
has one task run per query and round."""


@dataclass
class Owed:
    run_id: str
    job: str
    flow_run_id: str
    why: str
    """What failed, one line: the reason Prefect was not told at once."""
    state: str | None = None
    """The flow run's final state type (`COMPLETED`, `FAILED`, `CANCELLED`, `CRASHED`) when the run could not
    report it; None when the flow engine reported it."""
    message: str = ""
    task_runs: list[dict[str, Any]] = field(default_factory=list)
    """Each query line's and Dask round's task run (`tasks.query_line.note_task_run`): id, name, its true final
    state and message, whether Prefect is known to hold it, and the harvest task it runs (`task`)."""
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    """The run's artifacts not created yet: key, type, description, data."""


def owed_file(layout: OutputLayout, run_id: str) -> Path:
    return layout.prefect_owed_file(run_id)


def owe(layout: OutputLayout, owed: Owed) -> None:
    """Write (or replace) the run's record atomically."""
    path = owed_file(layout, owed.run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_bytes(orjson.dumps(asdict(owed), option=orjson.OPT_INDENT_2))
    os.replace(tmp, path)


def owed_runs(layout: OutputLayout, job: str | None = None) -> list[Owed]:
    """The records waiting in an output directory (of one job, when given), oldest run first."""
    found = []
    for path in layout.prefect_owed_files():
        try:
            owed = Owed(**orjson.loads(path.read_bytes()))
        except (
            OSError,
            ValueError,
            TypeError,
        ) as exc:  # half a record: the run's end never finished writing it
            log.warning("unreadable record of what Prefect is owed, %s: %s", path, exc)
            continue
        if job is None or owed.job == job:
            found.append(owed)
    return found


# --------------------------------------------------------------------------------------------------- telling
async def _tell_flow_run(client: Any, owed: Owed) -> bool:
    """The flow run's state, when owed; False when this Prefect has no such flow run (another server)."""
    from prefect.client.schemas.objects import StateType
    from prefect.exceptions import ObjectNotFound
    from prefect.states import State

    try:
        flow_run = await client.read_flow_run(UUID(owed.flow_run_id))
    except ObjectNotFound:
        return False
    if owed.state is not None and (flow_run.state is None or flow_run.state.type.value != owed.state):
        state: State[Any] = State(type=StateType(owed.state), message=owed.message)
        await client.set_flow_run_state(flow_run.id, state, force=True)
    return True


async def _prefect_task_runs(client: Any, owed: Owed) -> dict[str, Any]:
    """Task run id -> the task run Prefect holds, of those the record names."""
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterId

    ids = [UUID(t["id"]) for t in owed.task_runs]
    found: dict[str, Any] = {}
    for at in range(0, len(ids), READ_LIMIT):
        chunk = ids[at : at + READ_LIMIT]
        read = await client.read_task_runs(
            task_run_filter=TaskRunFilter(id=TaskRunFilterId(any_=chunk)), limit=len(chunk)
        )
        found.update((str(r.id), r) for r in read)
    return found


def _holds(known: Any, t: dict[str, Any]) -> bool:
    """Prefect holds the task run's true end."""
    return known is not None and known.state is not None and known.state.type.value == t["state"]


def _task_of(t: dict[str, Any]) -> Any:
    """The harvest task a task run of the record is a run of (a record without `task` names a query line)."""
    if t.get("task") == ROUND_TASK:
        from harvest.tasks.round_task import collect_round

        return collect_round
    from harvest.tasks.query_line import collect_queries

    return collect_queries


async def _tell_task_runs(client: Any, owed: Owed) -> None:
    from prefect.client.schemas.objects import StateType
    from prefect.states import Pending, State

    found = await _prefect_task_runs(client, owed)
    for t in owed.task_runs:
        known = found.get(t["id"])
        if _holds(known, t):
            continue
        if known is None:  # its events never arrived: the task run as the flow meant it
            await client.create_task_run(
                _task_of(t), UUID(owed.flow_run_id), t["id"], id=UUID(t["id"]), name=t["name"],
                extra_tags=["harvest", f"job:{owed.job}"], state=Pending(),
            )  # fmt: skip
        state: State[Any] = State(type=StateType(t["state"]), message=t["message"])
        await client.set_task_run_state(UUID(t["id"]), state, force=True)


async def missed_task_runs(owed: Owed) -> list[str]:
    """What Prefect lacks of the task runs whose report the run could not see (a Dask round's comes from its
    worker), one line each; read once the run's work ended. An API that does not answer is one line too: the
    record then waits for the next chance like any other."""
    unseen = Owed(owed.run_id, owed.job, owed.flow_run_id, "")
    unseen.task_runs = [t for t in owed.task_runs if not t["reported"]]
    if not unseen.task_runs:
        return []
    try:
        async with bounded_client() as client:
            found = await _prefect_task_runs(client, unseen)
    except Exception as exc:
        if not caused_by_api(exc):
            raise
        return [said(exc)]
    return [
        f"Prefect lacks the end of task run {t['name']}"
        for t in unseen.task_runs
        if not _holds(found.get(t["id"]), t)
    ]


async def create_artifacts(client: Any, flow_run_id: str, artifacts: list[dict[str, Any]]) -> None:
    from prefect.client.schemas.actions import ArtifactCreate

    for artifact in artifacts:
        await client.create_artifact(ArtifactCreate(**artifact, flow_run_id=UUID(flow_run_id)))


async def tell(layout: OutputLayout, owed: Owed) -> bool:
    """Tell Prefect what it is owed; False when this Prefect has no such flow run (another server: nothing to
    tell it). Raises when the API fails on the way; artifacts are created once."""
    async with bounded_client() as client:
        if not await _tell_flow_run(client, owed):
            return False
        await _tell_task_runs(client, owed)
        if owed.artifacts:
            await create_artifacts(client, owed.flow_run_id, owed.artifacts)
            owed.artifacts = []
            owe(layout, owed)  # a failure after this point must not create them twice
    return True


async def tell_owed(layout: OutputLayout, job: str) -> list[Owed]:
    """Tell every record of the job waiting in `layout` (the caller holds the job's lock); the records told, now
    deleted. Never raises: a Prefect still away keeps them for the next chance, said once."""
    told = []
    for owed in owed_runs(layout, job):
        try:
            known = await tell(layout, owed)
        except Exception as exc:
            if caused_by_api(exc):  # still away: the next chance tells it
                WATCH.notice("calls", said(exc))
                break
            log.warning("could not tell Prefect how run %s ended: %s", owed.run_id, said(exc))
            continue
        if known:
            told.append(owed)
        else:
            log.warning(
                "Prefect has no flow run %s (run %s): another Prefect server?", owed.flow_run_id, owed.run_id
            )
        owed_file(layout, owed.run_id).unlink(missing_ok=True)
    return told


def told_line(owed: Owed) -> str:
    """One line for a record told."""
    what = f"flow run {owed.flow_run_id}" + (f" set {owed.state}" if owed.state else "")
    lines = f", {len(owed.task_runs)} task runs" if owed.task_runs else ""
    return f"told Prefect how run {owed.run_id} of job {owed.job} ended ({what}{lines}), which it missed: {owed.why}"


# ------------------------------------------------------------------------------------ the end of this process
class NotTold(Abort):
    """Ends the flow run in the engine without another call to Prefect's API (an `Abort` is the engine's one way
    out that makes none): the run's data is complete, its record is written, the command line reports it."""


@dataclass
class Ended:
    """What the flow body leaves for the command line that called it, whatever Prefect made of its end."""

    started: bool = False
    """The flow body began: from here on the service may have been paid."""
    layout: OutputLayout | None = None
    summary: Any = None
    owed: Owed | None = None
    """The record the run's end wrote or would write: told (or written) by the caller when Prefect let go of the
    flow run with an error after the body ended."""
    final: tuple[str, str] | None = None
    """The final state (type, message) the body returned to the engine."""
    why: str | None = None


ENDED: contextvars.ContextVar[Ended | None] = contextvars.ContextVar("harvest_ended", default=None)


def body_started() -> None:
    """The flow's body began (from here on the service may be paid). A function, not the ContextVar in the flow's
    body: Dask pickles the flow's function with the globals it names, and a ContextVar does not pickle."""
    ended = ENDED.get()
    if ended is not None:
        ended.started = True
