"""How a run starts, given the runs before it: new, resumed after a crash, or continuing a stopped one.

- **Resume** (the default when the job's last run in this output is unfinished: killed, powered off, Ctrl-C,
  or a Prefect flow retry of the same flow run): the run keeps its id and budget; queries that ended are kept,
  the others land their raw pages again and page on from the last one. The ledger opens with what the journal
  says was spent, in-flight reservations at the crash included.
- **Continue** (`--continue`): a new run that picks up every query the earlier runs stopped (budget, a refused
  key, failure) at its saved cursor, skips the ones that ended for good and runs queries never run before.
- **Fresh** (`--fresh`, or no earlier run): a new run from page 1; an unfinished run is abandoned first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from connectors.paging.pager import OK_STATUSES, RUN_STOPPED, QuerySpec
from flows.commands.run_again import RunAgain
from flows.run.coverage import Coverage, coverage_of
from flows.run.plan import Plan
from flows.spec import UsageError
from tasks.output.journal import JournalState, read_journal
from tasks.output.layout import OutputLayout
from tasks.output.manifest import CONTINUABLE, RunManifest, run_heads
from tasks.output.query_summary import QuerySummary
from tasks.output.raw_store import RawIndex

Mode = Literal["auto", "fresh", "continue"]


@dataclass
class RunStart:
    """What a run carries over from before: kept results, and how each earlier query starts again."""

    kind: Literal["new", "resume", "continue"]
    previous: RunManifest | None = None
    """The run being resumed (same id) or continued (a new id)."""
    kept: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Summaries of this run's queries that ended before and are not run again (resume only)."""
    resume: set[str] = field(default_factory=set)
    """Queries that land their raw pages again and page on (resume only)."""
    continue_at: dict[str, QuerySpec] = field(default_factory=dict)
    """Queries of earlier runs to start at their saved cursor (continue only)."""
    done: set[str] = field(default_factory=set)
    """Queries that ended for good in the runs being continued: not run again (continue only)."""
    journal: JournalState = field(default_factory=JournalState)
    """The resumed run's journal: what it spent per query."""
    raw_index: RawIndex | None = None
    """Where the resumed run's raw pages are (resume only): read once, for the check and for the landing."""
    lost: dict[str, int] = field(default_factory=dict)
    """Queries journaled as ended whose raw pages are not all there (a power cut): query id -> pages found. They
    are resumed instead of kept: the pages found land, the missing ones are fetched (and paid) again."""
    coverage: Coverage = field(default_factory=Coverage)
    """What the job's earlier runs collected: incremental histories, collected queries."""

    def has_work(self, the_plan: Plan) -> bool:
        """Whether anything would run: a planned query not done before, or a query to continue."""
        return bool(self.continue_at) or any(self.decide(q) is not None for q in the_plan.queries)

    def decide(self, query: QuerySpec) -> QuerySpec | None:
        """The query as this run starts it, or None when it must not run again."""
        qid = query.query_id
        if qid in self.kept or qid in self.done:
            return None
        if qid in self.resume:
            # where it started: a continued query's cursor is in its start line, not in the plan
            started = self.journal.started.get(qid)
            at = {"start_cursor": started.get("start_cursor")} if started is not None else {}
            return self._with_history(QuerySpec(**{**_plain(query), "resume": True, **at}))
        if qid in self.continue_at:
            return self._with_history(self.continue_at[qid], continuing=True)
        return self._with_history(query)

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

    def skips_child(self, parent: QuerySpec, child: QuerySpec, incremental_run: bool) -> bool:
        """In an incremental run, a dependent query of an incremental parent that earlier runs collected is not
        paid for again: only new parent records start dependents (`--full` fetches them all again). A child
        that is incremental itself still runs, for its own new items."""
        return (
            incremental_run
            and parent.incremental
            and not child.incremental
            and child.query_id in self.coverage.collected
        )

    def lost_pages(self) -> int:
        """Pages the journal's ended queries had that their raw files no longer hold."""
        return sum(int(self.journal.ended[q]["pages"]) - found for q, found in self.lost.items())

    def paid_again(self, summaries: Iterable[dict[str, Any]]) -> int:
        """Pages this session fetched for the queries whose pages were lost: paid a second time."""
        return sum(
            max(0, int(s["pages"]) - self.lost[s["query_id"]])
            for s in summaries
            if s["query_id"] in self.lost
        )

    def unstarted(
        self, queries: Iterable[QuerySpec], summaries: list[dict[str, Any]], status: str
    ) -> list[dict]:
        """Planned queries a stopped run never started (`QuerySummary.not_started`)."""
        have = {s["query_id"] for s in summaries}
        decided = [self.decide(q) for q in queries if q.query_id not in have]
        return [QuerySummary.not_started(d, status).as_dict() for d in decided if d is not None]


