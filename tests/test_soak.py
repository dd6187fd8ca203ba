"""`make soak`: thousands of pages through every fault of the wire at a 20% fault rate, at concurrency 8, as a
nightly job meets them: the night, then the `--continue` its end prints while a query failed (an answer cut on
both tries fails its query at that page, by design), until the job is complete.

Prints what a user would fear (lost records, duplicate rows, credits over budget or below the service's bill:
all must be zero) and what it cost (attempts, faults, nights). Marked `soak`: `make test` leaves it out.

Every fault kind but `malformed`: that one is a whole JSON answer followed by other text, which harvest takes as
the service's own answer (docs/decisions.md, "A 2xx is paid for once"): kept, its query ends `drift`, and it is
never asked for again, so no number of nights completes such a query; its own tests hold that
(tests/test_fault_matrix.py, tests/test_kill_after_damaged.py). With it, every query of this job drifted at its
first such page and the soak "lost" 26,853 of 30,000 records (found 2026-12-03: the soak had not been run since
the decision of 2026-11-24).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harvest.sandbox.config import ALL_FAULTS, FaultKind, SandboxConfig
from harvest.sandbox.wire.serving import running
from tests.crawl_helpers import wait_for_entries
from tests.endpoints import PINS, PROFILE
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
WIRE_FAULTS = tuple(k for k in ALL_FAULTS if k is not FaultKind.MALFORMED)
NIGHTS = 8
"""The first night and at most seven `--continue`s: each fails a query only where an answer was cut twice (in
2026-12-03's soak, 8 of 10 queries in the first night; complete after the third `--continue`)."""


@pytest.mark.soak
def test_soak_thousands_of_pages_through_every_fault(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (PAGES, PAGES)}, page_size=10,
        fault_rate=0.2, fault_kinds=WIRE_FAULTS, seed=2026, retry_after="0.05", slow_seconds=1.0,
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
        nights = [run_flow(path)]
        while nights[-1].status == "failed" and len(nights) < NIGHTS:
            nights.append(run_flow(path, mode="continue"))
        took = time.monotonic() - t0
        attempts = scalar(db, "SELECT count(*) FROM requests")
        entries = wait_for_entries(sb, attempts, timeout=30)
        billed = sb.billed_total()
    want = set(expected_keys([(PINS, {"query": t}) for t in TOPICS], config)["pinboard_pins"])
    got = key_set(db, "pinboard_pins")
    rows_ = scalar(db, "SELECT count(*) FROM pinboard_pins")
    lost = len(want - got)
    duplicates = rows_ - len(got)
    counted = sum(n.credits_spent for n in nights)
    over_budget = sum(max(0, n.credits_spent - BUDGET) for n in nights) + max(0, billed - counted)
    faults = sum(e.fault is not None for e in entries)
    print(
        f"\nsoak: {len(TOPICS) * PAGES} pages, {attempts} attempts ({faults} faults injected) in {took:.0f} s, "
        f"{len(nights)} nights ({', '.join(n.status for n in nights)}); lost records: {lost}; duplicate rows: "
        f"{duplicates}; credits over budget (or below the service's bill): {over_budget}; credits counted "
        f"{counted}, billed {billed}"
    )
    assert (lost, duplicates, over_budget) == (0, 0, 0)
    assert nights[-1].status == "complete"
    assert attempts == len(entries)


WIDE = [f"acct{i:04d}" for i in range(400)]
"""A fan-out far wider than its gate (concurrency 4: 8 queries before their first page at a time)."""


@pytest.mark.soak
def test_soak_a_wide_fan_out_through_every_fault(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """400 accounts of 3 pages through every fault at 20%: first pages failing, retried and cut while hundreds of
    accounts wait for their turn; every record once, the bill never above the count, until the job is complete
    (2026-12-04: 1,491 attempts, two nights, counted 1,390 for a bill of 1,313, with the first-page gate as
    without it)."""
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PROFILE: (3, 3)}, page_size=5,
        fault_rate=0.2, fault_kinds=WIRE_FAULTS, seed=2027, retry_after="0.05", slow_seconds=1.0,
    )  # fmt: skip
    output = tmp_path / "out"
    db = output / "harvest.duckdb"
    with running(config) as sb:
        queries = [{"id": "videos", "endpoint": PROFILE, "for_each": {"handle": WIDE}}]
        service = {"timeout_seconds": 0.5, "attempts": 12}
        spec = job_spec(
            sb.base_url, output, queries, name="wide", credits=BUDGET, service=service, concurrency=4
        )
        path = write_spec(tmp_path, spec)
        nights = [run_flow(path)]
        while nights[-1].status == "failed" and len(nights) < NIGHTS:
            nights.append(run_flow(path, mode="continue"))
        attempts = scalar(db, "SELECT count(*) FROM requests")
        entries = wait_for_entries(sb, attempts, timeout=30)
        billed = sb.billed_total()
    expected = expected_keys([(PROFILE, {"handle": h}) for h in WIDE], config)
    table, want = next((t, set(k)) for t, k in expected.items() if k)
    got = key_set(db, table)
    duplicates = scalar(db, f"SELECT count(*) FROM {table}") - len(got)
    counted = sum(n.credits_spent for n in nights)
    print(
        f"\nwide soak: {attempts} attempts in {len(nights)} nights ({', '.join(n.status for n in nights)}); "
        f"lost {len(want - got)}, duplicates {duplicates}, counted {counted}, billed {billed}"
    )
    # answers lost on the wire (a timeout, a dropped connection) stay counted: a live session cannot know they
    # were not billed (docs/decisions.md, "Kills do not leave the count above the bill"), so counted >= billed
    assert (len(want - got), duplicates, max(0, billed - counted)) == (0, 0, 0)
    assert nights[-1].status == "complete"
    assert attempts == len(entries)
