"""Recurring jobs, in-process: Prefect states, a wrong key, `--continue`, `--fresh`, incremental reruns and flow
retries, each a real flow run against the sandbox over HTTP, checked against the sandbox's own ledger."""

from __future__ import annotations

import asyncio
import shlex
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from harvest.connectors.catalog import endpoints as catalog
from harvest.flows.cli import app
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.expected import expected_pages, full_crawl
from harvest.sandbox.wire.serving import running
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import all_manifests
from tests.crawl_helpers import data_entries, entry_cursor, paid_twice
from tests.endpoints import BALANCE, CREATIVE, CREATIVE_DETAIL, FEED, PINS, PROFILE, REELS, SHORT_COMMENTS
from tests.flow_helpers import (
    BIG_BALANCE,
    SECRET_KEY,
    expected_keys,
    job_spec,
    key_set,
    rows,
    run_flow,
    run_flow_retried,
    scalar,
    write_spec,
)
from tests.prefect_helpers import flow_runs, task_runs

runner = CliRunner()


def spec_of(
    base_url: str, output: Path, queries: list[dict[str, Any]], credits: int = 1000, **more: Any
) -> dict:
    return job_spec(base_url, output, queries, name="lifecycle", credits=credits, concurrency=3, **more)


# ----------------------------------------------------------------------------------------- Prefect states
JOBS = {"state-failed": "a", "state-budget": "b"}
"""Job -> its output directory under tmp_path."""


def test_prefect_states_tell_failed_and_budget_stops_apart(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (3, 3)})
    with running(config) as sb:
        failing = write_spec(
            tmp_path,
            spec_of(
                sb.base_url,
                tmp_path / "a",
                [
                    {"id": "fine", "endpoint": PINS, "params": {"query": "lamps"}},
                    {"id": "walled", "endpoint": PINS, "params": {"query": "blocked boards"}},
                ],
            )
            | {"name": "state-failed"},
            "failed.yaml",
        )
        short = write_spec(
            tmp_path,
            spec_of(
                sb.base_url, tmp_path / "b", [{"id": "pins", "endpoint": PINS, "params": {"query": "rugs"}}]
            )
            | {"name": "state-budget"},
            "budget.yaml",
        )
        failed = run_flow(failing)
        stopped = run_flow(short, budget=2)
    # each run's own flow run, by the id its manifest keeps (the session's server holds hundreds of others)
    ids = {job: str(all_manifests(OutputLayout(tmp_path / out))[0].flow_run_id) for job, out in JOBS.items()}
    found = flow_runs(list(ids.values()))
    by_job = {job: found[i] for job, i in ids.items()}
    assert by_job["state-failed"].parameters["spec_path"] == str(failing)
    assert by_job["state-budget"].parameters["spec_path"] == str(short)
    assert by_job["state-budget"].parameters["budget"] == 2  # a number stays a number (plain parameters)
    assert failed.status == "failed" and stopped.status == "budget_exhausted"
    assert by_job["state-failed"].state.type.value == "FAILED"
    assert failed.run_id in by_job["state-failed"].state.message
    assert "failed:" in by_job["state-failed"].state.message
    assert by_job["state-budget"].state.type.value == "COMPLETED"
    assert by_job["state-budget"].state.message.startswith("budget_exhausted: ")
    names = {t.name: t for t in task_runs(ids["state-failed"])}
    assert set(names) == {"fine", "walled"}
    assert all({"harvest", "job:state-failed"} <= set(t.tags) for t in names.values())
    # the failed query's task run is Failed, once (no Prefect retry), and its summary still reached the flow
    assert names["walled"].state.type.value == "FAILED" and names["walled"].run_count == 1
    assert names["fine"].state.type.value == "COMPLETED"
    walled = next(q for q in failed.queries if q["query_id"] == "walled")
    assert walled["status"] == "failed" and walled["credits"] == 1 and "(403)" in walled["error"]
    assert walled["error"] in names["walled"].state.message
    # the flow's Failed message names the failed query and the service's reason, never the key
    message = by_job["state-failed"].state.message
    assert f"failed: walled: {walled['error']}" in message and "fine" not in message
    assert SECRET_KEY not in message and all(SECRET_KEY not in t.state.message for t in names.values())


