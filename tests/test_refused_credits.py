"""A night of refusals (every request answered 500) as its log says it: no page is counted for an answer that
carried none, a refusal's credits are said as provisional until the account's balance settles them, and the
figures the run ends with are what the service billed, whether it billed the refusals or not."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import harvest.flows.collect  # noqa: F401  (Prefect's log handlers bind to the real stderr first)
from harvest.flows.cli import app
from harvest.flows.run.progress import PROVISIONAL
from harvest.sandbox.config import BILLED_FAULTS_DEFAULT, FaultKind, SandboxConfig
from harvest.sandbox.wire.serving import running
from tests.endpoints import FEED, PINS
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
