"""Asking for a page is the one part of paging that spends money, so it is kept where it can be read on its own.

Every answer that was paid for becomes a kept page (`keep`, the raw store) before anything reads it: a page, a
billed "not found", an answer no reading takes, a failure the service still charged for. The client's typed error
says how the query ends; the outcome records it, with the cursor a later run goes on from. What comes next, and
when paging stops, is `connectors.paging.pager`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa

from harvest.connectors import errors
from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.catalog.paging_styles import Cursor
from harvest.connectors.catalog.params import Params
from harvest.connectors.http.client import ServiceClient
from harvest.connectors.paging.page_request import DAMAGED, SERVICES_OWN, PageRequest
from harvest.connectors.reading.extraction import ExtractionReport
from harvest.connectors.reading.large_body import spans_in, whole

if TYPE_CHECKING:
    from harvest.connectors.paging.pager import PagerStart, QueryOutcome, QuerySpec

__all__ = ["Page", "PageFetching"]


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
    """The answer's bytes as received, until they are kept (then empty)."""
    body: Any
    fetched_at: datetime
    repairs: dict[str, int] = field(default_factory=dict)
    """What reading the body repaired (`connectors.reading.json_body`)."""
    records: dict[str, Sequence[Any]] = field(default_factory=dict)
    """Table -> the items as the service sent them."""
    tables: dict[str, pa.Table] = field(default_factory=dict)
    """Table -> the items as Arrow columns (without the run's columns); a `landed` page's: its primary keys."""
    report: ExtractionReport = field(default_factory=ExtractionReport)
    unread: str | None = None
    """A 2xx no reading takes: `DAMAGED` (on the wire, both tries) or `SERVICES_OWN`, kept with the answer so a
    resume after a kill ends or asks for it again as the live run did; None: read (or not a 2xx)."""
    landed: bool = False
    """Its tables went to the writer while it was read (a large answer's, a slice at a time): nothing is left
    to land but the page's end (`QueryPager.land`)."""

    @property
    def collected(self) -> bool:
        """A page of the query's (`QueryOutcome.pages` counts it); False: an answer damaged on the wire on both
        tries, kept and billed, whose page a later run asks for again."""
        return self.unread != DAMAGED

    @property
    def record_count(self) -> int:
        """Items the page held (kept or not)."""
        return sum(len(r) for r in self.records.values())


