"""Progress of a run: what it is, what it has spent of its budget, how fast it goes, per query. The flow reports
to whatever reporter the caller installed (the CLI installs a live view on a terminal, `flows.live_view`, and
plain sentences elsewhere, `LogLines`); by default nothing is shown, so flows run by a Prefect worker stay quiet.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from harvest.connectors.plurals import counted
from harvest.flows.console import note

if TYPE_CHECKING:
    from harvest.connectors.http.pace import PaceReport


@dataclass(frozen=True)
class RunFacts:
    """What a run is, known once it began: said at the top of the live view and in the first plain line."""

    run_id: str
    job: str
    budget: int
    spent: Callable[[], int]
    """The ledger's count, read when drawn: a resumed run's earlier sessions included."""
    provisional: Callable[[], int] = lambda: 0
    """Of that count, the refusals (429, 5xx) whose charge no answer said: counted until the balance settles them."""
    kind: str = "new"
    """`new`, `resume` or `continue` (`flows.run.start`)."""
    previous: str | None = None
    """The run resumed (the same id) or continued."""
    previous_status: str | None = None
    ended_before: int = 0
    pages_before: int = 0
    records_before: int = 0
    spent_before: int = 0
    going_on: int = 0
    """Queries a resume runs again (each from its last landed page, if any) or a continue picks up at its cursor."""
    planned: int | None = None
    """Queries this run starts, when the plan knows them all (None: dependent queries are found as it runs)."""
    page_bounds: Mapping[str, int] | None = None
    """The most pages each query can take; None when one of them is unbounded or not known yet."""
    exact: bool = False
    """Every query is one page: the bounds are the pages, not a ceiling."""

    def title(self) -> str:
        return f"run {self.run_id} of job {self.job}"

    def carried(self) -> str:
        """What a resumed or continued run starts from (empty for a new run)."""
        if self.kind == "resume":
            why = {"running": "was killed", "interrupted": "was interrupted"}.get(
                str(self.previous_status), f"ended {self.previous_status} and Prefect retries it"
            )
            spent = f"{self.spent_before} of {self.budget} credits were spent"
            if self.spent_before > self.budget:  # a resume given less: "20 of 10" reads as a broken cap
                spent = f"{self.spent_before} credits were spent, over this session's budget of {self.budget}"
            return (
                f"resumes run {self.run_id}, which {why}: {counted(self.ended_before, 'query')} had ended with "
                f"{counted(self.pages_before, 'page')} and {counted(self.records_before, 'record')}, "
                f"{spent}; {self.going_on} unfinished "
                f"{'query goes on where it' if self.going_on == 1 else 'queries go on where they'} stopped"
            )
        one = self.going_on == 1
        return (
            f"continues run {self.previous}: {counted(self.going_on, 'query')} "
            f"{'picks up at its saved cursor' if one else 'pick up at their saved cursors'}"
            if self.kind == "continue" else ""
        )  # fmt: skip

    def began(self) -> str:
        """The run in one plain sentence: which it is and, resumed or continued, what it starts from."""
        if self.kind == "resume":
            return f"job {self.job} {self.carried()}"
        planned = counted(self.planned, "query") if self.planned is not None else "queries as they are found"
        said = f"{self.title()} {self.carried()}" if self.kind == "continue" else f"{self.title()}: {planned}"
        return f"{said}; budget {self.budget} credits"


class Reporter(Protocol):
    def run_began(self, facts: RunFacts) -> None: ...
    def query_started(self, query_id: str, endpoint: str) -> None: ...
    def page_landed(self, query_id: str, records: int, credits: int, pages: int = 1) -> None: ...
    def query_finished(
        self, query_id: str, status: str, notes: Sequence[str] = (), credits: int | None = None
    ) -> None: ...
    def watch_pace(self, report: Callable[[], PaceReport]) -> None: ...
    def close(self) -> None: ...


def pace_text(report: Callable[[], PaceReport] | None) -> str:
    """`429s: 12 of 180, paced to 9.6/s` once the service asked harvest to slow down (else empty)."""
    if report is None:
        return ""
    met = report()
    if not met.refused:
        return ""
    pace = f", paced to {met.per_second:.1f}/s" if met.per_second is not None else ""
    return f"429s: {met.refused} of {met.requests}{pace}"


class Silent:
    def run_began(self, facts: RunFacts) -> None:
        pass

    def query_started(self, query_id: str, endpoint: str) -> None:
        pass

    def watch_pace(self, report: Callable[[], PaceReport]) -> None:
        pass

    def page_landed(self, query_id: str, records: int, credits: int, pages: int = 1) -> None:
        pass

    def query_finished(
        self, query_id: str, status: str, notes: Sequence[str] = (), credits: int | None = None
    ) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass
class Row:
    endpoint: str
    pages: int = 0
    records: int = 0
    credits: int = 0
    status: str = "running"
    notes: tuple[str, ...] = ()
    """What its pages held that did not land as records (`ExtractionReport.notes_of`): items left out, cursors."""


LISTED_WELL = 20
"""Queries that ended well each get a line of their own up to this many; past it (a fan-out over thousands of
accounts) they are counted in the totals: 10,000 `complete` lines hide the one that failed, which gets its line."""

PROVISIONAL = "for refused requests, until the account's balance shows whether they were billed"
"""How a count of refusals (429, 5xx) whose charge no answer said is told apart: the run's end settles them."""

