"""Earlier flow runs of a harvest run, told the truth in Prefect: Crashed once harvest resumes or abandons it.

A process killed with `kill -9` (the OOM killer, a power cut, a container stop past its grace) cannot end its
flow run, which then stays Running in Prefect forever; under a deployment it also holds the deployment's
concurrency slot until Prefect's lease on it expires (300 s without renewal; the next run waits in
`AwaitingConcurrencySlot` until then). The manifest lists every flow run a run had (`flow_run_ids`); when harvest
resumes or abandons the run, or `harvest serve` starts and finds the job's run unfinished with nobody holding
its lock, those still Running (or Pending, Cancelling) are set to Crashed with a message naming the run.

Prefect releases a deployment slot on that transition: through the flow run's lease while the lease lives, and
otherwise by taking one slot off the deployment's count (`ReleaseFlowConcurrencySlots`). That second way
would free a slot another run of the deployment holds now, so a flow run whose lease has expired is left
Running while another run of its deployment is active (a warning says so), and crashed otherwise.

Telling Prefect is a courtesy: any failure here is logged and never stops or fails the run.
"""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

log = logging.getLogger(__name__)

ACTIVE = ("RUNNING", "PENDING", "CANCELLING")
"""States of a flow run that a dead process leaves behind and that can hold a deployment slot."""


def _active_types() -> list[Any]:
    from prefect.client.schemas.objects import StateType

    return [StateType(name) for name in ACTIVE]


async def _lease_alive(client: Any, lease_id: UUID) -> bool:
    """Whether a concurrency lease still exists (renewing it is the only way the API offers to ask)."""
    try:
        await client.renew_concurrency_lease(lease_id, lease_duration=60)
    except Exception:  # 404/410: the lease expired and Prefect reclaimed the slot already
        return False
    return True


async def _safe_to_crash(client: Any, flow_run: Any) -> bool:
    """Whether crashing `flow_run` releases only its own deployment slot, never one another run holds."""
    if flow_run.deployment_id is None:
        return True  # no deployment, no slot
    lease_id = flow_run.state.state_details.deployment_concurrency_lease_id
    if lease_id is not None and await _lease_alive(client, lease_id):
        return True
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )

    others = await client.read_flow_runs(
        flow_run_filter=FlowRunFilter(
            state=FlowRunFilterState(type=FlowRunFilterStateType(any_=_active_types()))
        ),
        deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[flow_run.deployment_id])),
        limit=10,
    )
    return all(other.id == flow_run.id for other in others)


async def crash_stale_flow_runs(flow_run_ids: list[str], current: str | None, why: str) -> list[str]:
    """Set the flow runs of `flow_run_ids` (but `current`) that are still active to Crashed with the message
    `why`; return the ids crashed. Never raises."""
    from prefect.client.orchestration import get_client
    from prefect.states import Crashed

    stale = [fid for fid in dict.fromkeys(flow_run_ids) if fid and fid != current]
    crashed: list[str] = []
    if not stale:
        return crashed
    try:
        async with get_client() as client:
            for fid in stale:
                try:
                    flow_run = await client.read_flow_run(UUID(fid))
                except Exception:  # another Prefect server, or deleted: nothing to tell
                    continue
                if flow_run.state is None or flow_run.state.type.value not in ACTIVE:
                    continue
                if not await _safe_to_crash(client, flow_run):
                    log.warning(
                        "flow run %s stays %s in Prefect: its concurrency lease expired and another run of its "
                        "deployment is active, so crashing it now would free that run's slot",
                        fid,
                        flow_run.state.type.value,
                    )
                    continue
                await client.set_flow_run_state(flow_run.id, Crashed(message=why), force=True)
                crashed.append(fid)
    except Exception as exc:  # Prefect unreachable: the run goes on, the old flow run stays as it was
        log.warning("could not mark earlier flow runs Crashed in Prefect: %s", exc)
    return crashed
