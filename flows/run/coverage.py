"""What earlier runs of a job collected, per query id, derived from the run manifests.

The manifests are the receipts every run writes (and `harvest rebuild` keeps), so this survives a lost or
rebuilt database. Two things are derived:

- **histories**: for each query, whether its history is complete (a pass went from the top of its newest-first
  listing to the end, or down to items that were already complete), or partial and where its older,
  uncollected items begin (`backfill`), and the run in which it last became complete (`trusted_until`: keys
  landed up to that run may end paging). An incremental query's next run pages from these.
- **collected**: query ids whose newest status says their data was collected (complete, caught up, not found,
  capped by `max_pages`), with what they asked (endpoint, parameters): dependent queries of an incremental
  parent that an incremental run need not pay for again while they ask the same (`Coverage.has_collected`; a
  dependent whose spec changed its endpoint or a parameter under the same id asks anew); the parent's other
  earlier records start theirs from the database (`dependents_left`).
- **left off**: query ids whose newest run stopped them with a cursor kept (a budget stop, a failure, a kill),
  with what they asked and how many pages of their listing the nights paid: such a dependent of an
  incremental parent is picked up at that cursor by the next incremental night (`Coverage.picked_up`), not
  paid again from its first page.

Runs written before histories were recorded (no `history` in a query's summary) are read from statuses:
`complete` closes a history, `caught_up` keeps it as it was (that rerun may have stopped on items of an
unfinished pass), any other stop leaves it partial at its next cursor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harvest.connectors.catalog.paging_styles import Cursor
from harvest.connectors.paging.known_items import History
from harvest.connectors.paging.pager import QuerySpec
from harvest.flows.run.plan import DependentQuery, instantiate
from harvest.tasks.database.known_keys import parent_values
from harvest.tasks.output.manifest import CONTINUABLE, RunManifest

COLLECTED = frozenset({"complete", "caught_up", "not_found", "max_pages"})
"""Statuses of a query whose data was collected (the others stopped early: budget, failure, a killed run)."""


@dataclass(frozen=True)
class QueryHistory:
    history: History
    backfill: Cursor | None = None
    """Partial: where the older items not collected yet begin; None: unknown, page from the top."""
    trusted_until: str | None = None
    """The run in which the history last became complete; None: never."""


@dataclass(frozen=True)
class LeftOff:
    """Where a query's newest run stopped it, to be asked again from there."""

    endpoint: str
    asks: str | None
    cursor: Cursor | None
    follow_state: dict[str, Any] | None
    pages: int
    """Pages of its listing paid up to the cursor, over the nights that went on from one another."""


@dataclass
class Coverage:
    histories: dict[str, QueryHistory] = field(default_factory=dict)
    collected: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    """Query id -> (endpoint, `QuerySummary.asks`) of its newest collecting run."""
    left_off: dict[str, LeftOff] = field(default_factory=dict)

    def dependent(self, parent: QuerySpec, child: QuerySpec, incremental_run: bool) -> QuerySpec | None:
        """The query a parent's value starts this night, or None. In an incremental run a dependent query of an
        incremental parent that earlier runs collected is not paid for again: only new parent records start
        dependents (`--full` fetches them all again), and one an earlier night stopped goes on at its cursor
        (`picked_up`). A child that is incremental itself still runs, for its own new items."""
        if not (incremental_run and parent.incremental and not child.incremental):
            return child
        return None if self.has_collected(child) else self.picked_up(child)

    def picked_up(self, child: QuerySpec) -> QuerySpec | None:
        """A dependent query an earlier night stopped with its cursor kept, from that cursor (its `max_pages`
        less what the nights paid of it; None: that used it up), as asked now: from its first page when it asks
        something else now. Asked again from the top, a thread a budget stopped 24 pages in paid those 24
        pages again every night, and one longer than a night's budget never ended."""
        left = self.left_off.get(child.query_id)
        if left is None or not _asks_as(child, left.endpoint, left.asks):
            return child
        pages = child.max_pages
        if pages is not None:
            if pages <= left.pages:
                return None
            pages -= left.pages
        return replace(
            child, start_cursor=left.cursor, follow_state=left.follow_state, pages_before=left.pages,
            max_pages=pages,
        )  # fmt: skip

    def has_collected(self, query: QuerySpec) -> bool:
        """Whether an earlier run collected `query` asking what it asks now (its endpoint alone where that run's
        manifest did not say)."""
        found = self.collected.get(query.query_id)
        if found is None:
            return False
        return _asks_as(query, *found)


def _asks_as(query: QuerySpec, endpoint: str, asks: str | None) -> bool:
    """Whether `query` asks now what an earlier run's summary of it asked: the same endpoint, and the same
    parameters where both say (`asks` is absent from older manifests)."""
    return endpoint == query.endpoint and (asks is None or query.asks is None or asks == query.asks)


def _step(before: QueryHistory | None, run_id: str, query: Mapping[str, Any]) -> QueryHistory | None:
    """The history after one run's summary of the query."""
    trusted = before.trusted_until if before else None
    recorded = query.get("history")
    if recorded == "complete":
        return QueryHistory("complete", None, run_id)
    if recorded == "partial":
        return QueryHistory("partial", query.get("backfill_cursor"), trusted)
    status = query.get("status")
    if status == "complete":
        return QueryHistory("complete", None, run_id)
    if status == "caught_up":
        closed = before is not None and before.history == "complete"
        return QueryHistory("complete", None, run_id) if closed else before
    if status == "not_found" or not query.get("pages"):
        return before  # nothing was paged: nothing changed
    return QueryHistory("partial", query.get("next_cursor"), trusted)


