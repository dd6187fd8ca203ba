"""Paging through one query: every page it asks for, exactly once, and never one more.

The pager yields each paid page before asking for the next, so the caller can make it durable first (a crash
then loses nothing that was paid for, and a resume starts from the page's `cursor_out`). It stops:
- at the end of pages as the endpoint's paging style defines it, or at a page with no records (a last page that
  still carries a cursor answers an empty, billed page forever otherwise);
- when a cursor comes back that was already used, or a page repeats the previous one (the service ignores a
  misspelled cursor parameter and returns page 1 again): status `loop_detected`;
- at `max_pages`, when the credit ledger refuses a reservation (`budget_exhausted`, cursor kept), or on an
  error that retrying cannot fix (`failed`). A "not found" answer is billed and kept (`not_found`).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import orjson

from connectors import errors
from connectors.catalog import Endpoint
from connectors.client import ServiceClient
from connectors.ledger import CreditLedger
from connectors.paging import Cursor

Status = Literal["complete", "max_pages", "budget_exhausted", "loop_detected", "not_found", "failed"]
OK_STATUSES: frozenset[str] = frozenset({"complete", "max_pages", "budget_exhausted", "not_found"})
"""Statuses of a query that ended normally or stopped at its budget (exit code 0)."""


@dataclass(frozen=True)
class QuerySpec:
    """One planned query as plain data, so it can travel to a task on another machine."""

    query_id: str
    endpoint: str
    params: dict[str, Any]
    max_pages: int | None = None
    max_credits: int | None = None
    start_cursor: Cursor | None = None
    start_page: int = 0


@dataclass
class Page:
    query_id: str
    endpoint: str
    index: int
    params: dict[str, Any]
    cursor_in: Cursor | None
    cursor_out: Cursor | None
    status_code: int
    credits: int
    """What the ledger counted for this page's call, all attempts included."""
    raw: bytes
    body: Any
    fetched_at: datetime
    records: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def record_count(self) -> int:
        return sum(len(r) for r in self.records.values())


@dataclass
class QueryOutcome:
    query_id: str
    endpoint: str
    status: Status = "complete"
    pages: int = 0
    records: int = 0
    credits: int = 0
    next_cursor: Cursor | None = None
    error: str | None = None


def _signature(records: dict[str, list[Any]]) -> bytes:
    return hashlib.blake2b(orjson.dumps(records, option=orjson.OPT_SORT_KEYS), digest_size=16).digest()


class QueryPager:
    def __init__(self, spec: QuerySpec, endpoint: Endpoint, client: ServiceClient, ledger: CreditLedger):
        self.spec = spec
        self.endpoint = endpoint
        self.client = client
        self.ledger = ledger
        self.params = endpoint.params.model_validate(spec.params)
        self.outcome = QueryOutcome(spec.query_id, endpoint.path)

    def _request(self, cursor: Cursor | None) -> list[tuple[str, str]]:
        pairs = self.params.query_pairs()
        if not cursor:
            return pairs
        return [(k, v) for k, v in pairs if k not in cursor] + list(cursor.items())

    def _page(
        self, index: int, cursor: Cursor | None, status: int, credits: int, raw: bytes, body: Any
    ) -> Page:
        records = {k.table: k.extract(body) for k in self.endpoint.kinds} if body is not None else {}
        return Page(
            query_id=self.spec.query_id,
            endpoint=self.endpoint.path,
            index=index,
            params=self.spec.params,
            cursor_in=cursor,
            cursor_out=None,
            status_code=status,
            credits=credits,
            raw=raw,
            body=body,
            fetched_at=datetime.now(UTC),
            records=records,
        )

    async def pages(self) -> AsyncGenerator[Page, None]:
        spec, out = self.spec, self.outcome
        cursor = spec.start_cursor
        index = spec.start_page
        used: set[tuple[tuple[str, str], ...]] = set()
        if cursor:
            used.add(tuple(sorted(cursor.items())))
        previous: bytes | None = None
        path = self.endpoint.url_path(self.params)
        async with self.ledger.query(spec.query_id):
            try:
                while True:
                    if spec.max_pages is not None and out.pages >= spec.max_pages:
                        out.status, out.next_cursor = "max_pages", cursor
                        return
                    try:
                        response = await self.client.get(
                            path,
                            self._request(cursor),
                            cost=self.endpoint.cost,
                            query_id=spec.query_id,
                            page_index=index,
                            endpoint=self.endpoint.path,
                            query_cap=spec.max_credits,
                        )
                    except errors.BudgetExhausted as exc:
                        out.status, out.next_cursor, out.error = "budget_exhausted", cursor, str(exc)
                        return
                    except errors.NotFound as exc:
                        out.status, out.error = "not_found", str(exc)
                        paid = exc.response
                        if paid is not None:
                            page = self._page(
                                index, cursor, paid.status_code, exc.credits, paid.raw, paid.body
                            )
                            out.pages += 1
                            out.records += page.record_count
                            yield page
                        return
                    except errors.HarvestError as exc:
                        out.status, out.next_cursor, out.error = "failed", cursor, str(exc)
                        paid = exc.response
                        if paid is not None and exc.credits:
                            out.pages += 1
                            yield self._page(index, cursor, paid.status_code, exc.credits, paid.raw, None)
                        return
                    page = self._page(
                        index, cursor, response.status_code, response.credits, response.raw, response.body
                    )
                    nxt = self.endpoint.paging.next_cursor(response.body)
                    page.cursor_out = nxt
                    out.pages += 1
                    out.records += page.record_count
                    yield page  # the client already told the ledger this page is done
                    index += 1
                    if nxt is None or page.record_count == 0:
                        out.status = "complete"
                        return
                    signature = _signature(page.records)
                    key = tuple(sorted(nxt.items()))
                    if key in used or signature == previous:
                        out.status = "loop_detected"  # no next cursor: resuming from it would loop again
                        out.error = (
                            f"the service sent back a cursor already used ({nxt}) or the same page twice; "
                            "stopped instead of paying for the same pages again"
                        )
                        return
                    used.add(key)
                    previous, cursor = signature, nxt
            finally:
                out.credits = self.ledger.per_query_spent.get(spec.query_id, 0)
