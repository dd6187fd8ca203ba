"""The plan's expected case: what the last nights of the job paid, per line of the plan.

A plan's worst case is what the spec allows; a nightly job pays far less once its first night is in: an
incremental query stops at the first page of items it has, and its dependents start only for new parent
records. So each line of the plan learns from the finished runs of the job in its output directory (their
manifests: the receipts every run writes, read without DuckDB, so a running job's lock does not matter):

- a **learning night** of a line is a run in which every query of it ended having collected its data
  (`flows.run.coverage.COLLECTED`: not stopped by the budget, a failure or a kill), and, for an incremental
  query, whose history was already complete before that night (the first full pass is not a night to expect);
  a dependent line's nights are its parent's (a night that found no new parent record paid nothing for it);
- the expected cost is the average of the last `LAST_NIGHTS` learning nights, rounded up;
- an incremental line whose first complete pass is in, with no learning night since, expects one page a query
  (an incremental night pays at least its first page), its dependents nothing (no new parent record known);
- a line with nothing to learn from expects its worst case (unknown when that is unbounded);
- a line whose price the next run holds above the price list (the service was last seen charging more:
  `CostLine.listed`) counts each page a night paid at least at that price: nights paid at the old price would
  say a budget covers a night it does not.

Only the newest `WINDOW` finished runs are read: a year of nightly manifests need not be parsed to plan one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from harvest.connectors.paging.pager import base_id
from harvest.connectors.plurals import counted
from harvest.flows.run.coverage import COLLECTED
from harvest.flows.run.plan import CostLine, Plan
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import RunManifest, run_heads

LAST_NIGHTS = 3
"""Learning nights averaged: recent enough to follow a job that grows, enough to smooth one odd night."""
WINDOW = 12
"""Finished runs read, newest first: room for `LAST_NIGHTS` learning nights among runs that stopped short."""


@dataclass(frozen=True)
class ExpectedCost:
    """A line's expected credits (None: unknown) and where the figure comes from."""

    credits: int | None
    basis: str
    learned: bool = False
    """True when the figure comes from earlier runs."""


@dataclass(frozen=True)
class _Night:
    """One finished run, as the plan reads it: each query's summary, and what the run before said of it."""

    run_id: str
    queries: Mapping[str, Mapping[str, Any]]
    full: bool = False
    """`--full`: its incremental queries paged fully and every dependent ran again, as a plain night does not."""


def recent_runs(layout: OutputLayout, job: str) -> Iterator[RunManifest]:
    """The newest `WINDOW` finished runs of the job, newest first (none when the output does not exist yet),
    each read at its turn."""
    if not layout.raw_root.is_dir():
        return
    heads = [h for h in run_heads(layout, job) if not h.unfinished]
    for head in reversed(heads[-WINDOW:]):
        yield head.manifest()


READ = ("status", "credits", "pages", "history", "earlier", "endpoint", "asks")
"""What the forecast reads of a query's summary: a night keeps these, not the summaries (twelve nights of a
nightly job of 20,000 dependent queries held whole were ~0.9 GB for `harvest plan`)."""


def _night(run: RunManifest) -> _Night:
    return _Night(
        run.run_id, {q["query_id"]: {k: q[k] for k in READ if k in q} for q in run.queries}, run.full
    )


def _nights(runs: Iterable[RunManifest]) -> list[_Night]:
    """The runs as nights, newest first: a `--continue` run folded into the night it goes on from (its credits
    and pages added to each query's, its status the query's), so a plain night stopped by its budget and the
    continue that finished it are one night's cost. Learned apart, the continue's tail was what a query costs
    a night: `plan --check-expected` passed a budget the next plain night ran out of (336 expected, 486 paid)."""
    nights: list[_Night] = []
    root: dict[str, int] = {}
    read = [(_night(run), run.continues) for run in runs]  # each manifest let go once read (a night is small)
    for night, continues in reversed(read):  # oldest first, so a continue finds the night it goes on from
        at = root.get(continues) if continues else None
        if at is None:
            root[night.run_id] = len(nights)
            nights.append(night)
            continue
        root[night.run_id] = at
        merged = {q: dict(s) for q, s in nights[at].queries.items()}
        for query_id, summary in night.queries.items():
            before = merged.get(query_id, {})
            merged[query_id] = {**before, **summary} | {
                k: int(before.get(k) or 0) + int(summary.get(k) or 0) for k in ("credits", "pages")
            }
        nights[at] = replace(nights[at], queries=merged)
    return nights[::-1]


