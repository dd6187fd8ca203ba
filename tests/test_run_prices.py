"""`harvest run` when the service charges more than the job's cost table, checked against the sandbox's own bill.

Two jobs the audit found passing their budget by far more than one page (60 fanned-out queries, concurrency 8):
a cost lowered to 0 under `allow_lower_costs` spent 62 credits of a budget of 5, and a service charging 5 where
the catalog says 1 spent 60 of 30. The sandbox adds latency to every answer so that every query has asked for
its first page before the first answer arrives, as on a real service.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

# Prefect binds its log handlers to sys.stderr on first import: import it now, not inside a CliRunner
# invocation whose streams are closed afterwards.
import harvest.flows.collect  # noqa: F401
from harvest.flows.cli import app
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import running
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import all_manifests
from tests.crawl_helpers import data_entries
from tests.endpoints import FEED, PINS
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, job_spec, rows, scalar, write_spec
from tests.prefect_helpers import flow_run_states, task_runs
from tests.process_helpers import finish, start_run, wait_for_requests
from tests.test_resume_kill import kill_hard

runner = CliRunner()

BUG_5 = {  # a negotiated price the service does not honour: 0 in the spec, 1 at the service
    "endpoint": PINS,
    "param": "query",
    "spec": {"costs": {PINS: 0}, "allow_lower_costs": True},
    "service_costs": {},
    "budget": 5,
    "price": 1,
}
BUG_6 = {  # a price rise the catalog does not know: 1 in the catalog, 5 at the service
    "endpoint": FEED,
    "param": "handle",
    "spec": {},
    "service_costs": {FEED: 5},
    "budget": 30,
    "price": 5,
}


@pytest.mark.parametrize("case", [BUG_5, BUG_6], ids=["lowered-cost", "price-rise"])
def test_sixty_fanned_out_queries_pass_the_budget_by_one_page_at_most(
    prefect_harness: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    case: dict[str, Any],
) -> None:
    budget, price = case["budget"], case["price"]
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages=(3, 3), costs=case["service_costs"], latency=0.2
    )
    output = tmp_path / "out"
    with running(config) as sb:
        monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
        spec = write_spec(
            tmp_path,
            job_spec(
                sb.base_url,
                output,
                [
                    {
                        "id": "q",
                        "endpoint": case["endpoint"],
                        "for_each": {case["param"]: [f"v{i}" for i in range(60)]},
                    }
                ],
                name="prices",
                credits=budget,
                concurrency=8,
                **case["spec"],
            ),
        )
        with caplog.at_level(logging.WARNING, "harvest.ledger"):
            result = runner.invoke(app, ["run", str(spec)])
        billed = sb.billed_total()
        answered = len(data_entries(sb))

    assert result.exit_code == 0, result.output
    # The first answer shows the price before any other request is granted; with the budget not yet touched,
    # the one request's excess still fits: the bill is exactly the budget.
    assert billed == budget, f"the sandbox billed {billed} for a budget of {budget}"
    assert answered == budget // price
    assert f"credits spent: {budget} of a budget of {budget}" in result.stdout
    assert "status: budget_exhausted" in result.stdout
    db = output / "harvest.duckdb"
    assert scalar(db, "SELECT credits_spent FROM runs") == budget
    assert scalar(db, "SELECT service_billed FROM runs") == billed
    assert scalar(db, "SELECT sum(credits) FROM requests") == billed
    assert scalar(db, "SELECT count(*) FROM requests WHERE status_code = 200") == answered
    # every other query stopped where it was, for `--continue`
    statuses = rows(db, "SELECT status, count(*) FROM query_state GROUP BY status")
    assert statuses == [("budget_exhausted", 60)], statuses
    warned = [r.getMessage() for r in caplog.records if "the service charged" in r.getMessage()]
    assert len(warned) == 1, warned
    assert f"charged {price} credit{'' if price == 1 else 's'} for" in warned[0]


def test_queries_whose_cap_a_learned_price_passes_are_not_left_unstarted_by_the_budget(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The audit's night: the service charges 3 where the catalog says 1, and every query of the fan-out has
    `max_credits: 2`. The first answer teaches the ledger the price; no later query can then hold one request.
    They are not "never started, the run's budget spent before their turn" (97 of the budget is left), nor
    counted for `unstarted_exit_code: 3`, nor in the `--continue` line: the run says which could not send a
    request and why, and exits 1, since no night fetches them until the spec changes (docs/decisions.md)."""
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages=(3, 3), costs={FEED: 3})
    output = tmp_path / "out"
    handles = [f"v{i}" for i in range(8)]
    with running(config) as sb:
        monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
        query = {"id": "q", "endpoint": FEED, "for_each": {"handle": handles}, "max_credits": 2}
        spec = write_spec(
            tmp_path,
            job_spec(
                sb.base_url, output, [query], name="learned", credits=100, budget={"unstarted_exit_code": 3},
                concurrency=4,
            ),
        )  # fmt: skip
        result = runner.invoke(app, ["run", str(spec)], env={"COLUMNS": "2000"})
        billed = sb.billed_total()

    assert billed == 3, "one request, at the price the service charges"
    db = output / "harvest.duckdb"
    states = rows(db, "SELECT query_id, status, pages, error FROM query_state ORDER BY query_id")
    assert {status for _, status, _, _ in states} == {"budget_exhausted"}
    (first,) = [qid for qid, _, pages, _ in states if pages]
    stuck = [qid for qid, _, pages, _ in states if not pages]
    assert len(stuck) == len(handles) - 1
    for _, _, pages, error in states:
        if not pages:
            assert (
                "the query's cap of 2 credits (max_credits) is below the 3 credits one request costs" in error
            )
    err = " ".join(result.stderr.split())
    assert "never started" not in err, err
    said = next(line for line in result.stderr.splitlines() if "could not send a request" in line)
    assert said.startswith(
        f"{len(stuck)} queries could not send a request, their max_credits below what one request costs: "
        f"{len(stuck)} of {len(handles)} q (max_credits 2, a request 3 credits: "
    ), said
    assert (
        f"and {len(stuck) - 3} more). No run fetches them, neither `--continue` nor a larger budget" in said
    )
    assert sum(qid in said for qid in stuck) == 3 and first not in said
    assert "1 query stopped with its cursor kept: `" in err and "` picks it up" in err, (
        err
    )  # the first, which paid a page; not the rest
    assert result.exit_code == 1, result.output


