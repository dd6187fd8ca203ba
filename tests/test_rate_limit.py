"""A service with a rate limit, over real HTTP, through real flow runs: a busy service slows harvest down; it never
fails the night or inflates the count.

The sandbox accepts `rate` requests a second (a token bucket) and answers 429 with `Retry-After: 1` past it, not
billed. How close the paging time comes to `pages / rate` is measured by `bench/rate_limit.py`, not here.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest
import yaml

from harvest.flows.commands.run_report import rate_line
from harvest.sandbox.config import Quirks, SandboxConfig
from harvest.sandbox.wire.serving import running
from tests.crawl_helpers import data_entries
from tests.endpoints import PINS
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

TOPICS = [f"topic {c}" for c in "abcdefgh"]
PAGES = 10


def config(**overrides: Any) -> SandboxConfig:
    base = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (PAGES, PAGES)}, page_size=5, rate=20,
        retry_after="1", quirks=Quirks(dangling_last_cursor=False, repeat_items=False),
    )  # fmt: skip
    return base.replace(**overrides)


def spec(
    tmp_path: Path, base_url: str, budget: int = 1000, topics: list[str] = TOPICS, **rate_limit: Any
) -> Path:
    queries = [{"id": "pins", "endpoint": PINS, "for_each": {"query": topics}}]
    return write_spec(
        tmp_path,
        job_spec(
            base_url,
            tmp_path / "out",
            queries,
            name="busy",
            credits=budget,
            concurrency=16,
            rate_limit=rate_limit,
        ),
    )


def expected(cfg: SandboxConfig) -> set[tuple[Any, ...]]:
    return set(expected_keys([(PINS, {"query": t}) for t in TOPICS], cfg)["pinboard_pins"])


pytestmark = pytest.mark.usefixtures("api_key")


def test_a_rate_limit_far_below_the_concurrency_completes_every_query_and_counts_what_was_billed(
    prefect_harness: None, tmp_path: Path
) -> None:
    cfg = config()
    with running(cfg) as sb:
        summary = run_flow(spec(tmp_path, sb.base_url))
        entries = data_entries(sb)
        billed = sb.billed_total()
    refused = sum(e.status == 429 for e in entries)
    assert summary.status == "complete" and {q["status"] for q in summary.queries} == {"complete"}
    db = tmp_path / "out" / "harvest.duckdb"
    assert key_set(db, "pinboard_pins") == expected(cfg)  # 0 records lost
    assert billed == len(TOPICS) * PAGES == summary.credits_spent == summary.service_billed
    assert scalar(db, "SELECT credits_spent FROM runs") == billed
    assert sum(q["credits"] for q in summary.queries) == billed
    assert refused <= 0.2 * len(entries), f"{refused} of {len(entries)} requests refused"
    met = summary.rate_limit
    assert met["refused"] == refused and met["requests"] == len(entries)
    # the time the run went below its concurrency (none where a loaded machine never reached the limit); paced
    # at the end unless harvest was slower than the limit
    assert (met["slowed_s"] > 0 or refused == 0) and (met["per_second"] is not None or not met["limited"])
    # each 429 is in `requests`, counted at the time; the run's count is settled against the bill
    assert scalar(db, "SELECT count(*) FROM requests WHERE status_code = 429") == refused


@pytest.mark.parametrize(
    ("refused", "never_cut"),
    [(range(12, 20), False), ((10, 30, 50, 70), True)],
    ids=["blip", "here-and-there"],
)
def test_429s_with_no_limit_are_waited_out_and_the_summary_says_it_was_a_blip_not_a_limit(
    prefect_harness: None, tmp_path: Path, refused: Collection[int], never_cut: bool
) -> None:
    """Eight requests in a row refused, then none (a blip), or four twenty apart (a gateway's stray 429s): the
    refused pages wait their `Retry-After` and are fetched; the run ends at its concurrency, not at a found
    limit, and says how long it went below it. Stray 429s do not cut the pace at all: each cut it, the second
    within 30 s made it a limit, and at 2.5% of requests a night crawled at one request every few seconds
    (`make soak`, `tests/test_pace.py`)."""
    cfg = config(rate=0, fault_plan={n: "rate_limit" for n in refused})
    with running(cfg) as sb:
        summary = run_flow(spec(tmp_path, sb.base_url))
        entries = data_entries(sb)
    assert summary.status == "complete" and key_set(tmp_path / "out" / "harvest.duckdb", "pinboard_pins") == (
        expected(cfg)
    )
    assert sum(e.status == 429 for e in entries) == len(refused)
    met = summary.rate_limit
    # the refused pages' second each is time below the concurrency, and no limit was found
    assert met["refused"] == len(refused) and not met["limited"] and met["slowed_s"] >= 1.0, met
    assert met["per_second"] is None or not never_cut, met
    said = rate_line(met)
    assert said is not None and "below its concurrency for" in said and "a blip, not a limit" in said, said


def test_a_night_s_first_pages_past_the_limit_are_refused_once_not_again_with_the_next_pages(
    prefect_harness: None, tmp_path: Path
) -> None:
    """16 queries at concurrency 16 against a service that accepts 10 requests at once (a second's bucket): the
    6 first pages past it are refused, and no more at the night's start. The accepted answers came before the
    refusals, and each query sent its next page as it read its answer: those 10 were refused too (16 at the
    start of a night of 400 pages, `bench/rate_limit.py`); now they wait for the first wave's last answer and
    leave at the pace its refusals set."""
    topics = [f"topic {i:02d}" for i in range(16)]
    cfg = config(rate=10, pages_by_path={PINS: (3, 3)})
    with running(cfg) as sb:
        summary = run_flow(spec(tmp_path, sb.base_url, topics=topics))
        entries = data_entries(sb)
    start = entries[0].time
    at_start = [round(e.time - start, 3) for e in entries if e.status == 429 and e.time - start < 0.9]
    assert summary.status == "complete" and summary.credits_spent == 16 * 3
    assert len(at_start) <= 16 - 10 + 1, at_start  # the bucket's excess, and a token it refilled meanwhile


def test_a_tight_budget_is_spent_whole_however_often_the_service_refused(
    prefect_harness: None, tmp_path: Path
) -> None:
    cfg = config()
    with running(cfg) as sb:
        summary = run_flow(spec(tmp_path, sb.base_url, budget=40))
        entries = data_entries(sb)
        billed = sb.billed_total()
    assert sum(e.status == 429 for e in entries) > 0, "the limit was really met"
    assert billed == 40 == summary.credits_spent, "refusals counted as spent left credits unused"
    assert summary.status == "budget_exhausted"
    assert sum(e.status == 200 for e in entries) == 40


def test_a_known_limit_in_the_spec_meets_almost_no_refusal(prefect_harness: None, tmp_path: Path) -> None:
    cfg = config()
    with running(cfg) as sb:
        summary = run_flow(spec(tmp_path, sb.base_url, per_second=18))
        entries = data_entries(sb)
    assert summary.status == "complete"
    assert sum(e.status == 429 for e in entries) <= 2
    assert summary.rate_limit["limit"] == 18


@pytest.mark.scenario  # two nights of 24 s
def test_a_found_limit_is_said_as_the_spec_s_line_which_pasted_spares_the_next_night_its_refusals(
    prefect_harness: None, tmp_path: Path
) -> None:
    """A night that found the service's limit says the `rate_limit:` line that starts a night there; written into
    the spec as printed, the next night meets almost no refusal: the burst at full concurrency and the climb
    that told the limit from a blip are not met again every night."""
    # 24 s a night, long enough to judge; 5 a second, not 10: beside `make test` on two cores a night at 10
    # could not keep its pace long enough to judge the limit twice, and said no line (its CPU, not the pace)
    with running(config(rate=5, pages_by_path={PINS: (15, 15)})) as sb:
        path = spec(tmp_path, sb.base_url)
        first = run_flow(path)
        refused_first = sum(e.status == 429 for e in data_entries(sb))
        said = rate_line(first.rate_limit)
        assert said is not None and first.rate_limit["limited"], first.rate_limit
        (written,) = re.findall(
            r"`(rate_limit: \{per_second: [0-9.]+\})` in the spec starts a night there", said
        )
        body = yaml.safe_load(path.read_text()) | yaml.safe_load(written)
        path.write_text(yaml.safe_dump(body, sort_keys=False))
        second = run_flow(path)
        refused_second = sum(e.status == 429 for e in data_entries(sb)) - refused_first
    known = body["rate_limit"]["per_second"]
    assert 4.5 <= known <= 5.5 and second.status == "complete" and second.rate_limit["limit"] == known, said
    assert refused_first >= 8 and refused_second <= 2, (refused_first, refused_second)


def test_a_service_that_refuses_everything_stops_the_night_resumably_and_the_next_run_finishes(
    prefect_harness: None, tmp_path: Path
) -> None:
    cfg = config(rate=0.01, rate_burst=3)  # three requests, then one every 100 s
    db = tmp_path / "out" / "harvest.duckdb"
    with running(cfg) as sb:
        path = spec(tmp_path, sb.base_url, max_wait_seconds=2)
        stopped = run_flow(path)
        statuses = {q["status"] for q in stopped.queries}
        assert statuses == {"rate_limited"} or statuses == {"rate_limited", "complete"}, statuses
        assert stopped.status == "rate_limited" and stopped.credits_spent == sb.billed_total() == 3
        sb.app.rate_gate.rate = 0  # the service lifts its limit: tomorrow's run
        resumed = run_flow(path, mode="continue")
        entries = data_entries(sb)
    assert resumed.status == "complete"
    assert key_set(db, "pinboard_pins") == expected(cfg)
    ok = [(e.params["query"], e.params.get("cursor")) for e in entries if e.status == 200]
    assert len(ok) == len(set(ok)) == len(TOPICS) * PAGES, "a page was paid twice"
    assert rows(db, "SELECT status FROM runs ORDER BY started") == [("rate_limited",), ("complete",)]
