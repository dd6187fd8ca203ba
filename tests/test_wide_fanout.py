"""Wide fan-outs: what a run costs and leaves grows with its tables, not with its queries.

A fan-out over many accounts, and the dependent queries its parent's records start, are reported by one Prefect
task run per spec query (and do not wait for it), and land in one Parquet file per table (rolled only by size), one raw file and one attempt log
per session; every query still has its own row in `query_state`, and every record lands once."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.expected import full_crawl
from harvest.sandbox.wire.serving import RunningSandbox, running
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import all_manifests
from tests.endpoints import CREATIVE, CREATIVE_DETAIL, PROFILE
from tests.flow_helpers import (
    BIG_BALANCE,
    SECRET_KEY,
    child_tables,
    expected_keys,
    job_spec,
    key_set,
    rows,
    run_flow,
    scalar,
    write_spec,
)
from tests.prefect_helpers import task_runs

CREATIVE_PARAMS = {"query": "standing desks", "limit": 10}
CONFIG = SandboxConfig(
    api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PROFILE: (1, 1), CREATIVE: (3, 3)}, page_size=10
)
HANDLES = [f"acct{i:03d}" for i in range(150)]


def test_a_wide_fan_out_is_one_task_run_per_spec_query_and_one_file_per_table(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    output = tmp_path / "out"
    spec = write_spec(
        tmp_path,
        job_spec(
            "{base}",
            output,
            [
                {"id": "videos", "endpoint": PROFILE, "for_each": {"handle": HANDLES}},
                {"id": "creatives", "endpoint": CREATIVE, "params": CREATIVE_PARAMS},
                {
                    "id": "details",
                    "endpoint": CREATIVE_DETAIL,
                    "for_each": {"material_id": {"from": "creatives", "field": "material_id"}},
                },
            ],
            name="wide",
            credits=100_000,
            concurrency=4,
        ),
    )
    with running(CONFIG) as sb:
        spec.write_text(spec.read_text().replace("{base}", sb.base_url))
        summary = run_flow(spec)
        billed = sb.billed_total()
    materials = {m["material_id"] for m in full_crawl(CREATIVE, CREATIVE_PARAMS, CONFIG)["materials"]}
    assert summary.status == "complete", summary
    assert len(summary.queries) == len(HANDLES) + 1 + len(materials)
    assert summary.credits_spent == billed
    db = output / "harvest.duckdb"
    expected = expected_keys(
        [(PROFILE, {"handle": h}) for h in HANDLES] + [(CREATIVE, CREATIVE_PARAMS)], CONFIG,
        concrete=[f"/v1/creative/materials/{m}" for m in sorted(materials)],
    )  # fmt: skip
    for table, keys in expected.items():
        assert key_set(db, table) == set(keys), table
    states = rows(db, "SELECT status, count(*) FROM query_state GROUP BY 1")
    assert states == [("complete", len(summary.queries))], "each value keeps its own row"
    # files grow with tables: one per table (none rolled at this size), all listed by the run's manifest
    (manifest,) = all_manifests(OutputLayout(output))
    files = sorted(p.relative_to(output).as_posix() for p in (output / "parquet").rglob("*.parquet"))
    assert files == sorted(path for _, path, _ in manifest.all_files())
    landed = {table for table, _, _ in manifest.files}
    assert len(files) == len(landed) and landed - child_tables() == set(expected)
    # the raw store and the attempt log: one file each for the session, every query's pages in it
    run_dir = output / "raw" / manifest.run_id
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "journal.jsonl", "manifest.json", "session-0001.pages", "session-0001.requests.jsonl"
    ]  # fmt: skip
    assert scalar(db, "SELECT count(DISTINCT query_id) FROM requests") == len(summary.queries)
    # Prefect: one task run per spec query, each Completed; the dependents' line closed after its parent ended
    runs = {t.name: t for t in task_runs(str(manifest.flow_run_id))}
    assert sorted(runs) == ["creatives", "details", "videos"]
    assert all(t.state.type.value == "COMPLETED" for t in runs.values())
    # and the run's table artifact is a row per spec query, not one per account
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        (artifact,) = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["harvest-wide"])), limit=1
        )
    table = artifact.data if isinstance(artifact.data, list) else json.loads(str(artifact.data))
    assert [row["query_id"] for row in table] == [
        "creatives", f"details ({len(materials)} queries)", f"videos ({len(HANDLES)} queries)"
    ]  # fmt: skip


def test_a_task_run_prefect_cannot_start_never_fails_its_queries(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 10,000 accounts Prefect's server refused a task run its tags' concurrency slots (`503 Service
    Unavailable`) and the query failed. Here Prefect refuses every slot, as it raised then: the spec queries'
    lines run without a task run, every query completes, and the run says why once per line."""
    import prefect.task_engine
    from prefect.concurrency._asyncio import ConcurrencySlotAcquisitionError

    @contextlib.asynccontextmanager
    async def refused(names: list[str], **_: Any) -> AsyncIterator[None]:
        raise ConcurrencySlotAcquisitionError(
            f"Unable to acquire concurrency slots on {names!r}: Server error '503 Service Unavailable'"
        )
        yield  # an async generator, as Prefect's is

    monkeypatch.setattr(prefect.task_engine, "_aconcurrency", refused)
    output, handles = tmp_path / "out", HANDLES[:30]
    summary, heard, billed = _fan_out_heard(tmp_path, output, handles, monkeypatch)
    assert summary.status == "complete" and summary.credits_spent == billed == len(handles)
    assert {q["status"] for q in summary.queries} == {"complete"} and len(summary.queries) == len(handles)
    expected = expected_keys([(PROFILE, {"handle": h}) for h in handles], CONFIG)
    assert key_set(output / "harvest.duckdb", "short_video_videos") == set(expected["short_video_videos"])
    said = [m for m in heard if "could not run the task run of" in m]
    assert len(said) == 1 and "of videos" in said[0] and "503 Service Unavailable" in said[0], said