def expected_costs(
    plan: Plan, runs: Iterable[RunManifest], earlier: Mapping[str, int] | None = None
) -> dict[str, ExpectedCost]:
    """Each line's expected cost, by line id; `runs`: the job's finished runs, newest first; `earlier`: per
    dependent spec query below an incremental one, the queries the next night starts for earlier parent records
    (`flows.forecast.backlog`)."""
    nights = _nights(runs)
    parent_of = {dep.template_id: dep.parent for dep in plan.dependents}
    out: dict[str, ExpectedCost] = {}
    for line in plan.lines:
        if line.dependent and nights and (new := _unlearned(parent_of[line.group], plan, out)):
            found = ExpectedCost(line.worst_case, f"{new} with no night to learn from: the worst case")
        elif line.dependent:
            backlog = None if earlier is None else earlier.get(line.group)
            found = _dependent(line, parent_of[line.group], plan, nights, backlog)
        else:
            asked = [_Night(n.run_id, _asking(line, n.queries), n.full) for n in nights]
            found = _planned(line, line.group in plan.incremental, asked)
        out[line.query_id] = _at_most_worst(line, found)
    return out


def _unlearned(parent: str, plan: Plan, out: Mapping[str, ExpectedCost]) -> str:
    """The parent's lines with no night to learn from (a `for_each` value added since: its first pass finds
    every record new, and each starts a dependent): its dependents' nights say nothing of that. Empty: none."""
    new = [
        p.query_id
        for p in plan.lines
        if p.group == parent and p.query_id in out and not out[p.query_id].learned
    ]
    return ", ".join(new[:3]) + (f" and {len(new) - 3} more" if len(new) > 3 else "")


def _asking(line: CostLine, queries: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Mapping[str, Any]]:
    """A night's summaries, less the line's query where that night asked something else under its id (another
    endpoint, or parameters: `asks`, absent from older manifests): what a pin search paid says nothing of the
    forum search the spec asks now, nor what a search for other words paid."""
    summary = queries.get(line.query_id)
    if summary is None:
        return queries
    asked = summary.get("asks")
    same = asked is None or line.asks is None or asked == line.asks
    if same and summary.get("endpoint", line.endpoint) == line.endpoint:
        return queries
    return {q: s for q, s in queries.items() if q != line.query_id}


def _at_most_worst(line: CostLine, expected: ExpectedCost) -> ExpectedCost:
    """Never above what the spec allows now (a `max_pages` lowered since those nights)."""
    if expected.credits is None or line.worst_case is None or expected.credits <= line.worst_case:
        return expected
    return ExpectedCost(line.worst_case, f"{expected.basis}, at most the worst case", expected.learned)


def _worst(line: CostLine) -> ExpectedCost:
    return ExpectedCost(line.worst_case, "no earlier run to learn from: the worst case")


def _average(values: Sequence[int]) -> int:
    return math.ceil(sum(values) / len(values))


def _nights_words(n: int) -> str:
    return "the last night" if n == 1 else f"the average of the last {n} nights"


def _learning(query_id: str, incremental: bool, night: int, nights: Sequence[_Night]) -> bool | None:
    """Whether `nights[night]` is a learning night of one query: True, False (it ran, but stopped short or
    was its first full pass), None (it did not run that night)."""
    summary = nights[night].queries.get(query_id)
    if summary is None:
        return None
    if summary.get("status") not in COLLECTED:
        return False
    if not incremental:
        return True
    if nights[night].full:
        return False  # it paged fully: no plain night does
    before = next((n.queries[query_id] for n in nights[night + 1 :] if query_id in n.queries), None)
    return before is not None and _complete_after(before)


def _complete_after(summary: Mapping[str, Any]) -> bool:
    """Whether an incremental query's history was complete after the run this summary is of."""
    recorded = summary.get("history")
    if recorded is not None:
        return bool(recorded == "complete")
    return summary.get("status") in ("complete", "caught_up")


def _paid(line: CostLine, summary: Mapping[str, Any]) -> int:
    """What a query's night paid, each of its pages at least at the price the next run holds above the list."""
    credits = int(summary.get("credits", 0))
    return credits if line.listed is None else max(credits, int(summary.get("pages", 0)) * line.cost)


def _planned(line: CostLine, incremental: bool, nights: Sequence[_Night]) -> ExpectedCost:
    paid = [
        _paid(line, nights[n].queries[line.query_id])
        for n in range(len(nights))
        if _learning(line.query_id, incremental, n, nights)
    ][:LAST_NIGHTS]
    if paid:
        return ExpectedCost(_average(paid), _nights_words(len(paid)), learned=True)
    if incremental and any(
        _complete_after(n.queries[line.query_id]) for n in nights if line.query_id in n.queries
    ):
        return ExpectedCost(
            line.cost, f"{counted(1, 'page')}: caught up after its full pass (no night since)", learned=True
        )
    return _worst(line)