@pytest.mark.scenario
def test_a_continued_run_reserves_the_price_the_night_before_learned(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The service charges 5 where the catalog says 1. The night learns it from its first answer and stops at
    its budget; `--continue` starts with what the night learned, not the catalog's price: under a budget below
    one request it sends nothing (it does not pay 5 of a budget of 4) and says so (exit 1, the budget to raise, no
    `--continue` offered), and under a larger one its first request
    holds 5, so no answer charges past what was reserved (no overcharge warning, the bill within the budget)."""
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages=(10, 10), costs={FEED: 5})
    output = tmp_path / "out"
    with running(config) as sb:
        monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
        query = {"id": "q", "endpoint": FEED, "params": {"handle": "nasa"}}
        spec = write_spec(tmp_path, job_spec(sb.base_url, output, [query], name="relearn", credits=12))
        night = runner.invoke(app, ["run", str(spec)])
        assert night.exit_code == 0, night.output
        assert "credits spent: 10 of a budget of 12" in night.stdout  # 5 (reserved 1), then 5 held
        assert sb.billed_total() == 10

        caplog.clear()  # the night's own warning said
        with caplog.at_level(logging.WARNING, "harvest.ledger"):
            short = runner.invoke(app, ["run", str(spec), "--continue", "--budget", "4"])
            after_short = sb.billed_total()
            continued = runner.invoke(app, ["run", str(spec), "--continue", "--budget", "10"])
        billed = sb.billed_total()

    assert short.exit_code == 1, short.output  # no run with a budget of 4 can send it: said, not continued
    assert "credits spent: 0 of a budget of 4" in short.stdout, short.stdout
    assert "a budget of 4, a request 5 credits" in " ".join(short.output.split()), short.output
    assert after_short == 10, "a request the continued run's budget could not hold at the learned price"
    assert continued.exit_code == 0, continued.output
    assert "credits spent: 10 of a budget of 10" in continued.stdout, continued.stdout
    assert billed - after_short == 10
    warned = [r.getMessage() for r in caplog.records if "the service charged" in r.getMessage()]
    assert warned == [], "a continued run's first request held what the night learned"
    held = [r.getMessage() for r in caplog.records if "every request holds" in r.getMessage()]
    line = (
        f"{FEED}: every request holds 5 credits from the first, the price the service was last seen charging, "
        "above the cost table's; update the cost table"
    )
    assert held == [line, line], held  # each continued run says it
    db = output / "harvest.duckdb"
    spent = rows(db, "SELECT credits_spent, budget FROM runs ORDER BY started")
    assert spent == [(10, 12), (0, 4), (10, 10)], spent
    assert rows(db, "SELECT sum(credits), count(*) FROM requests") == [(20, 4)]  # 4 pages, none asked twice


@pytest.mark.scenario
def test_a_resume_after_a_kill_reserves_the_price_its_killed_session_learned(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """The service charges 5 where the catalog says 1; the run is killed with kill -9 once its first answer has
    taught it that (its second request held 5), before its manifest says anything. Resumed with 4 credits left
    in its budget, it sends nothing: its first request holds the 5 the journal kept, not the catalog's 1,
    which would have paid 5 past the budget."""
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages=(20, 20), costs={FEED: 5}, latency=0.2)
    output = tmp_path / "out"
    with running(config) as sb:
        query = {"id": "q", "endpoint": FEED, "params": {"handle": "nasa"}}
        spec = write_spec(tmp_path, job_spec(sb.base_url, output, [query], name="relearn", credits=100))
        proc = start_run(spec, tmp_path, prefect_api_url)
        wait_for_requests(sb, 2, proc)  # the second request left after the first answer taught the price
        kill_hard(proc, sb)
        billed = sb.billed_total()
        budget = billed + 4
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url, "--budget", str(budget)))
        after = sb.billed_total()

    assert code == 0, out + err
    assert after == billed, f"the resume paid {after - billed} with 4 credits left and requests of 5"
    said = " ".join(out.split())
    assert f"credits spent: {billed} of a budget of {budget}" in said, said
    assert "status: budget_exhausted" in said, said
    assert "the service charged" not in err, err
    assert f"{FEED}: every request holds 5 credits from the first" in err, err


def test_a_night_with_queries_no_request_fits_in_ends_failed_in_prefect_naming_them(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service charges 3 where the catalog says 1 and each of three queries has `max_credits: 2`: the first
    answer teaches the price, the other two queries can never send a request. The night exits 1 and its Prefect
    flow run ends Failed, its message naming them and their cap, so a scheduler sees what the exit code says;
    so does their line's task run, which the Prefect UI shows beside it, once (not retried). Their status stays `budget_exhausted` (query_state, the manifest: the run finished, nothing to resume), and
    `--continue` continues the night as a new run: it holds the learned price from its first request, pays
    nothing, exits 1 and ends Failed too, naming the two (the third spent its cap the night before, and a cap
    holds across the runs `--continue` makes)."""
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages=(3, 3), costs={FEED: 3})
    output = tmp_path / "out"
    handles = ["v0", "v1", "v2"]
    with running(config) as sb:
        monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
        query = {"id": "q", "endpoint": FEED, "for_each": {"handle": handles}, "max_credits": 2}
        spec = write_spec(
            tmp_path, job_spec(sb.base_url, output, [query], name="capped", credits=100, concurrency=3)
        )
        night = runner.invoke(app, ["run", str(spec)], env={"COLUMNS": "2000"})
        billed = sb.billed_total()
        again = runner.invoke(app, ["run", str(spec), "--continue"], env={"COLUMNS": "2000"})
        billed_again = sb.billed_total()

    assert night.exit_code == 1, night.output
    assert billed == 3 and billed_again == billed, (billed, billed_again)
    stopped, continued = sorted(all_manifests(OutputLayout(output)), key=lambda m: m.started)
    assert stopped.status == "budget_exhausted" and not stopped.unfinished
    assert {q["status"] for q in stopped.queries} == {"budget_exhausted"}
    stuck = sorted(q["query_id"] for q in stopped.queries if not q["pages"])
    assert len(stuck) == 2, stopped.queries
    assert stopped.flow_run_id is not None and continued.flow_run_id is not None
    state, message = flow_run_states([stopped.flow_run_id])[stopped.flow_run_id]
    assert state == "FAILED", (state, message)
    assert message.startswith("budget_exhausted: 3 queries"), message
    said = message.split("; could not send a request: ", 1)[-1]
    assert said.startswith("2 of 3 q (max_credits 2, a request 3 credits: "), message
    assert all(qid in said for qid in stuck), message
    (line,) = task_runs(stopped.flow_run_id)
    assert (line.name, line.state.type.value, line.run_count) == ("q", "FAILED", 1), line.state
    told = line.state.message
    assert told.startswith(
        "2 could not send a request (one costs more than its max_credits or the run's budget) of 3 queries; first "
    ), told
    first = told.split("; first ", 1)[1]
    assert first.split(":", 1)[0] in stuck, told
    assert "the query's cap of 2 credits (max_credits) is below the 3 credits one request costs" in first, (
        told
    )

    assert again.exit_code == 1, again.output
    assert continued.continues == stopped.run_id and continued.status == "budget_exhausted"
    state, message = flow_run_states([continued.flow_run_id])[continued.flow_run_id]
    assert state == "FAILED", (state, message)
    assert "could not send a request: 2 of 2 q (max_credits 2, a request 3 credits: " in message, message
    assert all(qid in message for qid in stuck), message
    (line,) = task_runs(continued.flow_run_id)
    assert line.state.type.value == "FAILED", line.state
    assert line.state.message.startswith(
        "2 could not send a request (one costs more than its max_credits or the run's budget) of 2 queries"
    )
    db = output / "harvest.duckdb"
    assert rows(db, "SELECT DISTINCT status FROM query_state") == [("budget_exhausted",)]
    assert rows(db, "SELECT status FROM runs ORDER BY started") == [("budget_exhausted",)] * 2
