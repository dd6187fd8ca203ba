"""A real run through an unreliable service: faults on ~30% of requests change nothing that lands.

Retries are the client's; the flow must still deliver every record of a full crawl exactly once per key, spend
within the budget, and never count less than the service billed (unknown outcomes count as spent). The faults
are those retried until an answer comes; a 2xx damaged on the wire is asked for once more only, and a malformed
one not at all (`tests/test_fault_matrix.py` and `tests/test_real_platform_answers.py`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harvest.sandbox.config import FaultKind, SandboxConfig
from harvest.sandbox.wire.serving import running
from tests.crawl_helpers import data_entries
from tests.endpoints import FORUM, PINS, PROFILE, REELS, SHOP
from tests.flow_helpers import (
    BIG_BALANCE,
    SECRET_KEY,
    expected_keys,
    job_spec,
    key_set,
    rows,
    run_flow,
    write_spec,
)

QUERIES = [
    (FORUM, {"subreddit": "running", "query": "shoes"}),
    (PINS, {"query": "trail"}),
    (PROFILE, {"handle": "nasa"}),
    (REELS, {"handle": "esa"}),
    (SHOP, {"url": "https://short-video.example/shop/acme"}),
]
REFUSALS = (429, 500, 502, 503, 504)
QUICK_FAULTS = [FaultKind.RATE_LIMIT, FaultKind.SERVER_ERROR, FaultKind.UNAVAILABLE, FaultKind.DROP]


@pytest.mark.scenario
@pytest.mark.parametrize("seed", [3, 11])
def test_faults_do_not_change_what_lands(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages=(2, 4), fault_rate=0.3, fault_kinds=QUICK_FAULTS,
        retry_after="0", seed=seed,
    )  # fmt: skip
    budget = 200
    with running(config) as sb:
        monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
        queries = [
            {"id": f"q{i}", "endpoint": path, "params": params} for i, (path, params) in enumerate(QUERIES)
        ]
        # 10 attempts: at a 30% fault rate, 5 (the default) fail a page about once in 400, and the schedule's
        # order depends on timing, so a run with 5 hits it now and then
        job = job_spec(
            sb.base_url, tmp_path / "out", queries, name="unreliable", credits=budget, service={"attempts": 10},
            concurrency=4,
        )  # fmt: skip
        spec = write_spec(tmp_path, job)
        summary = run_flow(spec)
        billed = sb.billed_total()
        faults = sum(e.fault is not None for e in sb.ledger)

    assert faults >= 3, "the schedule must really have injected faults"
    assert {q["status"] for q in summary.queries} == {"complete"}
    db = tmp_path / "out" / "harvest.duckdb"
    expected = expected_keys(QUERIES, config)
    for table, records in expected.items():
        assert key_set(db, table) == set(records), table
    assert billed <= summary.credits_spent <= budget
    # every attempt's credits as counted when it ended; the refusals (429, 5xx: not billed by the sandbox) then
    # went back, as the account's balance showed, and everything else stays counted (a dropped answer may be paid)
    counted, refusals = rows(
        db, f"SELECT sum(credits), sum(credits) FILTER (WHERE status_code IN {REFUSALS}) FROM requests"
    )[0]
    assert summary.credits_spent == counted - (refusals or 0)
    # every attempt is on record, the failed ones included
    attempts = rows(db, "SELECT count(*), count(*) FILTER (WHERE error IS NOT NULL) FROM requests")[0]
    assert attempts[0] == len(data_entries(sb)) and attempts[1] >= 1