def _group_learning(group: str, incremental: bool, night: int, nights: Sequence[_Night]) -> bool | None:
    """Whether a night is a learning night of every query of a spec query (its fan-out, or its instances)."""
    ids = [q for q in nights[night].queries if base_id(q) == group]
    if not ids:
        return None
    return all(_learning(q, incremental, night, nights) for q in ids)


def _dependent(
    line: CostLine, parent: str, plan: Plan, nights: Sequence[_Night], backlog: int | None
) -> ExpectedCost:
    """A dependent line pays for the parent records a night finds new (in an incremental run, those collected
    before are not paid again), so its nights are the parent's: a learning night of the parent in which the
    line's own queries, if any, all ended well; one that started none of them paid 0; the queries a night started
    for earlier parent records (`QuerySpec.earlier`) are left out. The queries the last night left unfinished (a
    budget or a cap stopped them) start again the next night: added; and where `backlog` (the queries the next
    night starts for earlier records; None: not below an incremental query) is more, the rest: a dependent added
    or changed since."""
    parent_incremental = parent in plan.incremental
    paid: list[int] = []
    for n, night in enumerate(nights):
        if night.full and root_of(parent, plan) in plan.incremental:
            continue  # every dependent ran again: no plain night does
        if not _parents_learning(parent, plan, n, nights):
            continue
        mine = [q for q_id, q in night.queries.items() if base_id(q_id) == line.group]
        if any(q.get("status") not in COLLECTED for q in mine):
            continue  # the budget stopped them that night: not what a night costs
        paid.append(sum(_paid(line, q) for q in mine if not q.get("earlier")))
        if len(paid) == LAST_NIGHTS:
            break
    unfinished = _left_over(line, nights)
    left, said = unfinished, f"{unfinished} left unfinished the last night"
    if backlog is not None and backlog > unfinished:  # more than those: added or changed since
        more = counted(backlog - unfinished, "query")
        never = f"for earlier {parent} records, never asked as the spec asks now"
        left, said = backlog, f"{said}, {more} {never}" if unfinished else f"{more} {never}"
    if paid:
        which = f"new {parent} records only" if parent_incremental else f"each {parent} record"
        basis = f"{_nights_words(len(paid))} ({which})"
        return _with_left(line, plan, ExpectedCost(_average(paid), basis, learned=True), left, said)
    root = root_of(parent, plan)
    if root in plan.incremental and _has_complete_pass(root, nights):
        none_yet = ExpectedCost(
            0, f"new {root} records only: none known yet (no night since the full pass)", True
        )
        return _with_left(line, plan, none_yet, left, said)
    return _worst(line)


def _above(group: str, plan: Plan) -> str | None:
    """The spec query a dependent spec query's values come from; None for a query that is not dependent."""
    return next((dep.parent for dep in plan.dependents if dep.template_id == group), None)


def root_of(group: str, plan: Plan) -> str:
    """The spec query at the top of a dependent chain (the channel's videos, above their comments' replies)."""
    above = _above(group, plan)
    return group if above is None else root_of(above, plan)


def _parents_learning(parent: str, plan: Plan, night: int, nights: Sequence[_Night]) -> bool:
    """Whether a night is a learning night of a dependent line's parent. A dependent parent that started no
    query that night found no new record of its own parent: the night is its parent's, up the chain (the
    night a channel's incremental videos found no new video started no comments, so no replies either)."""
    learning = _group_learning(parent, parent in plan.incremental, night, nights)
    if learning is None:
        above = _above(parent, plan)
        return above is not None and _parents_learning(above, plan, night, nights)
    return learning


def _left_over(line: CostLine, nights: Sequence[_Night]) -> int:
    """Queries of a dependent line the last night left unfinished: the next night starts them again."""
    if not nights:
        return 0
    return sum(
        1
        for q_id, q in nights[0].queries.items()
        if base_id(q_id) == line.group and q.get("status") not in COLLECTED
    )


def _with_left(line: CostLine, plan: Plan, expected: ExpectedCost, left: int, said: str) -> ExpectedCost:
    """The expected cost and `left` queries more (left unfinished the last night, or started for earlier parent
    records: `said`), each at its worst case, one page when that is unbounded, within the fan-out's
    `max_credits_total`."""
    if not left or expected.credits is None:
        return expected
    each = line.each if line.each is not None else line.cost
    credits = expected.credits + left * each
    cap = plan.caps.get(line.group)
    credits = credits if cap is None else min(credits, cap)
    return ExpectedCost(credits, f"{expected.basis}; {said}", learned=True)


def _has_complete_pass(group: str, nights: Iterable[_Night]) -> bool:
    return any(_complete_after(q) for n in nights for q_id, q in n.queries.items() if base_id(q_id) == group)
