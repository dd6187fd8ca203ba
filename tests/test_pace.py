"""The run's pace (`connectors.http.pace`) on a clock the test moves, and the ledger settling refusals against the
account's bill: a 429 slows harvest down, it never fails a query early or inflates the count."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from connectors.credits.ledger import CreditLedger
from connectors.http.pace import CUT_GAP, DECREASE, MIN_RATE, Pace, RateLimitedTooLong
from tasks.output.journal import RunJournal, read_journal


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_unlimited_until_the_first_refusal_then_just_under_what_the_service_accepted() -> None:
    clock = Clock()
    pace = Pace(clock=clock)
    for _ in range(40):  # 40 answers over the last second
        clock.now += 0.025
        pace.accepted()
    assert pace.rate is None
    pace.refused_one()
    assert pace.rate == pytest.approx(40 * DECREASE)
    pace.refused_one()  # the same burst: one cut
    assert pace.rate == pytest.approx(40 * DECREASE)
    clock.now += CUT_GAP + 0.1
    pace.refused_one()  # a later burst, with nothing accepted meanwhile: cut again from the pace itself
    assert pace.rate == pytest.approx(40 * DECREASE * DECREASE)


def test_the_pace_climbs_again_while_the_service_accepts_and_the_pace_holds_the_run_back() -> None:
    clock = Clock()
    pace = Pace(clock=clock)
    for _ in range(10):
        clock.now += 0.1
        pace.accepted()
    pace.refused_one()
    start = pace.rate
    assert start is not None
    for _ in range(200):  # answers at the pace: it grows
        clock.now += 1 / pace.rate  # type: ignore[operator]
        pace.accepted()
    assert pace.rate > start * 1.5  # type: ignore[operator]
    grown = pace.rate
    for _ in range(50):  # answers far slower than the pace (the run sends less): no growth past use
        clock.now += 5.0
        pace.accepted()
    assert pace.rate == grown


def test_a_known_limit_is_a_ceiling_from_the_start() -> None:
    clock = Clock()
    pace = Pace(per_second=5, clock=clock)
    for _ in range(500):
        clock.now += 0.2
        pace.accepted()
    assert pace.rate == 5
    pace.refused_one()  # the service allows less than the spec says: slower still
    assert pace.rate is not None and MIN_RATE <= pace.rate < 5


async def test_turns_are_spaced_by_the_pace() -> None:
    pace = Pace(per_second=50)
    loop = asyncio.get_running_loop()
    start = loop.time()
    await asyncio.gather(*(pace.turn() for _ in range(11)))
    assert loop.time() - start >= 10 / 50 * 0.9  # eleven requests: ten gaps of 1/50 s
    assert pace.requests == 11


def test_a_refused_request_waits_what_the_service_asked_or_a_growing_backoff() -> None:
    clock = Clock()
    pace = Pace(max_wait=600, clock=clock)
    assert pace.wait_after_refusal(3.0, refusals=0) == 3.0
    assert [pace.wait_after_refusal(None, n) for n in range(3)] == [1.0, 2.0, 4.0]


def test_waiting_stops_when_the_service_accepted_nothing_for_max_wait() -> None:
    clock = Clock()
    pace = Pace(max_wait=60, clock=clock)
    pace.accepted()
    clock.now += 55
    assert pace.wait_after_refusal(4.0, refusals=5) == 4.0
    with pytest.raises(RateLimitedTooLong) as caught:
        pace.wait_after_refusal(6.0, refusals=6)  # 55 + 6 > 60
    assert caught.value.waited == pytest.approx(55)
    pace.accepted()  # one answer got through: the clock starts again
    assert pace.wait_after_refusal(6.0, refusals=7) == 6.0


# ---------------------------------------------------------------------------------------------- the bill
async def _spend(
    ledger: CreditLedger, query_id: str, n: int, *, refusal: bool, charged: int | None = None
) -> None:
    for page in range(n):
        r = await ledger.reserve(query_id, page, 1)
        assert r is not None
        sent = ledger.sending(r)  # journaled from here, as a request that leaves
        assert sent is not None
        ledger.settle(sent, charged, refusal=refusal)


async def test_refusals_the_balance_shows_unbilled_go_back_to_the_budget_and_their_queries() -> None:
    ledger = CreditLedger(20)
    await _spend(ledger, "a", 5, refusal=False, charged=1)  # five answered pages, billed
    await _spend(ledger, "a", 4, refusal=True)  # four 429s, counted at their reservation
    await _spend(ledger, "b", 6, refusal=True)
    await _spend(ledger, "b", 2, refusal=False)  # two timeouts: unknown, and not refusals: they stay
    assert (ledger.spent, ledger.refused_unknown) == (17, 10)
    # the account fell by 7: the 5 pages and 2 more, the lost answers or 2 refusals (the bill cannot tell):
    # 2 refusals stay counted beside the lost answers, never less than the bill; 8 go back, the most first
    assert ledger.reconcile(billed=7) == 8
    assert (ledger.spent, ledger.refused_unknown) == (9, 2)
    assert ledger.per_query_spent == {"a": 7, "b": 2}
    assert ledger.remaining == 11  # the budget has them back


async def test_a_bill_that_holds_some_refusals_gives_back_only_the_rest() -> None:
    ledger = CreditLedger(20)
    await _spend(ledger, "a", 3, refusal=False, charged=1)
    await _spend(ledger, "a", 6, refusal=True)
    assert ledger.reconcile(billed=5) == 4  # 2 of the refusals were billed (or are answers still in flight)
    assert ledger.spent == 5 and ledger.refused_unknown == 2
    assert ledger.reconcile(billed=5) == 0  # nothing more to learn from the same bill


async def test_lost_answers_stay_counted_and_do_not_keep_refusals_from_going_back() -> None:
    """A dropped connection may have been billed or not: it stays counted. Here the service billed neither it
    nor the 429s; the refusals go back in full, the lost answer does not."""
    ledger = CreditLedger(20)
    await _spend(ledger, "a", 4, refusal=False, charged=1)
    await _spend(ledger, "a", 2, refusal=False)  # answers lost
    await _spend(ledger, "a", 3, refusal=True)
    assert ledger.reconcile(billed=4) == 3 and ledger.spent == 6
    assert ledger.reconcile(billed=4) == 0


async def test_a_bill_below_what_was_surely_billed_settles_nothing() -> None:
    """The balance fell by less than the answered pages cost: the account was topped up meanwhile, and the bill
    cannot tell refusals apart. Nothing goes back; the budget stays hard."""
    ledger = CreditLedger(20)
    await _spend(ledger, "a", 5, refusal=False, charged=1)
    await _spend(ledger, "a", 5, refusal=True)
    assert ledger.reconcile(billed=3) == 0 and ledger.spent == 10


async def test_what_goes_back_is_journaled_so_a_resume_counts_the_same(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = RunJournal(path)
    ledger = CreditLedger(20, journal=journal)
    await _spend(ledger, "a", 2, refusal=False, charged=1)
    await _spend(ledger, "a", 3, refusal=True)
    ledger.reconcile(billed=2)
    journal.close()
    state = read_journal(path)
    assert state.spent == {"a": 2} and state.total_spent == ledger.spent == 2
    assert (state.balances[0].settled, state.balances[0].named, state.unknown["a"]) == (5, 2, 0)