def coverage_of(manifests: Iterable[RunManifest]) -> Coverage:
    """Fold the finished runs, oldest first (`tasks.output.manifest.run_heads` order)."""
    out = Coverage()
    landed: dict[str, bool] = {}  # query id -> its newest summary landed records
    for run in manifests:
        if run.unfinished:
            continue  # a run being resumed: its start saw the runs before it
        for query in run.queries:
            qid = query["query_id"]
            history = _step(out.histories.get(qid), run.run_id, query)
            if history is None:
                out.histories.pop(qid, None)
            else:
                out.histories[qid] = history
            if _never_started(query):
                continue  # what an earlier night collected of it is still collected
            if _collected(query, landed.get(qid, False)):
                out.collected[qid] = (str(query.get("endpoint", "")), query.get("asks"))
            else:
                out.collected.pop(qid, None)
            landed[qid] = bool(query.get("records"))
            _left_off(out.left_off, run, query)
    return out


def _never_started(query: Mapping[str, Any]) -> bool:
    """A query the run listed but never sent a request for (a budget or a fan-out's cap left it unstarted):
    taken for uncollected, a `--full` night that a cap stopped made the next nights pay again for every
    dependent it had not started, each collected before. (`sent` is absent from older manifests: not known.)"""
    return query.get("sent") == 0 and not query.get("pages") and query.get("status") not in COLLECTED


def _left_off(left_off: dict[str, LeftOff], run: RunManifest, query: Mapping[str, Any]) -> None:
    """Where the query stands after this run: a run that `--continue`s the one before it counts on from its
    pages; any other counts from where it started (`QuerySpec.pages_before`)."""
    qid = query["query_id"]
    waiting = query.get("next_cursor") or query.get("follow_state")
    if query.get("status") not in CONTINUABLE or not waiting or query.get("refused_for_good"):
        left_off.pop(qid, None)
        return
    before = left_off.get(qid)
    pages = int(query.get("pages") or 0)
    pages += before.pages if run.continues is not None and before else int(query.get("pages_before") or 0)
    left_off[qid] = LeftOff(
        str(query.get("endpoint", "")),
        query.get("asks"),
        query.get("next_cursor"),
        query.get("follow_state"),
        pages,
    )


def _collected(query: Mapping[str, Any], landed_before: bool) -> bool:
    """Whether a query's summary says its data was collected. A `max_pages` stop that paged nothing itself (a
    continued query whose chain had used the cap up) collected only what the run before it landed: earlier
    versions counted a page damaged on both tries as paged, so its `--continue` stopped at `max_pages` without
    asking for it again; recorded as collected, no later night asked for it either."""
    status = query.get("status")
    if status == "max_pages" and not query.get("pages"):
        return landed_before
    return status in COLLECTED


def dependents_left(
    db: Path,
    parent: QuerySpec,
    deps_of: Callable[[str], Sequence[DependentQuery]],
    coverage: Coverage,
    incremental_run: bool,
) -> tuple[list[QuerySpec], list[str]]:
    """Dependent queries of an incremental parent's earlier records that were never collected (a budget
    stop, a failure, a dependent added to the spec since), at any depth, and notes on values that cannot be
    parameters. None unless the parent is incremental and the run is too (`--full` pages every record again).
    `deps_of`: the dependent queries of a query id.

    An incremental run does not page those records again, so their dependents start from what the database
    holds; those collected before are not paid for again, and their own dependents are looked for the same way
    (a video's comments collected, their replies a budget stopped: the replies start). Both runners (in process
    and Dask) call this."""
    children: list[QuerySpec] = []
    notes: list[str] = []
    if not (parent.incremental and incremental_run):
        return children, notes
    level = [parent]
    seen: set[str] = {parent.query_id}
    while level:
        below: list[QuerySpec] = []
        for dep, parents in _by_dependent(level, deps_of):
            values = parent_values(db, dep.kind, dep.field, [p.query_id for p in parents])
            for query_id in (p.query_id for p in parents):
                for value in values.get(query_id, ()):
                    try:
                        child = instantiate(dep, value)
                    except ValueError as exc:
                        notes.append(str(exc))  # it names the dependent query
                        continue
                    if child.query_id in seen:
                        continue
                    seen.add(child.query_id)
                    if coverage.has_collected(child):
                        below.append(child)
                    elif (picked := coverage.picked_up(child)) is not None:
                        children.append(replace(picked, earlier=True))
        level = below
    return children, notes


def _by_dependent(
    parents: Sequence[QuerySpec], deps_of: Callable[[str], Sequence[DependentQuery]]
) -> list[tuple[DependentQuery, list[QuerySpec]]]:
    """Each dependent query with the parents of this level it depends on: one read of the database each."""
    grouped: dict[str, tuple[DependentQuery, list[QuerySpec]]] = {}
    for parent in parents:
        for dep in deps_of(parent.query_id):
            grouped.setdefault(dep.template_id, (dep, []))[1].append(parent)
    return list(grouped.values())
