"""Progress of a run, per query: pages, records, credits.

The flow reports to whatever reporter the caller installed (the CLI installs a rich display on a terminal and
plain log lines elsewhere); by default nothing is shown, so flows run by a Prefect worker stay quiet.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from rich.console import Console
from rich.live import Live
from rich.table import Table

from flows.console import LiteralConsole, add_row, table, visible

if TYPE_CHECKING:
    from connectors.http.pace import PaceReport


class Reporter(Protocol):
    def query_started(self, query_id: str, endpoint: str) -> None: ...
    def page_landed(self, query_id: str, records: int, credits: int) -> None: ...
    def query_finished(self, query_id: str, status: str) -> None: ...
    def watch_pace(self, report: Callable[[], PaceReport]) -> None: ...
    def close(self) -> None: ...


def pace_text(report: Callable[[], PaceReport] | None) -> str:
    """`; 429s: 12 of 180, paced to 9.6/s` once the service asked harvest to slow down (else empty)."""
    if report is None:
        return ""
    met = report()
    if not met.refused:
        return ""
    pace = f", paced to {met.per_second:.1f}/s" if met.per_second is not None else ""
    return f"; 429s: {met.refused} of {met.requests}{pace}"


class Silent:
    def query_started(self, query_id: str, endpoint: str) -> None:
        pass

    def watch_pace(self, report: Callable[[], PaceReport]) -> None:
        pass

    def page_landed(self, query_id: str, records: int, credits: int) -> None:
        pass

    def query_finished(self, query_id: str, status: str) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass
class _Row:
    endpoint: str
    pages: int = 0
    records: int = 0
    credits: int = 0
    status: str = "running"


LISTED_WELL = 20
"""Queries that ended well each get a line of their own up to this many; past it (a fan-out over thousands of
accounts) they are counted in the totals instead: a nightly log of 10,000 `complete` lines hides the one that
failed. A query that did not end well always gets its line."""


def ended_well(status: str) -> bool:
    """Imported here, not at the top: the command line draws progress before the pager's imports are needed."""
    from connectors.paging.pager import OK_STATUSES

    return status in OK_STATUSES


@dataclass
class Counting:
    """Keeps per-query counts and the run's totals as they change (a display of 10,000 queries never sums them)."""

    rows: dict[str, _Row] = field(default_factory=dict)
    pace: Callable[[], PaceReport] | None = None
    """What the run met of the service's rate limit, read when the display is drawn."""
    pages: int = 0
    records: int = 0
    credits: int = 0
    running: int = 0
    finished_well: int = 0
    finished_badly: int = 0

    def watch_pace(self, report: Callable[[], PaceReport]) -> None:
        self.pace = report

    def _row(self, query_id: str, endpoint: str = "") -> _Row:
        row = self.rows.get(query_id)
        if row is None:
            row = self.rows[query_id] = _Row(endpoint)
            self.running += 1
        return row

    def query_started(self, query_id: str, endpoint: str) -> None:
        self._row(query_id, endpoint).endpoint = endpoint
        self.changed(query_id)

    def page_landed(self, query_id: str, records: int, credits: int) -> None:
        row = self._row(query_id)
        row.pages += 1
        row.records += records
        row.credits += credits
        self.pages, self.records, self.credits = (
            self.pages + 1,
            self.records + records,
            self.credits + credits,
        )
        self.changed(query_id)

    def query_finished(self, query_id: str, status: str) -> None:
        row = self._row(query_id)
        if row.status == "running":
            self.running -= 1
            if ended_well(status):
                self.finished_well += 1
            else:
                self.finished_badly += 1
        row.status = status
        self.changed(query_id)

    def totals(self) -> str:
        ended = self.finished_well + self.finished_badly
        bad = f" ({self.finished_badly} not well)" if self.finished_badly else ""
        return (
            f"{ended} queries ended{bad}, {self.running} running; {self.pages} pages, {self.records} records, "
            f"{self.credits} credits so far{pace_text(self.pace)}"
        )

    def changed(self, query_id: str) -> None:
        pass

    def close(self) -> None:
        pass


class LogLines(Counting):
    """A line per finished query (past `LISTED_WELL` only those that did not end well) and a heartbeat of the
    totals every few seconds: for cron logs, not terminals."""

    def __init__(self, every: float = 5.0) -> None:
        super().__init__()
        self.every = every
        self.last = time.monotonic()
        self.listed = 0

    def changed(self, query_id: str) -> None:
        row = self.rows[query_id]
        if row.status != "running":
            self._finished(query_id, row)
        elif self.pages and time.monotonic() - self.last >= self.every:  # not 10,000 rows a page
            self.last = time.monotonic()
            print(f"harvest: {self.totals()}", file=sys.stderr, flush=True)

    def _finished(self, query_id: str, row: _Row) -> None:
        if ended_well(row.status):
            self.listed += 1
            if self.listed > LISTED_WELL:
                return
        print(f"harvest: {visible(query_id)}: {row.status}, {row.pages} pages, {row.records} records, "
              f"{row.credits} credits", file=sys.stderr, flush=True)  # fmt: skip
        if self.listed == LISTED_WELL and ended_well(row.status):
            print(f"harvest: {LISTED_WELL} queries ended well; the rest that do are counted in the totals "
                  "(every query that does not end well still gets its line)", file=sys.stderr, flush=True)  # fmt: skip

    def close(self) -> None:
        if self.listed > LISTED_WELL:
            print(f"harvest: {self.totals()}", file=sys.stderr, flush=True)


class LiveTable(Counting):
    """A live table on a terminal: the last queries to change and the run's totals, redrawn a few times a second
    (not once a page: 10,000 one-page queries drew 30,000 tables)."""

    SHOWN = 30
    REDRAW_S = 0.25

    def __init__(self, console: Console | None = None) -> None:
        super().__init__()
        self.drawn = 0.0
        self.live = Live(self.render(), console=console or LiteralConsole(stderr=True), refresh_per_second=4)
        self.live.start()

    def render(self) -> Table:
        shown = table(
            "query",
            "pages",
            "records",
            "credits",
            "status",
            title="harvest",
            right=("pages", "records", "credits"),
        )
        latest = list(itertools.islice(reversed(self.rows.items()), self.SHOWN))
        for query_id, row in reversed(latest):
            add_row(shown, query_id, row.pages, row.records, row.credits, row.status)
        if len(self.rows) > self.SHOWN:
            shown.caption = self.totals()
        elif text := pace_text(self.pace):
            shown.caption = "service rate limit" + text
        return shown

    def changed(self, query_id: str) -> None:
        now = time.monotonic()
        if now - self.drawn >= self.REDRAW_S:
            self.drawn = now
            self.live.update(self.render())

    def close(self) -> None:
        self.live.update(self.render())
        self.live.stop()


_current: Reporter = Silent()


def install(reporter: Reporter) -> None:
    global _current
    _current = reporter


def current() -> Reporter:
    return _current


def for_terminal() -> Reporter:
    return LiveTable() if sys.stderr.isatty() else LogLines()
