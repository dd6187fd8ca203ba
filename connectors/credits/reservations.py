"""What the credit ledger hands out and reports: reservations, refusals, overcharges, snapshots."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from harvest.connectors.plurals import counted

Policy = Literal["breadth_first", "greedy"]
POLICIES: tuple[str, ...] = ("breadth_first", "greedy")


@dataclass(frozen=True)
class Reservation:
    """Credits held for one attempt at one page of one query."""

    id: int
    query_id: str
    page_index: int
    amount: int


@dataclass(frozen=True)
class Overcharge:
    """The service charged more than the cost table said; kept so the excess is never silent."""

    query_id: str
    page_index: int
    reserved: int
    charged: int

    @property
    def excess(self) -> int:
        return self.charged - self.reserved

    def warning(self, spent: int, budget: int) -> str:
        return (
            f"the service charged {counted(self.charged, 'credit')} for {self.query_id} "
            f"page {self.page_index} but the cost table says {self.reserved}; spent is now {spent} of a budget "
            f"of {budget}; later requests reserve "
            "the charged amount. Update the cost table."
        )


@dataclass(frozen=True)
class LedgerSnapshot:
    """All totals read at one instant (one lock acquisition), for displays and reports."""

    budget: int
    spent: int
    reserved: int
    remaining: int
    per_query_spent: Mapping[str, int]
    overcharged: int
    account_remaining: int | None
    floor_reached: bool
    expected: int = 0
    """Held for requests on the wire beyond what they were sent holding: the excess a learned price rise will take
    (part of `reserved`; it becomes `overcharged` as they settle)."""


class LedgerJournal(Protocol):
    """Where reservations are recorded durably; `closed(rid, None)` means released (nothing spent). `unknown`
    says why a charge no answer named was counted: "refusal" (429, 5xx), "unread" (an answer came, unreadable:
    billed before it was sent) or "lost" (no answer: billed or not); `refused`: of
    a named count (a Dask round's), the credits of refusals whose charge no answer named; `lost`: of it too, the
    credits of requests no status came back for (not a charge an answer named either). `priced`:
    an answer charged more than the cost table's price of a price key (`connectors.credits.prices`); `held`: the
    run holds a price from the first, what earlier runs saw charged; `seen`: an answer named a held key's charge.
    The run's resume, its `--continue` and the job's next night start from them (`flows.run.chain.carried`)."""

    def reserved(self, rid: int, query_id: str, amount: int, page: int = 0) -> None: ...
    def closed(
        self, rid: int, counted: int | None, unknown: Unknown = None, refused: int = 0, lost: int = 0
    ) -> None: ...
    def adjusted(self, query_id: str, credits: int) -> None: ...
    def priced(self, key: str, credits: int) -> None: ...
    def held(self, key: str, credits: int) -> None: ...
    def seen(self, key: str) -> None: ...


Unknown = Literal["refusal", "unread", "lost"] | None
"""Why a settled charge is not one an answer named (None: it is)."""

RefusalKind = Literal["budget", "stopped", "interrupted"]
"""Why the ledger refuses: the budget (or a cap or floor), or the whole run was stopped or interrupted."""


@dataclass(frozen=True)
class Refusal:
    kind: RefusalKind
    reason: str
    cap_below_price: tuple[int, int] | None = None
    """(max_credits, price) when one request costs more than the query's whole cap: no run can send it, so its
    run does not count it among the queries the budget left unstarted (`tasks.output.run_summary`)."""
    limit: str = "max_credits"
    """What `cap_below_price`'s cap is: the query's `max_credits`, or the run's whole `budget`."""
    capped: str | None = None
    """`max_credits` or `max_credits_total` when the query's own cap or its fan-out's is reached: a cap of the
    chain of runs `--continue` makes, as `max_pages` is, so no continued run picks the query up."""

    @classmethod
    def budget_left(cls, budget: int, spent: int, price: int = 0) -> Refusal:
        """The run's budget has too little left; or (`price` above the whole budget) could never hold one request:
        no run with this budget sends it, so `--continue` is no remedy and none is offered."""
        if price > budget:
            return cls(
                "budget",
                f"one request costs {price} credits, more than the run's whole budget of {budget}: no run with "
                f"this budget can send it ({spent} spent)",
                (budget, price),
                "budget",
            )
        return cls("budget", f"the run's budget of {budget} credits has {max(0, budget - spent)} left")

    @classmethod
    def query_cap(cls, cap: int, spent: int, price: int = 0) -> Refusal:
        """The query's `max_credits` is reached, or (`price` above it) could never hold one request."""
        if price > cap:
            return cls(
                "budget",
                f"the query's cap of {cap} credits (max_credits) is below the {price} credits one request costs: "
                f"it can never send one ({spent} spent)",
                (cap, price),
            )
        return cls(
            "budget", f"the query's cap of {cap} credits is reached ({spent} spent)", capped="max_credits"
        )

    @classmethod
    def fanout_cap(cls, group: str, cap: int, spent: int) -> Refusal:
        return cls(
            "budget",
            f"the cap of {cap} credits on all of {group}'s queries together (max_credits_total) is reached "
            f"({spent} spent)",
            capped="max_credits_total",
        )
