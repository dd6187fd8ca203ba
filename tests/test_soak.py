"""`make soak`: thousands of pages through every fault kind at a 20% fault rate, at concurrency 8.

Prints what a user would fear (lost records, duplicate rows, credits over budget: all must be zero) and what it
cost (attempts, faults, retries). Marked `soak`: `make test` leaves it out.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import running
from tests.crawl_helpers import wait_for_entries
from tests.endpoints import PINS
from tests.flow_helpers import (
    BIG_BALANCE,
    SECRET_KEY,
    expected_keys,
    job_spec,
    key_set,
    run_flow,
    scalar,
    write_spec,
)

TOPICS = [f"soak topic {i}" for i in range(10)]
PAGES = 300
BUDGET = 100_000


@pytest.mark.soak
def test_soak_thousands_of_pages_through_every_fault(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (PAGES, PAGES)}, page_size=10,
        fault_rate=0.2, seed=2026, retry_after="0.05", slow_seconds=1.0,
    )  # fmt: skip
    output = tmp_path / "out"
    db = output / "harvest.duckdb"
    with running(config) as sb:
        path = write_spec(
            tmp_path,
            job_spec(
                sb.base_url,
                output,
                [{"id": "pins", "endpoint": PINS, "for_each": {"query": TOPICS}}],
                name="soak",
                credits=BUDGET,
                service={"timeout_seconds": 0.5, "attempts": 12},
                concurrency=8,
            ),
        )
        t0 = time.monotonic()
        summary = run_flow(path)
        took = time.monotonic() - t0
        attempts = scalar(db, "SELECT count(*) FROM requests")
        entries = wait_for_entries(sb, attempts, timeout=30)
        billed = sb.billed_total()
    want = set(expected_keys([(PINS, {"query": t}) for t in TOPICS], config)["pinboard_pins"])
    got = key_set(db, "pinboard_pins")
    rows_ = scalar(db, "SELECT count(*) FROM pinboard_pins")
    lost = len(want - got)
    duplicates = rows_ - len(got)
    over_budget = max(0, summary.credits_spent - BUDGET) + max(0, billed - summary.credits_spent)
    faults = sum(e.fault is not None for e in entries)
    print(
        f"\nsoak: {len(TOPICS) * PAGES} pages, {attempts} attempts ({faults} faults injected) in {took:.0f} s; "
        f"status {summary.status}; lost records: {lost}; duplicate rows: {duplicates}; "
        f"credits over budget (or below the service's bill): {over_budget}; "
        f"credits counted {summary.credits_spent}, billed {billed}"
    )
    assert (lost, duplicates, over_budget) == (0, 0, 0)
    assert summary.status == "complete"
    assert attempts == len(entries)
