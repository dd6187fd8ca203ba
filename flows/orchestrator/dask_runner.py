"""The Prefect task runner of a Dask run: the cluster named in the spec, or a local one of worker processes."""

from __future__ import annotations

import logging
import os
from typing import Any

from harvest.flows.spec import JobSpec


def dask_task_runner(spec: JobSpec) -> Any:
    """Imported here: prefect_dask (and distributed) are the `dask` extra's, needed only by Dask runs."""
    from prefect_dask import DaskTaskRunner

    quiet_dask_logs()
    short_message_logs()
    if spec.runner.address:
        return DaskTaskRunner(address=spec.runner.address)
    return DaskTaskRunner(cluster_kwargs=local_cluster_kwargs(spec.runner.workers))


def local_cluster_kwargs(workers: int) -> dict[str, Any]:
    """A LocalCluster of worker processes with no dashboard and no fixed port.

    `dashboard_address=None` does not do what distributed documents (dask/distributed#8136): the scheduler's
    HTTP server (health and metrics routes) still binds :8787, or warns and moves when another cluster has it.
    Any free port on 127.0.0.1 instead, and `dashboard=False` so no Bokeh dashboard is served there either.
    """
    return {
        "n_workers": workers, "processes": True, "threads_per_worker": 1,
        "dashboard_address": "127.0.0.1:0", "scheduler_kwargs": {"dashboard": False},
        "preload": [__name__],  # `dask_setup` below, in each worker process
    }  # fmt: skip


def quiet_dask_logs() -> None:
    """Dask's INFO lines stay off harvest's stderr, which a cron job mails and a person reads a line an event:
    ~35 a run (its scheduler and nannies starting and closing, each connection, a dashboard address where no
    dashboard is served). Its warnings and errors still show. Called once distributed is imported, which sets
    the level from Dask's configuration: a level a user set there (`DASK_LOGGING__DISTRIBUTED`) is kept."""
    if "DASK_LOGGING__DISTRIBUTED" not in os.environ:
        logging.getLogger("distributed").setLevel(logging.WARNING)


MESSAGE_LOG = "distributed.admin.low-level-log-length"
MESSAGE_LOG_LENGTH = 10
"""The recent batches of messages each Dask connection keeps (distributed's default: 1,000)."""


def short_message_logs() -> None:
    """Each Dask connection keeps its last 1,000 batches of messages for debugging, and a round's message
    carries its task (~22 KB pickled): 4,000 one-page dependent queries held ~340 MB in harvest's process (its
    client, and the local cluster's scheduler) and ~70 MB more in each worker, 73 KB a query, growing until the
    logs were full. Ten batches each; a length a user set (`DASK_DISTRIBUTED__ADMIN__LOW_LEVEL_LOG_LENGTH`, or
    Dask's configuration) is kept. Set for the process before the client and cluster start (they read it then),
    and handed to the local cluster's workers with the rest of Dask's configuration."""
    import dask

    if (
        "DASK_DISTRIBUTED__ADMIN__LOW_LEVEL_LOG_LENGTH" not in os.environ
        and dask.config.get(MESSAGE_LOG) == 1000
    ):
        dask.config.set({MESSAGE_LOG: MESSAGE_LOG_LENGTH})


def dask_setup(worker: Any) -> None:
    """Each worker process of harvest's own cluster (its `preload`) ignores the terminal's Ctrl-C and hangup: a
    terminal sends them to the whole process group, and a worker they killed mid-request had its page billed
    and never landed, so the resume paid for it again. harvest's own handler stops the run as on a cluster of
    its own: no round is granted after it, the rounds in flight land. The cluster still closes its workers."""
    import signal

    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