RATE_WINDOW_S = 10.0
"""Pages a second are counted over this much of the recent past: steady to read, quick to follow a slowdown."""


def ended_well(status: str) -> bool:
    """Not stopped by the budget, a cap or the rate limit (its cursor waits: a log gives it a line) nor failed.
    The pager is imported here: the command line draws progress before the pager's imports are needed."""
    from harvest.connectors.paging.pager import OK_STATUSES

    return status in OK_STATUSES and status not in ("budget_exhausted", "rate_limited")


def query_notes(summary: Mapping[str, object], held: int = 0) -> list[str]:
    """What a query's line says beside its status, from its summary: items left out, a cursor not read, requests
    sent for no page; `held`: the credits of its refusals whose charge is not known yet (`refused_of`)."""
    from harvest.connectors.reading.extraction_report import ExtractionReport
    from harvest.connectors.reading.not_found import said_of
    from harvest.tasks.output.run_summary import sent_for_no_page

    extracted = summary.get("extraction")
    notes = ExtractionReport.notes_of(extracted if isinstance(extracted, Mapping) else None)
    notes += said_of(summary.get("status"), summary.get("error")) + sent_for_no_page(summary)
    return [*notes, f"{held} of them {PROVISIONAL}"] if held else notes


def clock(seconds: float) -> str:
    """`0:07`, `12:30`, `2:05:09`."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


@dataclass
class Counting:
    """Keeps per-query counts and the run's totals as they change (a display of 10,000 queries never sums them).
    Counts change on the run's event loop; a display may read them from its own thread, under `lock`."""

    rows: dict[str, Row] = field(default_factory=dict)
    """Every query reported, in the order they started."""
    running: dict[str, Row] = field(default_factory=dict)
    """The queries still running, in the order they started."""
    pace: Callable[[], PaceReport] | None = None
    """What the run met of the service's rate limit, read when the display is drawn."""
    facts: RunFacts | None = None
    pages: int = 0
    records: int = 0
    credits: int = 0
    finished_well: int = 0
    finished_badly: int = 0
    pages_left: int | None = None
    """Pages the run's queries can still take at most (`RunFacts.page_bounds`), when the plan knows them."""
    began: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)
    samples: deque[tuple[float, int]] = field(default_factory=deque)
    """(time, pages) now and then, to count pages a second over `RATE_WINDOW_S`."""

    def run_began(self, facts: RunFacts) -> None:
        with self.lock:
            self.facts = facts
            self.samples.append((time.monotonic(), self.pages))  # paging starts: the rate counts from here
            if facts.page_bounds is not None:
                self.pages_left = sum(facts.page_bounds.values())
        self.changed(None)

    def watch_pace(self, report: Callable[[], PaceReport]) -> None:
        self.pace = report

    def _row(self, query_id: str, endpoint: str = "") -> Row:
        row = self.rows.get(query_id)
        if row is None:
            row = self.rows[query_id] = self.running[query_id] = Row(endpoint)
        return row

    def query_started(self, query_id: str, endpoint: str) -> None:
        with self.lock:
            self._row(query_id, endpoint).endpoint = endpoint
        self.changed(query_id)

    def page_landed(self, query_id: str, records: int, credits: int, pages: int = 1) -> None:
        with self.lock:
            row = self._row(query_id)
            row.pages += pages
            row.records += records
            row.credits += credits
            self.pages += pages
            self.records += records
            self.credits += credits
            bound = self._bound(query_id)
            if bound is not None and self.pages_left:  # its pages within it (a Dask round lands several)
                within = min(row.pages, bound) - min(row.pages - pages, bound)
                self.pages_left = max(0, self.pages_left - within)
        self.changed(query_id)

    def query_finished(
        self, query_id: str, status: str, notes: Sequence[str] = (), credits: int | None = None
    ) -> None:
        """`credits`: what the ledger counts for the query at its end, its pages' sum or not (a refusal)."""
        with self.lock:
            row = self._row(query_id)
            row.notes = tuple(notes)
            if credits is not None:
                self.credits += credits - row.credits
                row.credits = credits
            if self.running.pop(query_id, None) is not None:
                if ended_well(status):
                    self.finished_well += 1
                else:
                    self.finished_badly += 1
                bound = self._bound(query_id)
                if bound is not None and self.pages_left is not None:
                    self.pages_left = max(0, self.pages_left - max(0, bound - row.pages))
            row.status = status
            self.ended(query_id, row)
        self.changed(query_id)

    def _bound(self, query_id: str) -> int | None:
        bounds = self.facts.page_bounds if self.facts else None
        return bounds.get(query_id) if bounds is not None else None

    def ended(self, query_id: str, row: Row) -> None:
        """A query ended (under `lock`): a display keeps it among the latest."""

    def rate(self, now: float) -> float | None:
        """Pages a second over the last `RATE_WINDOW_S` (None before a second of paging); call under `lock`."""
        if not self.pages:
            return None
        if not self.samples or now - self.samples[-1][0] >= 0.5:
            self.samples.append((now, self.pages))
        while len(self.samples) > 2 and now - self.samples[1][0] >= RATE_WINDOW_S:
            self.samples.popleft()
        then, pages = self.samples[0]
        return (self.pages - pages) / (now - then) if now - then >= 1.0 else None

    def time_left(self, rate: float | None) -> str:
        """`about 1:20 left` when every query is one page, `1:20 left at most` when the plan bounds the pages
        (`max_pages`); empty where it cannot know (a query pages until the service has no more)."""
        if self.pages_left is None or not rate or self.facts is None:
            return ""
        left = clock(self.pages_left / rate)
        return f"about {left} left" if self.facts.exact else f"{left} left at most"

    def spent_of_budget(self) -> tuple[int, int] | None:
        """(credits spent, budget) once the run began: the ledger's count, earlier sessions included. Read
        outside `lock`: the ledger takes its own."""
        return (self.facts.spent(), self.facts.budget) if self.facts else None

    def provisional(self) -> str:
        """` (5 of them for refused requests, until the account's balance shows whether they were billed)`."""
        held = self.facts.provisional() if self.facts else 0
        return f" ({held} of them {PROVISIONAL})" if held else ""

    def speed(self, now: float) -> list[str]:
        """`0:12 elapsed`, `45.2 pages/s`, the time left, the rate limit; no pace while no query runs (the load)."""
        rate = self.rate(now) if self.running else None
        said = [f"{clock(now - self.began)} elapsed", f"{rate:.1f} pages/s" if rate is not None else ""]
        return [text for text in (*said, self.time_left(rate), pace_text(self.pace)) if text]

    def queries(self) -> str:
        """`180 of 206 queries ended (2 not well), 10 running`."""
        ended = self.finished_well + self.finished_badly
        planned = self.facts.planned if self.facts else None
        of = f" of {planned}" if planned is not None and planned >= len(self.rows) else ""
        bad = f" ({self.finished_badly} not well)" if self.finished_badly else ""
        return f"{ended}{of} queries ended{bad}, {len(self.running)} running"

    def totals(self) -> str:
        """The run's plain progress sentence: credits, queries, pages and records, speed."""
        spent = self.spent_of_budget()  # the ledger's own lock, never taken inside this one
        provisional = self.provisional()
        with self.lock:
            now = time.monotonic()
            credits = f"{spent[0]} of {spent[1]} credits spent" if spent else f"{self.credits} credits spent"
            credits += provisional
            elapsed, *speed = self.speed(now)
            return (
                f"{elapsed}: {credits}; {self.queries()}; {counted(self.pages, 'page')}, {counted(self.records, 'record')}"
                + "".join(f"; {text}" for text in speed)
            )

    def changed(self, query_id: str | None) -> None:
        pass

    def close(self) -> None:
        pass


