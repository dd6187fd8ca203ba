"""Property: whatever the costs, budgets, outcomes and interleavings, the ledger never grants past budget."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict

from hypothesis import example, given, settings
from hypothesis import strategies as st

from harvest.connectors.credits.ledger import CreditLedger
from harvest.connectors.credits.reservations import LedgerSnapshot

# (cost from the table, what the service did, how many times the task yields while "in flight")
OUTCOMES = ("none", "less", "equal", "release")
op = st.tuples(st.integers(0, 3), st.sampled_from(OUTCOMES), st.integers(0, 3))
task_ops = st.lists(op, min_size=1, max_size=8)


async def _run(
    budget: int,
    tasks: list[list[tuple[int, str, int]]],
    policy: str,
    register: bool,
    overcharge_every: int | None,
) -> None:
    ledger = CreditLedger(budget, policy=policy)  # type: ignore[arg-type]
    violations: list[LedgerSnapshot] = []
    expected: dict[str, int] = defaultdict(int)
    settled = 0

    def check() -> None:
        s = ledger.snapshot()
        if s.spent + s.reserved > s.budget + s.overcharged:
            violations.append(s)

    async def task(i: int, ops: list[tuple[int, str, int]]) -> None:
        nonlocal settled
        qid = f"q{i}"
        cm = ledger.query(qid) if register else contextlib.nullcontext()
        async with cm:
            page = 0
            for cost, outcome, yields in ops:
                r = await ledger.reserve(qid, page, cost)
                check()
                if r is None:
                    return
                for _ in range(yields):
                    await asyncio.sleep(0)
                check()
                if outcome == "release":
                    ledger.release(r)  # never reached the service: retry the same page
                    check()
                    continue
                settled += 1
                if overcharge_every and settled % overcharge_every == 0:
                    charged: int | None = cost + 1
                elif outcome == "none":
                    charged = None
                elif outcome == "less":
                    charged = max(0, cost - 1)
                else:
                    charged = cost
                expected[qid] += ledger.settle(r, charged)
                check()
                ledger.page_done(qid, page)
                page += 1

    async with asyncio.timeout(10):  # a deadlock fails the example instead of hanging the suite
        await asyncio.gather(*(task(i, ops) for i, ops in enumerate(tasks)))

    assert not violations, violations[0]
    final = ledger.snapshot()
    assert final.reserved == 0
    assert final.spent == sum(expected.values())
    assert dict(final.per_query_spent) == {q: v for q, v in expected.items() if q in final.per_query_spent}
    if not overcharge_every:
        assert final.spent <= budget
        assert final.overcharged == 0


@settings(max_examples=120, deadline=None)
@given(
    budget=st.integers(0, 40),
    tasks=st.lists(task_ops, min_size=1, max_size=32),
    policy=st.sampled_from(["breadth_first", "greedy"]),
    register=st.booleans(),
)
def test_never_past_the_budget_when_the_service_charges_the_table(
    budget: int, tasks: list[list[tuple[int, str, int]]], policy: str, register: bool
) -> None:
    asyncio.run(_run(budget, tasks, policy, register, None))


@settings(max_examples=40, deadline=None)
@given(
    budget=st.integers(0, 40),
    tasks=st.lists(task_ops, min_size=1, max_size=32),
    policy=st.sampled_from(["breadth_first", "greedy"]),
    every=st.integers(1, 5),
)
def test_overspend_is_only_ever_the_services_overcharge(
    budget: int, tasks: list[list[tuple[int, str, int]]], policy: str, every: int
) -> None:
    asyncio.run(_run(budget, tasks, policy, True, every))


# ---------------------------------------------------------------------------------------------- balance floor
async def _floor_run(start: int, floor: int, tasks: list[list[tuple[int, str, int]]], policy: str) -> int:
    """An account of `start` credits, read before the run; each request is billed when the service takes it,
    and its answer shows the balance of that moment, arriving after `yields` turns of the loop (others
    answered meanwhile: out of order). "none": the answer is lost (billed, no balance, no charge named).
    Returns the account's balance at the end."""
    ledger = CreditLedger(10_000, min_balance=floor, policy=policy)  # type: ignore[arg-type]
    account = start
    ledger.observe_remaining(account)

    async def task(i: int, ops: list[tuple[int, str, int]]) -> None:
        nonlocal account
        qid = f"q{i}"
        for page, (cost, outcome, yields) in enumerate(ops):
            r = await ledger.reserve(qid, page, cost)
            if r is None or (r := ledger.sending(r)) is None:
                return
            if outcome == "release":
                ledger.release(r)  # never reached the service
                continue
            charged = max(0, cost - 1) if outcome == "less" else cost
            account -= charged
            seen = account
            for _ in range(yields):
                await asyncio.sleep(0)
            if outcome == "none":
                ledger.settle(r, None)
            else:
                ledger.observe_remaining(seen)
                ledger.settle(r, charged)

    async with asyncio.timeout(10):  # a deadlock fails the example instead of hanging the suite
        await asyncio.gather(*(task(i, ops) for i, ops in enumerate(tasks)))
    assert ledger.reserved == 0
    return account


