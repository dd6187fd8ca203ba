"""How a run starts, given the runs before it: decided once, by `decide`, for every way a run is started
(`harvest run`, a deployment's run, the Python API, a Prefect retry), under the job's lock (`preflight.lock_job`).

A start is one of three (`RunStart`):

- **Resume** (the default when the job's last run in this output is unfinished: killed, powered off, Ctrl-C, or a
  Prefect flow retry of the same flow run): the run keeps its id and budget; queries that ended are kept, the
  others land their raw pages again and page on from the last one. The ledger opens with what the journal says
  was spent, in-flight reservations at the crash included. A resumed run that continues earlier runs also knows
  what those settled (`flows.run.chain.Settled`): a query they completed is not asked again, one they stopped
  goes on from the cursor they kept, whatever part of the chain was killed and resumed.
- **Continue** (`--continue`): a new run that picks up every query the earlier runs stopped (budget, a refused
  key, failure) at its saved cursor, skips the ones that ended for good and runs queries never run before.
- **New** (`--fresh`, or no unfinished run): a new run from page 1; `--fresh` abandons an unfinished run first.

`--continue` while the job has an unfinished run is refused, here and only here (`continue_refused`). A resume
or a continue under a spec edited since goes on when queries were only added (they start at page 1) and is
refused when one it would go on with is asked differently (`flows.run.chain.query_changes`).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal

from harvest.connectors.credits.fanout_caps import FanoutCaps
from harvest.connectors.paging.pager import OK_STATUSES, RUN_STOPPED, QuerySpec, base_id
from harvest.flows.run.chain import (
    Settled,
    SpecCaps,
    chain_from,
    continuable,
    highest,
    newest_chain,
    passed_on,
    prices_before,
    resumable,
    settled_by,
)
from harvest.flows.run.coverage import Coverage, coverage_of
from harvest.flows.run.plan import Plan, plan
from harvest.flows.run.preflight import refuse_mixed_services
from harvest.flows.run.run_again import RunAgain, rerun_of
from harvest.flows.spec import JobSpec, UsageError
from harvest.flows.spec.identity import plan_key
from harvest.tasks.output.job_lock import JobLock
from harvest.tasks.output.journal import JournalState, read_journal
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import RunManifest, run_heads
from harvest.tasks.output.query_summary import QuerySummary
from harvest.tasks.output.raw_store import RawIndex

Mode = Literal["auto", "fresh", "continue"]


@dataclass(frozen=True, kw_only=True)
class _Start:
    """What every start has: what the job's finished runs collected, and what the chain before it settled."""

    kind: ClassVar[Literal["new", "resume", "continue"]]
    coverage: Coverage = field(default_factory=Coverage)
    """What the job's earlier runs collected: incremental histories, collected queries."""
    settled: Settled = field(default_factory=Settled)
    carried: Mapping[str, int] = field(default_factory=dict)
    """What the job's runs before this one passed on of the prices the service was seen charging above the cost
    table (`flows.run.chain.carried`): a new run's, and a resumed plain run's (a continued run's is `settled`'s)."""

    @property
    def previous(self) -> RunManifest | None:
        """The run resumed (the same id) or continued (a new id)."""
        return self.settled.last

    @property
    def continue_at(self) -> Mapping[str, QuerySpec]:
        """Queries of earlier runs to start at their saved cursor (a dependent one too: its parent ended)."""
        return self.settled.at

    @property
    def kept(self) -> Mapping[str, dict[str, Any]]:
        """Summaries of this run's queries that ended before and are not run again (a resume's)."""
        return {}

    @property
    def going_on(self) -> set[str]:
        """Queries that go on from where an earlier run or session stopped them."""
        return set(self.settled.at)

    @property
    def journal(self) -> JournalState:
        """The resumed run's journal: what it spent per query (empty for a new run)."""
        return JournalState()

    @property
    def prices(self) -> dict[str, int]:
        """What the service was seen charging per price key, above the cost table, by the runs before this one
        and (a resume) what its own earlier sessions held and were charged: its ledger holds it from the first
        request."""
        return highest(self.carried, self.settled.prices, self.journal.held, self.journal.prices)

    @property
    def raw_index(self) -> RawIndex | None:
        return None

    @property
    def lost(self) -> Mapping[str, int]:
        return {}

    def fanout_caps(self, caps: Mapping[str, int]) -> FanoutCaps:
        """The fan-outs' `max_credits_total` as the run's ledger holds them: opened with what the chain it
        continues spent on their queries, as a cap is the chain's (a resume's ledger adds its own sessions')."""
        fanouts = FanoutCaps(caps, base_id)
        fanouts.opening(self.settled.spent)
        return fanouts

    def decide(self, query: QuerySpec) -> QuerySpec | None:
        """The query as this run starts it, or None when it must not run again."""
        qid = query.query_id
        if qid in self.settled.done:
            return None
        if qid in self.settled.at:
            return self._with_history(self.settled.at[qid], continuing=True)
        return self._with_history(query)

    def has_work(self, the_plan: Plan) -> bool:
        """Whether anything would run: a planned query not done before, or a query to continue."""
        return bool(self.continue_at) or any(self.decide(q) is not None for q in the_plan.queries)

    def _with_history(self, query: QuerySpec, continuing: bool = False) -> QuerySpec:
        """An incremental query with what earlier runs left of its history; a continued one starts where its
        older items begin (the head is left to the next plain run)."""
        if not query.incremental:
            return query
        had = self.coverage.histories.get(query.query_id)
        if had is None:
            return replace(query, history=None, backfill=None, trusted_until=None)
        found = replace(query, history=had.history, backfill=had.backfill, trusted_until=had.trusted_until)
        if continuing:
            found = replace(found, start_cursor=had.backfill if had.history == "partial" else None)
        return found

    def unstarted(
        self, queries: Iterable[QuerySpec], summaries: Iterable[dict[str, Any]], status: str
    ) -> list[dict]:
        """Planned queries a stopped run never started (`QuerySummary.not_started`)."""
        have = {s["query_id"] for s in summaries}
        decided = [self.decide(q) for q in queries if q.query_id not in have]
        return [QuerySummary.not_started(d, status).as_dict() for d in decided if d is not None]


