"""Pages read back from the raw store: how a resumed query lands what it paid for before a crash.

The raw page file is the receipt of every paid answer, written before the next request. Replaying it gives the
records those answers held (to land again, replacing any partial Parquet) and the point where paging continues:
the `cursor_out` of the last durable page, or the page itself when it was a paid failure.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from connectors.catalog.endpoints import Endpoint
from connectors.catalog.paging_styles import Cursor
from connectors.catalog.records import RecordKind
from connectors.paging.pager import PagerStart, cursor_key, held_nothing, later_page, signature
from connectors.reading.extraction import ConvertedPage, convert_page
from connectors.reading.json_body import Body, read_body
from tasks.output.raw_store import RawPage, RawPageReader


@dataclass(frozen=True)
class ReplayedPage:
    raw: RawPage
    converted: ConvertedPage
    answered: bool
    """The stored answer is one the run used (success, or billed "not found"), not a paid failure."""

    @property
    def records(self) -> dict[str, list[Any]]:
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


def _body(page: RawPage) -> Body:
    """The stored answer read as the client reads a live one (`connectors.reading.json_body`): a JSON object or array
    of a success or a billed "not found"; no value for a paid failure (an error status, or a 2xx body that
    was cut or that no reading takes, which a rebuild lands once harvest can read it)."""
    if not (200 <= page.status_code < 300 or page.status_code == 404):
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
    """Folds replayed pages into the pager's starting state."""

    def __init__(
        self,
        kinds: tuple[RecordKind, ...],
        backfill: Cursor | None = None,
        start_cursor: Cursor | None = None,
    ) -> None:
        self.kinds = kinds
        self.backfill = backfill
        """An incremental query's backfill cursor: a page asked for with it shows the head had caught up."""
        self.start = PagerStart(cursor=start_cursor)
        """With no page stored, the query starts where it was to start (a continued query at its cursor)."""
        self._last: ReplayedPage | None = None

    def add(self, page: ReplayedPage) -> None:
        start, raw = self.start, page.raw
        if raw.cursor_in:
            start.used.add(cursor_key(raw.cursor_in))
            if self.backfill is not None and dict(raw.cursor_in) == self.backfill:
                start.backfilling = True
        start.pages += 1
        start.records += page.kept
        start.extraction.add(page.converted.report)
        start.index = raw.page + 1
        self._last = page

    def finish(self) -> PagerStart:
        """Where the query goes on: after its last good page, or again at a failed one."""
        start, last = self.start, self._last
        if last is None:
            return start
        raw = last.raw
        if raw.status_code == 404:
            start.ended = "not_found"
        elif last.converted.report.lost:
            start.ended = "drift"  # the catalog still cannot read it: stop here again, as the live run did
            start.cursor = dict(raw.cursor_out) if raw.cursor_out else None
        elif not last.answered:
            start.cursor, start.index = raw.cursor_in, raw.page  # a paid failure: ask for that page again
        elif not raw.cursor_out or held_nothing(last.record_count, last.converted.report):
            start.ended = "complete"
        else:
            start.cursor = dict(raw.cursor_out)
            start.previous = signature(self.kinds, last.converted.tables)
        return start
