"""Property: whatever the costs, budgets, outcomes and interleavings, the ledger never grants past budget."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.ledger import CreditLedger, LedgerSnapshot

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
