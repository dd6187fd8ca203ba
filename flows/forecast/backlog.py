"""What the next incremental night starts for parent records earlier nights found: dependents never collected as
the spec asks them now (added to the spec, or their endpoint or a parameter changed since, or stopped short).

A night's learned cost is what its new parent records started; these come on top, once. They are counted as the
run counts them (`flows.run.coverage.dependents_left`, on the parent values the output holds), so the plan
expects the night the run will have: a dependent added to a job of a thousand videos is a thousand requests,
not nothing.
"""

from __future__ import annotations

from collections import Counter

from harvest.connectors.paging.pager import base_id
from harvest.flows.forecast.last_nights import root_of
from harvest.flows.run.discovery import Discovery
from harvest.flows.run.plan import Plan
from harvest.flows.run.start import New, job_coverage
from harvest.tasks.output.layout import OutputLayout


def earlier_dependents(plan: Plan, layout: OutputLayout, job: str) -> dict[str, int]:
    """Per dependent spec query below an incremental one, the queries the next incremental night starts for
    earlier parent records (0 included: none); the others are not in it. The run's own rule: a new incremental
    run's `Discovery.left_over`."""
    below = {dep.template_id for dep in plan.dependents if root_of(dep.parent, plan) in plan.incremental}
    counts: Counter[str] = Counter({group: 0 for group in below})
    if not below or not layout.db.exists():
        return dict(counts)
    night = Discovery(plan, New(coverage=job_coverage(layout, job)), incremental=True)
    for query in plan.queries:
        if query.incremental:
            counts.update(base_id(child.query_id) for child in night.left_over(layout.db, query))
    return dict(counts)
