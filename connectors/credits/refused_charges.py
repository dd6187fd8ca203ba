"""Credits counted for refused requests (429, 5xx) whose charge the service did not say, per query.

The budget is a hard cap, so an unknown charge counts as spent at once. The service's notes say refusals carry
no credits and its 429s are not known to be billed; the account's balance (free to read) settles it: what the
balance did not fall by was not billed, and goes back (`CreditLedger.reconcile`).
"""

from __future__ import annotations


class RefusedCharges:
    """Per query, the credits counted for refusals with an unknown charge (not thread-safe: the ledger's lock)."""

    def __init__(self) -> None:
        self._by_query: dict[str, int] = {}
        self._earlier: dict[str, int] = {}
        """Of each query's, the credits earlier sessions of the run counted (a killed one's refusals and requests
        in flight, `CreditLedger.carry_over`): not this session's refusals, and given back last, as the bill
        that carried them over already had room for them."""
        self.total = 0

    def add(self, query_id: str, credits: int, earlier: bool = False) -> None:
        if credits > 0:
            self._by_query[query_id] = self._by_query.get(query_id, 0) + credits
            self.total += credits
            if earlier:
                self._earlier[query_id] = self._earlier.get(query_id, 0) + credits

    def this_session(self) -> int:
        """Of `total`, this session's: what a run's progress line says its refusals hold back."""
        return self.total - sum(self._earlier.values())

    def of(self, query_id: str) -> int:
        """This session's: a query's line says how many of the credits it paid now are still unsettled."""
        return self._by_query.get(query_id, 0) - self._earlier.get(query_id, 0)

    def give_back(self, credits: int) -> dict[str, int]:
        """Take up to `credits` off, the queries with the most first, each this session's part first; what each
        gave back."""
        back: dict[str, int] = {}
        for query_id in sorted(self._by_query, key=self._by_query.__getitem__, reverse=True):
            if credits <= 0:
                break
            take = min(credits, self._by_query[query_id])
            back[query_id] = take
            credits -= take
            self._by_query[query_id] -= take
            # this session's part went first: what is left of the earlier sessions' is what is left, at most
            earlier = min(self._earlier.pop(query_id, 0), self._by_query[query_id])
            if earlier:
                self._earlier[query_id] = earlier
            if not self._by_query[query_id]:
                del self._by_query[query_id]
        self.total -= sum(back.values())
        return back
