"""Paging through one query: every page it asks for, exactly once, and never one more.

Each paid answer goes to the caller's `keep` (the raw store) before anything parses it, so nothing in reading a
page can lose what was paid for; the pager then yields the page, read, before asking for the next (a crash then
loses nothing that was paid for, and a resume starts from the page's `cursor_out`). It stops:
- at the end of pages as the endpoint's paging style defines it, or at a page with no records (a last page that
  still carries a cursor answers an empty, billed page forever otherwise);
- when a cursor comes back that was already used, or a page repeats the previous one (the service ignores a
  misspelled cursor parameter and returns page 1 again): status `loop_detected`;
- at `max_pages`, when the credit ledger refuses a reservation (`budget_exhausted`, cursor kept), or on an
  error that retrying cannot fix (`failed`). A "not found" answer is billed and kept (`not_found`);
- at a page that lost records (`drift`, see `connectors.reading.extraction`), keeping its next cursor.
- incremental queries: after a page whose records were all landed before (`caught_up`), where "before" is
  decided by `connectors.paging.known_items`; a query whose earlier pass did not reach the end first catches up at the
  head, then goes on at the cursor where that pass stopped (`PagerStart.backfilling`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import orjson
import pyarrow as pa

from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.catalog.paging_styles import Cursor
from harvest.connectors.catalog.records import RecordKind
from harvest.connectors.credits.ledger import CreditLedger
from harvest.connectors.http.client import ServiceClient
from harvest.connectors.paging.follow_ups import FollowUps, cursor_key, follow_cursors
from harvest.connectors.paging.known_items import History, KnownKeys, backfill_after_head
from harvest.connectors.paging.page_fetching import Page, PageFetching
from harvest.connectors.paging.page_request import Tried
from harvest.connectors.reading.drift_message import KEPT, drift_message
from harvest.connectors.reading.extraction import ExtractionReport, convert_page
from harvest.connectors.reading.not_found import SAID, deactivated, not_found_words

Status = Literal[
    "complete",
    "caught_up",
    "max_pages",
    "budget_exhausted",
    "rate_limited",
    "not_found",
    "interrupted",
    "stopped",
    "loop_detected",
    "drift",
    "failed",
]
OK_STATUSES: frozenset[str] = frozenset(
    {"complete", "caught_up", "max_pages", "budget_exhausted", "rate_limited", "not_found"}
)
"""Statuses of a query that ended normally or stopped at its budget or the service's rate limit (exit code 0):
a stopped one keeps its cursor for the next run."""
RUN_STOPPED: frozenset[str] = frozenset({"interrupted", "stopped"})
"""Statuses that say the run stopped, not the query (Ctrl-C, a refused key): not a failure of the query."""


def query_failed(status: str) -> bool:
    """Whether a query's own status is a failure (drift, a loop, an error): its Prefect task run ends Failed."""
    return status not in OK_STATUSES and status not in RUN_STOPPED


@dataclass(frozen=True)
class QuerySpec:
    """One planned query as plain data, so it can travel to a task on another machine."""

    query_id: str
    endpoint: str
    params: dict[str, Any]
    max_pages: int | None = None
    max_credits: int | None = None
    start_cursor: Cursor | None = None
    """Where a continued query picks up (the cursor a budget stop kept); None: the first page."""
    incremental: bool = False
    """Stop after the first page whose records were all landed before (newest-first listings only)."""
    history: History | None = None
    """Incremental: what earlier runs left (`flows.run.coverage`): `complete`, `partial` (older items not collected
    yet, from `backfill` on) or None (never ran, or unknown: page fully)."""
    backfill: Cursor | None = None
    """Incremental, partial history: where the unfinished pass stopped; paged after the head catches up."""
    trusted_until: str | None = None
    """Incremental: the run in which the history last became complete; keys landed up to it may end paging."""
    resume: bool = False
    """The run was interrupted while this query ran: land its raw pages again, then page on from the last."""
    method: str | None = None
    """How its requests are sent (GET, POST), where the spec chose; None: the endpoint's default."""
    follow_state: dict[str, Any] | None = None
    """Where a continued query's follow-up requests stand (`FollowUps.plain`); None: none waiting."""
    asks: str | None = None
    """A dependent's digest of what it asks (endpoint, method, the parameters set, defaults left out:
    `flows.run.plan.instantiate`): an incremental night skips one collected before only when it asks the same."""
    earlier: bool = False
    """A dependent started for a parent record an earlier run found (`flows.run.coverage.dependents_left`), not
    one this run's pages found: the plan leaves it out of what a night costs."""
    pages_before: int = 0
    """Pages earlier nights paid of it before its `start_cursor` (`Coverage.picked_up`), out of `max_pages`."""

    def as_dict(self) -> dict[str, Any]:
        """Its fields, shallow: `dataclasses.asdict` deep-copies, 9% of a 10,000-query run's CPU."""
        return {name: getattr(self, name) for name in _QUERY_FIELDS}


