"""Property: Dask rounds (`flows.run.dask.grants`) keep the budget, each query's `max_credits` and each fan-out's
`max_credits_total` whatever the service charges, as the local runner does.

A night of rounds as `flows.run.dask.rounds.Rounds.run` plays it, in process: the flow's real ledger, `reprice`
and `allocate`, and for each grant a worker's real ledger (capped at the grant, holding the prices the flow
learned) paying page after page at the price the service charges, which may be above or below the cost table
and above or below what last night carried. Dependent queries arrive after a round or two, at an endpoint the
night may not have priced yet.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from harvest.connectors.credits.fanout_caps import FanoutCaps
from harvest.connectors.credits.ledger import CreditLedger
from harvest.connectors.paging.pager import QuerySpec, base_id
from harvest.flows.run.dask.grants import Running, allocate, reprice

KEYS = ("/e0", "/e1", "/e2")
GROUPS = ("g0", "g1", "g2")


@dataclass(frozen=True)
class Planned:
    group: str
    key: str
    pages: int
    """Pages the service has for it."""
    cap: int | None
    """Its `max_credits`."""
    arrives: int
    """The round after which it is found (0: planned; later: a dependent query)."""


planned = st.builds(
    Planned,
    st.sampled_from(GROUPS),
    st.sampled_from(KEYS),
    st.integers(1, 6),
    st.none() | st.integers(0, 15),
    st.integers(0, 2),
)


@dataclass(frozen=True)
class Night:
    budget: int
    table: dict[str, int]
    """The cost table's price of each price key."""
    charge: dict[str, int]
    """What the service charges a request of each."""
    carried: dict[str, int]
    """Last night's learned prices; only those above the table are carried (`above_the_list`)."""
    caps: dict[str, int]
    """Fan-out caps (`max_credits_total`) by spec query."""
    queries: list[Planned]
    round_pages: int
    policy: str


nights = st.builds(
    Night,
    budget=st.integers(0, 60),
    table=st.fixed_dictionaries({k: st.integers(0, 3) for k in KEYS}),
    charge=st.fixed_dictionaries({k: st.integers(0, 7) for k in KEYS}),
    carried=st.dictionaries(st.sampled_from(KEYS), st.integers(1, 7)),
    caps=st.dictionaries(st.sampled_from(GROUPS), st.integers(0, 30)),
    queries=st.lists(planned, min_size=1, max_size=12),
    round_pages=st.integers(1, 4),
    policy=st.sampled_from(["breadth_first", "greedy"]),
)


