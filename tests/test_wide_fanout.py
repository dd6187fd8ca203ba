"""Wide fan-outs (#29): what a run costs and leaves grows with its tables, not with its queries.

A fan-out over many accounts, and the dependent queries its parent's records start, run as one Prefect task run
per spec query, and land in one Parquet file per table (rolled only by size), one raw file and one attempt log
per session; every query still has its own row in `query_state`, and every record lands once."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.config import SandboxConfig
from sandbox.expected import full_crawl
from sandbox.wire.serving import running
from tasks.output.layout import OutputLayout
from tasks.output.manifest import all_manifests
from tests.flow_helpers import (
    BIG_BALANCE,
    SECRET_KEY,
    expected_keys,
    key_set,
    rows,
    run_flow,
    scalar,
    write_spec,
)
from tests.prefect_helpers import task_runs

PROFILE = "/v3/short-video/profile/videos"
CREATIVE = "/v1/creative/materials"
DETAIL = "/v1/creative/materials/{material_id}"
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
        {
            "name": "wide",
            "service": {"base_url": "{base}"},
            "budget": {"credits": 100_000},
            "concurrency": 4,
            "output": str(output),
            "queries": [
                {"id": "videos", "endpoint": PROFILE, "for_each": {"handle": HANDLES}},
                {"id": "creatives", "endpoint": CREATIVE, "params": CREATIVE_PARAMS},
                {
                    "id": "details",
                    "endpoint": DETAIL,
                    "for_each": {"material_id": {"from": "creatives", "field": "material_id"}},
                },
            ],
        },
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
    assert len(files) == len({table for table, _, _ in manifest.files}) == len(expected)
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