class LogLines(Counting):
    """Plain sentences for cron logs, not terminals: what the run is, a line per finished query (past
    `LISTED_WELL` only those that did not end well) and the run's totals every few seconds."""

    def __init__(self, every: float = 5.0) -> None:
        super().__init__()
        self.every = every
        self.last = time.monotonic()
        self.listed = 0

    def changed(self, query_id: str | None) -> None:
        if query_id is None:
            if self.facts is not None:
                _say(self.facts.began())
            return
        row = self.rows[query_id]
        if row.status != "running":
            self._finished(query_id, row)
        elif self.pages and time.monotonic() - self.last >= self.every:  # not 10,000 rows a page
            self.last = time.monotonic()
            _say(self.totals())

    def _finished(self, query_id: str, row: Row) -> None:
        if row.status == "budget_exhausted" and not row.pages and not row.notes:
            return  # never started: the end of the run names them all in one line (`never_started_line`)
        if ended_well(row.status) and not row.notes:
            self.listed += 1
            if self.listed > LISTED_WELL:
                return
        _say(
            f"{query_id}: {row.status}, {counted(row.pages, 'page')}, {counted(row.records, 'record')}, "
            f"{counted(row.credits, 'credit')}" + "".join(f"; {note}" for note in row.notes)
        )
        if self.listed == LISTED_WELL and ended_well(row.status) and not row.notes:
            _say(
                f"{LISTED_WELL} queries have ended well, each on a line above; from here on a query gets a line "
                "only when it does not end well, and the others are counted in the progress lines"
            )

    def close(self) -> None:
        if self.listed > LISTED_WELL:
            _say(self.totals())


def _say(sentence: str) -> None:
    """A sentence on stderr (`flows.console.tell`); query ids and job names are printed literally."""
    note(f"harvest: {sentence}")


_current: Reporter = Silent()


def install(reporter: Reporter) -> None:
    global _current
    _current = reporter


def current() -> Reporter:
    return _current


def for_terminal() -> Reporter:
    if not sys.stderr.isatty():
        return LogLines()
    from harvest.flows.live_view import LiveView

    return LiveView()