@settings(max_examples=150, deadline=None)
@given(
    start=st.integers(0, 40),
    floor=st.integers(0, 30),
    tasks=st.lists(task_ops, min_size=1, max_size=16),
    policy=st.sampled_from(["breadth_first", "greedy"]),
)
@example(start=40, floor=30, tasks=[[(1, "equal", 3)] * 4] * 16, policy="breadth_first")  # the audit's night
def test_requests_in_flight_never_take_the_account_below_its_floor(
    start: int, floor: int, tasks: list[list[tuple[int, str, int]]], policy: str
) -> None:
    """`budget.min_balance` with many requests in flight: the account ends at the floor or above (an account
    already below it is not touched)."""
    end = asyncio.run(_floor_run(start, floor, tasks, policy))
    assert end >= floor or end == start, (start, floor, end)


# ---------------------------------------------------------------------------------------------- service prices
# A service whose prices differ from the cost table, one price key (endpoint) per query. Each request is charged
# the price at the moment it is sent; optionally one key's price rises mid-run. What an attempt becomes:
# "answer" (a billed page: charged the price, priced), "unknown" (a timeout: charge unknown), "unbilled" (a 429:
# charged 0, not a price) or "release" (never sent).
ATTEMPTS = ("answer", "answer", "unknown", "unbilled", "release")
KEYS = ("/e0", "/e1", "/e2")


async def _priced_run(
    budget: int,
    table: dict[str, int],
    prices: dict[str, int],
    queries: list[tuple[str, list[tuple[str, int]]]],
    slots: int,
    policy: str,
    rise: tuple[str, int, int] | None,
) -> None:
    ledger = CreditLedger(budget, policy=policy)  # type: ignore[arg-type]
    price = dict(prices)
    sem = asyncio.Semaphore(slots)
    settled = 0
    violations: list[LedgerSnapshot] = []

    def check() -> None:
        s = ledger.snapshot()
        if s.spent + s.reserved > s.budget + s.overcharged + s.expected:  # expected: the rise on the wire
            violations.append(s)

    async def attempt(qid: str, key: str, page: int, outcome: str, yields: int) -> bool:
        """One attempt; False when the ledger refused it."""
        nonlocal settled
        while True:
            r = await ledger.reserve(qid, page, table[key], price_key=key)
            check()
            if r is None:
                return False
            async with sem:
                sent = ledger.sending(r)
                check()
                if sent is None:
                    continue  # the price rose while it waited: reserve again
                if outcome == "release":
                    ledger.release(sent)
                    return True
                charge = price[key]  # billed on arrival, at the price of that moment
                for _ in range(yields):
                    await asyncio.sleep(0)
                if outcome == "answer":
                    ledger.settle(sent, charge, priced=True)
                else:
                    ledger.settle(sent, None if outcome == "unknown" else 0)
                check()
                settled += 1
                if rise is not None and settled == rise[1]:
                    price[rise[0]] = rise[2]
                return True

    async def query(qid: str, key: str, ops: list[tuple[str, int]]) -> None:
        async with ledger.query(qid):
            page = 0
            for outcome, yields in ops:
                if not await attempt(qid, key, page, outcome, yields):
                    return
                if outcome == "answer":
                    ledger.page_done(qid, page)
                    page += 1

    async with asyncio.timeout(20):  # a deadlock fails the example instead of hanging the suite
        await asyncio.gather(*(query(f"q{i}", key, ops) for i, (key, ops) in enumerate(queries)))

    assert not violations, violations[0]
    final = ledger.snapshot()
    assert final.reserved == 0 and final.remaining == max(0, budget - final.spent)
    highest = {k: max(prices[k], rise[2] if rise and rise[0] == k else 0) for k in KEYS}
    by_key = {k: [o for o in ledger.overcharges if queries[int(o.query_id[1:])][0] == k] for k in KEYS}
    bound = 0
    for k in KEYS:
        # the one request that shows an unseen higher price; after a rise, the requests already on the wire
        most = 1 + (slots if rise and rise[0] == k else 0)
        assert len(by_key[k]) <= most, (k, by_key[k])
        assert all(o.charged <= highest[k] for o in by_key[k])
        bound += most * max(0, highest[k] - table[k])
    assert final.spent <= budget + bound
    if all(highest[k] <= table[k] for k in KEYS):
        assert final.spent <= budget and final.overcharged == 0