def _plain(query: QuerySpec) -> dict[str, Any]:
    return asdict(query)


def job_coverage(layout: OutputLayout, job: str, run_id: str) -> Coverage:
    """What the job's finished runs in this output directory collected before run `run_id` (`flows.run.coverage`).

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
    `again`: how the job's runs are started from a shell; None for a deployment's run (spec text, no file).
    """
    how = "interrupted" if run.status == "interrupted" else "killed"
    if again is None:
        resume = "a run of the deployment with mode auto"
        fresh = "one with mode fresh"
    else:
        resume, fresh = f"`{again.command()}`", f"`{again.command('--fresh')}`"
    return UsageError(
        f"--continue starts a new run from the queries earlier runs stopped, but run {run.run_id} of job "
        f"{run.job} is unfinished ({how}): resume it first with {resume} (without --continue), then "
        f"--continue goes on from where it stops; or {fresh} abandons it (its data is kept) and starts a new run"
    )


def retried_run(layout: OutputLayout, job: str, flow_run_id: str | None) -> RunManifest | None:
    """The run an earlier attempt of this Prefect flow run made, when Prefect retries the flow."""
    if flow_run_id is None:
        return None
    runs = [h for h in run_heads(layout, job) if h.flow_run_id == flow_run_id]
    return runs[-1].manifest() if runs else None


def resume_start(layout: OutputLayout, run: RunManifest, plan_key: str, service: str) -> RunStart:
    """Resume `run`: refuse when the spec's queries or the service changed (its cursors would not fit)."""
    if run.plan_key and run.plan_key != plan_key:
        raise UsageError(
            f"run {run.run_id} of job {run.job} is unfinished, but the spec's queries changed since; "
            "run with --fresh to abandon it (its data stays loaded) and start again, or restore the spec"
        )
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
    found = {q: len(index.at.get(q, ())) for q in ended}
    lost = {
        q: n for q, n in found.items() if n < int(ended[q]["pages"])
    }  # a power cut took pages, not the line
    kept = {q: s for q, s in ended.items() if q not in lost}
    resume = set(journal.started) - set(kept)
    return RunStart("resume", run, kept=kept, resume=resume, journal=journal, raw_index=index, lost=lost)


def _chain(layout: OutputLayout, job: str) -> list[RunManifest]:
    """The job's newest finished run and the runs it continues, oldest first."""
    runs = {h.run_id: h for h in run_heads(layout, job) if not h.unfinished}
    if not runs:
        return []
    newest = max(runs.values(), key=lambda h: (h.started, h.run_id))
    chain = [newest]
    while chain[-1].continues in runs and len(chain) <= len(runs):
        chain.append(runs[chain[-1].continues])
    return [h.manifest() for h in chain[::-1]]


def _paid_through(summary: dict[str, Any]) -> bool:
    """A query that drifted on its last page: every page is paid and kept (`harvest rebuild` lands them), so
    continuing it would only pay for the same pages again (unless follow-up requests were still waiting)."""
    return summary["status"] == "drift" and not summary.get("next_cursor") and not summary.get("follow_state")


def continue_start(layout: OutputLayout, job: str) -> RunStart:
    """Pick up what the job's earlier runs left: each query's newest status across the chain decides."""
    chain = _chain(layout, job)
    if not chain:
        return RunStart("new")
    status: dict[str, dict[str, Any]] = {}
    specs: dict[str, dict[str, Any]] = {}
    for run in chain:
        specs.update(read_journal(layout.journal_file(run.run_id)).started)
        status.update({q["query_id"]: q for q in run.queries})
    start = RunStart("continue", chain[-1])
    for qid, summary in status.items():
        if summary["status"] not in CONTINUABLE or _paid_through(summary):
            start.done.add(qid)
        elif qid in specs:
            spec = {**specs[qid], "start_cursor": summary.get("next_cursor"), "resume": False}
            spec["follow_state"] = summary.get("follow_state")  # follow-up requests it had waiting
            start.continue_at[qid] = QuerySpec(**spec)
    return start