class PageFetching:
    """The asking half of `QueryPager`: one page's request, its paid answer kept, and what an error ends."""

    spec: QuerySpec
    endpoint: Endpoint
    client: ServiceClient
    params: Params
    keep: Callable[[Page], None]
    can_keep: Callable[[], None]
    reading: Page | None
    outcome: QueryOutcome
    start: PagerStart

    def _request(self, index: int, cursor: Cursor | None) -> PageRequest:
        pairs = self.params.query_pairs()
        sent = cursor or self.endpoint.paging.first_request()
        if sent and cursor is None:  # a first page number, unless the query starts at its own
            sent = {k: v for k, v in sent.items() if k not in dict(pairs)}
        if sent:
            pairs = [(k, v) for k, v in pairs if k not in sent] + list(sent.items())
        method = self.endpoint.method_of(self.spec.method)
        return PageRequest(
            query_id=self.spec.query_id,
            endpoint=self.endpoint.path,
            path=self.endpoint.url_path(self.params),
            params=tuple(pairs),
            page=index,
            cost=self.endpoint.price_of(self.spec.params),
            query_cap=self.spec.max_credits,
            price_key=self.endpoint.price_key(self.spec.params),
            method=method,
            body=orjson.dumps(self.params.json_body(sent)) if method == "POST" else None,
            tried=self.start.tried,
        )

    def _paging_view(self, body: Any) -> Any:
        """The answer as the next request is read from it: whole where the paging reads into records kept
        unread (a large answer's), the skeleton otherwise."""
        spans = spans_in(body)
        if spans is not None and self.endpoint.paging.reads_into(spans.path):
            return whole(body)
        return body

    def _page(
        self,
        index: int,
        cursor: Cursor | None,
        status: int,
        credits: int,
        raw: bytes,
        body: Any,
        cursor_out: Cursor | None = None,
        repairs: dict[str, int] | None = None,
        unread: str | None = None,
    ) -> Page:
        """The paid answer, kept (`keep`). Its bytes are let go once kept: a large answer then does not sit in
        memory beside the records read from it (`_read` reads them, after the call that fetched it returned).
        `unread` `DAMAGED` (not `collected`): an answer damaged on the wire, which a later run asks for again, is
        no page of the query's (`max_pages` counts the pages collected; its credits still count, as every billed
        one does)."""
        page = Page(
            query_id=self.spec.query_id,
            endpoint=self.endpoint.path,
            index=index,
            params=self.spec.params,
            cursor_in=cursor,
            cursor_out=cursor_out,
            status_code=status,
            credits=credits,
            raw=raw,
            body=body,
            fetched_at=datetime.now(UTC),
            repairs=repairs or {},
            unread=unread,
        )
        self.keep(page)
        page.raw = b""
        self.reading = page
        if page.collected:
            self.outcome.pages += 1  # paid and kept, whatever reading it does
        return page

    def _receipt(self, index: int, cursor: Cursor | None, paid: errors.ServiceAnswer, credits: int) -> None:
        """A failure answer that may have been billed (a 5xx, a 400) is kept, as a receipt: it carried no page,
        so it is not counted as one nor read (a resume's replay passes it by too)."""
        receipt = Page(
            query_id=self.spec.query_id, endpoint=self.endpoint.path, index=index, params=self.spec.params,
            cursor_in=cursor, cursor_out=None, status_code=paid.status_code, credits=credits, raw=paid.raw,
            body=None, fetched_at=datetime.now(UTC),
        )  # fmt: skip
        self.keep(receipt)

    async def _fetch(self, index: int, cursor: Cursor | None) -> tuple[Page | None, bool]:
        """One paid page (or None), and whether the query ends with it (its outcome then says why).

        A billed error answer (a 404 "not found", a paid failure) comes as a page, so the caller keeps the
        receipt; the outcome is already set and paging stops after it.
        """
        out = self.outcome
        self.can_keep()  # raises when an answer could not be kept now (a full disk): nothing is paid then
        request = self._request(index, cursor)
        try:
            response = await self.client.get(request)
        except errors.RunStopped as exc:
            out.status, out.next_cursor, out.error = exc.status, cursor, exc.reason  # type: ignore[assignment]
            return None, True
        except errors.BudgetExhausted as exc:
            out.status, out.next_cursor, out.error = "budget_exhausted", cursor, str(exc)
            self.start.tried = exc.tried  # a later round's call goes on from them
            out.cap_below_price, out.capped = exc.cap_below_price, exc.capped
            return None, True
        except errors.RateLimited as exc:
            out.status, out.next_cursor, out.error = "rate_limited", cursor, str(exc)
            return None, True
        except (errors.Unauthorized, errors.OutOfCredits) as exc:  # the whole run stops on these
            out.status, out.next_cursor, out.error = "stopped", cursor, str(exc)
            return None, True
        except errors.NotFound as exc:
            out.status, out.error = "not_found", str(exc)
            paid = exc.response
            if paid is None:
                return None, True
            return self._page(index, cursor, paid.status_code, exc.credits, paid.raw, paid.body), True
        except errors.UnreadableAnswer as exc:
            # Kept either way. The service's own answer is not asked for again (a rebuild lands it once harvest
            # can read it); one the network damaged twice is asked for again by a later run.
            if exc.damaged:
                out.status, out.next_cursor, out.error = "failed", cursor, f"page {index + 1}: {exc}"
            else:
                out.status, out.next_cursor, out.error = "drift", None, f"page {index + 1}: {exc}"
            paid = exc.response
            if paid is None:
                return None, True
            unread = DAMAGED if exc.damaged else SERVICES_OWN  # kept with it: a resume tells them apart
            page = self._page(index, cursor, paid.status_code, exc.credits, paid.raw, None, unread=unread)
            return page, True
        except errors.HarvestError as exc:
            out.status, out.next_cursor, out.error = "failed", cursor, str(exc)
            out.refused_for_good = isinstance(exc, errors.Forbidden | errors.BadRequest)
            paid = exc.response
            if paid is not None and exc.credits:
                self._receipt(index, cursor, paid, exc.credits)
            return None, True
        nxt = self.endpoint.paging.next_cursor(self._paging_view(response.body), dict(request.params))
        page = self._page(
            index, cursor, response.status_code, response.credits, response.raw, response.body, nxt,
            response.repairs,
        )  # fmt: skip
        return page, False
