"""`harvest plan`: the queries a run would execute, their worst and expected credits against the budget, and
what the budget would leave undone.

The figures come from three places, each one idea: the plan's worst case (`flows.run.plan`), the expected case
the last nights paid (`flows.forecast.last_nights`), and the worst case played against the budget
(`flows.forecast.shortfall`). All of them at the prices the next run holds from its first request: the price list's,
or what the service was last seen charging above it (`flows.run.chain.next_prices`), said one line per price.
`--check` makes the verdict an exit code a script can act on. Where the job's last run is unfinished (killed,
interrupted), one line says that the next `harvest run` resumes it, or why it will be refused: a night's check
that passes should not be followed by a run that resumes or refuses without a word.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from harvest.connectors.catalog.endpoints import above_the_list
from harvest.connectors.plurals import counted
from harvest.flows.commands.output_arg import output_directory
from harvest.flows.console import add_row, out, prose, table
from harvest.flows.forecast.backlog import earlier_dependents
from harvest.flows.forecast.last_nights import ExpectedCost, expected_costs, recent_runs
from harvest.flows.forecast.shortfall import LineOutcome, Shortfall, shortfall
from harvest.flows.run.chain import next_prices
from harvest.flows.run.plan import Plan, plan
from harvest.flows.run.start import resume_start, unfinished_run
from harvest.flows.spec import JobSpec, UsageError
from harvest.tasks.output.job_lock import is_locked
from harvest.tasks.output.layout import OutputLayout

SHORT_EXIT = 3
"""`harvest plan --check` when the budget cannot cover the plan (and a run whose budget left queries never
started, when the spec asks: `budget.unstarted_exit_code`)."""
NAMED = 3
"""Queries of a fan-out named in a line before the rest are counted."""


def _figure(credits: int | None, unknown: str = "unbounded") -> str:
    return unknown if credits is None else str(credits)


def expected_total(result: Plan, expected: Mapping[str, ExpectedCost]) -> int | None:
    """The expected credits of the whole plan, each fan-out within its `max_credits_total`."""
    return result.total(lambda line: expected[line.query_id].credits)


def _rows(result: Plan, expected: Mapping[str, ExpectedCost]) -> None:
    rows = table(
        "query", "endpoint", "expected", "worst case", "why",
        title=f"{result.name}: credits", right=["expected", "worst case"],
    )  # fmt: skip
    for group in result.groups:
        lines = [line for line in result.lines if line.group == group]
        for line in lines:
            mine = expected[line.query_id]
            why = f"{line.basis}; expected: {mine.basis}" if mine.learned else line.basis
            add_row(rows, line.query_id, line.endpoint, _figure(mine.credits, "unknown"),
                    _figure(line.worst_case), why)  # fmt: skip
        cap = result.caps.get(group)
        if cap is not None and not lines[0].dependent:
            add_row(rows, f"{group} (its {len(lines)} queries together)", "", "",
                    _figure(result.group_total(group)), f"max_credits_total {cap} for all")  # fmt: skip
    rows.add_section()
    total = _figure(expected_total(result, expected), "unknown")
    add_row(rows, "total", "", total, _figure(result.worst_case), "")
    out.print(rows)


def _learned(expected: Mapping[str, ExpectedCost]) -> str:
    learned = [e.learned for e in expected.values()]
    if not any(learned):
        return "no earlier run of the job to learn from: the worst case"
    if all(learned):
        return "learned from the job's last nights"
    return "learned from the job's last nights; the worst case where a query has none"


def _named(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:NAMED])
    return shown if len(ids) <= NAMED else f"{shown} and {len(ids) - NAMED} more"


def short_lines(result: Shortfall) -> list[str]:
    """What the worst case leaves undone: per spec query, its queries that would not start (a fan-out's values
    named, a dependent's counted); then, in one sentence, the queries that would stop before their last page
    (bounded ones), and those that would page until the budget ran out (no `max_pages` bounds them)."""
    by_group: dict[str, list[LineOutcome]] = {}
    for outcome in result.outcomes:
        by_group.setdefault(outcome.line.group, []).append(outcome)
    said, stopping = [], []
    endless = [o.line.query_id for o in result.outcomes if o.cut_short and o.line.pages is None]
    for group, outcomes in by_group.items():
        if outcomes[0].line.dependent:
            (o,) = outcomes
            if o.not_started is None:
                said.append(f"{o.line.query_id}: an unknown number would not start (unbounded)")
            elif o.not_started:
                said.append(f"{o.line.query_id}: {o.not_started} of {o.instances} would not start")
            if o.cut_short and o.line.pages is not None:
                stopping.append(f"{o.line.query_id} ({o.cut_short} of {o.instances})")
            continue
        unstarted = [o.line.query_id for o in outcomes if o.not_started]
        short = [o for o in outcomes if o.cut_short and o.line.pages is not None]
        if len(outcomes) == 1:
            said += [f"{group} would not start"] if unstarted else []
            stopping += [group] if short else []
            continue
        if unstarted:
            said.append(f"{group}: {len(unstarted)} of {len(outcomes)} would not start: {_named(unstarted)}")
        if short:
            stopping.append(f"{group} ({len(short)} of {len(outcomes)})")
    if stopping:
        said.append("would stop before their last page: " + ", ".join(stopping))
    if endless:
        said.append("would page until the budget ran out (unbounded): " + _named(endless))
    return said


def _verdict(result: Plan, expected: int | None) -> str:
    worst = result.worst_case
    if worst is not None and worst <= result.budget:
        return "the budget covers the worst case"
    if expected is not None and expected <= result.budget:
        return "the budget covers the expected case, not the worst case"
    if expected is not None:
        return "the budget covers neither the expected case nor the worst case"
    return "the budget does not cover the worst case; the expected case is unknown"


def show_plan(
    spec: JobSpec, budget: int | None, output: Path | None, check: bool = False, check_expected: bool = False
) -> int:
    """Print the plan; the exit code: 0, or `SHORT_EXIT` when the case `--check` (the worst) or
    `--check-expected` names is one the budget does not cover. Both at once are refused, as `run --fresh
    --continue` is: which the user meant is not known (the second given won)."""
    if check and check_expected:
        raise UsageError("--check and --check-expected exclude each other; give the case to check")
    layout = OutputLayout(output_directory(output, "plan") if output is not None else spec.output)
    which = "expected" if check_expected else "worst" if check else None
    learned = above_the_list(next_prices(layout, spec.name), spec.endpoints())
    result = plan(spec, budget, learned)
    expected = expected_costs(
        result, recent_runs(layout, spec.name), earlier_dependents(result, layout, spec.name)
    )
    _rows(result, expected)
    for key, credits in sorted(learned.items()):
        if key.split("?", 1)[0] not in {line.endpoint for line in result.lines}:
            continue
        prose(
            f"{key}: {counted(credits, 'credit')} a request, the price the service was last seen charging, above "
            "the cost table's: the next run holds it from its first request, and so do these figures"
        )
    total = expected_total(result, expected)
    policy = "shared breadth-first" if result.policy == "breadth_first" else "taken in spec order (greedy)"
    prose(f"budget: {counted(result.budget, 'credit')}; a short one is {policy}")
    prose(
        f"worst case: {_figure(result.worst_case)}; expected: {_figure(total, 'unknown')} ({_learned(expected)})"
    )
    prose(_verdict(result, total))
    if not result.covered:
        play = shortfall(result)
        if not play.known:
            prose("what the worst case would leave undone is past counting (the budget is too large for it)")
        elif said := short_lines(play):
            prose("if the worst case happens, the budget runs out first:")
            for line in said:
                prose(f"  {line}")
        else:
            prose("if the worst case happens, every query still starts and ends")
    _next_run(spec, layout)
    covered = {"worst": result.covered, "expected": total is not None and total <= result.budget}
    return SHORT_EXIT if which is not None and not covered[which] else 0


def _next_run(spec: JobSpec, layout: OutputLayout) -> None:
    """What the next plain `harvest run` does with the job's unfinished run, if there is one: these figures are
    a new run's, while the resume pages on under that run's budget, what it spent included."""
    previous = unfinished_run(layout, spec.name)
    if previous is None:
        return
    if is_locked(layout.lock_file(spec.name)):  # running now: the next run is refused until it ends
        prose(
            f"run {previous.run_id} of job {spec.name} is running now: a `harvest run` meanwhile is refused"
        )
        return
    how = "interrupted" if previous.status == "interrupted" else "killed"
    try:
        resumed = resume_start(layout, previous, spec, previous.service)
    except UsageError as exc:
        prose(f"the next `harvest run` is refused: {exc}")
        return
    added = "; the queries the spec added since start at page 1" if resumed.added else ""
    prose(
        f"the next `harvest run` resumes run {previous.run_id} ({how}) rather than starting a new one: "
        f"{counted(resumed.own.total_spent, 'credit')} of its budget of {previous.budget} spent, "
        f"{counted(len(resumed.ended), 'query')} it ended not asked again{added}"
    )