@dataclass(frozen=True, kw_only=True)
class New(_Start):
    """A run from page 1. `abandon`: the unfinished run `--fresh` abandons first (its data landed and loaded)."""

    kind: ClassVar[Literal["new"]] = "new"
    abandon: RunManifest | None = None


@dataclass(frozen=True, kw_only=True)
class Continue(_Start):
    """A new run picking up what the chain of finished runs stopped (`settled`)."""

    kind: ClassVar[Literal["continue"]] = "continue"


@dataclass(frozen=True, kw_only=True)
class Resume(_Start):
    """The unfinished `run` again, under its id: what its own journal says first, then what the chain it
    continues had settled (`settled`)."""

    kind: ClassVar[Literal["resume"]] = "resume"
    run: RunManifest
    own: JournalState
    """The run's journal: what it started, ended and spent, over every session so far."""
    ended: Mapping[str, dict[str, Any]]
    """Summaries of its queries that ended and are kept (their raw pages are all there)."""
    index: RawIndex
    """Where its raw pages are: read once, for the check and for the landing."""
    added: bool = False
    """The spec's queries were edited since the run started, every query it asked asked the same (queries added,
    or the same ones written otherwise: `chain.resumable`)."""
    missing: Mapping[str, int] = field(default_factory=dict)
    """Queries journaled as ended whose raw pages are not all there (a power cut): query id -> pages found (as
    its `pages` counts them: a kept receipt or damaged answer is none, `RawIndex.counted`). They are resumed
    instead of kept: the pages found land, the missing ones are fetched (and paid) again."""

    @property
    def previous(self) -> RunManifest | None:
        return self.run

    @property
    def kept(self) -> Mapping[str, dict[str, Any]]:
        return self.ended

    @property
    def journal(self) -> JournalState:
        return self.own

    @property
    def raw_index(self) -> RawIndex | None:
        return self.index

    @property
    def lost(self) -> Mapping[str, int]:
        return self.missing

    @property
    def going_on(self) -> set[str]:
        """Queries started and not kept (they land their raw pages again and page on), and those the chain
        before it stopped that it had not started yet."""
        return (set(self.own.started) | set(self.settled.at)) - set(self.ended)

    def fanout_caps(self, caps: Mapping[str, int]) -> FanoutCaps:
        """The fan-outs' `max_credits_total` as the run's ledger holds them: opened with what the chain it
        continues spent on their queries, as a cap is the chain's (a resume's ledger adds its own sessions')."""
        fanouts = FanoutCaps(caps, base_id)
        fanouts.opening(self.settled.spent)
        return fanouts

    def decide(self, query: QuerySpec) -> QuerySpec | None:
        qid = query.query_id
        if qid in self.ended:
            return None
        started = self.own.started.get(qid)
        if started is None:  # not asked by this run yet: as the chain before it left it
            return super().decide(query)
        # where it started: a continued query's cursor and waiting follow-ups are in its start line, not the plan
        at = {k: started.get(k) for k in ("start_cursor", "follow_state")}
        resumed = QuerySpec(**{**query.as_dict(), "resume": True, **at})
        return self._with_history(resumed)

    def lost_pages(self) -> int:
        """Pages the journal's ended queries had that their raw files no longer hold."""
        return sum(int(self.own.ended[q]["pages"]) - found for q, found in self.missing.items())

    def paid_again(self, summaries: Iterable[dict[str, Any]]) -> int:
        """Pages this session fetched for the queries whose pages were lost: paid a second time."""
        return sum(
            max(0, int(s["pages"]) - self.missing[s["query_id"]])
            for s in summaries
            if s["query_id"] in self.missing
        )


