"""What a query's run ended with, as the flow, the journal, the manifest and the load read it.

Kept free of Prefect so that the flow's start (resume decisions) and the Dask rounds can build summaries without
importing the task module.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from harvest.connectors.paging.known_items import history_after
from harvest.connectors.paging.pager import PagerStart, QuerySpec


@dataclass
class QuerySummary:
    """What a connector task returns: small, plain, and enough to load and report the run."""

    query_id: str
    endpoint: str
    status: str
    pages: int
    records: int
    credits: int
    next_cursor: dict[str, str] | None
    error: str | None
    files: list[tuple[str, str, int]] = field(default_factory=list)
    """(table, path relative to the output root, rows) of every Parquet file the query published."""
    extraction: dict[str, Any] = field(default_factory=dict)
    """What the pages held vs what was kept (`connectors.reading.extraction.ExtractionReport.as_dict`)."""
    raw_file: str = ""
    requests_file: str = ""
    history: str | None = None
    """Incremental queries: `complete` or `partial` once this run's pass ended (`connectors.paging.known_items`)."""
    backfill_cursor: dict[str, str] | None = None
    """Incremental queries with a partial history: where their older, uncollected items begin."""
    follow_ups: int | None = None
    """Follow-up requests paid (counted in `pages` too), for an endpoint whose records carry follow-up cursors;
    None for every other."""
    follow_state: dict[str, Any] | None = None
    """The follow-up requests still waiting when the query stopped (`FollowUps.plain`): `--continue` asks them."""
    cap_below_price: dict[str, int] | None = None
    """{max_credits, price} when it ended because one request costs more than its whole `max_credits` (the
    service charged more than the cost table said): no run sends it, so it is not one the budget left unstarted."""
    refused_for_good: bool = False
    """The service refused it for good (403, 400): `--continue` would pay for the same answer, so it ends here."""
    capped: str | None = None
    """`max_credits` or `max_credits_total` when its own cap or its fan-out's ended it: the chain's cap, so it
    ends here too (`flows.run.chain.settled_by`)."""
    earlier: bool = False
    """Started for a parent record an earlier run found (`QuerySpec.earlier`): not what a night costs."""
    pages_before: int = 0
    """`QuerySpec.pages_before`: with `pages`, how far into its listing the query stands."""
    sent: int = 0
    """HTTP attempts it sent in this run, rows of `requests` (a 5xx or a 429 too; a resume counts the earlier
    sessions' stored answers). One with none "never started" (`run_summary.never_started`); one whose requests
    got no page before the budget stopped it did start: a stopped query, its attempts in `requests`."""
    asks: str | None = None
    """A dependent's `QuerySpec.asks`: an incremental run skips one an earlier run collected only when it asks the
    same now. None for other queries, and in manifests older than it (then its endpoint alone is compared)."""

    def as_dict(self) -> dict[str, Any]:
        """Its fields, shallow (`dataclasses.asdict` deep-copies: 9% of a 10,000-query run's CPU)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def not_started(cls, spec: QuerySpec, status: str, credits: int = 0) -> QuerySummary:
        """A query a stopped run never started: listed, so `--continue` or a resume runs it; an incremental one
        keeps the history it had (`history_after` with no page paged)."""
        start = spec.start_cursor
        return cls(
            query_id=spec.query_id, endpoint=spec.endpoint, status=status, pages=0, records=0, credits=credits,
            next_cursor=start, error=None, pages_before=spec.pages_before,
            **history_fields(spec, PagerStart(cursor=start), status, start),
        )  # fmt: skip


def history_fields(
    spec: QuerySpec, state: PagerStart, status: str, next_cursor: dict[str, str] | None
) -> dict[str, Any]:
    """An incremental query's history after this run (`history`, `backfill_cursor`) for its summary."""
    if not spec.incremental:
        return {}
    before = (spec.history, spec.backfill)
    history, backfill = history_after(status, state.backfilling, next_cursor, spec.start_cursor, before)
    return {"history": history, "backfill_cursor": backfill}
