"""A night of refusals (every request answered 500) as its log says it: no page is counted for an answer that
carried none, a refusal's credits are said as provisional until the account's balance settles them, and the
figures the run ends with are what the service billed, whether it billed the refusals or not."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

import harvest.flows.collect  # noqa: F401  (Prefect's log handlers bind to the real stderr first)
from harvest.flows.cli import app
from harvest.flows.run.progress import PROVISIONAL
from harvest.sandbox.config import BILLED_FAULTS_DEFAULT, FaultKind, SandboxConfig
from harvest.sandbox.wire.serving import running
from tests.crawl_helpers import data_entries
from tests.endpoints import CREATIVE, CREATIVE_DETAIL, FEED, PINS
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, job_spec, write_spec

runner = CliRunner()

QUERY_LINE = re.compile(
    r"^harvest: (\S+): failed, (\d+) pages?, 0 records, (\d+) credits?(; .*)?$", re.MULTILINE
)


@pytest.mark.scenario
@pytest.mark.parametrize("billed", [False, True], ids=["refusals-not-billed", "refusals-billed"])
def test_a_night_of_500s_says_what_was_billed(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, billed: bool
) -> None:
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, fault_rate=1.0, fault_kinds=[FaultKind.SERVER_ERROR],
        billed_faults=BILLED_FAULTS_DEFAULT | ({FaultKind.SERVER_ERROR} if billed else set()),
    )  # fmt: skip
    queries = [
        {"id": "pins", "endpoint": PINS, "params": {"query": "trail"}, "max_pages": 3},
        {"id": "feed", "endpoint": FEED, "params": {"handle": "acme.example"}, "max_pages": 3},
    ]
    with running(config) as sb:
        monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
        spec = write_spec(tmp_path, job_spec(sb.base_url, tmp_path / "out", queries, name="refusals"))
        result = runner.invoke(app, ["run", str(spec)])
        bill = sb.billed_total()
    assert result.exit_code == 1, result.output
    assert bill == (10 if billed else 0)  # 5 attempts a query, 1 credit each when billed
    lines = {m.group(1): m.groups()[1:] for m in QUERY_LINE.finditer(result.stderr)}
    assert set(lines) == {"pins", "feed"}, result.stderr
    for pages, credits, note in lines.values():
        assert pages == "0"  # a 500 carried no page
        assert credits == "5"  # counted at once (the budget is a hard cap) ...
        assert note == f"; 5 of them {PROVISIONAL}"
    # ... and settled to the bill at the end: the table, the final line and the bill agree
    table = re.findall(r"│ (feed|pins)\s+│ failed │\s+(\d+) │\s+0 │\s+(\d+) │", result.stdout)
    assert sorted(table) == [("feed", "0", str(bill // 2)), ("pins", "0", str(bill // 2))], result.stdout
    assert f"credits spent: {bill} of a budget of 100; records: 0; status: failed" in result.stdout
    said = result.stdout + result.stderr
    assert said.count("Please try again. 5 credit(s)") >= 2 and "again.." not in said


BUDGET = 3


def test_a_query_whose_only_request_was_an_unbilled_500_started(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "Never started" means no request went out. A detail's first request is answered 500 (not billed); while
    it waits to retry, the balance gives its credit back and another detail takes it, so its retry is refused
    for the budget: it is a stopped query with its attempt in `requests`, its line printed, and not among those
    the night says never started. `--continue` then fetches every detail, each billed once."""
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages=(2, 2),
        fault_plan_by_path={CREATIVE_DETAIL: [FaultKind.SERVER_ERROR]},
    )  # fmt: skip
    queries = [
        {"id": "creatives", "endpoint": CREATIVE, "params": {"query": "shoes", "limit": 5}, "max_pages": 1},
        {"id": "details", "endpoint": CREATIVE_DETAIL,
         "for_each": {"material_id": {"from": "creatives", "field": "material_id"}}},
    ]  # fmt: skip
    out = tmp_path / "out"
    with running(config) as sb:
        monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
        spec = write_spec(tmp_path, job_spec(sb.base_url, out, queries, credits=BUDGET, concurrency=1))
        night = runner.invoke(app, ["run", str(spec)])
        assert night.exit_code == 0, night.output
        with duckdb.connect(str(out / "harvest.duckdb"), read_only=True) as db:
            states = {
                q: (s, p)
                for q, s, p in db.execute("SELECT query_id, status, pages FROM query_state").fetchall()
            }
            sent = dict(db.execute("SELECT query_id, count(*) FROM requests GROUP BY query_id").fetchall())
        again = runner.invoke(app, ["run", str(spec), "--continue", "--budget", "100"])
        entries = data_entries(sb)
    refused = [
        q
        for q, (status, pages) in states.items()
        if status == "budget_exhausted" and not pages and sent.get(q)
    ]
    assert refused, (states, sent)  # the shape: a query that sent its 500 and was then stopped by the budget
    said = next((x for x in night.stderr.splitlines() if "never started" in x), "")
    unstarted = {q for q in states if q in said}
    assert unstarted == {
        q for q, (status, pages) in states.items() if status == "budget_exhausted" and not sent.get(q)
    }
    for q in refused:  # stopped, its line says why, and the `--continue` line counts it
        assert (
            f"{q}: budget_exhausted, 0 pages, 0 records, 0 credits; {sent[q]} request sent, no page"
            in night.stderr
        )
    stopped = sum(status == "budget_exhausted" for status, _ in states.values())
    assert f"{stopped} queries stopped with their cursors kept" in night.stdout + night.stderr
    # `--continue` picks them all up, and no page is billed twice
    assert again.exit_code == 0, again.output
    details = [e for e in entries if e.path == CREATIVE_DETAIL and e.credits]
    assert len(details) == len({e.path_params["material_id"] for e in details}) == len(states) - 1
