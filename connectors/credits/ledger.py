"""The credit ledger: the one place that decides whether a request may be sent.

The budget is a hard cap on real money. Every attempt (first tries and retries alike) must first reserve its
cost here; a request is sent only with a granted `Reservation`, and the reservation is closed afterwards:

- `settle(r, charged)` when the request may have reached the service. `charged` is the answer's
  `credits_charged`; None (no answer, no field, unparseable body) counts the full reserved amount as spent,
  because an unknown charge must be assumed to have happened.
- `release(r)` only when the request provably never reached the service (connect error, pool timeout).

Hence `spent + reserved <= budget` at every instant, under any interleaving, as long as the service charges
what the cost table says. When it charges more, the real amount is recorded (the account did pay it), a
warning is logged and the excess is visible in `overcharges`; that is the only way `spent` can pass `budget`.

Prices (`connectors.credits.prices`): reservations hold the price the service was seen charging per endpoint, and
`sending(r)` tops up a reservation granted below a price learned since; so the budget can be passed only by the
excess of the first request that shows a higher price, plus that of the requests on the wire (at most
`concurrency`), whose holds rise to it at once (`Settlement._expect_on_the_wire`): nothing sent may take theirs.
Breadth-first policy (`connectors.credits.fair_share`, its calls in `connectors.credits.turns`): queries are expected
when launched (`expect`), register while they run (`async with ledger.query(qid)`), both only inside any concurrency
limiter: a registered query that cannot run holds the others back, and report finished pages (`page_done`).

Concurrency: every decision and counter update happens under one `threading.Lock`, so totals read from
other threads (progress display) are consistent. Only `reserve` awaits; `sending`, `settle`, `release`,
`observe_remaining`, `register`, `page_done` and `finish` are plain calls, so they complete even inside a
cancelled task's cleanup (`connectors.credits.waiters`).

Stopping: `stop(kind, reason)` refuses every later reservation (a Ctrl-C, a refused API key, an empty
account); requests already sent still land and settle. Durability: an optional journal hears of every
reservation before it is granted and of how it was closed, so a crashed run's spending can be recovered
exactly (see `tasks.output.journal`), and `opening` seeds a resumed run with what it had spent before, `prices`
with what the service was last seen charging (a run's first request holds it, whatever started the run).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from harvest.connectors.credits.balance_floor import BalanceFloor
from harvest.connectors.credits.fair_share import FairShare
from harvest.connectors.credits.fanout_caps import FanoutCaps
from harvest.connectors.credits.holds import Holds
from harvest.connectors.credits.prices import Prices, held_from_the_first
from harvest.connectors.credits.refused_charges import RefusedCharges
from harvest.connectors.credits.reservations import (
    POLICIES,
    LedgerJournal,
    LedgerSnapshot,
    Overcharge,
    Policy,
    Refusal,
    RefusalKind,
    Reservation,
)
from harvest.connectors.credits.settlement import Settlement
from harvest.connectors.credits.turns import Turns
from harvest.connectors.credits.waiters import Waiters

log = logging.getLogger("harvest.ledger")


class CreditLedger(Settlement, Turns):
    """Hard-capped credit budget for one run; see the module docstring for the rules."""

    def __init__(
        self,
        budget: int,
        min_balance: int | None = None,
        policy: Policy = "breadth_first",
        *,
        opening: Mapping[str, int] | None = None,
        journal: LedgerJournal | None = None,
        fanouts: FanoutCaps | None = None,
        prices: Mapping[str, int] | None = None,
        charged: Mapping[str, int] | None = None,
        warn_prices: bool = True,
        whole_run: bool = True,
    ) -> None:
        """`prices`: what each price key holds from the first request (said, and journaled as held); `charged`:
        what the run's journal says its answers were charged above the cost table (a resume's earlier sessions).
        `warn_prices`, `whole_run`: False on a Dask worker, whose round holds the prices the flow's ledger said and
        whose budget is the round's grant (a price above the run's own can never be paid: `Refusal.budget_left`)."""
        if budget < 0:
            raise ValueError(f"budget must be >= 0, got {budget}")
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        self._budget = budget
        self._whole_run = whole_run
        self._floor = BalanceFloor(min_balance)
        self._policy: Policy = policy
        self._lock = threading.Lock()
        self._holds = Holds()
        self._q_spent: dict[str, int] = {q: c for q, c in (opening or {}).items() if c}
        self._spent = sum(self._q_spent.values())
        self._fanouts = fanouts or FanoutCaps({}, str)
        self._fanouts.opening(self._q_spent)
        self._session_spent = 0
        """Credits this ledger (this process) settled; `opening` is what earlier sessions spent."""
        self._named = 0
        """Credits whose charge an answer named (this session's, and earlier sessions' once `carry_over`)."""
        self._given_back = 0
        self._refused = RefusedCharges()
        self._journal = journal
        self._stopped: Refusal | None = None
        self._prices = Prices(prices, charged)
        held_from_the_first(prices or {}, journal, warn_prices)
        self._share = FairShare()
        self._overcharges: list[Overcharge] = []
        self._refusals: dict[str, Refusal] = {}
        self._waiters = Waiters()
        self._wake_all = self._waiters.wake_all

    def __repr__(self) -> str:
        s = self.snapshot()
        return (
            f"CreditLedger(budget={s.budget}, spent={s.spent}, reserved={s.reserved}, "
            f"policy={self._policy!r}, min_balance={self._floor.min_balance})"
        )

    # ---- reading -------------------------------------------------------------------------------------

    @property
    def budget(self) -> int:
        return self._budget

    @property
    def policy(self) -> Policy:
        return self._policy

    @property
    def min_balance(self) -> int | None:
        return self._floor.min_balance

    @property
    def spent(self) -> int:
        with self._lock:
            return self._spent

    @property
    def reserved(self) -> int:
        with self._lock:
            return self._holds.total

    @property
    def remaining(self) -> int:
        """Credits a new reservation could get: neither spent, nor held, nor owed to reservations granted below
        a price learned since; never negative (see `overcharges` when spent > budget)."""
        with self._lock:
            return self._free()

    @property
    def per_query_spent(self) -> dict[str, int]:
        with self._lock:
            return dict(self._q_spent)

    @property
    def learned_prices(self) -> dict[str, int]:
        """Price key -> what the service charged above the cost table (what reservations now hold)."""
        with self._lock:
            return self._prices.learned()

    def answered_prices(self) -> dict[str, Any]:
        """What this ledger's answers showed of prices (`Prices.answered`): a Dask round's report to the flow."""
        with self._lock:
            return self._prices.answered()

    @property
    def priced_keys(self) -> frozenset[str]:
        """Price keys an answer of this session priced (`Prices.seen`): the others go one request at a time."""
        with self._lock:
            return self._prices.seen()

    def _free(self) -> int:
        return max(0, self._budget - self._spent - self._holds.total - self._prices.shortfall)

    @property
    def overcharges(self) -> list[Overcharge]:
        with self._lock:
            return list(self._overcharges)

    @property
    def account_remaining(self) -> int | None:
        """The last `credits_remaining` the service reported for the account."""
        with self._lock:
            return self._floor.account_remaining

    @property
    def floor_reached(self) -> bool:
        with self._lock:
            return self._floor.reached

    def refusal(self, query_id: str) -> Refusal | None:
        """Why the last reserve() of this query returned None: its kind, and words for an error message."""
        with self._lock:
            return self._refusals.get(query_id)

    @property
    def stopped(self) -> Refusal | None:
        """Set once `stop` was called: every later reservation is refused for this reason."""
        with self._lock:
            return self._stopped

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def snapshot(self) -> LedgerSnapshot:
        with self._lock:
            return LedgerSnapshot(
                budget=self._budget, spent=self._spent, reserved=self._holds.total, remaining=self._free(),
                per_query_spent=MappingProxyType(dict(self._q_spent)),
                overcharged=sum(o.excess for o in self._overcharges), expected=self._holds.expected,
                account_remaining=self._floor.account_remaining, floor_reached=self._floor.reached,
            )  # fmt: skip

    # ---- reserving -----------------------------------------------------------------------------------

    async def reserve(
        self,
        query_id: str,
        page_index: int,
        amount: int,
        *,
        query_cap: int | None = None,
        price_key: str | None = None,
    ) -> Reservation | None:
        """Hold `amount` credits for one attempt, waiting while others' outstanding holds might free it.

        None means the credits cannot be granted (budget, balance floor, query cap, or the run was stopped):
        send nothing; `refusal(query_id)` says why. `price_key` (the endpoint) lets the ledger learn a price:
        once the service charged more than `amount` under that key, later reservations hold what it charged;
        until an answer has priced the key, its reservations are granted one at a time.
        """
        if amount < 0:
            raise ValueError(f"amount must be >= 0, got {amount}")
        if page_index < 0:
            raise ValueError(f"page_index must be >= 0, got {page_index}")
        loop = asyncio.get_running_loop()
        while True:
            with self._lock:
                held = self._prices.price(price_key, amount)
                advanced = self._share.started(query_id, page_index)
                outcome = self._decide(query_id, page_index, held, query_cap, price_key, amount)
                if isinstance(outcome, Refusal):
                    self._refusals[query_id] = outcome
                    waiter = None
                elif outcome is None:
                    waiter = self._waiters.add(loop)
                else:
                    waiter = None
            if advanced:
                self._wake_all()
            if isinstance(outcome, Refusal):
                log.info("refused %s page %d (%d credits): %s", query_id, page_index, held, outcome.reason)
                return None
            if waiter is None:
                return outcome
            try:
                await waiter
            finally:
                self._waiters.discard(waiter)

    def sending(self, r: Reservation) -> Reservation | None:
        """The request of `r` is about to leave: the last check of the balance floor and the price, then the
        journal.

        Returns the reservation to settle: `r`, topped up if its endpoint was seen costing more since it was
        granted. None: the account fell below `min_balance` while `r` waited for a connection slot, or there is
        no room for the higher price (budget or query cap); `r` was released: send nothing, reserve again (which
        says why). Journaled from here, a crash counts it as spent (still waiting for a slot at a crash: not
        counted). If the journal cannot be written, the reservation is released and the error raised."""
        with self._lock:
            r = self._holds.current(r)
            short = self._prices.sending(r.id)
            cap = self._holds.cap(r)
            floor = self._floor.reached
            group = self._fanouts.group(r.query_id)
            fits = (
                self._budget - self._spent - self._holds.total >= short
                and (
                    cap is None
                    or self._q_spent.get(r.query_id, 0) + self._holds.of_query(r.query_id) + short <= cap
                )
                and (group is None or self._fanouts.left(group) >= short)
            )
            if short and fits and not floor:
                r = self._holds.top_up(r, short)
                self._fanouts.held(r.query_id, short)
                self._share.repriced(r.query_id, r.amount)
        if floor or (short and not fits):  # short == 0: it holds its price, whatever an overcharge took
            why = (
                "the account fell below its floor"
                if floor
                else "its endpoint's price rose past the credits left (budget or cap)"
            )
            log.info("%s page %d: not sent, %s", r.query_id, r.page_index, why)
            self.release(r)
            return None
        if self._journal is None:
            return r
        try:
            self._journal.reserved(r.id, r.query_id, r.amount, r.page_index)
        except BaseException:
            self.release(r)
            raise
        with self._lock:
            self._holds.journaled(r)
        return r

    def _decide(
        self,
        query_id: str,
        page_index: int,
        amount: int,
        query_cap: int | None,
        price_key: str | None,
        listed: int,
    ) -> Reservation | Refusal | None:
        """A grant, a refusal, or None (wait: something outstanding may change the answer). `listed`: the cost
        table's price of the request (`amount` may hold more: a learned price)."""
        if self._stopped is not None:
            return self._stopped
        if query_cap is not None and amount > query_cap:
            return Refusal.query_cap(query_cap, self._q_spent.get(query_id, 0), amount)
        floor = self._floor.fits(amount, self._holds.total)
        if floor is not True:
            return floor  # a refusal, or wait: the requests held settle (or give back) what they hold
        q_spent = self._q_spent.get(query_id, 0)  # a cap reached is said first: it holds across `--continue`s
        if query_cap is not None and q_spent + amount > query_cap:
            return Refusal.query_cap(query_cap, q_spent)
        fits = self._fanouts.fits(query_id, amount)
        if isinstance(fits, Refusal):
            return fits
        if self._spent + amount > self._budget:
            return Refusal.budget_left(self._budget, self._spent, amount if self._whole_run else 0)
        if query_cap is not None and q_spent + self._holds.of_query(query_id) + amount > query_cap:
            return None
        if not fits:
            return None  # wait: the fan-out's open reservations may settle for less
        if self._prices.must_wait(price_key):
            return None  # the endpoint's price is unseen: one request at a time until an answer shows it
        free = self._free()
        if free < amount:
            return None
        if self._policy == "breadth_first" and (
            free - amount < self._share.lag_demand(query_id, page_index, amount)
            or self._fanouts.lagging(self._share, query_id, page_index, amount)
        ):
            return None
        r = self._holds.grant(query_id, page_index, amount, query_cap)
        self._fanouts.held(query_id, amount)
        self._share.granted(query_id, page_index, amount)
        self._prices.granted(r.id, price_key, amount, listed)
        self._refusals.pop(query_id, None)
        return r

    def fanout_spent(self, group: str) -> int:
        """Credits all of a capped fan-out's queries spent together (0 for a group without a cap)."""
        with self._lock:
            return self._fanouts.spent(group) if group in self._fanouts.caps() else 0

    def fanout_left(self, query_id: str) -> int | None:
        """Credits the query's capped fan-out could still be granted; None when its fan-out has no cap."""
        with self._lock:
            group = self._fanouts.group(query_id)
            return None if group is None else max(0, self._fanouts.left(group))

    def floor_room(self) -> int | None:
        """Credits the run may still hold without taking the account below `min_balance` (`BalanceFloor.room`);
        None without a floor or a reading."""
        with self._lock:
            return self._floor.room(self._holds.total)

    def stop(self, kind: RefusalKind, reason: str) -> bool:
        """Refuse every later reservation (the first stop's reason is kept); True if this call stopped it."""
        with self._lock:
            first = self._stopped is None
            if first:
                self._stopped = Refusal(kind, reason)
        if first:
            log.info("no further requests: %s", reason)
            self._wake_all()
        return first

    def observe_remaining(self, credits_remaining: int) -> None:
        """Record the account balance the service reported; below `min_balance` all reserves refuse."""
        with self._lock:
            newly = self._floor.observe(credits_remaining)
        if newly:
            log.warning(
                "account balance %d fell below the floor of %s credits: no further requests",
                credits_remaining,
                self._floor.min_balance,
            )
            self._wake_all()