prices = st.fixed_dictionaries({k: st.integers(0, 6) for k in KEYS})
table = st.fixed_dictionaries({k: st.integers(0, 3) for k in KEYS})
priced_query = st.tuples(
    st.sampled_from(KEYS),
    st.lists(st.tuples(st.sampled_from(ATTEMPTS), st.integers(0, 3)), min_size=1, max_size=6),
)


MID_RUN_RISE = {
    "budget": 60,
    "table": dict.fromkeys(KEYS, 1),
    "prices": dict.fromkeys(KEYS, 1),
    "queries": [("/e0", [("answer", 2)] * 3)] * 40,
    "slots": 4,
    "policy": "greedy",
    "rise": ("/e0", 5, 3),
}
"""40 queries granted at 1 and waiting for 4 connections when the price becomes 3: the waiting ones must be
topped up before they are sent, not each pay the rise."""


@settings(max_examples=150, deadline=None)
@given(
    budget=st.integers(0, 60),
    table=table,
    prices=prices,
    queries=st.lists(priced_query, min_size=1, max_size=60),
    slots=st.integers(1, 32),
    policy=st.sampled_from(["breadth_first", "greedy"]),
    rise=st.none() | st.tuples(st.sampled_from(KEYS), st.integers(1, 30), st.integers(1, 9)),
)
@example(**MID_RUN_RISE)  # type: ignore[arg-type]
def test_a_price_above_the_table_passes_the_budget_by_one_request_per_endpoint(
    budget: int,
    table: dict[str, int],
    prices: dict[str, int],
    queries: list[tuple[str, list[tuple[str, int]]]],
    slots: int,
    policy: str,
    rise: tuple[str, int, int] | None,
) -> None:
    """Unseen prices: one request's excess per endpoint; a mid-run rise: the requests in flight; a service
    charging no more than the table: never past the budget."""
    asyncio.run(_priced_run(budget, table, prices, queries, slots, policy, rise))


# ------------------------------------------------------------------------------------------ fan-out caps
# Queries in fan-outs (groups) with a cap of their own (`max_credits_total`), sharing a budget and a few
# connection slots; each attempt is one of ATTEMPTS (an unknown charge counts whole, an unbilled refusal 0, a
# release gives it back and the page is asked again: a retry). The service charges the table, or less.
GROUPS = ("g0", "g1", "g2")
fanout_query = st.tuples(
    st.sampled_from(GROUPS),
    st.integers(0, 3),
    st.lists(st.tuples(st.sampled_from(ATTEMPTS), st.integers(0, 3)), min_size=1, max_size=6),
)


async def _fanout_run(
    budget: int,
    caps: dict[str, int],
    queries: list[tuple[str, int, list[tuple[str, int]]]],
    slots: int,
    policy: str,
    less: bool,
) -> None:
    from harvest.connectors.credits.fanout_caps import FanoutCaps
    from harvest.connectors.paging.pager import base_id

    ledger = CreditLedger(budget, policy=policy, fanouts=FanoutCaps(caps, base_id))  # type: ignore[arg-type]
    sem = asyncio.Semaphore(slots)
    held: dict[str, int] = defaultdict(int)
    spent: dict[str, int] = defaultdict(int)
    violations: list[tuple[str, int, int]] = []

    def check() -> None:
        for group, cap in caps.items():
            if spent[group] + held[group] > cap:
                violations.append((group, spent[group], held[group]))
        s = ledger.snapshot()
        if s.spent + s.reserved > s.budget:
            violations.append(("budget", s.spent, s.reserved))

    async def attempt(qid: str, cost: int, page: int, outcome: str, yields: int) -> bool | None:
        """One attempt; None when the ledger refused it, False when it was released (the page is asked
        again by the next attempt: a retry)."""
        group = base_id(qid)
        while True:
            r = await ledger.reserve(qid, page, cost, price_key=f"/{group}")
            if r is None:
                return None
            held[group] += r.amount
            check()
            async with sem:
                sent = ledger.sending(r)
                if sent is None:
                    held[group] -= r.amount
                    continue  # the price rose while it waited: reserve again
                held[group] += sent.amount - r.amount
                check()
                for _ in range(yields):
                    await asyncio.sleep(0)
                held[group] -= sent.amount
                if outcome == "release":
                    ledger.release(sent)
                    check()
                    return False
                if outcome == "answer":
                    charge: int | None = max(0, cost - 1) if less else cost
                    spent[group] += ledger.settle(sent, charge, priced=True)
                else:
                    spent[group] += ledger.settle(sent, None if outcome == "unknown" else 0)
                check()
                return True

    async def query(qid: str, cost: int, ops: list[tuple[str, int]]) -> None:
        async with ledger.query(qid):
            page = 0
            for outcome, yields in ops:
                paid = await attempt(qid, cost, page, outcome, yields)
                if paid is None:
                    return
                if paid:
                    ledger.page_done(qid, page)
                    page += 1

    for n, (group, _, _) in enumerate(queries):
        ledger.expect(f"{group}[n={n}]")
    async with asyncio.timeout(20):  # a deadlock fails the example instead of hanging the suite
        await asyncio.gather(
            *(query(f"{group}[n={n}]", cost, ops) for n, (group, cost, ops) in enumerate(queries))
        )

    assert not violations, violations[0]
    final = ledger.snapshot()
    assert final.reserved == 0 and final.spent <= budget
    for group, cap in caps.items():
        assert ledger.fanout_spent(group) == spent[group] <= cap


