"""What a refusal of the ledger means to the query that met it, decided in one place.

The ledger says why it refused (`Refusal`): the query's budget, which a later run may go on from, or a stop of the
whole run (a refused key, an emptied account, Ctrl-C), which no later page can undo. The client meets a refusal
when it reserves, and the run's stop while a request waits for its slot or is already in flight; building the
errors here keeps the status each leads to, and its words, the same wherever the client raises one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harvest.connectors.errors import BudgetExhausted, HarvestError, RunStopped

if TYPE_CHECKING:
    from harvest.connectors.credits.reservations import Refusal
    from harvest.connectors.paging.page_request import PageRequest, Tried

__all__ = ["cap_refused", "exhausted", "refused", "stopped"]


def refused(
    refusal: Refusal | None, request: PageRequest, credits: int, attempts: int, tried: Tried | None = None
) -> HarvestError:
    """The error for a reservation the ledger refused: the budget (the query may go on in a later run), or a
    stop of the whole run (a refused key, an emptied account, Ctrl-C), which no later page can undo."""
    reason = refusal.reason if refusal else "the ledger refused it"
    if refusal is not None and refusal.kind != "budget":
        return RunStopped(
            status=refusal.kind, reason=reason, credits=credits, page_index=request.page,
            query_id=request.query_id, endpoint=request.endpoint,
        )  # fmt: skip
    if refusal is not None and refusal.cap_below_price is not None:
        return cap_refused(refusal, request.query_id, request.endpoint, request.page, credits, attempts)
    return exhausted(
        reason, request.query_id, request.endpoint, request.page, request.cost, credits, attempts, tried,
        capped=refusal.capped if refusal else None,
    )  # fmt: skip


def exhausted(
    reason: str,
    query_id: str,
    endpoint: str,
    page: int,
    cost: int,
    credits: int,
    attempts: int = 0,
    tried: Tried | None = None,
    capped: str | None = None,
) -> BudgetExhausted:
    """The error of a query the budget or its own `max_credits` ended, on the local runner (`refused`) and in
    Dask rounds alike: a round's worker, whose ledger holds only its grant, sees its grant run out, not the cap,
    so the flow says the ledger's refusal in these words."""
    return BudgetExhausted(
        page_index=page, cost=cost, reason=reason, credits=credits, attempts=attempts, query_id=query_id,
        endpoint=endpoint, tried=tried, capped=capped,
    )  # fmt: skip


def cap_refused(
    refusal: Refusal, query_id: str, endpoint: str, page: int, credits: int, attempts: int = 0
) -> BudgetExhausted:
    """The error for a refusal whose `cap_below_price` says one request costs more than the query's whole
    `max_credits` or the run's whole budget: its summary carries them (`{max_credits, price}`, `{budget,
    price}`), so the run says the query could not send a request, on the local runner (`refused`) and in Dask
    rounds (`flows.run.dask.rounds`) alike."""
    assert refusal.cap_below_price is not None
    cap, price = refusal.cap_below_price
    return BudgetExhausted(
        page_index=page, cost=price, reason=refusal.reason, credits=credits, attempts=attempts,
        query_id=query_id, endpoint=endpoint, cap_below_price={refusal.limit: cap, "price": price},
    )  # fmt: skip


def stopped(stop: Refusal | None, request: PageRequest, credits: int, sent: bool) -> RunStopped:
    """The error for a request the run's stop overtook: in flight (abandoned) or still waiting (never sent)."""
    reason = stop.reason if stop else "the run was stopped"
    return RunStopped(
        status=stop.kind if stop else "interrupted",
        reason=reason + ("; the request in flight was abandoned" if sent else ""),
        credits=credits, page_index=request.page, query_id=request.query_id, endpoint=request.endpoint,
    )  # fmt: skip
