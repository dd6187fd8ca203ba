"""The fault matrix at scale: real flow runs of hundreds of pages at concurrency 8 against a sandbox that misbehaves
one way at a time. For each fault: the records equal the fault-free crawl, no row lands twice, spending stays
within the budget (and never below what the service billed), and every attempt is in `requests`."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from harvest.sandbox.config import Drift, FaultKind, SandboxConfig
from harvest.sandbox.expected import full_crawl
from harvest.sandbox.wire.billing import LedgerEntry
from harvest.sandbox.wire.serving import RunningSandbox, running
from tests.crawl_helpers import data_entries
from tests.endpoints import FEED, PINS
from tests.flow_helpers import (
    BIG_BALANCE,
    SECRET_KEY,
    expected_keys,
    job_spec,
    key_set,
    rows,
    run_flow,
    scalar,
    write_spec,
)
from tests.sandbox_gate import settle

TOPICS = [f"topic {c}" for c in "abcdefgh"]
BUDGET = 1000
BASE = SandboxConfig(
    api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (30, 30), FEED: (40, 40)}, page_size=10,
    retry_after="0.05", slow_seconds=1.0,
)  # fmt: skip


pytestmark = pytest.mark.usefixtures("api_key")  # harvest's key in the environment (conftest)


def spec(tmp_path: Path, sb: RunningSandbox, topics: list[str] = TOPICS, **service: Any) -> Path:
    queries = [{"id": "pins", "endpoint": PINS, "for_each": {"query": topics}}]
    return write_spec(
        tmp_path,
        job_spec(
            sb.base_url, tmp_path / "out", queries, name="matrix", credits=BUDGET, concurrency=8,
            service={"timeout_seconds": 0.5, "attempts": 10, **service},
        ),
    )  # fmt: skip


def expected_pins(config: SandboxConfig, topics: list[str] = TOPICS) -> set[tuple[Any, ...]]:
    return set(expected_keys([(PINS, {"query": t}) for t in topics], config)["pinboard_pins"])


def _page(path: str, params: Mapping[str, Any]) -> tuple[str, str]:
    return path, json.dumps(params, sort_keys=True)


def answered_twice(sb: RunningSandbox, db: Path) -> int:
    """Pages the service answered in full more than once although harvest had read the answer (a good answer
    paid twice).

    The runs use a 0.5 s read timeout, which a slow answer must outlast; on a busy machine a normal answer can
    outlast it too. The service then answered a page whose answer harvest never saw, and harvest rightly asked
    again. Such attempts are in harvest's `requests` table with no status: each one explains one answer more,
    and nothing else does."""
    seen = Counter(_page(e.path, e.params) for e in data_entries(sb) if e.status == 200 and e.fault is None)
    unseen = Counter(
        _page(endpoint, json.loads(params))
        for endpoint, params in rows(db, "SELECT endpoint, params FROM requests WHERE status_code IS NULL")
    )
    return sum(max(0, n - 1 - unseen[page]) for page, n in seen.items())


def assert_every_attempt_is_a_row(entries: list[LedgerEntry], db: Path) -> None:
    """Every request the service saw, faulted or not, is a row of `requests`; a row it never saw is an attempt
    no answer came to: a kept-alive connection the server closed as the request went out (both sides idle out
    at 5 s) fails at once, before the request is read, and harvest cannot tell it from a request that was."""
    logged = Counter(_page(e.path, e.params) for e in entries)
    tried = Counter(_page(p, json.loads(q)) for p, q in rows(db, "SELECT endpoint, params FROM requests"))
    unanswered = Counter(
        _page(p, json.loads(q))
        for p, q in rows(db, "SELECT endpoint, params FROM requests WHERE status_code IS NULL")
    )
    assert logged <= tried, ("requests the service saw and harvest did not log", logged - tried)
    assert tried - logged <= unanswered, (
        "rows of requests the service never saw",
        tried - logged - unanswered,
    )


BODY_DAMAGE = [FaultKind.TRUNCATED, FaultKind.CUT]
"""A 2xx damaged on the wire: asked for once more, not twice."""
RETRIED = [f for f in FaultKind if f not in BODY_DAMAGE and f is not FaultKind.MALFORMED]
"""Faults retried until an answer comes (within `attempts`): the edge's refusals, slow answers, drops."""


