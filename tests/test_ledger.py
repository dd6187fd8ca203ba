"""The credit ledger: the budget is a hard cap under any interleaving, and waiting never deadlocks."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from harvest.connectors.credits.ledger import CreditLedger
from harvest.connectors.credits.reservations import Reservation


def refusal_reason(ledger: CreditLedger, query_id: str) -> str:
    refusal = ledger.refusal(query_id)
    return refusal.reason if refusal else ""


async def test_settle_counts_charged_unknown_and_release() -> None:
    ledger = CreditLedger(10)
    a = await ledger.reserve("q", 0, 3)
    b = await ledger.reserve("q", 1, 3)
    c = await ledger.reserve("p", 0, 2)
    assert a and b and c
    assert (ledger.spent, ledger.reserved, ledger.remaining) == (0, 8, 2)
    assert ledger.settle(a, 1) == 1  # charged less than the table: the real amount
    assert ledger.settle(b, None) == 3  # unknown: the reservation counts as spent
    ledger.release(c)  # never reached the service
    assert (ledger.spent, ledger.reserved, ledger.remaining) == (4, 0, 6)
    assert ledger.per_query_spent == {"q": 4}
    assert ledger.overcharges == []


async def test_closing_a_reservation_twice_is_an_error() -> None:
    ledger = CreditLedger(5)
    r = await ledger.reserve("q", 0, 1)
    assert r is not None
    ledger.settle(r, 1)
    with pytest.raises(ValueError, match="already settled"):
        ledger.settle(r, 1)
    with pytest.raises(ValueError, match="already settled"):
        ledger.release(r)
    assert ledger.spent == 1


async def test_refuses_what_does_not_fit_and_says_why() -> None:
    ledger = CreditLedger(3)
    r = await ledger.reserve("q", 0, 3)
    assert r is not None
    ledger.settle(r, 3)
    assert await ledger.reserve("q", 1, 1) is None
    assert "budget of 3 credits has 0 left" in refusal_reason(ledger, "q")
    assert await ledger.reserve("q", 1, 0) is not None  # a free (cached) request still fits


async def test_overcharge_is_recorded_and_visible(caplog: pytest.LogCaptureFixture) -> None:
    ledger = CreditLedger(2)
    r = await ledger.reserve("q", 0, 1)
    assert r is not None
    with caplog.at_level(logging.WARNING, "harvest.ledger"):
        assert ledger.settle(r, 3) == 3
    assert ledger.spent == 3 and ledger.remaining == 0
    [over] = ledger.overcharges
    assert (over.query_id, over.reserved, over.charged, over.excess) == ("q", 1, 3, 2)
    assert ledger.snapshot().overcharged == 2
    assert "charged 3 credits" in caplog.text
    assert await ledger.reserve("q", 1, 0) is None  # already past the budget: nothing more at all


async def test_waits_for_outstanding_reservations_instead_of_giving_up() -> None:
    ledger = CreditLedger(2)
    held = await ledger.reserve("a", 0, 2)
    assert held is not None
    waiter = asyncio.create_task(ledger.reserve("b", 0, 1))
    await asyncio.sleep(0.01)
    assert not waiter.done()  # does not fit now, but might once "a" settles
    ledger.release(held)
    async with asyncio.timeout(1):
        assert isinstance(await waiter, Reservation)


async def test_waiter_is_refused_when_outstanding_settles_as_spent() -> None:
    ledger = CreditLedger(2)
    held = await ledger.reserve("a", 0, 2)
    assert held is not None
    waiter = asyncio.create_task(ledger.reserve("b", 0, 1))
    await asyncio.sleep(0.01)
    ledger.settle(held, None)
    async with asyncio.timeout(1):
        assert await waiter is None
    assert ledger.spent == 2


async def test_waiter_gets_what_a_cheaper_settlement_leaves() -> None:
    ledger = CreditLedger(2)
    held = await ledger.reserve("a", 0, 2)
    assert held is not None
    waiter = asyncio.create_task(ledger.reserve("b", 0, 1))
    await asyncio.sleep(0.01)
    ledger.settle(held, 1)
    async with asyncio.timeout(1):
        assert await waiter is not None


async def test_min_balance_floor() -> None:
    ledger = CreditLedger(100, min_balance=50)
    ledger.observe_remaining(60)
    assert await ledger.reserve("q", 0, 1) is not None
    ledger.observe_remaining(49)
    assert ledger.floor_reached and ledger.account_remaining == 49
    assert await ledger.reserve("q", 1, 1) is None
    assert "below the floor of 50" in refusal_reason(ledger, "q")
    ledger.observe_remaining(80)  # the floor is sticky: a late, stale answer must not reopen spending
    assert await ledger.reserve("q", 1, 1) is None


async def test_a_granted_request_is_not_sent_once_the_account_fell_below_its_floor() -> None:
    """Requests granted before the floor was passed and still waiting for a connection slot are not sent:
    their reservations go back, and reserving again says why."""
    ledger = CreditLedger(100, min_balance=50)
    waiting = [await ledger.reserve(f"q{i}", 0, 1) for i in range(3)]
    ledger.observe_remaining(49)  # an answer that arrived meanwhile
    assert all(r is not None and ledger.sending(r) is None for r in waiting)
    assert ledger.reserved == 0 and ledger.spent == 0
    assert await ledger.reserve("q0", 0, 1) is None
    refusal = ledger.refusal("q0")
    assert refusal is not None and "floor of 50" in refusal.reason


async def test_floor_wakes_waiters_with_a_refusal() -> None:
    ledger = CreditLedger(1, min_balance=10)
    held = await ledger.reserve("a", 0, 1)
    assert held is not None
    waiter = asyncio.create_task(ledger.reserve("b", 0, 1))
    await asyncio.sleep(0.01)
    ledger.observe_remaining(5)
    async with asyncio.timeout(1):
        assert await waiter is None


async def test_no_floor_without_min_balance() -> None:
    ledger = CreditLedger(10)
    ledger.observe_remaining(0)
    assert await ledger.reserve("q", 0, 1) is not None


async def test_query_cap() -> None:
    ledger = CreditLedger(100)
    for page in range(3):
        r = await ledger.reserve("q", page, 1, query_cap=3)
        assert r is not None
        ledger.settle(r, 1)
    assert await ledger.reserve("q", 3, 1, query_cap=3) is None
    assert "cap of 3 credits" in refusal_reason(ledger, "q")
    assert await ledger.reserve("other", 0, 1, query_cap=3) is not None  # the cap is per query


async def test_query_cap_waits_for_own_outstanding() -> None:
    ledger = CreditLedger(100)
    first = await ledger.reserve("q", 0, 2, query_cap=3)
    assert first is not None
    second = asyncio.create_task(ledger.reserve("q", 1, 2, query_cap=3))
    await asyncio.sleep(0.01)
    assert not second.done()
    ledger.settle(first, 1)
    async with asyncio.timeout(1):
        assert await second is not None


async def test_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        CreditLedger(-1)
    with pytest.raises(ValueError):
        CreditLedger(1, policy="random")  # type: ignore[arg-type]
    ledger = CreditLedger(1)
    with pytest.raises(ValueError):
        await ledger.reserve("q", 0, -1)
    with pytest.raises(ValueError):
        await ledger.reserve("q", -1, 1)
    ledger.register("q")
    with pytest.raises(ValueError, match="already registered"):
        ledger.register("q")


# ---- breadth-first ----------------------------------------------------------------------------------------


async def _crawl(ledger: CreditLedger, query_id: str, latency: float, pages: list[int]) -> None:
    """A query with endless pages, each costing 1 and taking `latency` seconds."""
    async with ledger.query(query_id):
        page = 0
        while True:
            r = await ledger.reserve(query_id, page, 1)
            if r is None:
                return
            await asyncio.sleep(latency)
            ledger.settle(r, 1)
            ledger.page_done(query_id, page)
            pages.append(page)
            page += 1


async def _race(policy: str) -> dict[str, int]:
    ledger = CreditLedger(7, policy=policy)  # type: ignore[arg-type]
    got: dict[str, list[int]] = {"fast": [], "slow1": [], "slow2": []}
    async with asyncio.timeout(5):
        await asyncio.gather(
            _crawl(ledger, "fast", 0.0, got["fast"]),
            _crawl(ledger, "slow1", 0.02, got["slow1"]),
            _crawl(ledger, "slow2", 0.03, got["slow2"]),
        )
    assert ledger.spent == 7 and ledger.reserved == 0
    return {q: len(p) for q, p in got.items()}


async def test_breadth_first_shares_a_short_budget_fairly() -> None:
    counts = await _race("breadth_first")
    assert sum(counts.values()) == 7
    assert max(counts.values()) - min(counts.values()) <= 1, counts


async def test_greedy_lets_the_fastest_query_take_the_budget() -> None:
    counts = await _race("greedy")
    assert sum(counts.values()) == 7
    assert counts["fast"] >= 5, counts


async def test_breadth_first_does_not_hold_back_anyone_when_credits_are_ample() -> None:
    ledger = CreditLedger(1000)
    got: dict[str, list[int]] = {"fast": [], "slow": []}

    async def slow() -> None:
        async with ledger.query("slow"):
            r = await ledger.reserve("slow", 0, 1)
            assert r is not None
            await asyncio.sleep(0.2)
            ledger.settle(r, 1)
            got["slow"].append(0)

    async def fast() -> None:
        async with ledger.query("fast"):
            for page in range(20):
                r = await ledger.reserve("fast", page, 1)
                assert r is not None
                ledger.settle(r, 1)
                ledger.page_done("fast", page)
                got["fast"].append(page)

    async with asyncio.timeout(5):
        slow_task = asyncio.create_task(slow())
        await asyncio.sleep(0)
        await fast()
        assert not slow_task.done()  # the fast query ran all its pages while the slow one was still on page 0
        await slow_task


async def test_breadth_first_leader_waits_while_a_laggard_needs_the_credits() -> None:
    ledger = CreditLedger(3)
    ledger.register("lead")
    ledger.register("lag")
    for page in range(2):
        r = await ledger.reserve("lead", page, 1)
        assert r is not None
        ledger.settle(r, 1)
        ledger.page_done("lead", page)
    # 1 credit left: "lag" has not had page 0 yet, so "lead" must not take page 2.
    lead = asyncio.create_task(ledger.reserve("lead", 2, 1))
    await asyncio.sleep(0.01)
    assert not lead.done()
    r = await ledger.reserve("lag", 0, 1)
    assert r is not None
    ledger.settle(r, 1)
    async with asyncio.timeout(1):
        assert await lead is None  # the laggard got the last credit


async def test_an_expected_query_keeps_its_share_before_its_task_starts() -> None:
    """The flow launches two queries under a budget of 4; one task starts late. The early one takes 2 pages,
    then waits: the late one still gets its 2 (run-to-run, Prefect task start-up differs by 100s of ms)."""
    ledger = CreditLedger(4)
    ledger.expect("early")
    ledger.expect("late")
    early: list[int] = []
    late: list[int] = []
    async with asyncio.timeout(5):
        first = asyncio.create_task(_crawl(ledger, "early", 0.0, early))
        await asyncio.sleep(0.05)
        assert early == [0, 1]  # page 2 waits for "late", whose task has not started
        await _crawl(ledger, "late", 0.0, late)
        await first
    assert (early, late) == ([0, 1], [0, 1])


async def test_an_expected_query_that_never_registers_is_finished_by_its_launcher() -> None:
    ledger = CreditLedger(3)
    ledger.expect("broken")  # its task failed before its first request
    pages: list[int] = []
    crawl = asyncio.create_task(_crawl(ledger, "lead", 0.0, pages))
    await asyncio.sleep(0.05)
    assert pages == [0, 1]
    ledger.finish("broken")
    async with asyncio.timeout(1):
        await crawl
    assert pages == [0, 1, 2]


async def test_finishing_or_cancelling_a_laggard_releases_the_waiters() -> None:
    ledger = CreditLedger(3)
    stuck_started = asyncio.Event()

    async def stuck() -> None:  # registered, then hangs before its first page
        async with ledger.query("stuck"):
            stuck_started.set()
            await asyncio.sleep(3600)

    stuck_task = asyncio.create_task(stuck())
    await stuck_started.wait()
    async with ledger.query("lead"):
        for page in range(2):
            r = await ledger.reserve("lead", page, 1)
            assert r is not None
            ledger.settle(r, 1)
            ledger.page_done("lead", page)
        waiting = asyncio.create_task(ledger.reserve("lead", 2, 1))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        stuck_task.cancel()
        async with asyncio.timeout(1):
            assert await waiting is not None
    with pytest.raises(asyncio.CancelledError):
        await stuck_task


async def test_cancelled_waiter_leaves_nothing_behind() -> None:
    ledger = CreditLedger(1)
    held = await ledger.reserve("a", 0, 1)
    assert held is not None
    waiter = asyncio.create_task(ledger.reserve("b", 0, 1))
    await asyncio.sleep(0.01)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    ledger.release(held)
    assert (ledger.spent, ledger.reserved) == (0, 0)
    async with asyncio.timeout(1):
        assert await ledger.reserve("c", 0, 1) is not None


async def test_page_done_and_finish_of_unknown_queries_are_harmless() -> None:
    ledger = CreditLedger(1)
    ledger.page_done("nobody", 3)
    ledger.finish("nobody")
    assert await ledger.reserve("q", 5, 1) is not None


async def test_settle_from_another_thread_wakes_the_waiter() -> None:
    ledger = CreditLedger(1)
    held = await ledger.reserve("a", 0, 1)
    assert held is not None
    waiter = asyncio.create_task(ledger.reserve("b", 0, 1))
    await asyncio.sleep(0.01)
    thread = threading.Thread(target=ledger.release, args=(held,))
    thread.start()
    async with asyncio.timeout(1):
        assert await waiter is not None
    thread.join()


async def test_totals_read_from_another_thread_are_consistent() -> None:
    ledger = CreditLedger(50)
    stop = threading.Event()
    bad: list[object] = []

    def watch() -> None:
        while not stop.is_set():
            s = ledger.snapshot()
            if s.spent + s.reserved > s.budget or s.spent != sum(s.per_query_spent.values()):
                bad.append(s)

    watcher = threading.Thread(target=watch)
    watcher.start()

    async def worker(q: str) -> None:
        page = 0
        while (r := await ledger.reserve(q, page, 1)) is not None:
            await asyncio.sleep(0)
            ledger.settle(r, 1)
            page += 1

    try:
        async with asyncio.timeout(5):
            await asyncio.gather(*(worker(f"q{i}") for i in range(8)))
    finally:
        stop.set()
        watcher.join()
    assert not bad
    assert ledger.spent == 50


async def test_callers_that_forget_page_done_do_not_deadlock() -> None:
    """Reserving page k counts as having finished page k-1, so two such queries cannot wait on each other."""
    ledger = CreditLedger(5)

    async def crawl(query_id: str) -> int:
        pages = 0
        async with ledger.query(query_id):
            while (r := await ledger.reserve(query_id, pages, 1)) is not None:
                await asyncio.sleep(0.001)
                ledger.settle(r, 1)
                pages += 1
        return pages

    async with asyncio.timeout(2):
        counts = await asyncio.gather(crawl("a"), crawl("b"))
    assert sum(counts) == 5 and abs(counts[0] - counts[1]) <= 1


# ------------------------------------------------------------------------------- a fan-out's cap of its own
def _capped(budget: int, caps: dict[str, int], **options: object) -> CreditLedger:
    from harvest.connectors.credits.fanout_caps import FanoutCaps
    from harvest.connectors.paging.pager import base_id

    return CreditLedger(budget, fanouts=FanoutCaps(caps, base_id), **options)  # type: ignore[arg-type]


async def test_a_fan_out_cap_holds_all_its_queries_together_and_says_why() -> None:
    ledger = _capped(100, {"comments": 5})
    granted = [await ledger.reserve(f"comments[url={n}]", 0, 2) for n in range(2)]
    for r in granted:
        assert r is not None
        ledger.settle(r, 2)
    assert await ledger.reserve("comments[url=9]", 0, 2) is None  # 4 spent: 2 more would pass 5
    assert "cap of 5 credits on all of comments's queries together" in refusal_reason(
        ledger, "comments[url=9]"
    )
    assert await ledger.reserve("comments[url=9]", 0, 1) is not None  # what is left still fits
    assert await ledger.reserve("videos[handle=a]", 0, 50) is not None  # other queries: only the budget
    assert ledger.fanout_spent("comments") == 4 and ledger.fanout_left("comments[url=1]") == 0


async def test_a_fan_out_waits_for_its_own_open_reservations_then_takes_what_they_leave() -> None:
    ledger = _capped(100, {"c": 3}, policy="greedy")
    held = await ledger.reserve("c[x=1]", 0, 3)
    assert held is not None
    waiter = asyncio.ensure_future(ledger.reserve("c[x=2]", 0, 2))
    await asyncio.sleep(0.01)
    assert not waiter.done()  # 3 held of 3: it may still fit if the held one settles for less
    ledger.settle(held, 1)
    assert await asyncio.wait_for(waiter, 1) is not None


async def test_a_resumed_run_counts_what_the_fan_out_spent_before() -> None:
    ledger = _capped(100, {"c": 10}, opening={"c[x=1]": 6, "c[x=2]": 3, "other": 50})
    assert ledger.fanout_spent("c") == 9
    assert await ledger.reserve("c[x=3]", 0, 2) is None
    assert await ledger.reserve("c[x=3]", 0, 1) is not None


async def test_credits_given_back_return_to_the_fan_out() -> None:
    ledger = _capped(100, {"c": 2})
    r = await ledger.reserve("c[x=1]", 0, 2)
    assert r is not None
    ledger.settle(r, None, refusal=True)  # a 429 whose charge the answer did not say
    assert await ledger.reserve("c[x=2]", 0, 1) is None
    assert ledger.reconcile(0) == 2  # the account's bill shows it was not billed
    assert ledger.fanout_spent("c") == 0
    assert await ledger.reserve("c[x=2]", 0, 2) is not None


async def test_a_top_up_past_the_fan_out_cap_is_not_sent() -> None:
    ledger = _capped(100, {"c": 4}, policy="greedy")
    first = await ledger.reserve("c[x=1]", 0, 1, price_key="/e")
    assert first is not None and ledger.sending(first) is not None
    ledger.settle(first, 3, priced=True)  # the service charged 3, not 1: later requests hold 3
    second = await ledger.reserve("c[x=2]", 0, 1, price_key="/e")
    assert second is None  # 3 spent, 3 more would pass 4


async def test_breadth_first_inside_a_fan_out_gives_every_query_its_page_first() -> None:
    ledger = _capped(1000, {"c": 6})
    ids = [f"c[x={n}]" for n in range(3)]
    pages = dict.fromkeys(ids, 0)
    for qid in ids:
        ledger.expect(qid)

    async def query(qid: str, slow: int) -> None:
        async with ledger.query(qid):
            while (r := await ledger.reserve(qid, pages[qid], 1)) is not None:
                for _ in range(slow):  # the first query answers fastest: greedy, it would take 4 pages
                    await asyncio.sleep(0)
                ledger.settle(r, 1)
                ledger.page_done(qid, pages[qid])
                pages[qid] += 1

    await asyncio.wait_for(asyncio.gather(*(query(q, 3 * n) for n, q in enumerate(ids))), 5)
    assert sorted(pages.values()) == [2, 2, 2]  # 6 credits, 3 queries: two pages each, none three
    assert ledger.spent == 6