RunStart = New | Resume | Continue


@dataclass(frozen=True)
class Prepared:
    """A run `harvest run` prepared before Prefect started: its spec parsed, its output checked, its job's lock
    taken and its start decided; handed to the flow in the same process (`handed_over`)."""

    spec: JobSpec
    layout: OutputLayout
    lock: JobLock
    start: RunStart


_HANDED: contextvars.ContextVar[Prepared | None] = contextvars.ContextVar("harvest_prepared", default=None)


@contextmanager
def handed_over(prepared: Prepared | None) -> Iterator[None]:
    """`prepared` for the flow called inside (`flows.collect.run_collect`), which then parses, checks, locks and
    decides nothing again: scoped to that call (a Prefect retry of the flow is in it), nothing outlives it."""
    token = _HANDED.set(prepared)
    try:
        yield
    finally:
        _HANDED.reset(token)


def handed() -> Prepared | None:
    """What `harvest run` prepared for the flow running now, if it did (`handed_over`)."""
    return _HANDED.get()


def decide(
    spec: JobSpec,
    layout: OutputLayout,
    service: str,
    mode: Mode,
    again: RunAgain | None = None,
    retry_of: str | None = None,
) -> RunStart:
    """How this run starts, under the job's lock. `service`: the label the run records (`ServiceAccess.label`).
    `again`: how this session was started from a shell, for the refusals' commands (default: as the unfinished
    run's manifest knows it). `retry_of`: the Prefect flow run, when Prefect retries the flow: the run an earlier
    attempt made is resumed, whatever it ended with. Raises UsageError for what must be refused."""
    retried = retried_run(layout, spec.name, retry_of) if retry_of is not None else None
    if retried is not None:
        return resume_start(layout, retried, spec, service)
    refuse_mixed_services(layout, service)
    previous = unfinished_run(layout, spec.name)
    if previous is not None and mode == "continue":
        raise continue_refused(previous, again or rerun_of(previous, layout.root))
    if previous is not None and mode != "fresh":
        return resume_start(layout, previous, spec, service)
    covered = job_coverage(layout, spec.name)
    if mode == "continue":
        settled = settled_by(layout, newest_chain(layout, spec.name), SpecCaps.of(spec.queries))
        if settled.last is not None:
            if settled.last.plan_key not in ("", plan_key(spec)):  # the spec edited since: what still holds
                settled = continuable(settled, plan(spec), again)
            return Continue(coverage=covered, settled=settled)
    before = newest_chain(layout, spec.name)
    before += [previous] if previous is not None else []  # the run --fresh abandons saw the service last
    return New(coverage=covered, abandon=previous, carried=passed_on(layout, before))


