"""The credit budget is a hard cap on real money: harvest's real pager, client and ledger against the sandbox's
own billing, one query, several at once, per-query caps, the balance floor, and a property test over random
faults, costs, concurrency and budgets.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from harvest.connectors.catalog import endpoints as catalog
from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.credits.ledger import CreditLedger
from harvest.connectors.credits.reservations import Policy
from harvest.connectors.http.client import ServiceClient
from harvest.connectors.paging.pager import QuerySpec
from harvest.sandbox.config import FaultKind, SandboxConfig
from harvest.sandbox.expected import crawl
from harvest.sandbox.wire.faults import PROXY_PAGE
from harvest.sandbox.wire.serving import RunningSandbox, running, start
from tests.crawl_helpers import (
    FAST,
    Run,
    collect,
    entry_cursor,
    expected,
    harvested,
    query_entries,
    real_retries,  # noqa: F401  (fixture)
    run_query,
)
from tests.declaring_helpers import Variant, aliased, variants
from tests.endpoints import CLIP, FEED, FORUM, PHOTOS, PINS, PROFILE, REELS, SHOP
from tests.flow_helpers import SECRET_KEY, job_spec, run_flow, write_spec

pytestmark = pytest.mark.usefixtures("real_retries")

Factory = Callable[..., RunningSandbox]
ENDPOINTS = catalog.endpoints()


async def _concurrently(
    sb: RunningSandbox,
    queries: list[tuple[str, Endpoint, dict[str, Any]]],
    ledger: CreditLedger,
    in_flight: int = 16,
) -> dict[str, Run]:
    async with ServiceClient(sb.base_url, sb.key, ledger, retry=FAST, max_in_flight=in_flight) as client:
        runs = await asyncio.gather(
            *(collect(QuerySpec(qid, e.path, p), e, client, ledger) for qid, e, p in queries)
        )
    return {qid: run for (qid, _, _), run in zip(queries, runs, strict=True)}


# ---------------------------------------------------------------------------------------------- (a) one query
async def test_budget_smaller_than_one_query(sandbox_factory: Factory) -> None:
    sb = sandbox_factory(pages=(5, 5), page_size=4)
    endpoint, params = ENDPOINTS[PINS], {"query": "desk lamps"}
    ledger = CreditLedger(3)
    run = await run_query(sb, endpoint, params, ledger=ledger)

    assert sb.billed_total() == 3 == ledger.spent == run.outcome.credits
    assert len(sb.ledger) == 3 and len(run.pages) == 3
    assert run.outcome.status == "budget_exhausted"
    assert "budget of 3 credits" in (run.outcome.error or "")
    pages = list(crawl(PINS, params, sb.config))
    assert run.outcome.next_cursor == pages[2].next, "the cursor of page 4, the first not fetched"

    # resuming from it fetches exactly the rest: together, the full crawl, and no page twice
    spec = QuerySpec("q", PINS, params, start_cursor=run.outcome.next_cursor)
    rest_ledger = CreditLedger(100)
    async with ServiceClient(sb.base_url, sb.key, rest_ledger, retry=FAST) as client:
        rest = await collect(spec, endpoint, client, rest_ledger)
    # a continued query is a new run of it: its page indices start again at 0; the last page of pins carries a
    # cursor to the page that ends pin search (`"cursor": "-end-"`, no pins, billed), as on the service
    assert rest.outcome.status == "complete" and [p.index for p in rest.pages] == [0, 1, 2]
    assert harvested(endpoint, run.pages + rest.pages, params) == expected(endpoint, params, sb.config)
    assert len(sb.ledger) == 6


async def test_zero_budget_sends_nothing(sandbox_factory: Factory) -> None:
    sb = sandbox_factory()
    run = await run_query(sb, ENDPOINTS[PINS], {"query": "x"}, ledger=CreditLedger(0))
    assert run.outcome.status == "budget_exhausted" and run.pages == []
    assert sb.ledger == [] and run.outcome.next_cursor is None


# ---------------------------------------------------------------------------------------------- (b) shared budget
@pytest.mark.parametrize("pins", variants(PINS))
@pytest.mark.parametrize(("budget", "cost"), [(7, 1), (8, 1), (11, 2)])
async def test_breadth_first_shares_a_short_budget_fairly(budget: int, cost: int, pins: Variant) -> None:
    """The same for pins a job declares, its price a job's `costs:` override."""
    with aliased(SandboxConfig(), pages=(5, 5), page_size=4, costs={PINS: cost}) as sb:
        endpoint = pins.endpoint({pins.path: cost})
        queries = [(f"q{i}", endpoint, {"query": f"topic {i}"}) for i in range(3)]
        ledger = CreditLedger(budget, policy="breadth_first")
        runs = await _concurrently(sb, queries, ledger)
    served = ENDPOINTS[PINS]  # the sandbox's ledger names the path it served

    counts = [len(query_entries(sb, served, p)) for _, _, p in queries]
    assert max(counts) - min(counts) <= 1, counts
    assert counts == [len(runs[q].pages) for q, _, _ in queries]
    assert sb.billed_total() == sum(counts) * cost == budget - budget % cost
    assert ledger.spent == sb.billed_total()
    assert {r.outcome.status for r in runs.values()} == {"budget_exhausted"}


