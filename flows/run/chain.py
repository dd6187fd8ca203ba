"""What a chain of finished runs settled (a run and the runs it `--continue`s, oldest first): the queries that
ended for good, those stopped with a cursor kept, and the prices the service was seen charging. A continued run
starts from it (`flows.run.start.Continue`), and so does the resume of one (`flows.run.start.Resume`); a plain
new run of the job starts from its prices (`carried`), and so does `harvest plan`'s forecast.

What the spec asks now against what an unfinished run, or the chain `--continue` picks up, asked
(`query_changes`): a resume and a `--continue` go on after queries were added (they start at page 1), but not
after a query they paid for is asked differently (its cursor belongs to another question) or, for a resume, is
gone (its pages would land nowhere: `--fresh` lands them). A cron job whose spec gained a query after a killed
night resumes it the next night instead of being refused until someone runs `--fresh`, and pays nothing twice."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from harvest.connectors.paging.pager import QuerySpec, base_id
from harvest.flows.run.plan import Plan, instantiate
from harvest.flows.run.run_again import RunAgain
from harvest.flows.spec import UsageError
from harvest.tasks.output.journal import JournalState, read_journal, read_prices
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import CONTINUABLE, RunManifest, run_heads

log = logging.getLogger(__name__)


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
    started: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Query id -> the query as the chain last started it (`QuerySpec.as_dict`): what it asked, which a spec
    edited since is compared with (`query_changes`)."""


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
    return Settled(frozenset(done), at, chain[-1], prices, spent, specs)


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


@dataclass(frozen=True)
class QueryChanges:
    """Queries asked before that the spec now asks differently (`changed`: the same id, another endpoint,
    method or parameters; or asked before harvest kept what a query asks) or not at all (`removed`)."""

    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()

    def named(self) -> str:
        """'asked differently: a, b; no more in the spec: c' (at most five ids each)."""
        parts = [
            f"{how}: {_few(ids)}"
            for how, ids in (("asked differently", self.changed), ("no more in the spec", self.removed))
            if ids
        ]
        return "; ".join(parts)


def query_changes(asked: Mapping[str, Mapping[str, Any]], the_plan: Plan) -> QueryChanges:
    """Each query of `asked` (query id -> the query as it was started, `QuerySpec.as_dict`) against the plan: a
    planned query by its id, a dependent's instance by its template asking for the same parent value."""
    planned = {q.query_id: q.asks for q in the_plan.queries}
    templates = {d.template_id: d for d in the_plan.dependents}
    changed: list[str] = []
    removed: list[str] = []
    for qid, started in asked.items():
        template = templates.get(base_id(qid)) if qid != base_id(qid) else None
        if qid in planned:
            now = planned[qid]
        elif template is not None and template.param in (started.get("params") or {}):
            try:
                now = instantiate(template, started["params"][template.param]).asks
            except ValueError:  # the template's parameters refuse that parent value now
                now = None
        else:
            removed.append(qid)
            continue
        if not started.get("asks") or started.get("asks") != now:
            changed.append(qid)
    return QueryChanges(tuple(changed), tuple(removed))


def unfed(the_plan: Plan, asked: Iterable[str], not_read_again: Iterable[str]) -> tuple[str, ...]:
    """Dependent queries the spec added (none of their instances `asked`) whose parent's records are on pages
    this run does not read again (`not_read_again`: query ids): nothing would start them for those records, and
    the run would end `complete` without them."""
    bases = {base_id(q) for q in asked}
    parents = {base_id(q) for q in not_read_again}
    return tuple(
        d.template_id for d in the_plan.dependents if d.template_id not in bases and d.parent in parents
    )


def resumable(
    run: RunManifest, own: Mapping[str, Mapping[str, Any]], settled: Settled, the_plan: Plan, dask: bool
) -> None:
    """Refuse to resume `run` when the spec asks differently a query it (`own`: its journal's) or the chain it
    continues asked, or no more one it started or was to pick up, or added a dependent query whose parent's
    records the resume does not read again (the chain's pages; under Dask, the run's own ended queries' too: the
    local runner lands its own pages again and starts it from them); queries only added resume it (they start
    at page 1, under its budget: `say_added`)."""
    asked = {**settled.started, **own}
    changes = query_changes(asked, the_plan)
    removed = tuple(q for q in changes.removed if q in own or q in settled.at)  # a settled query is landed
    orphans = unfed(the_plan, asked, [*settled.started, *(own if dask else ())])
    if changes.changed or removed:
        said = replace(changes, removed=removed).named()
    elif orphans:
        said = f"added: {_few(orphans)}, for records this resume does not read again"
    else:
        return
    raise UsageError(
        f"run {run.run_id} of job {run.job} is unfinished, but the spec's queries changed since ({said}); run "
        "with --fresh to abandon it (what it paid for is landed and loaded first) and start again, or restore "
        "the spec"
    )


def say_added(run: RunManifest) -> None:
    """One line when a resume goes on under a spec edited since the run started (`resumable`): queries added, or
    written otherwise and asked the same; `run`: its manifest as resumed (the budget this session holds)."""
    log.warning(
        "run %s of job %s is resumed under a spec edited since it started: every query it asked is asked as "
        "before and goes on, queries the spec added start at page 1 under its budget of %s credits",
        run.run_id, run.job, run.budget,
    )  # fmt: skip


def continuable(settled: Settled, the_plan: Plan, again: RunAgain | None) -> Settled:
    """What a `--continue` picks up of `settled` under the spec as it is now: refused when the spec asks a query
    of the chain differently (its cursor belongs to the old one); a query the spec no longer asks is not picked
    up; one added runs from page 1. The new run the refusal names keeps the session's `--budget` and `--full`."""
    changes = query_changes(settled.started, the_plan)
    orphans = unfed(the_plan, settled.started, settled.started)
    last = settled.last
    new = "a run of the deployment with mode auto" if again is None else f"`{again.command()}`"
    if changes.changed and last is not None:
        raise UsageError(
            f"--continue picks up the queries run {last.run_id} of job {last.job} stopped, but the spec's "
            f"queries changed since ({changes.named()}): their cursors belong to the old ones. Restore the "
            f"spec to go on, or {new} starts a new run from page 1"
        )
    if orphans and last is not None:
        raise UsageError(
            f"--continue picks up the queries run {last.run_id} of job {last.job} stopped, but the spec added "
            f"{_few(orphans)} since, for records of queries those runs asked, whose pages a continued run does "
            f"not read again: {new} starts a new run from page 1"
        )
    gone = set(changes.removed)
    return replace(
        settled, at={q: s for q, s in settled.at.items() if q not in gone}, done=settled.done - gone
    )


def _few(ids: Iterable[str]) -> str:
    ids = list(ids)
    more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
    return ", ".join(ids[:5]) + more
