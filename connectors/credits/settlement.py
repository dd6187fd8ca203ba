"""How a reservation is closed is where the ledger meets what the service billed, so it is kept apart from how
one is granted.

Granting (`CreditLedger.reserve`, `sending`) decides before a request leaves; closing decides after it, from what
came back: the charge the answer named, or the whole reservation when no charge is known, and later the account's
own bill for the refusals whose charge no answer said (`reconcile`). The journal hears of every close, so a
crashed run's spending is recovered exactly. Nothing here awaits: a close must complete even in the cleanup of a
cancelled task (`connectors.credits.waiters`). The books it writes (what each query spent, the overcharges, the
refusals still to settle) are the ledger's own, under its one lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping

from harvest.connectors.credits.balance_floor import BalanceFloor
from harvest.connectors.credits.fair_share import FairShare
from harvest.connectors.credits.fanout_caps import FanoutCaps
from harvest.connectors.credits.holds import Holds
from harvest.connectors.credits.prices import PriceNews, Prices
from harvest.connectors.credits.refused_charges import RefusedCharges
from harvest.connectors.credits.reservations import LedgerJournal, Overcharge, Reservation, Unknown

__all__ = ["Settlement"]

log = logging.getLogger("harvest.ledger")


class Settlement:
    """The closing half of `CreditLedger`: settling, releasing and reconciling reservations on its books."""

    _lock: threading.Lock
    _budget: int
    _holds: Holds
    _share: FairShare
    _fanouts: FanoutCaps
    _prices: Prices
    _spent: int
    _session_spent: int
    _named: int
    _unread: int = 0
    """Credits counted for answers that came unreadable (a status came, the body said no charge): the service
    charged before it sent them, so any later balance reading holds them (`reconcile`)."""
    _lost: int = 0
    """Credits counted for requests no status came back for (a timeout, a dropped connection): billed or not, and
    never given back. A Dask round reports its worker's (`lost`): the flow's ledger keeps them out of `_named`."""
    _given_back: int
    _q_spent: dict[str, int]
    _refused: RefusedCharges
    _floor: BalanceFloor
    _overcharges: list[Overcharge]
    _journal: LedgerJournal | None
    _wake_all: Callable[[], None]

    # ---- closing reservations (never await: safe in cleanup of cancelled tasks) ------------------------

    def _close(
        self, r: Reservation, counted: int | None, priced: bool, named: bool = False
    ) -> tuple[Reservation, bool, PriceNews | None]:
        """Take `r` off the books (`counted`: spent, None: released; `named`: an answer said the charge); the
        reservation as held (it may have been topped up), whether the journal heard of it, and what its charge
        told of its price key's price."""
        key = self._prices.key_of(r.id)
        before = None if key is None else self._prices.price(key, 0)
        held, journaled = self._holds.close(r)
        self._fanouts.held(held.query_id, -held.amount)
        if counted is not None:
            self._fanouts.counted(held.query_id, counted)
        self._share.closed(held.query_id, held.page_index)
        news = self._prices.closed(r.id, held.amount, counted if named else None, priced)
        if key is not None and self._prices.price(key, 0) != before:  # this answer taught a higher price
            self._expect_on_the_wire(key)
        return held, journaled, news

    def _expect_on_the_wire(self, key: str) -> None:
        """The requests of `key` already sent will be charged its learned price: their holds are raised to it
        (budget, query and fan-out caps alike), so nothing more is sent while they may take what it would use."""
        price, sent = self._prices.on_the_wire(key)
        for rid in sent:
            raised = self._holds.expect(rid, price)
            if raised is not None:
                r, extra = raised
                self._fanouts.held(r.query_id, extra)
                self._share.repriced(r.query_id, r.amount)

    def _tell(self, news: Iterable[PriceNews]) -> None:
        """The journal hears what answers told of prices, before the settle that told it (a resume holds it too,
        and the runs after this one start from it: `flows.run.chain.carried`)."""
        if self._journal is None:
            return
        for n in news:
            if n.charged is not None:
                self._journal.priced(n.key, n.charged)
            if n.seen:
                self._journal.seen(n.key)

    def heard(
        self, charged: Mapping[str, int] | None = None, named: Iterable[str] = (), seen: Iterable[str] = ()
    ) -> None:
        """What a Dask round's ledger saw of prices (`CreditLedger.answered_prices`): later rounds are granted,
        and their workers hold, the prices learned, and grant the keys `seen` to more than one query; the
        journal hears it as if this ledger's answers said it."""
        with self._lock:
            news = self._prices.heard(charged or {}, named, seen)
            for key in charged or {}:
                self._expect_on_the_wire(key)
        self._tell(news)

    def settle(
        self,
        r: Reservation,
        charged: int | None,
        *,
        priced: bool = False,
        refusal: bool = False,
        refused: int = 0,
        lost: int = 0,
        answered: bool = False,
    ) -> int:
        """Close `r` as spent: `charged` credits, or the whole reservation when the charge is unknown.

        `priced`: the answer was one the service bills as a page (a readable 2xx, 403 or 404), so its endpoint's
        price is seen and its requests need not go one at a time. `refusal`: the service refused the
        request (429, 5xx): an unknown charge then counts as spent until the account's balance says otherwise
        (`reconcile`). `refused`: of a known `charged` (a Dask round's spending), the credits its worker counted
        for refusals whose charge no answer named: unsettled here too, until the balance says. `lost`: of it too,
        the credits its worker counted for requests no status came back for: no charge an answer named (a dropped
        connection the service never billed), counted as a local lost answer is. `answered`: a
        status came (the service charged before it sent it), not so for a timeout or a dropped connection.
        Returns the credits counted."""
        with self._lock:
            held = self._holds.current(r)
            if charged is None or charged < 0:
                if charged is not None:
                    why = "ignoring negative credits_charged=%d for %s; counting %d"
                    log.warning(why, charged, r.query_id, held.amount)
                counted = held.amount
            else:
                counted = charged
            named = charged is not None and charged >= 0
            sent_with = self._holds.sent_holding(r)  # an expected charge added on the wire is not the table's
            held, journaled, news = self._close(r, counted, priced, named)
            over = Overcharge(held.query_id, held.page_index, sent_with, counted)
            if over.excess > 0:
                self._overcharges.append(over)
            self._spent += counted
            self._session_spent += counted
            self._q_spent[held.query_id] = self._q_spent.get(held.query_id, 0) + counted
            unknown: Unknown = None
            if charged is None or charged < 0:
                unknown = "refusal" if refusal else "unread" if answered else "lost"
                self._count_unnamed(held.query_id, counted, unknown, answered)
                refused = lost = 0
            else:
                refused, lost = self._count_named(held.query_id, counted, refused, lost)
            spent = self._spent
        self._tell([news] if news is not None else [])
        if journaled:
            self._journal.closed(r.id, counted, unknown, refused, lost)  # type: ignore[union-attr]
        if over.excess > 0:
            log.warning("%s", over.warning(spent, self._budget))
        self._wake_all()
        return counted

    def _count_unnamed(self, query_id: str, counted: int, unknown: Unknown, answered: bool) -> None:
        """A charge no answer named, counted whole (under the lock): a refusal's until the balance says, an
        unreadable answer's (billed before it was sent), or a lost request's (billed or not, kept)."""
        self._floor.counted_unnamed(counted)
        if unknown == "refusal":
            self._refused.add(query_id, counted)
        elif answered:
            self._unread += counted
        else:
            self._lost += counted

    def _count_named(self, query_id: str, counted: int, refused: int, lost: int) -> tuple[int, int]:
        """A known count (under the lock): of it, a Dask round's refusals and lost requests are no charges an
        answer named, so they stay out of `_named` (a killed session's bill is checked against it), as the
        local runner's are. Returns them, bounded by the count."""
        refused = min(max(0, refused), counted)
        lost = min(max(0, lost), counted - refused)
        self._named += counted - refused - lost
        self._lost += lost
        self._floor.counted_unnamed(refused + lost)
        if refused:
            self._refused.add(query_id, refused)
        return refused, lost

    def release(self, r: Reservation) -> None:
        """Give `r` back: only for requests that provably never reached the service."""
        with self._lock:
            _, journaled, _ = self._close(r, None, False)
        if journaled:
            self._journal.closed(r.id, None)  # type: ignore[union-attr]
        self._wake_all()

    @property
    def lost(self) -> int:
        """Credits counted for requests no status came back for (`_lost`): what a Dask round reports of them."""
        with self._lock:
            return self._lost

    @property
    def refused_unknown(self) -> int:
        """Credits counted for refusals whose charge the service did not say (429, 5xx), still unsettled."""
        with self._lock:
            return self._refused.total

    @property
    def refused_this_session(self) -> int:
        """Of `refused_unknown`, this session's refusals: not the earlier sessions' carried over (`carry_over`)."""
        with self._lock:
            return self._refused.this_session()

    def refused_of(self, query_id: str) -> int:
        """Of what the query counted in this session, the credits for refusals whose charge is not known yet
        (`refused_unknown` holds earlier sessions' too)."""
        with self._lock:
            return self._refused.of(query_id)

    @property
    def given_back(self) -> int:
        """Credits this ledger gave back after the account's balance showed they were not billed."""
        with self._lock:
            return self._given_back

    def carry_over(self, named: int, unknown: Mapping[str, int], unread: int = 0) -> None:
        """Earlier sessions of the run (a killed process) are settled with this one's readings: the charges their
        answers named, their answers that came unreadable (billed: without them, the bill's room kept as many of
        the refusals counted, and a resumed run counted more than it was billed), and per query the credits they
        counted without knowing the charge (refusals, requests in flight at the kill). `reconcile` then takes a
        bill that starts at the run's first reading."""
        with self._lock:
            self._named += named
            self._unread += unread
            for query_id, credits in unknown.items():
                self._refused.add(query_id, min(credits, self._q_spent.get(query_id, 0)), earlier=True)

    def reconcile(self, billed: int) -> int:
        """Settle the refusals' unknown charges against the service's own bill (`billed`: how far the account's
        balance fell since the first reading of the sessions whose charges the ledger holds, free to read). What
        the bill leaves no room for was not billed: it goes back to the budget and the queries. Returns the
        credits given back.

        Never counts less than the service billed: the refusals kept are as many as the bill leaves room for
        beside the charges the answers named and those counted for answers that came unreadable (a 200 cut short:
        charged before it was sent, so the reading holds it). Lost answers (a timeout, a dropped connection) are
        sized as if they had been free, and stay counted: the service may charge one after the reading. The bill
        may also hold charges of requests still in flight (then less goes back now, the rest at the next
        reading). A bill below those charges (a top-up during the run) settles nothing."""
        with self._lock:
            room = billed - self._named - self._unread
            if room < 0:
                return 0
            back = self._refused.give_back(self._refused.total - min(room, self._refused.total))
            for query_id, credits in back.items():
                self._q_spent[query_id] -= credits
                self._fanouts.counted(query_id, -credits)
            given = sum(back.values())
            self._floor.given_back(given)
            self._spent -= given
            self._session_spent -= given
            self._given_back += given
        if self._journal is not None:
            for query_id, credits in back.items():
                self._journal.adjusted(query_id, -credits)
        if given:
            log.info("the account's balance shows %d refused request(s) were not billed: counted back", given)
            self._wake_all()
        return given