async def test_greedy_never_passes_the_shared_budget(sandbox_factory: Factory) -> None:
    sb = sandbox_factory(pages=(5, 5), page_size=4)
    endpoint = ENDPOINTS[PINS]
    queries = [(f"q{i}", endpoint, {"query": f"topic {i}"}) for i in range(3)]
    ledger = CreditLedger(7, policy="greedy")
    runs = await _concurrently(sb, queries, ledger)
    assert sb.billed_total() == 7 == ledger.spent == sum(len(r.pages) for r in runs.values())


# ---------------------------------------------------------------------------------------------- (c) per-query caps
async def test_max_pages(sandbox_factory: Factory) -> None:
    sb = sandbox_factory(pages=(4, 4), page_size=4)
    run = await run_query(sb, ENDPOINTS[PINS], {"query": "chairs"}, max_pages=2)
    assert run.outcome.status == "max_pages" and len(run.pages) == 2 and len(sb.ledger) == 2
    assert run.outcome.next_cursor == run.pages[1].cursor_out is not None
    assert run.outcome.credits == sb.billed_total() == 2


@pytest.mark.parametrize(("cost", "cap", "pages"), [(1, 3, 3), (2, 5, 2), (3, 2, 0)])
async def test_max_credits_caps_one_query_only(
    sandbox_factory: Factory, cost: int, cap: int, pages: int
) -> None:
    sb = sandbox_factory(pages=(5, 5), page_size=4, costs={PINS: cost})
    endpoint = catalog.get(PINS, {PINS: cost})
    ledger = CreditLedger(100)
    capped = await run_query(
        sb, endpoint, {"query": "tables"}, ledger=ledger, query_id="capped", max_credits=cap
    )
    other = await run_query(sb, endpoint, {"query": "sofas"}, ledger=ledger, query_id="free")

    assert capped.outcome.status == "budget_exhausted"
    assert "cap of" in (capped.outcome.error or "")
    assert len(query_entries(sb, endpoint, {"query": "tables"})) == pages == len(capped.pages)
    assert capped.outcome.credits == pages * cost <= cap
    # five pages of pins and the page ending pin search (`-end-`)
    assert other.outcome.status == "complete" and len(other.pages) == 6, "the cap is per query"
    assert ledger.spent == sb.billed_total() == (pages + 6) * cost


# ---------------------------------------------------------------------------------------------- (d) balance floor
async def test_min_balance_floor_stops_the_run(sandbox_factory: Factory) -> None:
    sb = sandbox_factory(api_keys={"floor-key": 12}, pages=(6, 6), page_size=4)
    ledger = CreditLedger(100, min_balance=10)
    run = await run_query(sb, ENDPOINTS[PINS], {"query": "rugs"}, ledger=ledger)

    # balances after each page: 11, 10 -> a third page would take the account below the floor of 10
    assert [p.body["credits_remaining"] for p in run.pages] == [11, 10]
    assert run.outcome.status == "budget_exhausted" and "floor of 10" in (run.outcome.error or "")
    assert len(sb.ledger) == 2 and sb.balance() == 10
    assert run.outcome.next_cursor == run.pages[-1].cursor_out is not None


