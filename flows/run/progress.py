"""Progress of a run, per query: pages, records, credits.

The flow reports to whatever reporter the caller installed (the CLI installs a rich display on a terminal and
plain log lines elsewhere); by default nothing is shown, so flows run by a Prefect worker stay quiet.
"""

from __future__ import annotations

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


@dataclass
class Counting:
    """Keeps per-query counts; the base of both displays."""

    rows: dict[str, _Row] = field(default_factory=dict)
    pace: Callable[[], PaceReport] | None = None
    """What the run met of the service's rate limit, read when the display is drawn."""

    def watch_pace(self, report: Callable[[], PaceReport]) -> None:
        self.pace = report

    def query_started(self, query_id: str, endpoint: str) -> None:
        self.rows[query_id] = _Row(endpoint)
        self.changed(query_id)

    def page_landed(self, query_id: str, records: int, credits: int) -> None:
        row = self.rows.setdefault(query_id, _Row(""))
        row.pages += 1
        row.records += records
        row.credits += credits
        self.changed(query_id)

    def query_finished(self, query_id: str, status: str) -> None:
        self.rows.setdefault(query_id, _Row("")).status = status
        self.changed(query_id)

    def changed(self, query_id: str) -> None:
        pass

    def close(self) -> None:
        pass


class LogLines(Counting):
    """One line per finished query and a heartbeat every few seconds: for cron logs, not terminals."""

    def __init__(self, every: float = 5.0) -> None:
        super().__init__()
        self.every = every
        self.last = time.monotonic()

    def changed(self, query_id: str) -> None:
        row = self.rows[query_id]
        now = time.monotonic()
        if row.status != "running":
            print(f"harvest: {visible(query_id)}: {row.status}, {row.pages} pages, {row.records} records, "
                  f"{row.credits} credits", file=sys.stderr, flush=True)  # fmt: skip
            return
        if now - self.last < self.every:  # totals only when a heartbeat is due, not 10,000 rows a page
            return
        pages = sum(r.pages for r in self.rows.values())
        if pages:
            self.last = now
            credits = sum(r.credits for r in self.rows.values())
            running = sum(r.status == "running" for r in self.rows.values())
            print(f"harvest: {running} running, {pages} pages, {credits} credits so far{pace_text(self.pace)}",
                  file=sys.stderr, flush=True)  # fmt: skip


class LiveTable(Counting):
    """A live table on a terminal, refreshed a few times a second (rendering is throttled by rich)."""

    def __init__(self, console: Console | None = None) -> None:
        super().__init__()
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
        for query_id, row in list(self.rows.items())[-30:]:
            add_row(shown, query_id, row.pages, row.records, row.credits, row.status)
        if text := pace_text(self.pace):
            shown.caption = "service rate limit" + text
        return shown

    def changed(self, query_id: str) -> None:
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
