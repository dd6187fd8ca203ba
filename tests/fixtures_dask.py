"""One Dask cluster per test module, for the tests that need a cluster and not harvest's own.

A run with `runner: {kind: dask, workers: N}` starts a local cluster of N worker processes and stops it at its
end, and each worker imports Prefect and harvest before its first round: ~30 s more than the same run on a
running cluster, on a busy 2-core machine. Tests whose property is about the rounds (the budget, the balance floor, an incremental rerun, a full
disk) run on this one instead, `runner: {kind: dask, address: ...}`: the same worker processes harvest starts
(`local_cluster_kwargs`, two of them), started once. `test_dask_runner` keeps runs that start harvest's own.

Nothing a round leaves on a worker outlives its task (results are released once settled), so the cluster is
shared as it is; a test that kills a worker starts a cluster of its own. Per module, not per session: an idle
cluster's processes still take ~4 s of CPU every 30 s (heartbeats, monitors, event loops), more than a start
costs by the time a session of several minutes ends.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

SHARED_WORKERS = 2


@pytest.fixture(scope="module")
def dask_address() -> Iterator[str]:
    """The scheduler's address of a local cluster of `SHARED_WORKERS` processes whose environment holds
    harvest's key (`tests.flow_helpers.SECRET_KEY`), as a worker started by hand on another machine would. Its
    processes end with this one (distributed's own watch of the parent), however this one ends."""
    from distributed import LocalCluster

    from harvest.flows.orchestrator.dask_runner import local_cluster_kwargs
    from tests.flow_helpers import SECRET_KEY

    env = {"HARVEST_API_KEY": SECRET_KEY}
    with LocalCluster(**local_cluster_kwargs(SHARED_WORKERS), host="127.0.0.1", env=env) as cluster:
        yield cluster.scheduler_address