def job_coverage(layout: OutputLayout, job: str, run_id: str | None = None) -> Coverage:
    """What the job's finished runs in this output directory collected, but run `run_id` (`flows.run.coverage`).

    A resumed run (a Prefect flow retry resumes a run that ended) reads the same runs as its first start."""
    return coverage_of(
        h.manifest() for h in run_heads(layout, job) if h.run_id != run_id and not h.unfinished
    )


def unfinished_run(layout: OutputLayout, job: str) -> RunManifest | None:
    """The job's newest run if it never finished (killed) or was interrupted."""
    heads = run_heads(layout, job)
    return heads[-1].manifest() if heads and heads[-1].unfinished else None


def continue_refused(run: RunManifest, again: RunAgain | None) -> UsageError:
    """`--continue` while the job has an unfinished run: refused, never silently turned into a resume.

    The two differ in what the budget caps (a resume's covers the whole run, its killed part included; a
    continued run's is new spending), so doing either in place of the other spends what the user did not ask for.
    `again`: how this session was started; None for a deployment's run (spec text, no file). The resume keeps
    the unfinished run's budget; the `--fresh`, a new night, keeps this session's `--budget` and `--full`.
    """
    how = "interrupted" if run.status == "interrupted" else "killed"
    if again is None:
        resume = "a run of the deployment with mode auto"
        fresh = "one with mode fresh"
    else:
        resume, fresh = f"`{again.of_another_run().command()}`", f"`{again.command('--fresh')}`"
    return UsageError(
        f"--continue starts a new run from the queries earlier runs stopped, but run {run.run_id} of job "
        f"{run.job} is unfinished ({how}): resume it first with {resume} (without --continue), then "
        f"--continue goes on from where it stops; or {fresh} abandons it (its data is kept) and starts a new run"
    )


def retried_run(layout: OutputLayout, job: str, flow_run_id: str) -> RunManifest | None:
    """The run an earlier attempt of this Prefect flow run made, when Prefect retries the flow."""
    runs = [h for h in run_heads(layout, job) if h.flow_run_id == flow_run_id]
    return runs[-1].manifest() if runs else None


def resume_start(layout: OutputLayout, run: RunManifest, spec: JobSpec, service: str) -> Resume:
    """Resume `run`: refuse when the service changed, or a query it asked is asked differently or no more
    (`chain.query_changes`: its cursor would not fit; queries the spec added since start at page 1)."""
    if run.service != service:
        raise UsageError(
            f"run {run.run_id} of job {run.job} is unfinished and ran against {run.service}, not {service}; "
            "resume it against the same service, or run with --fresh to abandon it"
        )
    journal = read_journal(layout.journal_file(run.run_id))
    retry = not run.unfinished  # a flow retry of a run that ended: re-run what did not end well
    ended = {
        q: s
        for q, s in journal.ended.items()
        if s["status"] not in RUN_STOPPED and (not retry or s["status"] in OK_STATUSES)
    }
    index = RawIndex(layout.raw_files(run.run_id))
    found = {q: index.counted.get(q, 0) for q in ended}  # like its `pages`: no receipt, no damaged answer
    # a power cut took pages, not the line
    lost = {q: n for q, n in found.items() if n < int(ended[q]["pages"])}
    runs = {h.run_id: h for h in run_heads(layout, run.job) if not h.unfinished and h.run_id != run.run_id}
    settled = settled_by(layout, chain_from(runs, run.continues))
    added = bool(run.plan_key) and run.plan_key != plan_key(spec)
    if added:
        resumable(run, journal.started, settled, plan(spec), spec.runner.kind == "dask")
    return Resume(
        coverage=job_coverage(layout, run.job, run.run_id), settled=settled, added=added,
        carried={} if run.continues else prices_before(layout, run), run=run, own=journal,
        ended={q: s for q, s in ended.items() if q not in lost}, index=index, missing=lost,
    )  # fmt: skip
