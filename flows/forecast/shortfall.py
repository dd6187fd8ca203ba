"""The plan's worst case played against the budget: which queries would not start, and which would stop short.

A budget below the worst case is not an error: the run stops each query that finds it spent (`budget_exhausted`,
its cursor kept). What a nightly job needs to know before it runs is who would pay for the shortfall. The plan
plays its worst case (every query takes its most pages, every page of a parent is full of new records, each
starting one dependent query) through the budget as the run's policy shares it:

- `breadth_first`: the next page goes to the query with the fewest pages so far (spec order among equals), so
  every query gets page k before any gets page k+1, and a dependent query found on a parent's page starts with
  none: its first page comes before the leaders' next ones;
- `greedy`: the queries take their pages in spec order, the dependent ones after the queries they come from.

Inside a fan-out with `max_credits_total`, its queries stop when the cap is spent. Queries that are alike (the
instances of one dependent query at the same page) move together, so a fan-out of thousands is counted, not
walked one by one; a run of rounds nothing can change (no new queries, nobody ending) is taken in one step.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from harvest.flows.run.plan import CostLine, Plan

STEPS = 200_000
"""Moves of the play before it gives up (a budget vastly larger than its pages' prices, with dependents
starting on every page): the outcome is then unknown, never guessed."""


@dataclass(frozen=True)
class LineOutcome:
    """What the worst case leaves of one line of the plan."""

    line: CostLine
    instances: int | None
    """Queries of the line in the worst case (1 for a planned query; None: unbounded)."""
    started: int
    """How many took their first page."""
    finished: int
    """How many took every page of their worst case."""

    @property
    def not_started(self) -> int | None:
        return None if self.instances is None else self.instances - self.started

    @property
    def cut_short(self) -> int:
        return self.started - self.finished


@dataclass
class Shortfall:
    """The worst case against the budget: per line, queries not started and cut short."""

    outcomes: list[LineOutcome] = field(default_factory=list)
    spent: int = 0
    known: bool = True
    """False when the play gave up (`STEPS`): the plan then says it cannot tell."""

    @property
    def short(self) -> list[LineOutcome]:
        """The lines where some query would not start or would stop before its last page."""
        return [o for o in self.outcomes if o.not_started != 0 or o.cut_short]


class _Play:
    def __init__(self, plan: Plan, budget: int) -> None:
        self.plan, self.budget = plan, budget
        self.lines = plan.lines
        self.cohorts: Counter[tuple[int, int]] = Counter()
        """(line index, pages taken) -> queries of that line at that page."""
        self.started: Counter[int] = Counter()
        self.finished: Counter[int] = Counter()
        self.spawned: Counter[int] = Counter()
        self.unbounded: set[int] = set()
        """Lines whose instances cannot be counted: a parent line's page size is unknown."""
        self.cap_left = dict(plan.caps)
        groups = [line.group for line in self.lines]
        self.children = {
            n: [k for k, line in enumerate(self.lines) if line.dependent and _parent(plan, line) == groups[n]]
            for n in range(len(self.lines))
        }
        for n, line in enumerate(self.lines):
            if not line.dependent:
                self.cohorts[(n, 0)] = 1
                self.spawned[n] = 1
        self.breadth_first = plan.policy != "greedy"

    def _pages(self, n: int) -> int | None:
        return self.lines[n].pages

    def _active(self) -> list[tuple[int, int]]:
        return [
            (n, taken)
            for (n, taken), count in self.cohorts.items()
            if count and (self._pages(n) is None or taken < self._pages(n))  # type: ignore[operator]
        ]

    def _affordable(self, n: int, count: int) -> int:
        price = self.lines[n].cost
        if price == 0:
            return count
        fit = min(count, self.budget // price)
        cap = self.cap_left.get(self.lines[n].group)
        return fit if cap is None else min(fit, cap // price)

    def _pay(self, n: int, members: int, rounds: int = 1) -> None:
        credits = self.lines[n].cost * members * rounds
        self.budget -= credits
        group = self.lines[n].group
        if group in self.cap_left:
            self.cap_left[group] -= credits

    def _advance(self, n: int, taken: int) -> None:
        """The queries of line n at page `taken` each take one page, as far as credits go; the rest end."""
        count = self.cohorts.pop((n, taken))
        moved = self._affordable(n, count)
        if moved:
            self._pay(n, moved)
            self.cohorts[(n, taken + 1)] += moved
            if taken == 0:
                self.started[n] += moved
            if self._pages(n) == taken + 1:
                self.finished[n] += moved
            self._spawn(n, moved)

    def _spawn(self, n: int, pages: int) -> None:
        """The dependent queries `pages` full pages of line n start."""
        for child in self.children[n]:
            size = self.lines[n].records
            if size is None:
                self.unbounded.add(child)
                continue
            self.cohorts[(child, 0)] += pages * size
            self.spawned[child] += pages * size

    def _leap(self, active: list[tuple[int, int]]) -> bool:
        """Rounds nothing changes (same page for all, no dependents to start) taken in one step."""
        if len({taken for _, taken in active}) != 1 or any(self.children[n] for n, _ in active):
            return False
        (taken,) = {taken for _, taken in active}
        bounds = [self._pages(n) - taken for n, _ in active if self._pages(n) is not None]  # type: ignore[operator]
        cost = sum(self.lines[n].cost * self.cohorts[(n, t)] for n, t in active)
        if cost:
            bounds.append(self.budget // cost)
        by_group: Counter[str] = Counter()
        for n, t in active:
            by_group[self.lines[n].group] += self.lines[n].cost * self.cohorts[(n, t)]
        bounds += [self.cap_left[g] // c for g, c in by_group.items() if g in self.cap_left and c]
        if not bounds:
            return False  # free and unbounded: nothing here takes credits from anyone
        rounds = min(bounds) - 1  # the last round goes one cohort at a time
        if rounds < 1:
            return False
        for n, t in active:
            count = self.cohorts.pop((n, t))
            self._pay(n, count, rounds)
            self.cohorts[(n, t + rounds)] += count
            if t == 0:
                self.started[n] += count
            if self._pages(n) == t + rounds:
                self.finished[n] += count
        return True

    def play(self) -> bool:
        for _ in range(STEPS):
            active = self._active()
            if not active:
                return True
            if self.breadth_first and self._leap(active):
                continue
            key = (lambda c: (c[1], c[0])) if self.breadth_first else (lambda c: c)
            n, taken = min(active, key=key)
            if not self.breadth_first and not self.children[n] and self._run_out(n, taken):
                continue
            self._advance(n, taken)
        return False

    def _run_out(self, n: int, taken: int) -> bool:
        """Greedy: a line without dependents takes its pages in one step, as far as credits go."""
        count = self.cohorts[(n, taken)]
        pages = self._pages(n)
        price = self.lines[n].cost * count
        bounds = [] if pages is None else [pages - taken]
        if price:
            bounds.append(self.budget // price)
            cap = self.cap_left.get(self.lines[n].group)
            if cap is not None:
                bounds.append(cap // price)
        rounds = min(bounds) if bounds else 0
        if rounds < 2:
            return False
        del self.cohorts[(n, taken)]
        self._pay(n, count, rounds - 1)
        self.cohorts[(n, taken + rounds - 1)] += count
        if taken == 0:
            self.started[n] += count
        return True


def _parent(plan: Plan, line: CostLine) -> str:
    return next(dep.parent for dep in plan.dependents if dep.template_id == line.group)


def shortfall(plan: Plan) -> Shortfall:
    """The outcome of the plan's worst case under its budget and policy."""
    play = _Play(plan, plan.budget)
    known = play.play()
    outcomes = []
    for n, line in enumerate(plan.lines):
        instances = line.instances if line.dependent else 1
        if n in play.unbounded or (instances is None and line.dependent):
            instances = None
        outcomes.append(LineOutcome(line, instances, play.started[n], play.finished[n]))
    return Shortfall(outcomes, plan.budget - play.budget, known)