def test_the_queries_do_not_wait_for_their_task_run_to_start(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy Prefect server answered a task run's slot call in 2.1 s (it takes 50 ms), and a fan-out waited
    those seconds before its first request. Here Prefect holds every task run back (its slot call does not
    answer) until the service has been paid for every account, or 20 s: the accounts are all paid first, the
    task run then reports the line, and nothing is said of Prefect's trouble (there was none, only slowness)."""
    import asyncio
    import time

    import prefect.task_engine

    output, handles = tmp_path / "out", HANDLES[:40]
    held: list[float] = []
    sandboxes: list[RunningSandbox] = []

    @contextlib.asynccontextmanager
    async def slow_server(names: list[str], **_: Any) -> AsyncIterator[None]:
        deadline = time.monotonic() + 20
        while sandboxes[0].billed_total() < len(handles) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        held.append(deadline - time.monotonic())
        yield

    monkeypatch.setattr(prefect.task_engine, "_aconcurrency", slow_server)
    summary, heard, billed = _fan_out_heard(tmp_path, output, handles, monkeypatch, sandboxes)
    assert len(held) == 1 and held[0] > 0, "the accounts waited for the task run's slot"
    assert summary.status == "complete" and summary.credits_spent == billed == len(handles)
    assert {q["status"] for q in summary.queries} == {"complete"}
    (manifest,) = all_manifests(OutputLayout(output))
    runs = task_runs(str(manifest.flow_run_id))
    assert [(t.name, t.state.type.value) for t in runs] == [("videos", "COMPLETED")]
    assert not [m for m in heard if "could not run the task run" in m]


def _fan_out_heard(
    tmp_path: Path,
    output: Path,
    handles: list[str],
    monkeypatch: pytest.MonkeyPatch,
    sandboxes: list[RunningSandbox] | None = None,
) -> tuple[Any, list[str], int]:
    """One query over `handles` on 4 connections: the run's summary, the warnings the fan-out logged, the
    credits the sandbox billed. `sandboxes` gets the running sandbox before the run starts."""
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    spec = write_spec(
        tmp_path,
        job_spec("{base}", output, [{"id": "videos", "endpoint": PROFILE, "for_each": {"handle": handles}}], name="fan-out", credits=1000, concurrency=4),
    )  # fmt: skip
    heard: list[logging.LogRecord] = []
    listener = logging.Handler(logging.WARNING)
    listener.emit = heard.append  # type: ignore[method-assign]
    logging.getLogger("harvest.flows.run.fanout").addHandler(listener)
    try:
        with running(CONFIG) as sb:
            (sandboxes if sandboxes is not None else []).append(sb)
            spec.write_text(spec.read_text().replace("{base}", sb.base_url))
            summary = run_flow(spec)
            billed = sb.billed_total()
    finally:
        logging.getLogger("harvest.flows.run.fanout").removeHandler(listener)
    return summary, [r.getMessage() for r in heard], billed
