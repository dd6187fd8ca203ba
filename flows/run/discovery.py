"""Which dependent queries a parent starts: one rule for both runners, the in-process fan-out and Dask rounds.

The two differ only in where a parent's values are read (the page hook in this process, or a Dask worker that
sends them back with its round); what a value starts is decided here: an empty or already seen value starts
nothing, one the child's parameter refuses is noted (a run does not stop for one odd parent value), and in an
incremental run a child that earlier runs collected is not paid for again (`Coverage.dependent`). A parent's
earlier records whose dependents were never collected start them too (`flows.run.coverage.dependents_left`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from harvest.connectors.paging.pager import QuerySpec
from harvest.flows.run.coverage import dependents_left
from harvest.flows.run.plan import DependentQuery, Plan, base_id, instantiate
from harvest.flows.run.start import RunStart


class Discovery:
    def __init__(self, the_plan: Plan, start: RunStart, incremental: bool) -> None:
        self.start = start
        self.incremental = incremental
        self._by_parent: dict[str, list[DependentQuery]] = {}
        for dep in the_plan.dependents:
            self._by_parent.setdefault(dep.parent, []).append(dep)
        self._seen: dict[str, set[Any]] = {dep.template_id: set() for dep in the_plan.dependents}
        self.skipped: list[str] = []
        """Parent values that could not start a query, with why: the run logs them."""

    def dependents_of(self, query_id: str) -> list[DependentQuery]:
        return self._by_parent.get(base_id(query_id), [])

    def children(self, parent: QuerySpec, dep: DependentQuery, values: Iterable[Any]) -> Iterator[QuerySpec]:
        """The queries the parent's new values start, each value once per dependent query."""
        seen = self._seen[dep.template_id]
        for value in values:
            if value in (None, "") or value in seen:
                continue
            seen.add(value)
            try:
                child = instantiate(dep, value)
            except ValueError as exc:  # one odd parent value must not stop the run
                self.skipped.append(str(exc))  # it names the dependent query
                continue
            started = self.start.coverage.dependent(parent, child, self.incremental)
            if started is not None:
                yield started

    def left_over(self, db: Path, query: QuerySpec) -> list[QuerySpec]:
        """The dependents an incremental parent's earlier records never got (their runs stopped first), at any
        depth: those of its collected dependents' records too."""
        children, notes = dependents_left(
            db, query, self.dependents_of, self.start.coverage, self.incremental
        )
        self.skipped += notes
        return children

    def started_before(self) -> list[QuerySpec]:
        """The queries a resumed run's earlier sessions started and did not end, in start order. A dependent
        whose parent ended before the stop is found by no parent's pages this session (Dask rounds reland only
        the queries that go on; the local runner lands its kept parents' pages again, `Fanout.rediscover`):
        left out, it was never asked again and the run said `complete` without it."""
        ended = self.start.kept
        return [QuerySpec(**q) for qid, q in self.start.journal.started.items() if qid not in ended]