# ---------------------------------------------------------------------------------------------- wrong key
def test_a_wrong_key_sends_one_request_and_says_so_once(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`harvest run` refuses it before Prefect starts (fix the key, exit 2); a deployment's run (the flow
    itself) stops at the same free reading, its 30 queries `stopped`."""
    handles = [f"maker{i}" for i in range(30)]
    with running(SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE})) as sb:
        monkeypatch.setenv("HARVEST_API_KEY", "not-the-key-0000")
        spec = write_spec(
            tmp_path,
            spec_of(
                sb.base_url,
                tmp_path / "out",
                [{"id": "v", "endpoint": PROFILE, "for_each": {"handle": handles}}],
            ),
        )
        result = runner.invoke(app, ["run", str(spec)])
        refused_at_once = list(sb.ledger)
        summary = run_flow(spec)
        requests = sb.ledger
    assert result.exit_code == 2, result.output
    assert [(e.path, e.status) for e in refused_at_once] == [(BALANCE, 402)]
    assert result.stderr.count("refused the API key") == 1 and "fix the key" in result.stderr
    assert "not-the-key" not in result.output
    assert len(requests) == 2 and requests[1].status == 402  # the flow's free balance read, refused
    assert sb.billed_total() == 0
    assert summary.status == "failed" and "out of credits, or the API key is not valid" in (
        summary.error or ""
    )
    db = tmp_path / "out" / "harvest.duckdb"
    assert rows(db, "SELECT status FROM runs") == [("failed",)]
    assert scalar(db, "SELECT count(*) FROM query_state WHERE status = 'stopped'") == 30


async def _gated_requests(base_url: str) -> None:
    from harvest.connectors.credits.ledger import CreditLedger
    from harvest.connectors.http.client import PageRequest, RetryPolicy, ServiceClient

    ledger = CreditLedger(100)
    async with ServiceClient(base_url, "not-the-key-0000", ledger, retry=RetryPolicy(attempts=1)) as client:
        calls = [
            client.get(PageRequest(f"q{i}", PINS, PINS, (("query", f"q{i}"),), page=0, cost=1))
            for i in range(12)
        ]
        await asyncio.gather(*calls, return_exceptions=True)
    assert ledger.stopped is not None and "402" in ledger.stopped.reason


def test_without_a_balance_read_the_first_paid_request_still_goes_alone() -> None:
    """When the balance cannot prove the key, the first paid request does: twelve queries, one request."""
    with running(SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE})) as sb:
        asyncio.run(_gated_requests(sb.base_url))
        assert len(data_entries(sb)) == 1 and data_entries(sb)[0].status == 402


# ---------------------------------------------------------------------------------------------- --continue
def test_continue_spends_nothing_on_pages_already_paid(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    topics = ["oak", "elm", "ash"]
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (5, 5)}, page_size=3)
    demand = sum(expected_pages(PINS, {"query": t}, config) for t in topics)
    output = tmp_path / "out"
    with running(config) as sb:
        spec = write_spec(
            tmp_path,
            spec_of(sb.base_url, output, [{"id": "pins", "endpoint": PINS, "for_each": {"query": topics}}]),
        )
        first = run_flow(spec, budget=7)
        second = run_flow(spec, budget=5, mode="continue")
        third = run_flow(spec, budget=100, mode="continue")
        nothing = run_flow(spec, mode="continue")
        entries = data_entries(sb)
    assert first.status == second.status == "budget_exhausted"
    assert third.status == "complete"
    assert nothing.status == "nothing_to_continue"
    assert len(entries) == demand == 7 + 5 + (demand - 12)  # every page paid once across three nights
    assert paid_twice(entries) == 0
    runs = {m.run_id: m for m in all_manifests(OutputLayout(output))}
    assert runs[second.run_id].continues == first.run_id
    assert runs[third.run_id].continues == second.run_id
    want = expected_keys([(PINS, {"query": t}) for t in topics], config)
    assert key_set(output / "harvest.duckdb", "pinboard_pins") == set(want["pinboard_pins"])


def test_a_query_s_max_pages_holds_across_the_nights_that_continue_it(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """`max_pages: 4` on a query spread over two budget-stopped nights and two `--continue` nights pays 4 pages, as
    one night does: each continued run counted its pages from 0 (the nights paid 1 + 1 + 4), and then a night
    counted the chain's pages from what the night before it had left (1 + 1 + 1)."""
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (8, 8)}, page_size=3)
    output = tmp_path / "out"
    query = {"id": "pins", "endpoint": PINS, "params": {"query": "oak"}, "max_pages": 4}
    with running(config) as sb:
        spec = write_spec(tmp_path, spec_of(sb.base_url, output, [query]))
        nights = [run_flow(spec, budget=1), run_flow(spec, budget=1, mode="continue")]
        nights += [run_flow(spec, budget=100, mode="continue"), run_flow(spec, budget=100, mode="continue")]
        entries = data_entries(sb)
    assert [n.status for n in nights[:3]] == ["budget_exhausted", "budget_exhausted", "complete"], nights
    assert nights[3].status == "nothing_to_continue", nights[3]
    assert len(entries) == 4 and paid_twice(entries) == 0
    assert [q["status"] for q in nights[2].queries] == ["max_pages"]