REFUSAL_BURSTS = {n: FaultKind.RATE_LIMIT for start in (20, 100, 180) for n in range(start, start + 8)}
"""429s as a service's limit sends them: in bursts, every request in flight refused at once (24 in all).

Refused at random (a share of every request, at any pace), the pace rightly takes them for a limit it keeps
missing and settles at a fraction of a request a second: the case then took 4 minutes and more, waiting on the
pace, and proved nothing the bursts do not (each refused request waits its `Retry-After` and is asked again,
unbilled and uncounted). How the pace meets a limit is `tests/test_pace.py`'s and `tests/test_rate_limit.py`'s."""


@pytest.mark.scenario
@pytest.mark.parametrize("fault", RETRIED, ids=[f.value for f in RETRIED])
def test_one_fault_kind_at_scale(prefect_harness: None, tmp_path: Path, fault: FaultKind) -> None:
    if fault is FaultKind.RATE_LIMIT:
        config = BASE.replace(fault_plan=REFUSAL_BURSTS, seed=11)
    else:
        config = BASE.replace(fault_rate=0.1, fault_kinds=[fault], seed=11)
    db = tmp_path / "out" / "harvest.duckdb"
    with running(config) as sb:
        summary = run_flow(spec(tmp_path, sb))
        settle(sb)  # slow answers harvest gave up on are recorded when they end
        entries = data_entries(sb)
        billed = sb.billed_total()
        faults = sum(e.fault is not None for e in entries)
    assert summary.status == "complete", summary
    assert faults >= 20, "the fault was really injected, many times"
    assert key_set(db, "pinboard_pins") == expected_pins(config)
    assert scalar(db, "SELECT count(*) FROM pinboard_pins") == len(expected_pins(config))
    assert answered_twice(sb, db) == 0
    assert billed <= summary.credits_spent <= BUDGET
    assert summary.service_billed == billed, "the balance read before and after tells the service's bill"
    assert scalar(db, "SELECT service_billed FROM runs") == billed
    assert_every_attempt_is_a_row(entries, db)
    # each attempt's credits as counted when it ended; the refusals the account's balance shows were not billed
    # (429, 5xx) went back after the run, everything else stays counted (a lost answer may have been paid).
    # A lost answer (a read timeout on a busy machine) the service did bill leaves the bill unable to say which
    # of it and a refusal was billed: one refusal per such credit stays counted (never count less than billed).
    refusals = "status_code IN (429, 500, 502, 503, 504)"
    kept = scalar(db, f"SELECT coalesce(sum(credits), 0) FROM requests WHERE NOT coalesce({refusals}, false)")
    lost = scalar(db, "SELECT coalesce(sum(credits), 0) FROM requests WHERE status_code IS NULL")
    assert kept <= summary.credits_spent <= kept + lost
    if (
        fault is FaultKind.UNAVAILABLE
    ):  # the edge's 503 is not billed, and each one was counted so when it came
        assert scalar(db, "SELECT sum(credits) FROM requests") == billed == summary.credits_spent


@pytest.mark.scenario
@pytest.mark.parametrize("fault", BODY_DAMAGE, ids=[f.value for f in BODY_DAMAGE])
def test_answers_damaged_on_the_wire_at_scale_are_asked_for_once_more(
    prefect_harness: None, tmp_path: Path, fault: FaultKind
) -> None:
    """Each damaged answer is asked for once more. A page damaged on both tries stops its query (`failed`,
    its cursor kept); `--continue` asks for it again, and in the end the records are the fault-free crawl. No
    page is paid more than twice in one run, and no answer harvest read is paid again."""
    config = BASE.replace(fault_rate=0.1, fault_kinds=[fault], seed=11)
    db = tmp_path / "out" / "harvest.duckdb"
    with running(config) as sb:
        path = spec(tmp_path, sb)
        summaries = [run_flow(path)]
        while summaries[-1].status != "complete" and len(summaries) < 6:
            summaries.append(run_flow(path, mode="continue"))
        entries = data_entries(sb)
        billed = sb.billed_total()
    for summary in summaries:
        for q in summary.queries:
            assert q["status"] == "complete" or (q["status"] == "failed" and "cut" in q["error"]), q
    assert summaries[-1].status == "complete", [s["status"] for s in summaries]
    assert sum(e.fault is not None for e in entries) >= 20, "the fault was really injected, many times"
    assert key_set(db, "pinboard_pins") == expected_pins(config)
    assert scalar(db, "SELECT count(*) FROM pinboard_pins") == len(expected_pins(config))
    assert answered_twice(sb, db) == 0
    per_run = Counter(_page(e.path, e.params) for e in entries)
    assert max(per_run.values()) <= 2 * len(summaries)
    assert billed <= sum(s.credits_spent for s in summaries) <= BUDGET * len(summaries)


