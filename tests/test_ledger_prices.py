"""The ledger against a service that charges more than the cost table: an unseen price goes one request at a
time, a learned price is held by later reservations, and a reservation granted below a price learned since is
topped up or given back before its request leaves."""

from __future__ import annotations

import asyncio

from harvest.connectors.credits.fanout_caps import FanoutCaps
from harvest.connectors.credits.ledger import CreditLedger
from harvest.connectors.credits.reservations import Reservation

E, F = "/v1/e", "/v1/f"


async def _granted(ledger: CreditLedger, qid: str, amount: int, key: str = E) -> Reservation:
    r = await ledger.reserve(qid, 0, amount, price_key=key)
    assert r is not None
    return r


async def _pending(coro: object) -> asyncio.Task[Reservation | None]:
    task = asyncio.ensure_future(coro)  # type: ignore[arg-type]
    await asyncio.sleep(0.01)
    return task


async def test_an_unseen_price_is_reserved_one_request_at_a_time() -> None:
    ledger = CreditLedger(100)
    first = await _granted(ledger, "a", 1)
    second = await _pending(ledger.reserve("b", 0, 1, price_key=E))
    other = await _granted(ledger, "c", 1, key=F)  # another endpoint has its own first request
    unkeyed = await ledger.reserve("d", 0, 1)  # no price key: nothing to learn, nothing to wait for
    assert not second.done() and unkeyed is not None
    ledger.settle(first, 1, priced=True)
    async with asyncio.timeout(1):
        assert await second is not None
    # seen: from now on the endpoint's requests are granted together
    assert await ledger.reserve("e", 0, 1, price_key=E) is not None
    assert other and ledger.reserved == 4


async def test_an_answer_without_a_price_keeps_the_endpoint_one_at_a_time() -> None:
    ledger = CreditLedger(100)
    first = await _granted(ledger, "a", 1)
    ledger.settle(first, None)  # a timeout, a truncated page: the charge is unknown
    second = await _granted(ledger, "b", 1)
    third = await _pending(ledger.reserve("c", 0, 1, price_key=E))
    assert not third.done()
    ledger.release(second)  # never sent: the next one may go
    async with asyncio.timeout(1):
        assert await third is not None


async def _serve(ledger: CreditLedger, queries: int, cost: int, price: int) -> list[int]:
    """`queries` first pages reserved at `cost` and sent as they are granted, each charged `price`: the amounts
    the granted ones held, in grant order."""
    waiting = [asyncio.ensure_future(ledger.reserve(f"q{i}", 0, cost, price_key=E)) for i in range(queries)]
    held = []
    async with asyncio.timeout(2):
        while waiting:
            done, pending = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            waiting = list(pending)
            for r in (task.result() for task in done):
                if r is not None:
                    sent = ledger.sending(r)
                    assert sent is not None
                    held.append(sent.amount)
                    ledger.settle(sent, price, priced=True)
    return held


async def test_the_first_overcharge_is_the_only_one() -> None:
    """Bug 6 in small: catalog 1, service 5, budget 30, 60 queries: 30 spent, not 60."""
    ledger = CreditLedger(30)
    assert await _serve(ledger, 60, 1, 5) == [1, 5, 5, 5, 5, 5]
    assert ledger.spent == 30
    assert len(ledger.overcharges) == 1 and ledger.learned_prices == {E: 5}


async def test_a_zero_price_override_cannot_fan_out_past_the_budget() -> None:
    """Bug 5 in small: `costs: {path: 0}`, a service charging 1, 60 queries: the first answer teaches the
    price before any other request is granted."""
    ledger = CreditLedger(5)
    assert await _serve(ledger, 60, 0, 1) == [0, 1, 1, 1, 1]
    assert ledger.spent == 5


async def test_past_the_budget_by_one_requests_excess_at_most() -> None:
    ledger = CreditLedger(3)
    assert await _serve(ledger, 60, 1, 7) == [1]
    assert ledger.spent == 7 <= 3 + (7 - 1), "the budget, plus the excess of the one request that showed it"


async def test_a_reservation_granted_below_a_price_learned_since_is_topped_up_when_sent() -> None:
    ledger = CreditLedger(20)
    first = await _granted(ledger, "a", 1)
    ledger.settle(first, 1, priced=True)
    waiting = await _granted(ledger, "b", 1)  # granted at 1, not sent yet
    in_flight = ledger.sending(await _granted(ledger, "c", 1))
    assert in_flight is not None
    ledger.settle(in_flight, 4, priced=True)  # the price rose mid-run: this one paid 4
    # the 3 credits "b" now lacks are kept off the budget: 20 - 5 spent - 1 held - 3 owed
    assert ledger.remaining == 11
    sent = ledger.sending(waiting)
    assert sent is not None and sent.id == waiting.id and sent.amount == 4
    assert (ledger.reserved, ledger.remaining) == (4, 11)
    assert ledger.settle(sent, 4) == 4 and len(ledger.overcharges) == 1
    assert (await _granted(ledger, "d", 1)).amount == 4


