"""A cap for a whole fan-out (`max_credits_total`), a real run against the sandbox over HTTP: the replies of every
comment of a video (the example catalog's chain), all of them together within their cap, shared breadth-first,
some 5xx answers retried on the way; and what the night says of the queries the cap left unstarted, with the exit
code the job asked for."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

import flows.collect  # noqa: F401  (Prefect binds its log handlers on first import: not inside a CliRunner)
from flows.cli import app
from sandbox.config import FaultKind, SandboxConfig
from sandbox.wire.serving import running
from tests.crawl_helpers import data_entries
from tests.declared_helpers import REFERRED, referred
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, rows, write_spec

COMMENTS = "/v1/video-platform/video/comments"
REPLIES = "/v1/video-platform/video/comment/replies"
PARAMS = {"url": "https://www.video-platform.example/watch?v=Y2Ah_DFr8cw", "order": "top"}
CAP = 6
runner = CliRunner()


def test_a_fan_out_spends_within_its_cap_breadth_first_and_says_who_never_started(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={COMMENTS: (1, 1), REPLIES: (3, 3)}, page_size_by_path={COMMENTS: 24},
        fault_rate=0.25, fault_kinds=[FaultKind.SERVER_ERROR], seed=3, declared=referred(),
    )  # fmt: skip
    output = tmp_path / "out"
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    with running(config) as sb:
        spec = write_spec(
            tmp_path,
            {
                "name": "capped",
                "service": {"base_url": sb.base_url},
                "budget": {"credits": 1000, "unstarted_exit_code": 3},
                "concurrency": 2,  # dependents in line: 4 at a time, fewer than the cap
                "output": str(output),
                "catalogs": [str(REFERRED)],
                "queries": [
                    {"id": "comments", "endpoint": COMMENTS, "params": PARAMS},
                    {
                        "id": "replies", "endpoint": REPLIES, "max_credits_total": CAP,
                        "for_each": {"continuationToken": {"from": "comments", "field": "replies_token"}},
                    },
                ],
            },
        )  # fmt: skip
        result = runner.invoke(app, ["run", str(spec)], env={"COLUMNS": "200"})
        billed: Counter[str] = Counter()
        for entry in data_entries(sb):
            billed[entry.path] += entry.credits
        faults = sum(1 for e in data_entries(sb) if (e.status or 0) >= 500)
    db = output / "harvest.duckdb"
    threads = {t for (t,) in rows(db, "SELECT replies_token FROM video_platform_video_comments") if t}
    assert len(threads) > CAP + 2  # more threads than the cap pays first pages for, and than the line holds
    states = rows(
        db, "SELECT query_id, status, pages, credits FROM query_state WHERE query_id LIKE 'replies[%'"
    )
    assert faults, "the fault schedule sent no 5xx: the retries went untested"
    # the service's own bill and harvest's count of the fan-out: exactly its cap, never past it
    assert billed[REPLIES] == CAP == sum(credits for _, _, _, credits in states)
    # breadth-first inside the fan-out: one page each for as many as the cap pays, none a second
    assert len(states) == len(threads) and Counter(pages for _, _, pages, _ in states) == {
        1: CAP,
        0: len(threads) - CAP,
    }
    assert {status for _, status, _, _ in states} == {"budget_exhausted"}
    # the night says how many never started, which (a few named) and why; the job asked for exit code 3
    unstarted = len(threads) - CAP
    line = next(x for x in result.stderr.splitlines() if "never started" in x)
    assert line.startswith(
        f"{unstarted} queries never started, the credits spent before their turn: the cap of"
    )
    assert f"{unstarted} of {len(threads)} replies (replies[continuationToken=" in line and "more)" in line
    assert result.exit_code == 3, result.output
