"""A nightly job against the sandbox, as the rebuild, export and `harvest raw` tests run it: two profile
listings, a search and a creative search with its details, each night with the engagement counters grown
(`observation`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import running
from tests.endpoints import CREATIVE, CREATIVE_DETAIL, PINS, PROFILE
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, job_spec, run_flow, write_spec

CONFIG = SandboxConfig(
    api_keys={SECRET_KEY: BIG_BALANCE},
    pages_by_path={PROFILE: (2, 2), PINS: (2, 2), CREATIVE: (1, 1)},
    page_size=4,
)
HANDLES = ["nasa", "esa"]


def job(output: Path) -> dict[str, Any]:
    queries = [
        {"id": "videos", "endpoint": PROFILE, "params": {"sort_by": "latest"}, "for_each": {"handle": HANDLES}},
        {"id": "pins", "endpoint": PINS, "params": {"query": "oak desk"}},
        {"id": "creatives", "endpoint": CREATIVE, "params": {"query": "standing desks", "limit": 3}},
        {"id": "details", "endpoint": CREATIVE_DETAIL, "for_each": {"material_id": {"from": "creatives", "field": "material_id"}}},
    ]  # fmt: skip
    # each night's sandbox comes with --base-url
    return job_spec("http://127.0.0.1:9", output, queries, name="nightly", credits=1000)


def night(tmp_path: Path, output: Path, observation: int, monkeypatch: pytest.MonkeyPatch) -> str:
    """One night's run of the job (a real flow run: needs `prefect_harness`), complete; its run id."""
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    spec = write_spec(tmp_path, job(output))
    with running(replace(CONFIG, observation=observation)) as sb:
        summary = run_flow(spec, base_url=sb.base_url)
    assert summary.status == "complete", summary
    return str(summary.run_id)


def parquet_rows(root: Path) -> dict[str, int]:
    """Rows per Parquet file under `root`, by path relative to it."""
    import pyarrow.parquet as pq

    return {str(p.relative_to(root)): pq.read_metadata(p).num_rows for p in sorted(root.rglob("*.parquet"))}