def test_a_max_pages_added_to_the_spec_before_a_continue_holds_across_the_chain(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """A night the budget stopped after 2 pages; the team then caps the query at 3 pages and continues: the
    continued run read the cap as its journal had it (none) and paged the rest of the listing, 8 pages in all.
    The spec's cap now holds over the chain, as a `max_credits` changed since does: 1 page more."""
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (8, 8)}, page_size=3)
    output = tmp_path / "out"
    query = {"id": "pins", "endpoint": PINS, "params": {"query": "oak"}}
    with running(config) as sb:
        spec = write_spec(tmp_path, spec_of(sb.base_url, output, [query]))
        first = run_flow(spec, budget=2)
        capped = write_spec(
            tmp_path, spec_of(sb.base_url, output, [{**query, "max_pages": 3}]), "capped.yaml"
        )
        continued = run_flow(capped, budget=100, mode="continue")
        entries = data_entries(sb)
    assert first.status == "budget_exhausted" and first.queries[0]["pages"] == 2, first
    assert [(q["status"], q["pages"]) for q in continued.queries] == [("max_pages", 1)], continued.queries
    assert len(entries) == 3 and paid_twice(entries) == 0


def test_a_page_damaged_on_both_tries_is_asked_for_by_continue_though_max_pages_is_1(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """A video's comments with `max_pages: 1`, their first answer cut short twice (both billed): the night fails
    and says `--continue` asks for the page again. The damaged answer counted as the query's page, so the
    continued query had `max_pages` 0 left and stopped without a request (`max_pages`, 0 pages), and that read
    as collected: no later night asked either, and the video's comments were missing for good. Now the
    continue asks for the page and lands its comments; its credits count, the 2 damaged ones too."""
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, page_size_by_path={PROFILE: 1},
        fault_plan_by_path={SHORT_COMMENTS: ["truncated", "truncated"]},
    )  # fmt: skip
    output = tmp_path / "out"
    queries = [
        {"id": "videos", "endpoint": PROFILE, "params": {"handle": "acmerunning", "sort_by": "latest"},
         "incremental": True, "max_pages": 1},
        {"id": "comments", "endpoint": SHORT_COMMENTS, "for_each": {"url": {"from": "videos", "field": "url"}},
         "max_pages": 1},
    ]  # fmt: skip
    with running(config) as sb:
        spec = write_spec(tmp_path, spec_of(sb.base_url, output, queries))
        night = run_flow(spec)
        continued = run_flow(spec, mode="continue")
        comments = [e for e in data_entries(sb) if e.path == SHORT_COMMENTS]
        later = run_flow(spec)
        asked_later = [e for e in data_entries(sb) if e.path == SHORT_COMMENTS][len(comments) :]
    (failed,) = [q for q in night.queries if q["query_id"].startswith("comments[")]
    assert failed["status"] == "failed" and "damaged on both tries" in failed["error"], failed
    assert [e.fault for e in comments] == ["truncated", "truncated", None], comments  # the continue asked
    url = failed["query_id"].split("url=", 1)[1].rstrip("]")
    db = output / "harvest.duckdb"
    landed = scalar(db, "SELECT count(*) FROM short_video_comments WHERE video_url = ?", [url])
    (again,) = continued.queries
    assert again["status"] == "max_pages" and again["pages"] == 1 and landed == again["records"] > 0, again
    assert (failed["pages"], failed["records"], failed["credits"]) == (0, 0, 2), failed  # no page came
    assert later.status == "complete" and asked_later == [], asked_later  # collected: not asked again
    assert continued.credits_spent == 1 and night.credits_spent == 1 + 2  # the video's page, the damaged two