async def _on_the_wire(ledger: CreditLedger, n: int, **caps: int) -> list[Reservation]:
    """The endpoint seen at 1 credit, then `n` requests sent at 1 each (`caps`: reserve's `query_cap`)."""
    seen = await _granted(ledger, "seen", 1)
    ledger.settle(seen, 1, priced=True)
    sent = [ledger.sending(await _reserved(ledger, f"q{i}", **caps)) for i in range(n)]
    assert all(r is not None for r in sent)
    return sent  # type: ignore[return-value]


async def _reserved(ledger: CreditLedger, qid: str, **caps: int) -> Reservation:
    r = await ledger.reserve(qid, 0, 1, price_key=E, **caps)
    assert r is not None
    return r


async def test_requests_on_the_wire_when_the_price_rises_hold_it_and_nothing_more_is_sent() -> None:
    """8 requests left at 1 credit each, the first answer says 5: the other 7 will be charged 5 too. Their
    holds rise to it at once, so the budget of 40 (1 + 5 + 7 x 5 = 41 is already past it) sends nothing
    more; before, 28 credits looked free and three more requests left at 5 each (the money helper's 64 of 40)."""
    ledger = CreditLedger(40)
    first, *others = await _on_the_wire(ledger, 8)
    ledger.settle(first, 5, priced=True)
    assert ledger.reserved == 7 * 5 and ledger.remaining == 0
    late = await _pending(ledger.reserve("late", 0, 1, price_key=E))
    for r in others:
        ledger.settle(r, 5, priced=True)
    async with asyncio.timeout(1):
        assert await late is None
    assert ledger.spent == 1 + 8 * 5  # past the budget by the excess of requests already sent, no more
    assert len(ledger.overcharges) == 8 and all(o.reserved == 1 for o in ledger.overcharges)


async def test_a_fan_out_cap_counts_its_requests_on_the_wire_at_the_new_price() -> None:
    fanouts = FanoutCaps({"comments": 20}, lambda qid: "comments" if qid.startswith("q") else qid)
    ledger = CreditLedger(1000, fanouts=fanouts)
    first, *others = await _on_the_wire(ledger, 4)
    ledger.settle(first, 5, priced=True)  # 5 spent, 3 x 5 expected: the cap's 20 is taken
    late = await _pending(ledger.reserve("q9", 0, 1, price_key=E))
    for r in others:
        ledger.settle(r, 5, priced=True)
    async with asyncio.timeout(1):
        assert await late is None
    assert ledger.fanout_spent("comments") == 20


async def test_a_query_cap_counts_its_requests_on_the_wire_at_the_new_price() -> None:
    ledger = CreditLedger(1000)
    seen = await _granted(ledger, "seen", 1)
    ledger.settle(seen, 1, priced=True)
    sent = [
        ledger.sending(await ledger.reserve("q", page, 1, query_cap=12, price_key=E)) for page in range(2)
    ]
    first, second = sent
    assert first is not None and second is not None
    ledger.settle(first, 5, priced=True)  # 5 spent and 5 expected of the cap of 12
    late = await _pending(ledger.reserve("q", 2, 1, query_cap=12, price_key=E))
    assert not late.done()  # before: 5 spent + 1 held left room for a third page at 5 (15 of 12)
    ledger.settle(second, 5, priced=True)
    async with asyncio.timeout(1):
        assert await late is None
    assert ledger.per_query_spent["q"] == 10


async def test_a_reservation_that_cannot_be_topped_up_is_given_back_and_reserved_again() -> None:
    ledger = CreditLedger(6)
    seen = await _granted(ledger, "a", 1)
    ledger.settle(seen, 1, priced=True)
    waiting = await _granted(ledger, "b", 1)
    in_flight = ledger.sending(await _granted(ledger, "c", 1))
    assert in_flight is not None
    ledger.settle(in_flight, 4)  # 5 spent of 6: "b" cannot hold 4
    assert ledger.sending(waiting) is None
    assert ledger.reserved == 0 and ledger.spent == 5
    assert await ledger.reserve("b", 0, 1, price_key=E) is None  # reserved again at 4: refused
    assert ledger.spent <= 6 + 3


