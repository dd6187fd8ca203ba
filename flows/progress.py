"""Progress of a run, per query: pages, records, credits.

The flow reports to whatever reporter the caller installed (the CLI installs a rich display on a terminal and
plain log lines elsewhere); by default nothing is shown, so flows run by a Prefect worker stay quiet.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Protocol

from rich.console import Console
from rich.live import Live
from rich.table import Table

from flows.console import LiteralConsole, add_row, table, visible


class Reporter(Protocol):
    def query_started(self, query_id: str, endpoint: str) -> None: ...
    def page_landed(self, query_id: str, records: int, credits: int) -> None: ...
    def query_finished(self, query_id: str, status: str) -> None: ...
    def close(self) -> None: ...


class Silent:
    def query_started(self, query_id: str, endpoint: str) -> None:
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
        pages = sum(r.pages for r in self.rows.values())
        if pages and now - self.last >= self.every:
            self.last = now
            credits = sum(r.credits for r in self.rows.values())
            running = sum(r.status == "running" for r in self.rows.values())
            print(f"harvest: {running} running, {pages} pages, {credits} credits so far",
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