def test_continue_compares_a_dependent_with_its_template_as_the_spec_asks_now(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """A video's comments failed (its answer cut short twice), so `--continue` would ask them again. A query added
    since leaves the comments to go on as asked; the comments asked with `trim: true` since are another
    question for the same video: refused, naming the comments of that video, nothing paid."""
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, page_size_by_path={PROFILE: 1},
        fault_plan_by_path={SHORT_COMMENTS: ["truncated", "truncated"]},
    )  # fmt: skip
    output = tmp_path / "out"
    videos = {"id": "videos", "endpoint": PROFILE, "params": {"handle": "acmerunning"}, "max_pages": 1}
    comments = {"id": "comments", "endpoint": SHORT_COMMENTS, "max_pages": 1,
                "for_each": {"url": {"from": "videos", "field": "url"}}}  # fmt: skip
    oak = {"id": "oak", "endpoint": PINS, "params": {"query": "oak"}}
    trimmed = {**comments, "params": {"trim": True}}
    with running(config) as sb:
        spec = write_spec(tmp_path, spec_of(sb.base_url, output, [videos, comments]))
        night = run_flow(spec)
        write_spec(tmp_path, spec_of(sb.base_url, output, [videos, trimmed, oak]))
        paid = len(data_entries(sb))
        refused = runner.invoke(app, ["run", str(spec), "--continue"])
        refused_paid = len(data_entries(sb)) - paid
        write_spec(tmp_path, spec_of(sb.base_url, output, [videos, comments, oak]))
        went_on = runner.invoke(app, ["run", str(spec), "--continue"])
        asked = [e.path for e in data_entries(sb)[paid:]]
    (failed,) = [q["query_id"] for q in night.queries if q["status"] == "failed"]
    assert failed.startswith("comments[url="), night.queries
    assert refused.exit_code == 2 and refused_paid == 0, refused.output
    assert f"(asked differently: {failed})" in " ".join(refused.stderr.split()), refused.stderr
    assert went_on.exit_code == 0, went_on.output
    assert SHORT_COMMENTS in asked and PINS in asked and PROFILE not in asked, asked


def test_a_query_s_max_credits_and_a_fan_out_s_cap_hold_across_the_nights_that_continue_them(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """`max_credits: 3` on a query and `max_credits_total: 4` on a fan-out of three, 8 pages each at a credit:
    each `--continue` opened both caps afresh and paid them again (3 + 3 + 3, 4 + 4 + 4), while the night they
    stopped said "stopped with their cursors kept: `--continue` picks them up". Now a cap is the chain's, as
    `max_pages` is: a budget-stopped night and its continuation pay 3 and 4 in all, the run says the caps were
    reached, and one more `--continue` has nothing to do until the spec raises a cap: then it pays what was raised."""
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (8, 8)}, page_size=3)
    output = tmp_path / "out"
    queries = [
        {"id": "pins", "endpoint": PINS, "params": {"query": "oak"}, "max_credits": 3},
        {"id": "fan", "endpoint": PINS, "for_each": {"query": ["a", "b", "c"]}, "max_credits_total": 4},
    ]
    with running(config) as sb:
        spec = write_spec(tmp_path, spec_of(sb.base_url, output, queries))
        first = runner.invoke(app, ["run", str(spec), "--budget", "2"])
        assert first.exit_code == 0 and "--continue` picks" in first.stderr, first.output
        second = runner.invoke(app, ["run", str(spec), "--continue"])
        paid = Counter(e.params.get("query") for e in data_entries(sb))
        third = runner.invoke(app, ["run", str(spec), "--continue"])
        assert len(data_entries(sb)) == paid.total(), third.output
        write_spec(tmp_path, spec_of(sb.base_url, output, [{**queries[0], "max_credits": 5}, queries[1]]))
        raised = runner.invoke(app, ["run", str(spec), "--continue"])
        more = Counter(e.params.get("query") for e in data_entries(sb)) - paid
    assert paid["oak"] == 3 and paid["a"] + paid["b"] + paid["c"] == 4, paid
    said = " ".join(second.stderr.split())
    assert "cursors kept" not in said, said
    assert "reached the spec's cap (max_credits, max_credits_total), which holds across the runs" in said, (
        said
    )
    assert "raised in the spec, `harvest run" in said, said
    assert third.exit_code == 0 and "nothing to continue" in third.output, third.output
    assert raised.exit_code == 0 and more == {"oak": 2}, (more, raised.output)


def test_a_fan_out_whose_cap_and_budget_run_out_together_is_not_offered_to_continue(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """A budget of 4 and a fan-out capped at 4: the budget's refusal was said first, so the queries ended
    `budget_exhausted` without their cap and the run's last line said "3 queries stopped with their cursors
    kept: `--continue` picks them up", which then found nothing it could send. A cap its spent credits reached
    is said first now: the line says to raise it, and `--continue` says there is nothing to continue."""
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (8, 8)}, page_size=3)
    queries = [
        {"id": "fan", "endpoint": PINS, "for_each": {"query": ["a", "b", "c"]}, "max_credits_total": 4}
    ]
    with running(config) as sb:
        spec = write_spec(tmp_path, spec_of(sb.base_url, tmp_path / "out", queries))
        first = runner.invoke(app, ["run", str(spec), "--budget", "4"])
        paid = len(data_entries(sb))
        again = runner.invoke(app, ["run", str(spec), "--continue", "--budget", "10"])
        assert len(data_entries(sb)) == paid == 4, again.output
    said = " ".join(first.stderr.split())
    assert first.exit_code == 0 and "cursors kept" not in said, said
    assert "3 queries reached the spec's cap (max_credits_total)" in said, said
    assert again.exit_code == 0 and "nothing to continue" in again.output, again.output


