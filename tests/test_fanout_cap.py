"""A cap for a whole fan-out (`max_credits_total`), a real run against the sandbox over HTTP: the replies of every
comment of a video (the built-in chain), all of them together within their cap, shared breadth-first,
some 5xx answers retried on the way; and what the night says of the queries the cap left unstarted, with the exit
code the job asked for."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from harvest.connectors.catalog.job_catalog import builtin_declarations
from harvest.sandbox.config import FaultKind, SandboxConfig
from harvest.sandbox.wire.serving import running
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import all_manifests
from tests.crawl_helpers import data_entries
from tests.endpoints import COMMENT_REPLIES, VIDEO_COMMENTS
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, job_spec, rows, write_spec
from tests.prefect_helpers import flow_run_states
from tests.process_helpers import finish, start_run

PARAMS = {"url": "https://www.video-platform.example/watch?v=Y2Ah_DFr8cw", "order": "top"}
CAP = 6


def test_a_fan_out_spends_within_its_cap_breadth_first_and_says_who_never_started(
    prefect_api_url: str, tmp_path: Path
) -> None:
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={VIDEO_COMMENTS: (1, 1), COMMENT_REPLIES: (3, 3)}, page_size_by_path={VIDEO_COMMENTS: 24},
        fault_rate=0.25, fault_kinds=[FaultKind.SERVER_ERROR], seed=3, catalog=builtin_declarations(),
    )  # fmt: skip
    output = tmp_path / "out"
    with running(config) as sb:
        queries = [
            {"id": "comments", "endpoint": VIDEO_COMMENTS, "params": PARAMS},
            {
                "id": "replies", "endpoint": COMMENT_REPLIES, "max_credits_total": CAP,
                "for_each": {"continuationToken": {"from": "comments", "field": "replies_token"}},
            },
        ]  # fmt: skip
        spec = write_spec(
            tmp_path,
            job_spec(
                sb.base_url, output, queries, name="capped", credits=1000, budget={"unstarted_exit_code": 3},
                concurrency=2,  # dependents in line: 4 at a time, fewer than the cap
            ),
        )  # fmt: skip
        # `harvest run SPEC` as cron or a terminal of 80 columns runs it (rich takes TTY_COMPATIBLE for a tty)
        terminal = {"TTY_COMPATIBLE": "1", "NO_COLOR": "1", "COLUMNS": "80"}
        code, _, err = finish(start_run(spec, tmp_path, prefect_api_url, env=terminal))
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
    assert billed[COMMENT_REPLIES] == CAP == sum(credits for _, _, _, credits in states)
    # breadth-first inside the fan-out: one page each for as many as the cap pays, none a second
    assert len(states) == len(threads) and Counter(pages for _, _, pages, _ in states) == {
        1: CAP,
        0: len(threads) - CAP,
    }
    assert {status for _, status, _, _ in states} == {"budget_exhausted"}
    # the night says how many never started (no request went out: one whose only request was a 500 before the
    # cap was spent is a stopped query, a row of `requests`), which (a few named, each whole on a line of the
    # terminal's 80 columns) and why; the job asked for exit code 3
    asked = {q for (q,) in rows(db, "SELECT DISTINCT query_id FROM requests")}
    never = {qid for qid, _, pages, _ in states if not pages and qid not in asked}
    unstarted = len(never)
    assert unstarted > 3, never
    said = re.sub(r"\x1b\[[0-9;]*m", "", err).splitlines()
    first = next(n for n, x in enumerate(said) if "never started" in x)
    end = next(n for n in range(first, len(said)) if said[n].endswith("more)"))
    lines = said[first : end + 1]
    named = [qid for qid in never if any(qid in line for line in lines)]  # each id whole on one line
    assert len(named) == 3, lines
    assert " ".join(lines) == (
        f"{unstarted} queries never started, their fan-out's cap (max_credits_total) spent before their turn: "
        f"{unstarted} of {len(threads)} replies ({', '.join(sorted(named, key=' '.join(lines).index))} "
        f"and {unstarted - 3} more)"
    )
    assert all(len(line) <= 80 for line in lines) and len(lines) > 1, lines
    assert code == 3, err
    # a served deployment hears it too: the flow run Failed, its message counting what never started
    (manifest,) = all_manifests(OutputLayout(output))
    state, message = flow_run_states([manifest.flow_run_id])[manifest.flow_run_id]
    assert state == "FAILED" and f"{unstarted} queries never started (the budget or a cap spent)" in message