async def _night(night: Night) -> None:
    budget, table, charge, caps, queries = night.budget, night.table, night.charge, night.caps, night.queries
    round_pages, policy = night.round_pages, night.policy
    carried = {k: c for k, c in night.carried.items() if c > table[k]}
    flow = CreditLedger(
        budget, policy=policy, fanouts=FanoutCaps(caps, base_id), prices=carried, warn_prices=False
    )  # type: ignore[arg-type]
    plans = {f"{q.group}[n={i}]": q for i, q in enumerate(queries)}
    running: list[Running] = []
    over: dict[str, int] = defaultdict(int)  # price key -> requests charged above what they held
    q_spent: dict[str, int] = defaultdict(int)
    violations: list[str] = []

    def arrive(after: int) -> None:
        for qid, q in plans.items():
            if q.arrives == after:
                running.append(
                    Running(QuerySpec(qid, q.key, {}, max_credits=q.cap), table[q.key], price_key=q.key)
                )

    async def worker(r: Running, grant: int) -> dict:
        """`tasks.round_task._pay`: a ledger capped at the grant, holding the flow's learned prices."""
        q = plans[r.spec.query_id]
        ledger = CreditLedger(grant, policy="greedy", prices=flow.learned_prices, warn_prices=False)
        page = r.pages
        while page < q.pages:
            held = await ledger.reserve(r.spec.query_id, page, table[q.key], query_cap=q.cap, price_key=q.key)
            if held is None:
                break
            sent = ledger.sending(held)
            if sent is None:
                continue
            if charge[q.key] > sent.amount:
                over[q.key] += 1
            ledger.settle(sent, charge[q.key], priced=True)
            page += 1
        return {"spent": ledger.spent, "pages": page, "prices": ledger.answered_prices()}

    arrive(0)
    for round_no in range(1, 200):
        reprice(running, flow.learned_prices)
        for r in [r for r in running if r.spec.max_credits is not None and r.cost > r.spec.max_credits]:
            running.remove(r)
        free = flow.remaining
        grants = allocate(running, free, round_pages, flow.fanout_left, flow.priced_keys)
        granted = [r for r in running if grants[r.spec.query_id] > 0]
        held = sum(grants[r.spec.query_id] * r.cost for r in granted)
        if held > free:
            violations.append(f"round {round_no}: granted {held} of {free} free")
        for r in granted:
            cap = r.spec.max_credits
            if cap is not None and r.credits + grants[r.spec.query_id] * r.cost > cap:
                violations.append(f"round {round_no}: {r.spec.query_id} granted past its cap of {cap}")
            if grants[r.spec.query_id] > round_pages:
                violations.append(f"round {round_no}: {r.spec.query_id} granted past round_pages")
        for group in caps:
            members = [r for r in granted if base_id(r.spec.query_id) == group]
            given = sum(grants[r.spec.query_id] * r.cost for r in members)
            if members and given > (flow.fanout_left(members[0].spec.query_id) or 0):
                violations.append(f"round {round_no}: fan-out {group} granted {given} past its cap")
        for key in KEYS:
            if (
                key not in flow.priced_keys
                and sum(grants[r.spec.query_id] for r in granted if r.price_key == key) > 1
            ):
                violations.append(f"round {round_no}: {key}, priced by no answer, granted more than one page")
        if not granted:
            break
        reserved = []
        for r in granted:
            amount = grants[r.spec.query_id] * r.cost
            reservation = await flow.reserve(r.spec.query_id, r.pages, amount, query_cap=r.spec.max_credits)
            if reservation is not None:
                reserved.append((r, reservation, amount))
        if not reserved:  # as `Rounds.run`: the ledger refused every grant (a free page past the budget)
            break
        for r, reservation, amount in reserved:
            result = await worker(r, amount)
            flow.heard(**result["prices"])
            flow.settle(reservation, result["spent"])
            r.credits += result["spent"]
            q_spent[r.spec.query_id] += result["spent"]
            r.pages = result["pages"]
            if r.pages >= plans[r.spec.query_id].pages or (
                r.spec.max_credits is not None and r.credits + r.cost > r.spec.max_credits
            ):
                running.remove(r)
        arrive(round_no)
    else:
        raise AssertionError("the rounds never ended")

    assert not violations, violations
    excess = {k: max(0, charge[k] - max(table[k], carried.get(k, 0))) for k in KEYS}
    assert all(n <= 1 for n in over.values()), (
        f"more than one request per endpoint paid past its hold: {over}"
    )
    bound = sum(excess[k] for k in over)
    assert flow.spent <= budget + bound, (flow.spent, budget, bound)
    for qid, spent in q_spent.items():
        cap = plans[qid].cap
        assert cap is None or spent <= cap + excess[plans[qid].key], (qid, spent, cap)
    for group, cap in caps.items():
        assert flow.fanout_spent(group) <= cap + bound, (group, flow.fanout_spent(group), cap)
    if not over:
        assert flow.spent <= budget and flow.overcharges == []


@settings(max_examples=300, deadline=None)
@given(night=nights)
def test_dask_rounds_pass_no_cap_by_more_than_one_requests_excess_per_endpoint(night: Night) -> None:
    """Each round's grants fit the credits free, each query's cap and round_pages, and an endpoint no answer
    priced gets one page in all; over the night, at most one request per endpoint pays past what it held (the
    first to show a price above the table and above last night's), so the budget, a query's `max_credits` and a
    fan-out's cap are passed by that excess at most, and never when the service charges no more than was held."""
    asyncio.run(asyncio.wait_for(_night(night), 20))