def test_a_run_against_the_embedded_sandbox_never_lands_beside_real_runs(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """Trying a nightly job offline (`harvest run nightly.yaml --base-url sandbox`) wrote the sandbox's made-up
    records into the nightly's own DuckDB and Parquet, and the incremental queries' histories with them, though
    the README says synthetic rows never mix into real tables. Refused now before anything is paid (exit 2),
    both ways round, naming the run already there; with an output of its own it runs."""
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (2, 2)}, page_size=3)
    output, offline = tmp_path / "out", tmp_path / "offline"
    with running(config) as sb:
        spec = write_spec(
            tmp_path,
            spec_of(sb.base_url, output, [{"id": "pins", "endpoint": PINS, "params": {"query": "oak"}}]),
        )
        night = runner.invoke(app, ["run", str(spec)])
        assert night.exit_code == 0, night.output
        landed = scalar(output / "harvest.duckdb", "SELECT count(*) FROM pinboard_pins")
        nightly = len(data_entries(sb))
        tried = runner.invoke(app, ["run", str(spec), "--base-url", "sandbox"])
        apart = runner.invoke(app, ["run", str(spec), "--base-url", "sandbox", "--output", str(offline)])
        back = runner.invoke(app, ["run", str(spec), "--output", str(offline)])
        paid = len(data_entries(sb))
    assert tried.exit_code == 2, tried.output
    said = " ".join(tried.stderr.split())
    assert f"{output} holds run {night_run(output)} of job lifecycle against {sb.base_url}" in said, said
    assert "this run asks sandbox (embedded): made-up records would land in the same tables" in said, said
    assert scalar(output / "harvest.duckdb", "SELECT count(*) FROM pinboard_pins") == landed
    assert len(all_manifests(OutputLayout(output))) == 1
    assert apart.exit_code == 0, apart.output
    assert back.exit_code == 2 and "real records would land in the same tables" in " ".join(
        back.stderr.split()
    )
    assert paid == nightly, "the service was asked for nothing after the nightly's run"


def night_run(output: Path) -> str:
    (run,) = all_manifests(OutputLayout(output))
    return run.run_id


def test_continue_after_the_spec_changed_a_query_is_refused_before_paying(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """A night stopped by its budget; the user changes the query (`query: oak` -> `query: elm`) and runs
    `--continue`. It picked the old query up at its cursor and paid for `oak` again, saying "queries pick up at
    their saved cursors", and never asked for `elm`. Refused now, as a resume is: exit 2, nothing paid, and the
    command it prints starts the changed spec from page 1 under the `--budget 2` the refused night was given
    (it printed the plain command: run as printed, it spent up to the spec's budget)."""
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (6, 6)}, page_size=3)
    output = tmp_path / "out"
    query = {"id": "pins", "endpoint": PINS, "params": {"query": "oak"}}
    with running(config) as sb:
        spec = write_spec(tmp_path, spec_of(sb.base_url, output, [query]))
        first = runner.invoke(app, ["run", str(spec), "--budget", "1"])
        assert first.exit_code == 0 and "--continue" in first.stderr, first.output
        write_spec(tmp_path, spec_of(sb.base_url, output, [{**query, "params": {"query": "elm"}}]))
        paid = len(data_entries(sb))
        refused = runner.invoke(app, ["run", str(spec), "--budget", "2", "--continue"])
        assert refused.exit_code == 2, refused.output
        assert len(data_entries(sb)) == paid
        assert "the spec's queries changed since (asked differently: pins)" in " ".join(
            refused.stderr.split()
        )
        new = f"harvest run {spec} --budget 2"
        assert f"`{new}` starts a new run from page 1" in " ".join(refused.stderr.split()), refused.stderr
        fresh = runner.invoke(app, shlex.split(new)[1:])  # the printed command, run as printed
        assert fresh.exit_code == 0, fresh.output
        asked = {e.params.get("query") for e in data_entries(sb)[paid:]}
    assert asked == {"elm"}
    assert "credits spent: 2 of a budget of 2" in fresh.stdout, fresh.stdout