@settings(max_examples=150, deadline=None)
@given(
    budget=st.integers(0, 60),
    caps=st.dictionaries(st.sampled_from(GROUPS), st.integers(0, 12), min_size=1),
    queries=st.lists(fanout_query, min_size=1, max_size=40),
    slots=st.integers(1, 16),
    policy=st.sampled_from(["breadth_first", "greedy"]),
    less=st.booleans(),
)
@example(  # a short cap on one wide fan-out, every attempt retried once, all on the wire together
    budget=60, caps={"g0": 7}, queries=[("g0", 2, [("release", 1), ("answer", 2)] * 3)] * 20, slots=16,
    policy="breadth_first", less=False,
)  # fmt: skip
def test_a_fan_out_never_spends_past_its_cap_under_concurrency_and_retries(
    budget: int,
    caps: dict[str, int],
    queries: list[tuple[str, int, list[tuple[str, int]]]],
    slots: int,
    policy: str,
    less: bool,
) -> None:
    """At every instant a capped fan-out's spent and held credits stay within its cap (and the run's within
    its budget), whatever the interleaving, retries, unknown charges and refusals; no deadlock."""
    asyncio.run(_fanout_run(budget, caps, queries, slots, policy, less))


@settings(max_examples=60, deadline=None)
@given(
    cap=st.integers(0, 30),
    wants=st.lists(st.integers(1, 8), min_size=2, max_size=12),
    cost=st.integers(1, 3),
)
def test_a_short_fan_out_cap_is_shared_breadth_first(cap: int, wants: list[int], cost: int) -> None:
    """No query of a capped fan-out takes page k+1 while another that wanted more stopped at page k: the
    page counts of the queries the cap stopped differ by at most one, and no query has more than one page
    past any of them."""

    async def run() -> dict[str, tuple[int, bool]]:
        from harvest.connectors.credits.fanout_caps import FanoutCaps
        from harvest.connectors.paging.pager import base_id

        ledger = CreditLedger(10_000, fanouts=FanoutCaps({"c": cap}, base_id))
        done: dict[str, tuple[int, bool]] = {}
        ids = [f"c[n={n}]" for n in range(len(wants))]
        for qid in ids:
            ledger.expect(qid)

        async def query(qid: str, want: int, slow: int) -> None:
            async with ledger.query(qid):
                pages = 0
                while pages < want:
                    r = await ledger.reserve(qid, pages, cost)
                    if r is None:
                        done[qid] = (pages, True)
                        return
                    for _ in range(slow):  # the first queries answer fastest: they would race ahead
                        await asyncio.sleep(0)
                    ledger.settle(r, cost)
                    ledger.page_done(qid, pages)
                    pages += 1
                done[qid] = (pages, False)

        async with asyncio.timeout(10):
            await asyncio.gather(*(query(q, w, n) for n, (q, w) in enumerate(zip(ids, wants, strict=True))))
        assert ledger.fanout_spent("c") <= cap
        return done

    done = asyncio.run(run())
    stopped = [pages for pages, refused in done.values() if refused]
    if stopped:
        assert max(stopped) - min(stopped) <= 1, done
        assert max(pages for pages, _ in done.values()) <= min(stopped) + 1, done
