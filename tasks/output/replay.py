"""Pages read back from the raw store: how a resumed query lands what it paid for before a crash.

The raw page file is the receipt of every paid answer, written before the next request. Replaying it gives the
records those answers held (to land again, replacing any partial Parquet) and the point where paging continues:
the `cursor_out` of the last durable page, or the page itself when it was a paid failure.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.catalog.paging_styles import Cursor
from harvest.connectors.errors import UnreadableAnswer
from harvest.connectors.paging.follow_ups import FollowUps, cursor_key, follow_cursors
from harvest.connectors.paging.page_request import SERVICES_OWN
from harvest.connectors.paging.pager import PagerStart, held_nothing, later_page, signature
from harvest.connectors.reading.extraction import ConvertedPage, convert_page
from harvest.connectors.reading.json_body import Body, read_body
from harvest.tasks.output.raw_store import RawPage, RawPageReader


@dataclass(frozen=True)
class ReplayedPage:
    raw: RawPage
    converted: ConvertedPage
    answered: bool
    """The stored answer is one the run used (success, or billed "not found"), not a paid failure."""

    @property
    def records(self) -> dict[str, Sequence[Any]]:
        return self.converted.records

    @property
    def fetched_at(self) -> datetime:
        return datetime.fromisoformat(self.raw.fetched_at)

    @property
    def record_count(self) -> int:
        return sum(len(r) for r in self.records.values())

    @property
    def kept(self) -> int:
        return self.converted.report.kept


def carried_a_page(status: int) -> bool:
    """Whether a stored answer is a page (a 2xx, readable or not, or a billed "not found"), not a receipt."""
    return 200 <= status < 300 or status == 404


def collected_page(page: ReplayedPage) -> bool:
    """Whether a stored answer counts as a page the query collected, as the live run counted it
    (`QueryOutcome.pages`, which `max_pages` counts): a readable 2xx, a billed "not found", or an answer the
    service sent unreadable (kept `SERVICES_OWN`: its query ended there as drift). A 2xx damaged on the wire (or
    unreadable in a frame kept before the verdict was) is a paid failure that a resume asks for again
    (`ResumePoint.finish`): counted, a resume under `max_pages` stopped a page early, or at `max_pages` without
    asking for it (the page read as collected, its records missing for good) when a kill came after the answer
    was kept and before its query's end was."""
    raw = page.raw
    return raw.counted and (raw.status_code == 404 or page.answered or raw.unread is not None)


def _body(page: RawPage) -> Body:
    """The stored answer read as the client reads a live one (`connectors.reading.json_body`): a JSON object or array
    of a success or a billed "not found"; no value for a paid failure (an error status, or a 2xx body that
    was cut or that no reading takes, which a rebuild lands once harvest can read it)."""
    if not carried_a_page(page.status_code):
        return Body(None)
    return read_body(page.body)


def replay(path: Path, endpoint: Endpoint) -> Iterator[ReplayedPage]:
    """Every complete page of a raw file with its records; a torn tail (a crash mid-write) is skipped."""
    return replay_pages(RawPageReader(path), endpoint)


def replay_pages(pages: Iterable[RawPage], endpoint: Endpoint) -> Iterator[ReplayedPage]:
    """Stored pages (a query's, from a `RawIndex`) with their records, read as the live run read them (the
    places its earlier pages held)."""
    found: set[str] = set()
    for page in pages:
        body = _body(page)
        converted = convert_page(
            endpoint.kinds, body.value, page.params, body.repairs,
            earlier=found, later=later_page(page.page, page.cursor_in), paging=endpoint.paging,
        )  # fmt: skip
        found |= converted.report.found
        yield ReplayedPage(page, converted, body.value is not None)


class ResumePoint:
    """Folds replayed pages into the pager's starting state: the top-level pages' next cursor, and the follow-up
    requests still waiting, found again from the stored answers as the live run found them
    (`connectors.paging.follow_ups`)."""

    def __init__(
        self,
        endpoint: Endpoint,
        backfill: Cursor | None = None,
        start_cursor: Cursor | None = None,
        follow_state: dict[str, Any] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.backfill = backfill
        """An incremental query's backfill cursor: a page asked for with it shows the head had caught up."""
        self.start = PagerStart(cursor=start_cursor, follow=FollowUps.from_plain(follow_state))
        """With no page stored, the query starts where it was to start (a continued query at its cursor)."""
        self._last: ReplayedPage | None = None
        self._last_top: ReplayedPage | None = None
        """The last answered top-level page: where the top-level pages go on."""
        self._followed = False
        """The last page stored answered a follow-up."""

    def add(self, page: ReplayedPage) -> None:
        start, raw, follow = self.start, page.raw, self.start.follow
        followed = follow.is_waiting(raw.cursor_in)
        if raw.cursor_in:
            start.used.add(cursor_key(raw.cursor_in))
            if self.backfill is not None and dict(raw.cursor_in) == self.backfill:
                start.backfilling = True
        if collected_page(page):  # a failure's receipt (a 5xx, a 400), or a 2xx no reading takes, is none
            start.pages += 1
        start.records += page.kept
        start.sent += 1  # a stored answer, page or receipt, is a request sent
        start.extraction.add(page.converted.report)
        start.index = raw.page + 1
        readable = page.answered and not page.converted.report.lost
        if readable:
            follow.found(follow_cursors(self.endpoint, page.records), start.used)
        if followed and page.answered:  # a paid failure still waits: asked for again
            assert raw.cursor_in is not None
            follow.answered(raw.cursor_in, start.used)
            if readable and raw.cursor_out and page.record_count and self.endpoint.paging.page is None:
                follow.found([{**raw.cursor_in, **raw.cursor_out}], start.used)
        elif not followed and readable:
            self._last_top = page
            follow.turn = True
        self._last, self._followed = page, followed

    def finish(self) -> PagerStart:
        """Where the query goes on: after its last good page, or again at a failed one."""
        start, last = self.start, self._last
        if last is None:
            return start
        self._top_state()
        raw = last.raw
        if raw.status_code == 404 and not self._followed:
            start.ended = "not_found"
        elif last.converted.report.lost:
            start.ended = "drift"  # the catalog still cannot read it: stop here again, as the live run did
            if not self._followed:
                start.cursor = dict(raw.cursor_out) if raw.cursor_out else None
        elif not last.answered and raw.unread == SERVICES_OWN:
            # the service sent it unreadable: paid once, never asked for again; the live run ended here as drift
            start.ended, start.cursor = "drift", None
            start.error = (
                f"page {raw.page + 1}: {UnreadableAnswer(read_body(raw.body).problem or 'not JSON')}"
            )
        elif not last.answered:
            start.index = raw.page  # a paid failure: ask for that page again
            if self._followed:
                start.follow.turn = True
            else:
                start.cursor, start.follow.top_ended = raw.cursor_in, False
        elif start.follow.choose(start.cursor) is None:
            start.ended = "complete"
        return start

    def _top_state(self) -> None:
        """The top-level pages' state after their last answered page: its next cursor, or ended."""
        start, top = self.start, self._last_top
        if top is None:
            return
        if not top.raw.cursor_out or held_nothing(top.record_count, top.converted.report):
            start.follow.top_ended = True
        else:
            start.cursor = dict(top.raw.cursor_out)
            start.previous = signature(self.endpoint.kinds, top.converted.tables)