def test_continue_after_queries_were_added_and_removed_picks_up_what_the_spec_still_asks(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """A night stopped by its budget with two queries at their cursors; the user removes one and adds another,
    then runs `--continue`. It was refused ("the spec's queries changed since") as if a query had changed, and
    the only way on was a new night paying again for the pages the stopped one had. Now the kept query goes on
    from its cursor, the added one starts at page 1, the removed one is not asked: no page paid twice."""
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (6, 6)}, page_size=3)
    output = tmp_path / "out"
    oak, ash, elm = ({"id": t, "endpoint": PINS, "params": {"query": t}} for t in ("oak", "ash", "elm"))
    with running(config) as sb:
        spec = write_spec(tmp_path, spec_of(sb.base_url, output, [oak, ash]))
        first = runner.invoke(app, ["run", str(spec), "--budget", "4"])
        assert first.exit_code == 0 and "--continue" in first.stderr, first.output
        before = Counter(e.params.get("query") for e in data_entries(sb))
        write_spec(tmp_path, spec_of(sb.base_url, output, [oak, elm]))
        went_on = runner.invoke(app, ["run", str(spec), "--continue"])
        entries = data_entries(sb)
    assert before == {"oak": 2, "ash": 2}, before  # breadth-first: both stopped at their third page
    assert went_on.exit_code == 0, went_on.output
    asked = Counter(e.params.get("query") for e in entries)
    assert asked["oak"] == asked["elm"] > 2 and asked["ash"] == 2, asked  # oak and elm: the whole crawl each
    assert paid_twice(entries) == 0
    db = output / "harvest.duckdb"
    whole = expected_keys([(PINS, {"query": "oak"}), (PINS, {"query": "elm"})], config)["pinboard_pins"]
    assert set(whole) <= key_set(db, "pinboard_pins")  # oak's first night and its continuation: every pin
    runs = all_manifests(OutputLayout(output))
    assert [r.status for r in runs] == ["budget_exhausted", "complete"], [r.status for r in runs]
    assert runs[1].continues == runs[0].run_id


def test_a_query_whose_one_request_costs_more_than_the_whole_budget_is_said_so_and_not_continued(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """A budget of 25 and an endpoint at 26 credits a request: the night said "1 query stopped with its cursor
    kept: `--continue` picks it up", and the continued night "1 query never started, the run's budget spent
    before its turn" with 0 of 25 spent, and the same advice, for ever. Now it says what no budget of 25 can
    do and what to change, exit 1 as for a `max_credits` below the price, and offers no `--continue`."""
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (2, 2)}, page_size=3)
    output = tmp_path / "out"
    queries = [
        {"id": "pins", "endpoint": PINS, "params": {"query": "oak"}},
        {"id": "audience", "endpoint": "/v1/short-video/user/audience", "params": {"handle": "nasa"}},
    ]
    with running(config) as sb:
        spec = write_spec(tmp_path, spec_of(sb.base_url, output, queries, credits=25))
        night = runner.invoke(app, ["run", str(spec)])
        audience_asked = [e for e in data_entries(sb) if e.path.endswith("/audience")]
    assert night.exit_code == 1, night.output
    said = " ".join(night.output.split())
    assert "could not send a request, one costing more than the run's whole budget" in said, said
    assert "a budget of 25, a request 26 credits" in said and "--continue` picks" not in said, said
    assert audience_asked == []
    (run,) = all_manifests(OutputLayout(output))
    assert {q["query_id"]: q["status"] for q in run.queries}["pins"] == "complete"


def test_a_query_the_service_refused_for_good_is_not_offered_to_continue_nor_paid_again(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """The platform blocks a query (403, billed): the night said "1 query stopped with its cursor kept:
    `--continue` picks it up", and the continued night asked (and paid) the same 403 again, and said so again.
    Now the night offers no `--continue` for it and a `--continue` leaves it alone."""
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (2, 2)}, page_size=3)
    output = tmp_path / "out"
    queries = [{"id": "walled", "endpoint": PINS, "params": {"query": "blocked boards"}}]
    with running(config) as sb:
        spec = write_spec(tmp_path, spec_of(sb.base_url, output, queries))
        night = runner.invoke(app, ["run", str(spec)])
        continued = runner.invoke(app, ["run", str(spec), "--continue"])
        statuses = [e.status for e in data_entries(sb)]
    assert night.exit_code == 1, night.output
    said = " ".join(night.output.split())
    assert "(403)" in said and "--continue` picks" not in said, said
    assert continued.exit_code == 0 and "nothing to continue" in " ".join(continued.output.split()).lower(), (
        continued.output
    )
    assert statuses == [403]  # asked once


