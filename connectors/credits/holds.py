"""Credits held for requests not yet answered: the ledger's open reservations.

The budget check is `spent + held <= budget`; this keeps the "held" side in one place: each open reservation
(topped up when its endpoint's price rose), what each query holds (for its cap), and which reservations the
journal heard of (a crash counts those as spent). Not thread-safe on its own: the credit ledger calls it under
its lock.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from harvest.connectors.credits.reservations import Reservation


class Holds:
    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._open: dict[int, Reservation] = {}
        self._by_query: dict[str, int] = {}
        self._caps: dict[int, int] = {}
        """Open reservation id -> its query's cap, for top-ups before sending."""
        self._journaled: set[int] = set()
        self._expected: dict[int, int] = {}
        """Sent reservation id -> credits added to its hold once its price was learned on the wire: what it
        is expected to be charged beyond what it was sent holding."""
        self.total = 0

    def of_query(self, query_id: str) -> int:
        return self._by_query.get(query_id, 0)

    def current(self, r: Reservation) -> Reservation:
        """`r` as held now (it may have been topped up since it was handed out)."""
        return self._open.get(r.id, r)

    def cap(self, r: Reservation) -> int | None:
        return self._caps.get(r.id)

    def grant(self, query_id: str, page_index: int, amount: int, cap: int | None) -> Reservation:
        r = Reservation(next(self._ids), query_id, page_index, amount)
        self._open[r.id] = r
        self.total += amount
        self._by_query[query_id] = self.of_query(query_id) + amount
        if cap is not None:
            self._caps[r.id] = cap
        return r

    def top_up(self, r: Reservation, extra: int) -> Reservation:
        r = replace(r, amount=r.amount + extra)
        self._open[r.id] = r
        self.total += extra
        self._by_query[r.query_id] += extra
        return r

    def expect(self, rid: int, price: int) -> tuple[Reservation, int] | None:
        """The sent reservation `rid` will be charged `price`: its hold raised to it, and by how much (None: it
        holds enough)."""
        r = self._open.get(rid)
        if r is None or r.amount >= price:
            return None
        extra = price - r.amount
        self._expected[rid] = self._expected.get(rid, 0) + extra
        return self.top_up(r, extra), extra

    @property
    def expected(self) -> int:
        """Credits added on the wire, all reservations together (`expect`)."""
        return sum(self._expected.values())

    def sent_holding(self, r: Reservation) -> int:
        """What the open reservation `r` held when its request left (before any expected charge was added)."""
        return self.current(r).amount - self._expected.get(r.id, 0)

    def journaled(self, r: Reservation) -> None:
        self._journaled.add(r.id)

    def close(self, r: Reservation) -> tuple[Reservation, bool]:
        """Take `r` off: the reservation as held, and whether the journal heard of it."""
        held = self._open.pop(r.id, None)
        if held is None:
            raise ValueError(f"reservation {r.id} of {r.query_id!r} is already settled or released")
        self.total -= held.amount
        self._by_query[held.query_id] -= held.amount
        self._caps.pop(r.id, None)
        self._expected.pop(r.id, None)
        journaled = r.id in self._journaled
        self._journaled.discard(r.id)
        return held, journaled
