"""How much each running query may pay in a Dask round: its grant of pages, breadth-first across queries, within
the budget, each query's cap and its fan-out's `max_credits_total`, a page at the price the service was last seen
charging (`reprice`), and one page a round of an endpoint no answer has priced yet. Plain data in, plain data
out, so the rule is tested on its own (`tests/test_dask_runner.py`) and `flows.run.dask.rounds` only reserves
and submits.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass, field
from typing import Any

from harvest.connectors.paging.pager import QuerySpec, base_id


@dataclass
class Running:
    spec: QuerySpec
    cost: int
    state: dict[str, Any] | None = None
    pages: int = 0
    credits: int = 0
    """What the query paid in the run, a resumed one's earlier sessions included (the ledger's `per_query_spent`,
    what the local runner reports): its `max_credits` counts them all, and the ledger refuses a grant past it."""
    before: int = 0
    """What earlier sessions of the run paid for it: its line says this session's credits, as the local runner's."""
    records: int = 0
    files: list[Any] = field(default_factory=list)
    rounds: int = 0
    known: dict[str, Any] | None = None
    """Where its known keys are staged (an incremental query on staging workers: `tasks.staged_known`)."""
    price_key: str | None = None
    """What the ledger learns its price under (`Endpoint.price_key`)."""
    listed: int | None = None
    """The cost table's price of one request (None: `cost` as first given)."""


def reprice(running: list[Running], learned: Mapping[str, int]) -> None:
    """Each query's page at what the service was seen charging for its price key (the flow's ledger's learned
    prices: those the run started from and those its rounds reported), never below the cost table's: a round
    granted at the table's price would pay past its grant on its first page."""
    for r in running:
        if r.listed is None:
            r.listed = r.cost
        r.cost = max(r.listed, learned.get(r.price_key, 0) if r.price_key is not None else 0)


def allocate(
    running: list[Running],
    free: int,
    round_pages: int,
    fanout_left: Callable[[str], int | None] = lambda query_id: None,
    priced: Container[str] = frozenset(),
) -> dict[str, int]:
    """Pages granted per query this round: one at a time to the query with the fewest pages so far, within the
    budget, each query's cap and its fan-out's `max_credits_total` (`fanout_left`: what the ledger can still
    grant the query's fan-out; None: no cap).

    A price key not in `priced` (no answer of the run has shown what the service charges for it) is granted
    one page, to the first query in that order: a worker's ledger lives one round, so every query granted the
    key would send a first request at a price that may be wrong and pass the budget by its excess. The others
    wait for the next round, granted at the price that page's answer showed (`reprice`): as locally, one
    request's excess per key at most, and page counts still end within one of each other."""
    grants = {r.spec.query_id: 0 for r in running}
    left = free
    fanouts = {r.spec.query_id: (base_id(r.spec.query_id), fanout_left(r.spec.query_id)) for r in running}
    group_left = {group: credits for group, credits in fanouts.values() if credits is not None}
    unpriced: set[str] = set()  # the keys no answer priced that a query was granted this round
    while True:
        moved = False
        for r in sorted(running, key=lambda r: (r.pages + grants[r.spec.query_id], r.spec.query_id)):
            qid, key = r.spec.query_id, r.price_key
            cap = r.spec.max_credits
            within_cap = cap is None or r.credits + (grants[qid] + 1) * r.cost <= cap
            group = fanouts[qid][0]
            within_cap = within_cap and (group not in group_left or r.cost <= group_left[group])
            unseen = key if key is not None and key not in priced else None
            if grants[qid] < round_pages and r.cost <= left and within_cap and unseen not in unpriced:
                grants[qid] += 1
                left -= r.cost
                if group in group_left:
                    group_left[group] -= r.cost
                if unseen is not None:
                    unpriced.add(unseen)
                moved = True
                break  # re-sort: breadth-first, page by page
        if not moved:
            return grants
