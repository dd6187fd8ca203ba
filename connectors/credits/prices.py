"""What each endpoint really costs, as the service's answers show it: the credit ledger's price memory.

The cost table (the catalog, or a job's `costs:`) is what harvest *expects* to pay; the service decides what it
*charges*. Reserving the table's price is only a hard cap while the two agree, so the ledger keeps three facts
per price key (an endpoint) and uses them to keep a price rise from passing the budget by more than one page:

- **seen**: an answer the service billed as a page (its body readable) has come back. Until then the key is
  *unseen* and at most one reservation of it is open at a time (`must_wait`): every query's first page waiting
  on the same unknown price would otherwise all be sent at a price that may be wrong (60 fanned-out queries of a
  `costs: {path: 0}` job spent 62 credits of a budget of 5). The cost is one round trip per endpoint per run.
- **learned**: the highest charge seen above what was reserved. Later reservations hold at least it. A run that
  goes on from earlier ones (a resume, `--continue`) starts with what they learned (`known`): the catalog's price
  again would let its first request pay the excess a second time, past a budget that could not hold it.
- **shortfall**: reservations granted before the price was learned and not yet sent hold too little. Their
  missing credits are kept off the budget for new reservations, and `sending` tops each one up (or the ledger
  gives it back to be reserved again) before its request leaves. Only requests already on the wire can pay
  the old price.

Not thread-safe on its own: the credit ledger calls it under its lock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping


class Prices:
    def __init__(self, known: Mapping[str, int] | None = None) -> None:
        self._learned: dict[str, int] = dict(known or {})
        """Price key -> the highest charge seen above a reservation (what later reservations hold)."""
        self._seen: set[str] = set()
        """Price keys a billed, readable answer has priced."""
        self._open: Counter[str] = Counter()
        """Price key -> reservations open under it (granted, not yet settled or released)."""
        self._key_of: dict[int, str] = {}
        """Open reservation id -> its price key."""
        self._unsent: dict[int, int] = {}
        """Reservation id -> amount held, for open reservations whose request has not been sent yet."""
        self.shortfall = 0
        """Credits the unsent reservations lack against the learned prices (kept off the budget)."""

    def price(self, key: str | None, amount: int) -> int:
        """What a reservation of `amount` under `key` must hold: never less than what the key was charged."""
        return amount if key is None else max(amount, self._learned.get(key, 0))

    def learned(self) -> dict[str, int]:
        return dict(self._learned)

    def must_wait(self, key: str | None) -> bool:
        """True while the key's price is unseen and a reservation of it is already open: one at a time."""
        return key is not None and key not in self._seen and self._open[key] > 0

    def granted(self, rid: int, key: str | None, amount: int) -> None:
        if key is None:
            return
        self._open[key] += 1
        self._key_of[rid] = key
        self._unsent[rid] = amount

    def _short(self, rid: int) -> int:
        held = self._unsent.get(rid)
        key = self._key_of.get(rid)
        if held is None or key is None:
            return 0
        return max(0, self._learned.get(key, 0) - held)

    def sending(self, rid: int) -> int:
        """The request of `rid` leaves: the credits it lacks against the learned price (0: it holds enough)."""
        short = self._short(rid)
        self.shortfall -= short
        self._unsent.pop(rid, None)
        return short

    def closed(self, rid: int, reserved: int, counted: int | None, priced: bool) -> str | None:
        """Reservation `rid` (holding `reserved`) closed; `counted` was spent (None: released). A charge above
        what it held teaches the key's price, and the unsent reservations of the key now lack the difference.
        Returns the key whose price it taught (for the run's journal: a resume starts from it), else None."""
        self.shortfall -= self._short(rid)
        self._unsent.pop(rid, None)
        key = self._key_of.pop(rid, None)
        if key is None:
            return None
        self._open[key] -= 1
        if self._open[key] <= 0:
            del self._open[key]
        if priced:
            self._seen.add(key)
        if counted is None or counted <= max(reserved, self._learned.get(key, 0)):
            return None
        self._learned[key] = counted
        self.shortfall = sum(self._short(r) for r in self._unsent)
        return key
