"""A resume on a Dask cluster the killed flow shared waits for that flow's rounds to end before it pays.

A flow killed on a cluster given by `runner.address` leaves its rounds running there: each pays the rest of its
grant and lands it (on the shared disk, or staged) for nobody. A resume that read the account's balance while
they paid would take their grants' unpaid part as not billed and spend it again, and its landing and loading
would race theirs for the same files. So the resume asks every worker how many rounds of its run it is in
(`tasks.round_task.rounds_paying`) and waits until none is; the balance it then reads holds everything the
killed session will ever pay, and the session is settled against it as a local resume's is
(`flows.run.bill.carry_over`). A cluster harvest started died with the killed flow: nothing to wait for there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from harvest.connectors.plurals import counted
from harvest.flows.console import note

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
WAIT_SECONDS = 900.0
"""How long a resume waits for the killed flow's rounds: a round pays at most `round_pages` pages (each retried
within the client's policy). Past it the resume goes on without settling the killed session: their grants stay
counted until the run's end, and nothing passes the budget."""


async def killed_rounds_ended(
    address: str, run_id: str, stopped: Callable[[], bool], wait_seconds: float = WAIT_SECONDS
) -> bool:
    """Whether no round of `run_id` is left on the cluster at `address` (waiting while some are); False when the
    cluster cannot say, they did not end in `wait_seconds`, or the run was told to stop (Ctrl-C) meanwhile."""
    from distributed import Client

    from harvest.flows.orchestrator.dask_runner import quiet_dask_logs
    from harvest.tasks.round_task import rounds_paying

    quiet_dask_logs()

    deadline = time.monotonic() + wait_seconds
    said = False
    try:
        async with Client(address, asynchronous=True, timeout="30s") as client:
            while True:
                paying = sum((await client.run(rounds_paying, run_id)).values())
                if not paying:
                    return True
                if not said:
                    note(
                        f"harvest: waiting for {counted(paying, 'round')} of the killed run still paying on the "
                        f"cluster at {address} (at most {wait_seconds / 60:.0f} min) before reading the balance"
                    )
                    said = True
                if stopped() or time.monotonic() > deadline:
                    return False
                await asyncio.sleep(POLL_SECONDS)
    except Exception as exc:  # an unreachable scheduler or worker: the rounds fail the same way in a moment
        log.warning("could not ask the Dask cluster at %s for the killed run's rounds: %s", address, exc)
        return False