def test_a_night_of_many_requests_in_flight_leaves_the_account_at_its_floor(
    prefect_harness: None, api_key: str, tmp_path: Path
) -> None:
    """The whole run as `harvest run` makes it (balance read first, 16 requests in flight, answers taking
    0.2 s): the requests on the wire when an answer shows the floor used to be paid past it (the account at
    14 for a floor of 30). The run holds the floor in its grants: the account ends at the floor exactly."""
    config = SandboxConfig(api_keys={SECRET_KEY: 40}, pages_by_path={PINS: (5, 5)}, latency=0.2)
    queries = [{"id": "pins", "endpoint": PINS, "for_each": {"query": [f"q{i}" for i in range(16)]}}]
    with running(config) as sb:
        spec = job_spec(sb.base_url, tmp_path / "out", queries, budget={"min_balance": 30}, concurrency=16)
        summary = run_flow(write_spec(tmp_path, spec))
        balance, billed = sb.balance(), sb.billed_total()
    assert balance == 30 and billed == summary.credits_spent == 10, (balance, billed, summary.credits_spent)
    assert summary.status == "budget_exhausted", summary
    assert sum(q["pages"] for q in summary.queries) == 10
    assert all("floor of 30" in q["error"] for q in summary.queries if q["pages"] < 5), summary.queries


def test_a_night_that_finds_the_account_below_its_floor_says_so_not_that_the_budget_ran_out(
    prefect_harness: None, api_key: str, tmp_path: Path
) -> None:
    """The account already under `min_balance` (another job on the key spent it): nothing is sent, and the line
    a cron mail shows names the floor. It said "the run's budget spent before their turn" with 0 of the budget
    spent: the operator would raise a budget that was never the problem."""
    from harvest.tasks.output.run_summary import never_started_line

    config = SandboxConfig(api_keys={SECRET_KEY: 967}, pages_by_path={PINS: (2, 2)})
    queries = [{"id": "pins", "endpoint": PINS, "for_each": {"query": ["a", "b", "c"]}}]
    with running(config) as sb:
        spec = job_spec(sb.base_url, tmp_path / "out", queries, credits=300, budget={"min_balance": 1000})
        summary = run_flow(write_spec(tmp_path, spec))
        billed = sb.billed_total()
    assert billed == summary.credits_spent == 0
    assert never_started_line(summary) == (
        "3 queries never started, the account at its balance floor (budget.min_balance) before their turn: "
        "3 of 3 pins (pins[query=a], pins[query=b], pins[query=c])"
    )
    assert all("967" in q["error"] and "floor of 1000" in q["error"] for q in summary.queries), (
        summary.queries
    )