# ---------------------------------------------------------------------------------------------- incremental
@pytest.mark.scenario
def test_an_unchanged_incremental_rerun_pays_one_page_per_query(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PROFILE: (4, 4), FEED: (3, 3)})
    queries = [
        {"id": "videos", "endpoint": PROFILE, "params": {"sort_by": "latest"}, "for_each": {"handle": ["nasa", "esa"]},
         "incremental": True},
        {"id": "feed", "endpoint": FEED, "params": {"handle": "nasa.example"}, "incremental": True},
        {"id": "pins", "endpoint": PINS, "params": {"query": "lamps"}},
    ]  # fmt: skip
    output = tmp_path / "out"
    with running(config) as sb:
        spec = write_spec(tmp_path, spec_of(sb.base_url, output, queries))
        run_flow(spec)
        full_pass = len(data_entries(sb))
        rerun = run_flow(spec)
        rerun_entries = data_entries(sb)[full_pass:]
        forced = run_flow(spec, full=True)
    per_path = Counter(e.path for e in rerun_entries)
    assert per_path[PROFILE] == 2 and per_path[FEED] == 1  # one page per incremental query
    assert per_path[PINS] == expected_pages(PINS, {"query": "lamps"}, config)  # not incremental: all pages
    statuses = {q["query_id"]: q["status"] for q in rerun.queries}
    assert statuses == {"videos[handle=nasa]": "caught_up", "videos[handle=esa]": "caught_up",
                        "feed": "caught_up", "pins": "complete"}  # fmt: skip
    assert all(q["status"] == "complete" for q in forced.queries)
    assert forced.credits_spent == full_pass


def test_an_incremental_rerun_after_new_items_pays_the_pages_that_hold_them(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """Night 1 pages fully; by night 2 the service has 7 newer videos (page size 5): pages 0 and 1 hold them,
    page 2 holds only known ones and proves nothing newer is left. Three pages, not the whole profile."""
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PROFILE: (6, 6)}, page_size=5)
    query = {
        "id": "videos",
        "endpoint": PROFILE,
        "params": {"handle": "nasa", "sort_by": "latest"},
        "incremental": True,
    }
    output = tmp_path / "out"
    with running(config) as night1:
        spec = write_spec(tmp_path, spec_of(night1.base_url, output, [query]))
        first = run_flow(spec)
    with running(config.replace(new_items=7)) as night2:
        spec = write_spec(tmp_path, spec_of(night2.base_url, output, [query]))
        second = run_flow(spec)
        paid = data_entries(night2)
    assert first.queries[0]["pages"] == 6 and first.queries[0]["status"] == "complete"
    assert len(paid) == 3 and second.queries[0]["status"] == "caught_up"
    db = output / "harvest.duckdb"
    assert scalar(db, "SELECT count(*) FROM short_video_videos") == first.records + 7


def test_incremental_is_refused_where_the_order_is_unknown(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        spec_of(
            "sandbox", tmp_path / "out", [{"endpoint": PINS, "params": {"query": "x"}, "incremental": True}]
        ),
    )
    result = runner.invoke(app, ["validate", str(spec)])
    assert result.exit_code == 2
    assert "queries[0].incremental" in result.stderr and "does not list newest first" in result.stderr
    for path in (PROFILE, FEED, REELS):
        assert path in result.stderr
    assert [e.path for e in catalog.ENDPOINTS if e.newest_first] != []


# --------------------------------------------------------------------------------------------- flow retries
@pytest.mark.scenario
def test_a_prefect_flow_retry_resumes_the_run_instead_of_paying_again(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """The first attempt fails one query (503 until retries run out); Prefect retries the flow; the retry
    resumes the same run: the query that completed is not paid again, the failed one goes on where it was."""
    unavailable = ["unavailable"] * 5
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE},
        pages_by_path={PINS: (3, 3), PROFILE: (3, 3)},
        fault_plan_by_path={PROFILE: [None, *unavailable]},
    )
    output = tmp_path / "out"
    with running(config) as sb:
        spec = write_spec(
            tmp_path,
            spec_of(
                sb.base_url,
                output,
                [
                    {"id": "pins", "endpoint": PINS, "params": {"query": "lamps"}},
                    {"id": "videos", "endpoint": PROFILE, "params": {"handle": "nasa"}},
                ],
            ),
        )
        summary = run_flow_retried(spec)
        entries = [e for e in data_entries(sb) if e.fault is None]
    assert summary.status == "complete", summary
    assert summary.resumes == 1
    assert len(all_manifests(OutputLayout(output))) == 1
    assert paid_twice(entries) == 0  # no page was answered twice
    pages = Counter(e.path for e in entries)
    assert pages == {PINS: 4, PROFILE: 3}  # pin search's three pages and the one that ends it (`-end-`)
    assert scalar(output / "harvest.duckdb", "SELECT count(DISTINCT run_id) FROM query_state") == 1
    states = dict(rows(output / "harvest.duckdb", "SELECT query_id, status FROM query_state"))
    assert states == {"pins": "complete", "videos": "complete"}
    assert {entry_cursor(catalog.get(PROFILE), e) is None for e in entries if e.path == PROFILE} == {
        True,
        False,
    }


