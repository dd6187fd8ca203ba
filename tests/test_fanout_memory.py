"""A wide fan-out's memory while it pages grows with what each ended query leaves for the run's end, not with the
queries waiting for a connection: a nightly fan-out over 10,000 accounts used to build every query's paging
machinery at once (its pager, its credit reservation, its request: ~10 KB each) and the allocator kept the
arenas they had filled after they ended (10,000 one-page accounts peaked at 452 MB). What an ended query leaves
is its summary, kept as the JSON the manifest writes (~1 KB, not ~3.7 KB of dicts): a night's dependent queries
are one per parent record (20,000 dependent queries peaked at 419 MB, now 345 MB).

Measured where a run is measured: a real flow run against the sandbox over HTTP on 127.0.0.1, Python's
allocations traced while the sandbox answers each request (the sandbox serves from a thread of this process)."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import pytest

from harvest.flows.collect import run_collect
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import RunningSandbox, running
from tests.endpoints import PROFILE
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, job_spec, rows, run_flow, write_spec

Scope = MutableMapping[str, Any]
App = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]

CONFIG = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PROFILE: (1, 1)}, page_size=1)


class Sampled:
    """The largest traced allocation of the process seen as a request reached the sandbox: the run's memory
    while it pages (its end, the load, comes after the last request)."""

    def __init__(self) -> None:
        self.most = 0
        self.requests = 0

    def around(self, app: App) -> App:
        async def sampled(scope: Scope, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and scope["path"] == PROFILE:
                self.requests += 1
                self.most = max(self.most, tracemalloc.get_traced_memory()[0])
            await app(scope, receive, send)

        return sampled


def _run_memory(tmp_path: Path, accounts: int) -> tuple[int, int]:
    """Bytes traced at the busiest request of a fan-out over `accounts` one-page accounts, and at the run's
    traced peak (its end included: the manifest, the load's `query_state`, the summary), above the traced bytes
    before the run."""
    output = tmp_path / f"out-{accounts}"
    handles = [f"acct{i:05d}" for i in range(accounts)]
    queries = [{"id": "videos", "endpoint": PROFILE, "for_each": {"handle": handles}}]
    job = job_spec("{base}", output, queries, name=f"fan{accounts}", credits=10 * accounts, concurrency=2)
    spec = write_spec(tmp_path, job, name=f"fan{accounts}.yaml")
    sampled = Sampled()
    with RunningSandbox(CONFIG, served=sampled.around).start() as sb:
        spec.write_text(spec.read_text().replace("{base}", sb.base_url))
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        summary = run_flow(spec)
        peak = tracemalloc.get_traced_memory()[1]
    assert summary.status == "complete", summary
    assert sampled.requests == accounts
    assert rows(output / "harvest.duckdb", "SELECT count(*) FROM query_state") == [(accounts,)]
    return sampled.most - before, peak - before


def test_a_fan_out_holds_a_packed_summary_per_ended_query_and_no_waiting_machinery(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    tracemalloc.start()
    try:
        _run_memory(tmp_path, 40)  # the process's one-time costs (caches, the first flow run) paid here
        small = _run_memory(tmp_path, 100)
        large = _run_memory(tmp_path, 700)
    finally:
        tracemalloc.stop()
    per_query = (large[0] - small[0]) / 600
    at_peak = (large[1] - small[1]) / 600
    # what an ended query keeps for the run's end, its summary compressed with its neighbours'
    # (`PackedSummaries`): 3.1-3.3 KB measured at 1,500 accounts, 3.0-3.25 KB at 700; as plain JSON 3.8-4.2 KB, as dicts 5.6 KB, and with the paging
    # machinery of every query waiting at once 12.6 KB. At the run's traced peak (its end) 3.4 KB; 5.1-5.3 KB
    # with plain JSON and the manifest made as one document, 8.2 KB with the summaries as dicts
    assert per_query < 3_800, f"{per_query:.0f} bytes a query while paging"
    assert at_peak < 4_200, f"{at_peak:.0f} bytes a query at the run's peak"


SHORT = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PROFILE: (3, 3)}, page_size=1)


def test_a_short_budget_is_still_shared_by_every_account_of_a_fan_out_wider_than_the_gate(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """40 accounts of 3 pages, one connection (at most 2 queries before their first page at once), 60 credits:
    every account gets its first page before any gets a third, and the queries let in first, which wait for
    the others' first pages before their second, never keep those others out (a run that waited on itself
    would never end: the test gives it two minutes)."""
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    output = tmp_path / "out"
    handles = [f"acct{i:02d}" for i in range(40)]
    with running(SHORT) as sb:
        queries = [{"id": "videos", "endpoint": PROFILE, "for_each": {"handle": handles}}]
        spec = write_spec(
            tmp_path, job_spec(sb.base_url, output, queries, name="short", credits=60, concurrency=1)
        )
        summary = asyncio.run(asyncio.wait_for(run_collect(spec_path=str(spec)), timeout=120))
        billed = sb.billed_total()
    assert summary.status == "budget_exhausted", summary
    assert billed == 60 == summary.credits_spent
    pages = dict(rows(output / "harvest.duckdb", "SELECT query_id, pages FROM query_state"))
    assert len(pages) == 40 and sum(pages.values()) == 60
    assert sorted(set(pages.values())) == [1, 2], pages  # breadth-first: 20 with two pages, 20 with one
