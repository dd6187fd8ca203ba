"""What a chain of finished runs settled (a run and the runs it `--continue`s, oldest first): the queries that
ended for good, those stopped with a cursor kept, and the prices the service was seen charging. A continued run
starts from it (`flows.run.start.Continue`), and so does the resume of one (`flows.run.start.Resume`); a plain
new run of the job starts from its prices (`carried`), and so does `harvest plan`'s forecast."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harvest.connectors.paging.pager import QuerySpec, base_id
from harvest.tasks.output.journal import JournalState, read_journal, read_prices
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import CONTINUABLE, RunManifest, run_heads


@dataclass(frozen=True)
class Settled:
    """What a chain of finished runs settled, each query's newest status deciding: queries that ended for good
    (`done`: not asked again) and queries stopped with a cursor kept (`at`: asked again from there)."""

    done: frozenset[str] = frozenset()
    at: Mapping[str, QuerySpec] = field(default_factory=dict)
    last: RunManifest | None = None
    """The chain's newest run (the one a continued run names)."""
    prices: Mapping[str, int] = field(default_factory=dict)
    """Price key -> what the chain passes on of the prices the service was seen charging above the cost table
    (`carried`): a continued run's first request holds it, not the cost table's price the service was seen
    passing."""
    spent: Mapping[str, int] = field(default_factory=dict)
    """Query id -> the credits the chain spent on it: a fan-out's `max_credits_total`, as each query's
    `max_credits` and `max_pages`, caps the whole chain, so a continued run's ledger opens its caps with them."""


def newest_chain(layout: OutputLayout, job: str, before: RunManifest | None = None) -> list[RunManifest]:
    """The job's newest finished run and the runs it continues, oldest first; `before`: of the runs started
    before that one (a resumed run's)."""
    runs = {
        h.run_id: h
        for h in run_heads(layout, job)
        if not h.unfinished and (before is None or (h.started, h.run_id) < (before.started, before.run_id))
    }
    if not runs:
        return []
    newest = max(runs.values(), key=lambda h: (h.started, h.run_id))
    return chain_from(runs, newest.run_id)


def chain_from(runs: Mapping[str, Any], run_id: str | None) -> list[RunManifest]:
    """Run `run_id` (a head of `runs`) and the runs it continues, oldest first; empty for None."""
    chain: list[Any] = []
    while run_id is not None and run_id in runs and len(chain) <= len(runs):
        chain.append(runs[run_id])
        run_id = runs[run_id].continues
    return [h.manifest() for h in chain[::-1]]


@dataclass(frozen=True)
class SpecCaps:
    """The spec's credit caps as a continued run reads them, per spec query id: each query's `max_credits` and a
    fan-out's `max_credits_total`. A cap is the chain's, so a query that reached it is continued only once the
    spec raised it; without them (a resume, whose spec is the one its chain ran) the journal's caps hold."""

    each: Mapping[str, int | None] = field(default_factory=dict)
    total: Mapping[str, int] = field(default_factory=dict)
    pages: Mapping[str, int | None] = field(default_factory=dict)
    """Each query's `max_pages` as the spec says it now: one added or lowered since the chain began holds it."""

    @classmethod
    def of(cls, queries: Iterable[Any]) -> SpecCaps:
        """From the spec's queries (`flows.spec.model.Query`)."""
        queries = list(queries)
        return cls(
            {q.query_id: q.max_credits for q in queries},
            {q.query_id: q.max_credits_total for q in queries if q.max_credits_total is not None},
            {q.query_id: q.max_pages for q in queries},
        )


def settled_by(layout: OutputLayout, chain: list[RunManifest], caps: SpecCaps | None = None) -> Settled:
    """What a chain of finished runs settled: each query's newest status across it decides."""
    if not chain:
        return Settled()
    status: dict[str, dict[str, Any]] = {}
    specs: dict[str, dict[str, Any]] = {}
    prices: dict[str, int] = {}
    paged: Counter[str] = Counter()  # pages each query paid over the chain: its `max_pages` is the chain's
    # and credits: its `max_credits` and its fan-out's `max_credits_total` too
    spent: Counter[str] = Counter()
    # each query as the chain first started it: its limits, not what a run had left
    first: dict[str, dict[str, Any]] = {}
    for run in chain:
        journal = read_journal(layout.journal_file(run.run_id))
        specs.update(journal.started)
        first.update({q: started for q, started in journal.started.items() if q not in first})
        prices = carried(prices, journal)
        status.update({q["query_id"]: q for q in run.queries})
        paged.update({q["query_id"]: int(q.get("pages") or 0) for q in run.queries})
        spent.update({q["query_id"]: int(q.get("credits") or 0) for q in run.queries})
    left = _CapsLeft(caps, paged, spent)
    done: set[str] = set()
    at: dict[str, QuerySpec] = {}
    for qid, summary in status.items():
        waiting = summary.get("next_cursor") or summary.get("follow_state")  # a page or follow-ups to ask
        # drifted on its last page with nothing waiting: all paid and kept (`harvest rebuild` lands them)
        if (
            summary["status"] not in CONTINUABLE
            or (summary["status"] == "drift" and not waiting)
            or summary.get("refused_for_good")  # a 403 or 400: asked again, it answers (and bills) the same
        ):
            done.add(qid)
        elif qid in specs:
            spec = {**specs[qid], "start_cursor": summary.get("next_cursor"), "resume": False}
            spec["follow_state"] = summary.get("follow_state")  # follow-up requests it had waiting
            pages = first[qid].get("max_pages")
            pages = pages if caps is None else caps.pages.get(base_id(qid), pages)
            if pages is not None:  # it pages what the chain has not yet
                spec["max_pages"] = max(0, int(pages) - paged[qid])
            credits = left.query(qid, first[qid].get("max_credits"), summary.get("capped"))
            if credits == 0 or (summary.get("capped") == "max_credits_total" and not left.fanout(qid)):
                done.add(qid)  # its cap, or its fan-out's, is the chain's: reached, and not raised since
                continue
            spec["max_credits"] = credits  # what the chain has not spent of it
            at[qid] = QuerySpec(**spec)
    return Settled(frozenset(done), at, chain[-1], prices, spent)