def test_continue_after_a_dependent_was_added_is_refused_and_the_printed_night_fetches_it(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """A night stopped by its budget after the creatives query had ended; the team adds the materials' details
    (a query per material the creatives found) and runs `--continue`. A continued run does not read the
    creatives' pages again, so nothing would start the details: it said `complete` without one of them. Refused
    now, naming the details, nothing paid; the command it prints starts a night that fetches every detail."""
    params = {"query": "standing desks", "limit": 5}
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (30, 30), CREATIVE: (2, 2)}, page_size=5
    )
    output = tmp_path / "out"
    creatives = {"id": "creatives", "endpoint": CREATIVE, "params": params}
    pins = {"id": "pins", "endpoint": PINS, "params": {"query": "oak"}}
    details = {"id": "details", "endpoint": CREATIVE_DETAIL,
               "for_each": {"material_id": {"from": "creatives", "field": "material_id"}}}  # fmt: skip
    with running(config) as sb:
        spec = write_spec(tmp_path, spec_of(sb.base_url, output, [creatives, pins]))
        night = run_flow(spec, budget=20)
        write_spec(tmp_path, spec_of(sb.base_url, output, [creatives, pins, details]))
        paid = len(data_entries(sb))
        refused = runner.invoke(app, ["run", str(spec), "--continue"])
        refused_paid = len(data_entries(sb)) - paid
        printed = f"harvest run {spec}"
        said = " ".join(refused.stderr.split())
        new_night = runner.invoke(app, shlex.split(printed)[1:])
        entries = data_entries(sb)[paid:]
    statuses = {q["query_id"]: q["status"] for q in night.queries}
    assert statuses == {"creatives": "complete", "pins": "budget_exhausted"}, statuses
    assert refused.exit_code == 2 and refused_paid == 0, refused.output
    assert "the spec added details since" in said and f"`{printed}` starts a new run from page 1" in said, (
        said
    )
    assert new_night.exit_code == 0, new_night.output
    materials = [m["material_id"] for m in full_crawl(CREATIVE, params, config)["materials"]]
    asked = Counter(e.path_params.get("material_id") for e in entries if e.path_params)
    assert set(asked) == set(materials) and max(asked.values()) == 1, asked


def test_plan_expects_a_night_stopped_by_its_budget_and_its_continue_as_one_night(
    prefect_harness: None, tmp_path: Path, api_key: str
) -> None:
    """A night stopped by its budget (4 of oak's pages), then `--continue` pays the rest: the plan learned the
    continue's tail as what oak costs a night, and `--check-expected` passed a budget of 10 the next plain night
    ran out of. The two are one night's cost now: all they paid expected, and the check exits 3."""
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (12, 12)}, page_size=3)
    output = tmp_path / "out"
    oak = {"id": "oak", "endpoint": PINS, "params": {"query": "oak"}}
    with running(config) as sb:
        spec = write_spec(tmp_path, spec_of(sb.base_url, output, [oak], credits=10))
        stopped = runner.invoke(app, ["run", str(spec), "--budget", "4"])
        went_on = runner.invoke(app, ["run", str(spec), "--continue"])
        paid = len(data_entries(sb))
        billed = sb.billed_total()
    assert stopped.exit_code == 0 and went_on.exit_code == 0, stopped.output + went_on.output
    planned = runner.invoke(app, ["plan", str(spec)], env={"COLUMNS": "300"})
    (row,) = [line for line in planned.stdout.splitlines() if line.startswith("│ oak")]
    runs = [(r.credits_spent, r.queries[0]["credits"]) for r in all_manifests(OutputLayout(output))]
    # expected: what the night and its continue paid
    assert row.split("│")[3].strip() == str(sum(c for c, _ in runs)), (row, paid, runs)
    assert sum(c for c, _ in runs) == billed, (runs, billed, paid)
    check = runner.invoke(app, ["plan", str(spec), "--check-expected"])
    assert check.exit_code == 3, check.output