@pytest.mark.parametrize("floor", [1000, 0], ids=["at_its_floor", "empty"])
def test_a_night_the_account_could_not_pay_for_fails_loudly(
    prefect_harness: None, api_key: str, tmp_path: Path, floor: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """A night the account left without a single page (at its floor, or out of credits) exited 0 and was
    Completed in Prefect, `budget_exhausted` with 0 of its budget spent: a cron job and a served deployment
    both reported success for a night that missed everything. No budget or `--continue` helps until a person
    tops the account up or lowers the floor: exit 1 and Failed, the line saying so."""
    from typer.testing import CliRunner

    from harvest.flows.cli import app
    from harvest.tasks.output.layout import OutputLayout
    from harvest.tasks.output.manifest import all_manifests
    from tests.prefect_helpers import flow_run_states

    config = SandboxConfig(api_keys={SECRET_KEY: 967 if floor else 0}, pages_by_path={PINS: (2, 2)})
    queries = [{"id": "pins", "endpoint": PINS, "for_each": {"query": ["a", "b"]}}]
    output = tmp_path / "out"
    with running(config) as sb:
        spec = job_spec(sb.base_url, output, queries, credits=300, budget={"min_balance": floor})
        result = CliRunner().invoke(app, ["run", str(write_spec(tmp_path, spec))])
        billed = sb.billed_total()
    (manifest,) = all_manifests(OutputLayout(output))
    state, message = flow_run_states([manifest.flow_run_id])[manifest.flow_run_id]
    assert billed == 0 and result.exit_code == 1, result.output
    assert state == "FAILED" and "2 queries never started (the account at its balance floor)" in message, (
        message
    )
    said = " ".join(result.output.split())
    assert "once the account is topped up or budget.min_balance lowered, `" in said, said


# ---------------------------------------------------------------------------------------------- property
QUICK_FAULTS = [
    FaultKind.RATE_LIMIT,
    FaultKind.SERVER_ERROR,
    FaultKind.UNAVAILABLE,
    FaultKind.DROP,
    FaultKind.TRUNCATED,
    FaultKind.MALFORMED,
]
SUBJECTS: dict[str, Callable[[int], dict[str, Any]]] = {
    PINS: lambda i: {"query": f"prop {i}"},
    FORUM: lambda i: {"subreddit": f"sub{i}", "query": "q"},
    PROFILE: lambda i: {"handle": f"maker{i}"},
    SHOP: lambda i: {"url": f"https://shop.example/s{i}"},
    REELS: lambda i: {"handle": f"reeler{i}"},
    FEED: lambda i: {"handle": f"u{i}.mb.example"},
    PHOTOS: lambda i: {"url": f"https://network-a.example/p{i}"},
    CLIP: lambda i: {"url": f"https://clips.streaming.example/c{i}"},
}
PROPERTY_PATHS = list(SUBJECTS)


async def _property_run(
    sb: RunningSandbox,
    endpoints: dict[str, Endpoint],
    queries: list[tuple[str, str, dict[str, Any]]],
    ledger: CreditLedger,
    in_flight: int,
    attempts: int,
) -> dict[str, Run]:
    retry = dataclasses.replace(FAST, attempts=attempts)
    async with ServiceClient(sb.base_url, sb.key, ledger, retry=retry, max_in_flight=in_flight) as client:
        runs = await asyncio.gather(
            *(collect(QuerySpec(q, path, p), endpoints[path], client, ledger) for q, path, p in queries)
        )
    return {q: r for (q, _, _), r in zip(queries, runs, strict=True)}


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    costs=st.fixed_dictionaries({p: st.integers(0, 3) for p in PROPERTY_PATHS}),
    paths=st.lists(st.sampled_from(PROPERTY_PATHS), min_size=1, max_size=8),
    faults=st.dictionaries(st.integers(1, 16), st.sampled_from(QUICK_FAULTS), max_size=8),
    in_flight=st.integers(1, 32),
    attempts=st.integers(2, 5),
    budget=st.integers(0, 40),
    policy=st.sampled_from(["breadth_first", "greedy"]),
)
def test_property_budget_delivery_and_counting(
    costs: dict[str, int],
    paths: list[str],
    faults: dict[int, FaultKind],
    in_flight: int,
    attempts: int,
    budget: int,
    policy: Policy,
) -> None:
    config = SandboxConfig(
        api_keys={"prop-key": 10**6}, pages=(1, 4), page_size=4, costs=costs, fault_plan=faults
    )
    endpoints = catalog.endpoints(costs)
    queries = [(f"q{i}", path, SUBJECTS[path](i)) for i, path in enumerate(paths)]
    ledger = CreditLedger(budget, policy=policy)
    sb = start(config)
    try:
        runs = asyncio.run(_property_run(sb, endpoints, queries, ledger, in_flight, attempts))
        entries = sb.ledger
        billed = sb.billed_total()
    finally:
        sb.stop(wait=False)

    # (i) the sandbox never billed past the budget; (iii) harvest counted at least what was billed
    assert billed <= budget
    assert billed <= ledger.spent <= budget
    assert ledger.reserved == 0

    # (ii) every undamaged 200 the sandbox answered reached the caller exactly once, by query and cursor
    owner = {}
    for qid, path, params in queries:
        model = endpoints[path].params.model_validate(params)
        owner[(path, frozenset(model.query_pairs()))] = qid
    answered: Counter[tuple[str, frozenset[tuple[str, Any]]]] = Counter()
    for e in entries:
        if e.status != 200 or e.fault is not None:
            continue
        endpoint = next(ep for ep in endpoints.values() if ep.path == e.path)
        cursor = entry_cursor(endpoint, e) or {}
        identity = frozenset((k, v) for k, v in e.params.items() if k not in cursor)
        answered[(owner[(e.path, identity)], frozenset(cursor.items()))] += 1
    delivered: Counter[tuple[str, frozenset[tuple[str, Any]]]] = Counter(
        (qid, frozenset((p.cursor_in or {}).items()))
        for qid, run in runs.items()
        for p in run.pages
        if p.status_code == 200 and p.body is not None  # a failed call's paid attempts come without a body
    )
    assert answered == delivered
    assert set(delivered.values()) <= {1}

    event(f"requests: {'0' if not entries else '1-9' if len(entries) < 10 else '10+'}")
    event(f"faults hit: {sum(e.fault is not None for e in entries)}")
    for run in runs.values():
        event(f"status: {run.outcome.status}")

    # and each query ended in a way a user can act on
    for qid, path, params in queries:
        out, pages = runs[qid].outcome, runs[qid].pages
        assert out.status in ("complete", "budget_exhausted", "failed", "drift"), out
        if out.status == "complete":
            assert harvested(endpoints[path], pages, params) == expected(endpoints[path], params, config)
        elif out.status == "budget_exhausted":
            assert out.next_cursor == (pages[-1].cursor_out if pages else None)
        elif out.status == "drift":  # a malformed answer: the service's own, paid once, kept, not asked again
            assert "could not be read" in (out.error or "") and out.next_cursor is None, out
            assert pages and pages[-1].body is None and runs[qid].kept[-1].endswith(PROXY_PAGE)
        else:
            assert "unavailable" in (out.error or "") or "damaged on both tries" in (out.error or ""), out