def test_answers_no_reading_takes_at_scale_are_paid_once_and_kept(
    prefect_harness: None, tmp_path: Path
) -> None:
    """A 200 whose JSON is followed by a proxy's error page is the service's answer: its query stops there as
    `drift` with the page kept (paid once, never asked for again), the other queries complete."""
    config = BASE.replace(fault_rate=0.05, fault_kinds=[FaultKind.MALFORMED], seed=5)
    db = tmp_path / "out" / "harvest.duckdb"
    with running(config) as sb:
        summary = run_flow(spec(tmp_path, sb))
        entries = data_entries(sb)
    statuses = {q["query_id"]: q["status"] for q in summary.queries}
    assert set(statuses.values()) <= {"complete", "drift"} and "drift" in statuses.values()
    asked = Counter(_page(e.path, e.params) for e in entries)
    assert set(asked.values()) == {1}, "a page was asked for twice"
    for q in summary.queries:
        topic = q["query_id"].split("query=", 1)[1].rstrip("]")  # pins[query=topic a]
        theirs = [e for e in entries if e.params["query"] == topic]
        assert theirs, q["query_id"]
        assert q["pages"] == len(theirs), "every paid page of the query is kept"
        if q["status"] == "drift":
            assert theirs[-1].fault == "malformed" and "could not be read" in q["error"]
            assert q["next_cursor"] is None
    assert key_set(db, "pinboard_pins") <= expected_pins(config)
    kept = rows(db, "SELECT count(*) FROM requests WHERE status_code = 200")
    assert kept == [(len(entries),)]


def test_out_of_credits_mid_run_stops_cleanly_and_continues(prefect_harness: None, tmp_path: Path) -> None:
    config = BASE.replace(api_keys={SECRET_KEY: 150})
    db = tmp_path / "out" / "harvest.duckdb"
    with running(config) as sb:
        path = spec(tmp_path, sb)
        stopped = run_flow(path)
        assert len(data_entries(sb)) <= 150 + 8  # the 402s that stopped it, at most one per request in flight
        sb.set_balance(10_000)
        resumed = run_flow(path, mode="continue")
        twice = answered_twice(sb, db)
    assert stopped.status == "failed" and "402" in (stopped.error or "")
    assert {q["status"] for q in stopped.queries} <= {"stopped", "complete"}
    assert resumed.status == "complete" and twice == 0
    assert key_set(db, "pinboard_pins") == expected_pins(config)