class _CapsLeft:
    """What a chain left of each query's `max_credits` and each fan-out's `max_credits_total`: a cap holds across
    the runs `--continue` makes, as `max_pages` does. Left is what can still hold a request at what the chain's
    pages of it cost on average: a query the budget stopped right at its cap is as done as one its cap stopped."""

    def __init__(self, caps: SpecCaps | None, paged: Counter[str], spent: Counter[str]) -> None:
        self.caps, self.paged, self.spent = caps, paged, spent
        self.group_paged: Counter[str] = Counter()
        self.group_spent: Counter[str] = Counter()
        for qid in spent:
            self.group_paged[base_id(qid)] += paged[qid]
            self.group_spent[base_id(qid)] += spent[qid]

    def query(self, qid: str, journaled: int | None, capped: str | None) -> int | None:
        """Its `max_credits` less what the chain spent on it (None: no cap); 0 when no request fits in it."""
        cap = journaled if self.caps is None else self.caps.each.get(base_id(qid), journaled)
        if cap is None:
            return None
        fits = _fits(cap, self.spent[qid], self.paged[qid])
        return cap - self.spent[qid] if fits and not (capped == "max_credits" and self.caps is None) else 0

    def fanout(self, qid: str) -> bool:
        """Whether its fan-out's `max_credits_total`, as the spec says it now, can still hold a request."""
        if self.caps is None:
            return False
        group = base_id(qid)
        cap = self.caps.total.get(group)
        return cap is None or _fits(cap, self.group_spent[group], self.group_paged[group])


def _fits(cap: int, spent: int, pages: int) -> bool:
    """Whether what is left of `cap` holds a request at what `pages` cost on average (any, before a page)."""
    return cap > spent and (pages == 0 or (cap - spent) * pages >= spent)


def highest(*known: Mapping[str, int]) -> dict[str, int]:
    """Price key -> the highest of the prices known for it."""
    out: dict[str, int] = {}
    for prices in known:
        for key, credits in prices.items():
            out[key] = max(credits, out.get(key, 0))
    return out


def carried(before: Mapping[str, int], journal: JournalState) -> dict[str, int]:
    """The prices a run passes on to the runs after it: per price key, the highest charge above the cost table its
    answers named; and of what it held from its first request (`before`: what the runs before it passed on), the
    keys no answer of it priced. So a price lasts while the service keeps charging it, and one the service went
    back from is dropped: its night holds it (conservative), the night after holds the cost table's price. A
    night that never asked for the key (a budget below the held price, a failure, a query not run) passes it on:
    it saw nothing that says the service stopped charging it."""
    out = dict(journal.prices)
    for key, credits in highest(before, journal.held).items():
        if key not in journal.seen and key not in out:
            out[key] = credits
    return out


def passed_on(layout: OutputLayout, runs: Iterable[RunManifest]) -> dict[str, int]:
    """What the last of `runs` (oldest first: a chain, then the unfinished run a new one abandons) passes on."""
    prices: dict[str, int] = {}
    for run in runs:
        prices = carried(prices, read_prices(layout.journal_file(run.run_id)))
    return prices


def prices_before(layout: OutputLayout, run: RunManifest) -> dict[str, int]:
    """What the runs before `run` passed on: the chain it continues, or (a plain run) the job's newest finished
    chain started before it. Its resume holds it, even when the run was killed before its journal said so."""
    if run.continues is None:
        return passed_on(layout, newest_chain(layout, run.job, before=run))
    runs = {h.run_id: h for h in run_heads(layout, run.job) if not h.unfinished and h.run_id != run.run_id}
    return passed_on(layout, chain_from(runs, run.continues))


def next_prices(layout: OutputLayout, job: str) -> dict[str, int]:
    """What the job's next run holds from its first request (`harvest plan` forecasts with it): what its newest
    finished chain passes on; or, when its newest run is unfinished, what that run's resume holds (what it held
    from the first and what its answers were charged: a run's prices never fall while it runs)."""
    if not layout.raw_root.is_dir():
        return {}
    heads = run_heads(layout, job)
    if not heads or not heads[-1].unfinished:
        return passed_on(layout, newest_chain(layout, job))
    run = heads[-1].manifest()
    own = read_prices(layout.journal_file(run.run_id))
    return highest(prices_before(layout, run), own.held, own.prices)
