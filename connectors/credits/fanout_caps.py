"""Caps on what a whole fan-out spends: all the queries one spec query makes, together (`max_credits_total`).

A fanned-out or dependent query makes many queries; `max_credits` caps each alone, so 90 comment queries of 10
credits each are a 900-credit worst case. A fan-out cap is held like the run's budget: a reservation is granted
only while the group's spent and held credits plus its amount stay within the cap, so no interleaving, retry or
top-up passes it. A reservation the group can never fit (its spent credits alone leave too little) is refused
and the query stops `budget_exhausted` with its cursor; one that may fit once the group's open reservations
settle waits. Under the breadth-first policy the group is shared breadth-first too: a member may take page k only
while the group's credits left still cover its lagging members' pages up to k-1 (`FairShare.lag_demand`, among
the members), so a short cap gives every video's comments their first page before any gets a second.

A query belongs to a group by its id (`group_of`: the spec query it was made from); groups without a cap are not
tracked. Not thread-safe on its own: the credit ledger calls it under its lock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping

from harvest.connectors.credits.fair_share import FairShare
from harvest.connectors.credits.reservations import Refusal


class FanoutCaps:
    def __init__(self, caps: Mapping[str, int], group_of: Callable[[str], str]) -> None:
        if any(cap < 0 for cap in caps.values()):
            raise ValueError(f"fan-out caps must be >= 0, got {dict(caps)}")
        self._caps = dict(caps)
        self._group_of = group_of
        self._groups: dict[str, str | None] = {}
        """Query id -> its capped group (None: no cap), as first asked."""
        self._spent: Counter[str] = Counter()
        self._held: Counter[str] = Counter()

    def __bool__(self) -> bool:
        return bool(self._caps)

    def group(self, query_id: str) -> str | None:
        """The capped group the query belongs to, or None."""
        found = self._groups.get(query_id, "")
        if found == "":
            name = self._group_of(query_id)
            found = self._groups[query_id] = name if name in self._caps else None
        return found

    def cap(self, group: str) -> int:
        return self._caps[group]

    def spent(self, group: str) -> int:
        return self._spent[group]

    def left(self, group: str) -> int:
        """Credits the group could still be granted: neither spent nor held."""
        return self._caps[group] - self._spent[group] - self._held[group]

    def fits(self, query_id: str, amount: int) -> bool | Refusal:
        """Whether a reservation of `amount` fits the query's fan-out cap: True (or no cap), False (not now:
        its open reservations may settle for less), or a refusal (its spent credits alone leave too little)."""
        group = self.group(query_id)
        if group is None:
            return True
        if self._spent[group] + amount > self._caps[group]:
            return Refusal.fanout_cap(group, self._caps[group], self._spent[group])
        return self.left(group) >= amount

    def lagging(self, share: FairShare, query_id: str, page_index: int, amount: int) -> bool:
        """Breadth-first inside the fan-out: page `page_index` must wait while the fan-out's credits left after
        it would not cover its lagging members' pages up to `page_index - 1`."""
        group = self.group(query_id)
        if group is None:
            return False
        among = lambda other: self.group(other) == group  # noqa: E731
        return self.left(group) - amount < share.lag_demand(query_id, page_index, amount, among)

    def opening(self, per_query: Mapping[str, int]) -> None:
        """What earlier sessions of the run spent, per query (a resumed run's fan-out keeps its cap)."""
        for query_id, credits in per_query.items():
            self.counted(query_id, credits)

    def counted(self, query_id: str, credits: int) -> None:
        """The query's spent credits changed by `credits` (settled, or given back when negative)."""
        group = self.group(query_id) if self._caps else None
        if group is not None:
            self._spent[group] += credits

    def held(self, query_id: str, credits: int) -> None:
        """The query's held credits changed by `credits` (granted or topped up; closed when negative)."""
        group = self.group(query_id) if self._caps else None
        if group is not None:
            self._held[group] += credits

    def caps(self) -> dict[str, int]:
        return dict(self._caps)