# ---------------------------------------------------------------------------------------------- prices above the table
PRICE_PATHS = [
    PINS,
    FORUM,
    FEED,
    PROFILE,
]
"""Endpoints whose answers carry `credits_charged` (the clip's bare array carries none: its price can only be
the table's, see docs/decisions.md)."""
UNREADABLE = {FaultKind.TRUNCATED.value, FaultKind.MALFORMED.value}
"""Billed faults whose charge harvest cannot read: counted at the reservation."""


@pytest.mark.scenario
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    table=st.fixed_dictionaries({p: st.integers(0, 3) for p in PRICE_PATHS}),
    prices=st.fixed_dictionaries({p: st.integers(0, 6) for p in PRICE_PATHS}),
    paths=st.lists(st.sampled_from(PRICE_PATHS), min_size=1, max_size=60),
    faults=st.dictionaries(st.integers(1, 40), st.sampled_from(QUICK_FAULTS), max_size=8),
    in_flight=st.integers(1, 32),
    budget=st.integers(0, 60),
    policy=st.sampled_from(["breadth_first", "greedy"]),
)
@example(  # bug 5: `costs: {path: 0}` with allow_lower_costs, 60 fanned-out queries: 62 spent of 5
    table={p: 0 for p in PRICE_PATHS},
    prices={p: 1 for p in PRICE_PATHS},
    paths=[PRICE_PATHS[0]] * 60,
    faults={},
    in_flight=8,
    budget=5,
    policy="breadth_first",
)
@example(  # bug 6: the service charges 5 where the catalog says 1: 60 spent of 30
    table={p: 1 for p in PRICE_PATHS}, prices={p: 5 for p in PRICE_PATHS}, paths=[PRICE_PATHS[2]] * 60,
    faults={}, in_flight=8, budget=30, policy="greedy",
)  # fmt: skip
@example(  # a damaged first answer (billed, its charge unreadable) does not show the price
    table={p: 1 for p in PRICE_PATHS}, prices={p: 5 for p in PRICE_PATHS}, paths=[PRICE_PATHS[0]] * 20,
    faults={1: FaultKind.TRUNCATED}, in_flight=8, budget=20, policy="greedy",
)  # fmt: skip
def test_property_a_service_charging_more_than_the_table(
    table: dict[str, int],
    prices: dict[str, int],
    paths: list[str],
    faults: dict[int, FaultKind],
    in_flight: int,
    budget: int,
    policy: Policy,
) -> None:
    """The sandbox bills `prices`, harvest's cost table (overrides below the catalog's included) says `table`:
    past the budget by at most one request's excess per endpoint, and not at all when nothing costs more than
    the table. Checked against the sandbox's own bill."""
    config = SandboxConfig(
        api_keys={"prop-key": 10**6}, pages=(1, 3), page_size=2, costs=prices, fault_plan=faults
    )
    endpoints = catalog.endpoints(table)
    queries = [(f"q{i}", path, SUBJECTS[path](i)) for i, path in enumerate(paths)]
    ledger = CreditLedger(budget, policy=policy)
    sb = start(config)
    try:
        runs = asyncio.run(_property_run(sb, endpoints, queries, ledger, in_flight, 3))
        entries = sb.ledger
        billed = sb.billed_total()
    finally:
        sb.stop(wait=False)

    excess = {p: max(0, prices[p] - table[p]) for p in set(paths)}
    unreadable = Counter(e.path for e in entries if e.fault in UNREADABLE and e.credits)
    event(f"excess: {'none' if not any(excess.values()) else 'some'}")
    event(f"unreadable billed answers: {sum(unreadable.values())}")
    assert ledger.reserved == 0
    # harvest's count: the budget, plus the one request per endpoint that showed its higher price
    assert ledger.spent <= budget + sum(excess.values())
    assert sum(o.excess for o in ledger.overcharges) <= sum(excess.values())
    # the bill: also what damaged answers cost beyond their reservation before the price was shown
    assert billed <= ledger.spent + sum(excess[p] * unreadable[p] for p in excess)
    if not any(excess.values()):
        assert billed <= ledger.spent <= budget
    for qid, _, _ in queries:
        assert runs[qid].outcome.status in ("complete", "budget_exhausted", "failed", "drift"), runs[
            qid
        ].outcome
