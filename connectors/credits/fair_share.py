"""Breadth-first sharing of a short budget: every running query gets page k before any gets page k+1.

Queries register while they run and report finished pages. A query can be expected before it registers (the flow
launched its task, which has not reached its first request yet): it counts as lagging at its first page, so a query
whose task started sooner cannot take the short budget meanwhile. A reservation for page k of query q must wait
while another registered query lags behind (its next page index is < k) *and* the credits still free after this
reservation would not cover the pages those lagging queries need to reach page k-1 (costed at each one's last
reservation). With ample credits nobody waits (no lock-step, no throughput loss); when credits run short the
leaders wait, so final page counts differ by at most one. Asking for page k implies pages < k are done: that is
what makes waiting cycles impossible (a waiter always waits on a query strictly behind it).

Not thread-safe on its own: the credit ledger calls it under its lock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable


class FairShare:
    def __init__(self) -> None:
        self._next_page: dict[str, int] = {}
        """Registered, unfinished queries -> the next page index each will ask for."""
        self._inflight: dict[str, Counter[int]] = {}
        """Query -> page index -> reservations held for it."""
        self._cost: dict[str, int] = {}
        """Query -> the amount of its last reservation (what its next pages are expected to cost)."""
        self._expected: set[str] = set()
        """Queries expected and not registered yet."""

    def expect(self, query_id: str, next_page: int) -> None:
        if query_id not in self._next_page:
            self._next_page[query_id] = next_page
            self._expected.add(query_id)

    def register(self, query_id: str, next_page: int) -> None:
        if query_id in self._next_page and query_id not in self._expected:
            raise ValueError(f"query {query_id!r} is already registered")
        self._expected.discard(query_id)
        self._next_page[query_id] = max(next_page, self._next_page.get(query_id, next_page))

    def started(self, query_id: str, page_index: int) -> bool:
        """The query asks for `page_index`, so the pages before it are done; True when that moved it on."""
        nxt = self._next_page.get(query_id)
        if nxt is not None and page_index > nxt:
            self._next_page[query_id] = page_index
            return True
        return False

    def done(self, query_id: str, page_index: int) -> bool:
        """Page `page_index` of the query landed; True when that moved it on (unregistered: no-op)."""
        nxt = self._next_page.get(query_id)
        if nxt is None or page_index + 1 <= nxt:
            return False
        self._next_page[query_id] = page_index + 1
        return True

    def finish(self, query_id: str) -> bool:
        """The query reserves nothing more; True if it was registered (others may stop waiting)."""
        self._expected.discard(query_id)
        self._cost.pop(query_id, None)  # a fan-out's 10,000 ended queries keep nothing here
        if not self._inflight.get(query_id):
            self._inflight.pop(query_id, None)
        return self._next_page.pop(query_id, None) is not None

    def lag_demand(
        self, query_id: str, page_index: int, amount: int, among: Callable[[str], bool] | None = None
    ) -> int:
        """Credits the queries behind `query_id` still need to complete page `page_index - 1`; `among`: only
        those queries (the members of a capped fan-out)."""
        if page_index == 0:  # nothing is behind a first page (a fan-out's 10,000 first pages skip the walk)
            return 0
        demand = 0
        for other, nxt in self._next_page.items():
            if other == query_id or nxt >= page_index or (among is not None and not among(other)):
                continue
            inflight = self._inflight.get(other, Counter())
            in_range = sum(1 for p, n in inflight.items() if n > 0 and nxt <= p < page_index)
            demand += max(0, page_index - nxt - in_range) * self._cost.get(other, amount)
        return demand

    def granted(self, query_id: str, page_index: int, amount: int) -> None:
        self._inflight.setdefault(query_id, Counter())[page_index] += 1
        self._cost[query_id] = amount

    def repriced(self, query_id: str, amount: int) -> None:
        """The query's reservation was topped up to a price learned since: its next pages cost that."""
        self._cost[query_id] = amount

    def closed(self, query_id: str, page_index: int) -> None:
        inflight = self._inflight[query_id]
        inflight[page_index] -= 1
        if inflight[page_index] <= 0:
            del inflight[page_index]
            if not inflight and query_id not in self._next_page:  # its last hold, after it finished
                del self._inflight[query_id]