_QUERY_FIELDS = tuple(f.name for f in fields(QuerySpec))


def asks_digest(endpoint: str, params: Mapping[str, Any], method: str | None) -> str:
    """`QuerySpec.asks`: the parameters as set (a default a later catalog adds changes no digest, so an upgrade
    asks nothing again), with the endpoint and the method."""
    text = json.dumps({"endpoint": endpoint, "params": params, "method": method}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def base_id(query_id: str) -> str:
    """The spec's query id of an expanded or instantiated id: `videos[handle=nasa]` -> `videos`."""
    return query_id.split("[", 1)[0]


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
    extraction: ExtractionReport = field(default_factory=ExtractionReport)
    cap_below_price: dict[str, int] | None = None
    """{max_credits, price} when the ledger refused it because one request costs more than its whole cap."""
    refused_for_good: bool = False
    """The service refused it for good (403: the platform blocks it; 400: a parameter it rejects): asked again,
    it answers (and bills) the same, so `--continue` does not pick it up."""
    capped: str | None = None
    """`max_credits` or `max_credits_total`: its own cap or its fan-out's ended it, a cap of the whole chain of
    runs `--continue` makes (`flows.run.chain`), so no continued run picks it up."""


@dataclass
class PagerStart:
    """Where paging begins: the first page of a fresh query, or after the pages a resumed query replayed."""

    cursor: Cursor | None = None
    index: int = 0
    pages: int = 0
    records: int = 0
    used: set[tuple[tuple[str, str], ...]] = field(default_factory=set)
    """Cursors already sent, for the loop guard."""
    previous: bytes | None = None
    """Signature of the last page's records, for the loop guard."""
    ended: Status | None = None
    """Set when the replayed pages show the query had already ended (its last page had no next cursor)."""
    error: str | None = None
    """Why, when the replayed pages ended it on an answer the service sent unreadable (no lost records say it)."""
    backfilling: bool = False
    """Incremental: the head has caught up and paging continues the unfinished backfill."""
    extraction: ExtractionReport = field(default_factory=ExtractionReport)
    tried: Tried = field(default_factory=Tried)
    """What attempts at the page at `cursor` established when the credits ran out among them (`Tried`)."""
    follow: FollowUps = field(default_factory=FollowUps)
    """The follow-up requests its records handed out (`connectors.paging.follow_ups`)."""
    sent: int = 0
    """Requests the query sent before (earlier Dask rounds; a resume: its stored answers): `QuerySummary.sent`."""


def signature(kinds: tuple[RecordKind, ...], tables: Mapping[str, pa.Table]) -> bytes:
    """What a page holds, for the loop guard: its records' primary keys, in order (a page that repeats the
    previous one repeats its keys). Cheaper than hashing the records: the keys are already Arrow columns."""
    digest = hashlib.blake2b(digest_size=16)
    for kind in kinds:
        table = tables.get(kind.table)
        if table is None:
            continue
        for name in kind.primary_key:
            digest.update(orjson.dumps(table.column(name).to_pylist(), default=str))
    return digest.digest()


def later_page(index: int, cursor_in: Mapping[str, Any] | None) -> bool:
    """Whether a page is not its query's first: places sent on the first page only may be left out of it."""
    return index > 0 or bool(cursor_in)


def held_nothing(records: int, report: ExtractionReport) -> bool:
    """A page with no items at all (none a kind's `where` left out either): paging ends there."""
    return records == 0 and not report.dropped


class QueryPager(PageFetching):
    def __init__(
        self,
        spec: QuerySpec,
        endpoint: Endpoint,
        client: ServiceClient,
        ledger: CreditLedger,
        start: PagerStart | None = None,
        known: KnownKeys | None = None,
        *,
        keep: Callable[[Page], None],
        can_keep: Callable[[], None] = lambda: None,
        land: Callable[[Page, Mapping[str, pa.Table]], None] | None = None,
    ):
        self.spec = spec
        self.endpoint = endpoint
        self.client = client
        self.ledger = ledger
        self.params = endpoint.params.model_validate(spec.params)
        self.start = start or PagerStart(
            cursor=spec.start_cursor, follow=FollowUps.from_plain(spec.follow_state)
        )
        if self.start.cursor and not self.start.used:
            self.start.used.add(cursor_key(self.start.cursor))
        self.known = known
        self.keep = keep
        """The caller's raw store: makes each paid answer durable before it is read."""
        self.can_keep = can_keep
        """Asked before each request: raises when the caller could not keep an answer now (a full disk,
        `tasks.output.machine_fault.DiskRoom`), so nothing is paid that would be paid again."""
        self.land = land
        """The caller's writer, for a large answer's tables a slice at a time as they are read (the page comes
        `landed`); None: every page's tables are read whole and the caller lands them."""
        self.reading: Page | None = None
        """The kept page being read, landed or followed; None while asking for the next one."""
        self.following = False
        """The page asked for (or being read) is a follow-up (`connectors.paging.follow_ups`)."""
        self.backfill = backfill_after_head(spec.history, spec.backfill, spec.start_cursor)
        self.outcome = QueryOutcome(
            spec.query_id,
            endpoint.path,
            pages=self.start.pages,
            records=self.start.records,
            extraction=self.start.extraction,
        )

    def _read(self, page: Page) -> None:
        """The page's records, per kind, and the account of what did not make it (the places the query's earlier
        pages held: one a later page leaves out is no drift). A follow-up's answer is not looked at for an unread
        cursor: its own next page is read through `paging.follow`, not `paging.next`."""
        land, to = self.land, None
        if land is not None:
            to = lambda tables: land(page, tables)  # noqa: E731
        converted = convert_page(
            self.endpoint.kinds, page.body, self.spec.params, page.repairs,
            earlier=self.outcome.extraction.found, later=later_page(page.index, page.cursor_in),
            paging=None if self.following else self.endpoint.paging, land=to,
        )  # fmt: skip
        page.records, page.tables, page.report = converted.records, converted.tables, converted.report
        page.landed = converted.landed

    async def pages(self) -> AsyncGenerator[Page, None]:
        """Every paid page of the query, in order; `outcome` says how and why paging ended."""
        spec, out, state = self.spec, self.outcome, self.start
        if state.ended is not None:
            self.ledger.finish(spec.query_id)  # it was expected, and will send nothing
            out.status = state.ended
            out.credits = self.ledger.per_query_spent.get(spec.query_id, 0)  # paid before a kill, all landed
            if state.ended == "drift":
                out.next_cursor = self._top_cursor()
                out.error = state.error or drift_message(self.endpoint, state.extraction)
            return
        async with self.ledger.query(spec.query_id, state.index):
            try:
                while (choice := state.follow.choose(state.cursor)) is not None:
                    cursor, self.following = choice
                    if spec.max_pages is not None and out.pages >= spec.max_pages:
                        out.status, out.next_cursor = "max_pages", self._top_cursor()
                        return
                    self.reading = None
                    page, ended = await self._fetch(state.index, cursor)
                    if page is not None:
                        state.tried = Tried()  # answered: the next request's attempts start afresh
                        self._read(page)
                        out.records += page.report.kept
                        out.extraction.add(page.report)
                        yield page
                    if ended or page is None or not self._advance(page, state):
                        return
                out.status = "complete"  # the top-level pages ended earlier, and no follow-up is left
            finally:
                out.credits = self.ledger.per_query_spent.get(spec.query_id, 0)
                if self.following and out.next_cursor is not None:  # stopped at a follow-up: it still waits
                    out.next_cursor = self._top_cursor()

    def _top_cursor(self) -> Cursor | None:
        """Where the top-level pages go on (None once they ended: only follow-ups were left)."""
        return None if self.start.follow.top_ended else self.start.cursor

    def broke(self, exc: Exception) -> None:
        """Something no rule foresaw raised while paging. While a kept page was being read or landed, the query
        stops after that page as `drift`: `harvest rebuild` lands it, `--continue` goes on from its next cursor,
        nothing is paid twice. Otherwise (asking for a page) it failed, and goes on from that page's cursor."""
        out, page = self.outcome, self.reading
        what = self.client.scrub(f"{type(exc).__name__}: {exc}")  # an exception may quote anything
        if page is None:
            out.status, out.next_cursor, out.error = "failed", self._top_cursor(), what
            return
        out.status, out.next_cursor = "drift", self._top_cursor() if self.following else page.cursor_out
        out.error = (
            f"page {page.index + 1} of {self.endpoint.path} could not be read or landed ({what}). "
            f"Stopped; {KEPT}"
        )

    def stopped(self, reason: str) -> None:
        """The run stopped under this query (the machine could not write what it paid for): `interrupted`, so the
        next run resumes it from its last stored page; a page being read was kept or is asked for again."""
        out, page = self.outcome, self.reading
        if out.status == "interrupted":
            return
        out.status, out.error = "interrupted", reason
        out.next_cursor = page.cursor_in if page is not None and not self.following else self._top_cursor()

    def _advance(self, page: Page, state: PagerStart) -> bool:
        """Move `state` past a landed page; False (with the outcome set) when paging ends here."""
        out, nxt = self.outcome, page.cursor_out
        if page.report.lost:
            out.status, out.next_cursor = "drift", nxt  # a fixed catalog can go on from here
            out.error = drift_message(self.endpoint, page.report)
            if self.following and page.cursor_in is not None:  # paid: its own next page waits instead
                state.follow.answered(page.cursor_in, state.used)
                state.follow.found([{**page.cursor_in, **nxt}] if nxt else [], state.used)
                out.next_cursor = self._top_cursor()
            return False
        state.follow.found(follow_cursors(self.endpoint, page.records), state.used)
        if self.following:
            return self._past_follow_up(page, state)
        if page.report.not_found or deactivated(page.body):
            out.status, words = "not_found", not_found_words(page.body)
            out.error = SAID + words if words else out.error
            return False
        if nxt is None or held_nothing(page.record_count, page.report):
            return self._top_ended(state)
        if self._caught_up(page, state):
            if self.backfill is None or state.backfilling:
                out.status = "caught_up"  # every record of this page was landed before: the rest is older
                return False
            if self._to_backfill(state):
                return True
        sig, key = signature(self.endpoint.kinds, page.tables), cursor_key(nxt)
        if key in state.used or sig == state.previous:
            out.status = "loop_detected"  # no next cursor: resuming from it would loop again
            out.error = (
                f"the service sent back a cursor already used ({nxt}) or the same page twice; "
                "stopped instead of paying for the same pages again"
            )
            return False
        state.used.add(key)
        state.previous, state.cursor, state.index = sig, nxt, state.index + 1
        state.follow.turn = True
        return True

    def _top_ended(self, state: PagerStart) -> bool:
        """The top-level pages ended: the query is complete, unless follow-ups wait (they go on alone)."""
        if not state.follow.waiting:
            self.outcome.status = "complete"
            return False
        state.follow.top_ended, state.index = True, state.index + 1
        return True

    def _past_follow_up(self, page: Page, state: PagerStart) -> bool:
        """A follow-up's page: asked no more; its own next page (a thread's more replies) waits in turn."""
        assert page.cursor_in is not None
        state.follow.answered(page.cursor_in, state.used)
        nxt = page.cursor_out
        ends = page.record_count == 0 or page.report.not_found or deactivated(page.body)
        if nxt is not None and not ends and self.endpoint.paging.page is None:
            state.follow.found([{**page.cursor_in, **nxt}], state.used)
        state.index += 1
        if state.follow.choose(state.cursor) is None:
            self.outcome.status = "complete"
            return False
        return True

    def _caught_up(self, page: Page, state: PagerStart) -> bool:
        """Every record of the page is known: any key while the head catches up on an unfinished pass (it has
        reached what that pass covered), else only keys whose older items were all collected (trusted)."""
        if self.known is None:
            return False
        head = self.backfill is not None and not state.backfilling
        return self.known.all_known(self.endpoint.kinds, page.records, self.spec.params, trusted=not head)

    def _to_backfill(self, state: PagerStart) -> bool:
        """The head caught up: go on where the unfinished pass stopped (its older items were never paid).

        When the head itself already asked for that cursor (an offset cursor shifted by new items), it has
        paged past it: the backfill goes on from here instead."""
        assert self.backfill is not None
        state.backfilling = True
        key = cursor_key(self.backfill)
        if key in state.used:
            return False
        state.used.add(key)
        state.previous = None  # an offset cursor may show the page the head just read again
        state.cursor, state.index = dict(self.backfill), state.index + 1
        return True