async def test_a_top_up_respects_the_query_cap() -> None:
    ledger = CreditLedger(100)
    seen = await _granted(ledger, "a", 1)
    ledger.settle(seen, 1, priced=True)
    capped = await ledger.reserve("b", 0, 1, query_cap=2, price_key=E)
    assert capped is not None
    in_flight = ledger.sending(await _granted(ledger, "c", 1))
    assert in_flight is not None
    ledger.settle(in_flight, 3)
    assert ledger.sending(capped) is None  # 3 would pass its cap of 2
    assert await ledger.reserve("b", 0, 1, query_cap=2, price_key=E) is None
    assert ledger.refusal("b") is not None and "cap of 2" in ledger.refusal("b").reason  # type: ignore[union-attr]


class _Journal:
    def __init__(self) -> None:
        self.events: list[tuple[str, int | str, int | None]] = []

    def reserved(self, rid: int, query_id: str, amount: int, page: int = 0) -> None:
        self.events.append(("reserve", rid, amount))

    def closed(
        self, rid: int, counted: int | None, unknown: str | None = None, refused: int = 0, lost: int = 0
    ) -> None:
        self.events.append(("close", rid, counted))

    def adjusted(self, query_id: str, credits: int) -> None:
        self.events.append(("adjust", query_id, credits))

    def priced(self, key: str, credits: int) -> None:
        self.events.append(("price", key, credits))

    def held(self, key: str, credits: int) -> None:
        self.events.append(("hold", key, credits))

    def seen(self, key: str) -> None:
        self.events.append(("seen", key, None))


async def test_the_journal_hears_the_topped_up_amount() -> None:
    journal = _Journal()
    ledger = CreditLedger(20, journal=journal)
    ledger.settle(await _granted(ledger, "a", 1), 1, priced=True)  # never sent: not journaled
    waiting = await _granted(ledger, "b", 1)
    in_flight = ledger.sending(await _granted(ledger, "c", 1))
    assert in_flight is not None
    ledger.settle(in_flight, 3, priced=True)
    sent = ledger.sending(waiting)
    assert sent is not None
    assert journal.events == [
        ("reserve", in_flight.id, 1),
        ("price", E, 3),  # before its settle: a resume after a kill between the two still holds the price
        ("close", in_flight.id, 3),
        ("reserve", sent.id, 3),
    ]


async def test_a_run_journals_what_it_held_and_each_charge_above_the_table_its_hold_covered_too() -> None:
    """What the next night starts from (`flows.run.chain.carried`): the prices a run held from the first, each
    key's first named charge (`seen`), and its highest charge above the cost table, said even when the price held
    already covered it (the service still charges it), once per rise. A held key charged the table's price again
    is seen with no `price` line: the night after holds the table's price."""
    journal = _Journal()
    ledger = CreditLedger(100, journal=journal, prices={E: 5, F: 5})
    a = ledger.sending(await _granted(ledger, "a", 1))
    assert a is not None and a.amount == 5
    ledger.settle(a, 5, priced=True)
    b = ledger.sending(await _granted(ledger, "b", 1, key=F))
    assert b is not None
    ledger.settle(b, 1, priced=True)
    c = ledger.sending(await _granted(ledger, "c", 1))
    assert c is not None
    ledger.settle(c, 5, priced=True)
    assert journal.events == [
        ("hold", E, 5), ("hold", F, 5),
        ("reserve", a.id, 5), ("price", E, 5), ("seen", E, None), ("close", a.id, 5),
        ("reserve", b.id, 5), ("seen", F, None), ("close", b.id, 1),
        ("reserve", c.id, 5), ("close", c.id, 5),
    ]  # fmt: skip
    assert ledger.spent == 11 and ledger.overcharges == []


async def test_a_free_request_is_sent_after_an_overcharge_took_the_room_left() -> None:
    """A 0-credit request (a `costs: {path: 0}` override) granted while an overcharge left spent + held above
    the budget must still be sent: giving it back made the client reserve it again at once, in a loop that
    never yielded (found by the property test of the price rules, which hung)."""
    ledger = CreditLedger(10, policy="greedy")
    first, second = await _granted(ledger, "a", 5, key=F), await _granted(ledger, "b", 5, key="/v1/g")
    assert ledger.sending(first) is not None and ledger.sending(second) is not None
    ledger.settle(first, 8, priced=True)  # 3 over the table: spent 8 + held 5 > 10
    free = await ledger.reserve("c", 0, 0, price_key=E)
    assert free is not None
    assert ledger.sending(free) is free
    ledger.settle(free, 0, priced=True)
    assert ledger.spent == 8 and ledger.reserved == 5