def test_an_invalid_key_costs_one_request_at_scale(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARVEST_API_KEY", "wrong-key-0123456789")
    with running(BASE) as sb:
        summary = run_flow(spec(tmp_path, sb))
        assert len(sb.ledger) == 1 and sb.billed_total() == 0
    assert summary.status == "failed" and {q["status"] for q in summary.queries} == {"stopped"}


def test_not_found_answers_among_normal_ones(prefect_harness: None, tmp_path: Path) -> None:
    topics = [*TOPICS[:6], "missing one", "missing two"]
    with running(BASE) as sb:
        summary = run_flow(spec(tmp_path, sb, topics))
        billed = sb.billed_total()
    statuses = {q["query_id"]: q["status"] for q in summary.queries}
    assert summary.status == "complete"
    assert [s for q, s in statuses.items() if "missing" in q] == ["complete", "complete"]  # an empty search
    db = tmp_path / "out" / "harvest.duckdb"
    assert key_set(db, "pinboard_pins") == expected_pins(BASE, topics)
    # harvest counts what the service billed, plus, as spent, any attempt whose answer never came (a 0.5 s
    # timeout on a busy machine): never less than the bill, and more only by those
    unanswered = scalar(db, "SELECT coalesce(sum(credits), 0) FROM requests WHERE status_code IS NULL")
    assert billed <= summary.credits_spent <= billed + unanswered


def test_a_cursor_handed_back_stops_the_query_instead_of_paying_forever(
    prefect_harness: None, tmp_path: Path
) -> None:
    config = BASE.replace(drift=Drift(stuck_cursor=frozenset({PINS})))
    with running(config) as sb:
        summary = run_flow(spec(tmp_path, sb))
        paid = Counter(e.params["query"] for e in data_entries(sb))
    assert summary.status == "failed"
    assert {q["status"] for q in summary.queries} == {"loop_detected"}
    assert set(paid.values()) == {2}, "page 1 repeats page 1's cursor: two pages a query, never a third"
    db = tmp_path / "out" / "harvest.duckdb"
    assert rows(db, "SELECT DISTINCT status FROM query_state") == [("loop_detected",)]


def test_drifted_feed_items_at_scale(prefect_harness: None, tmp_path: Path) -> None:
    config = BASE.replace(drift=Drift(wrapped_feed=0.5), fault_rate=0.05, seed=3)
    handles = [f"u{i}.example" for i in range(4)]
    with running(config) as sb:
        queries = [{"id": "feed", "endpoint": FEED, "for_each": {"handle": handles}}]
        path = write_spec(
            tmp_path,
            job_spec(
                sb.base_url, tmp_path / "out", queries, name="matrix-feed", credits=BUDGET, concurrency=8,
                service={"timeout_seconds": 0.5, "attempts": 10},
            ),
        )  # fmt: skip
        summary = run_flow(path)
    want = {p["uri"] for h in handles for p in full_crawl(FEED, {"handle": h}, config)["posts"]}
    db = tmp_path / "out" / "harvest.duckdb"
    assert summary.status == "complete" and len(want) > 1000
    assert {r[0] for r in rows(db, "SELECT uri FROM microblog_b_posts")} == want
    assert scalar(db, "SELECT sum(records_without_key) + sum(lists_missing) FROM query_state") == 0


@pytest.mark.scenario
@pytest.mark.parametrize(
    "refusal, cut",
    [(FaultKind.SERVER_ERROR, FaultKind.TRUNCATED), (FaultKind.SERVER_ERROR, FaultKind.CUT)],
    ids=["bodies-cut-in-the-json", "connections-closed-mid-body"],
)
def test_refusals_beside_answers_cut_short_are_counted_as_the_account_was_billed(
    prefect_harness: None, tmp_path: Path, refusal: FaultKind, cut: FaultKind
) -> None:
    """500s (not billed) beside 200s whose body came cut short (billed; the charge they name unread): the
    balance after the run leaves room for the cut answers' charges and no refusal, so every refusal goes back
    and the count is the bill. The room went to the refusals before, as if the cut answers had been free, and
    both stayed counted: a quarter of a night's budget, and of a fan-out's cap, held for charges that never
    happened. Only a lost answer (no status: a timeout on a busy machine) may still keep a refusal counted.
    A body the connection cut half-way (its status came, its whole Content-Length did not) is such an answer
    too: it was settled as lost, and refusals beside it stayed counted (60 for a bill of 55)."""
    config = BASE.replace(fault_rate=0.3, fault_kinds=[refusal, cut], seed=3)
    db = tmp_path / "out" / "harvest.duckdb"
    with running(config) as sb:
        summary = run_flow(spec(tmp_path, sb))
        settle(sb)
        billed = sb.billed_total()
        faults = Counter(e.fault for e in data_entries(sb))
    assert faults[cut] >= 5 and faults[refusal] >= 5, faults
    lost = scalar(db, "SELECT coalesce(sum(credits), 0) FROM requests WHERE status_code IS NULL")
    assert summary.service_billed == billed
    assert billed <= summary.credits_spent <= billed + lost, (summary.credits_spent, billed, lost)
    assert scalar(db, "SELECT credits_spent FROM runs") == summary.credits_spent
