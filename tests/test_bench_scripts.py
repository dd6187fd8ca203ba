"""The bench's plain scripts land the table harvest lands, so `make bench` prices the same job on both sides.

harvest's `short_video_videos` gained columns (13 when the scripts were written, 43 since); the scripts kept 13
and the end-to-end ratio compared a third of the work with the whole of it. Here the scripts and a real harvest
run page the same sandbox over HTTP, and every column the scripts land must hold harvest's values.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest

from harvest.connectors.catalog import endpoints as catalog
from tests.flow_helpers import job_spec, run_flow, write_spec
from tests.test_cli_sandbox import harvest_sandbox

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
PATH = "/v3/short-video/profile/videos"
KEY = "bench-scripts-key-0123456789"
HANDLES = ["maker00", "maker01"]
HARVEST_ONLY = {"raw", "_endpoint", "_query_id", "_run_id", "_fetched_at"}


def _declared() -> list[tuple[str, str]]:
    (kind,) = catalog.get(PATH).kinds
    return [(f.name, str(f.type)) for f in kind.columns if f.name not in HARVEST_ONLY]


def test_the_scripts_declare_harvests_columns() -> None:
    sys.path.insert(0, str(BENCH))
    try:
        from video_table import SCHEMA
    finally:
        sys.path.remove(str(BENCH))
    scripts = [(f.name, "timestamp" if str(f.type).startswith("timestamp") else str(f.type)) for f in SCHEMA]
    declared = [(n, "timestamp" if t.startswith("timestamp") else t) for n, t in _declared()]
    assert scripts == declared


def _table(db: Path, names: list[str]) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        cols = ", ".join(f'"{n}"' for n in names)
        return con.execute(f"SELECT {cols} FROM short_video_videos ORDER BY aweme_id").fetchall()
    finally:
        con.close()


def _comparable(
    rows: list[tuple[Any, ...]], names: list[str], json_columns: set[str]
) -> list[tuple[Any, ...]]:
    """JSON columns compared as values: the scripts' json.dumps spaces its separators, harvest's does not."""
    at = [i for i, n in enumerate(names) if n in json_columns]
    out = []
    for row in rows:
        values = list(row)
        for i in at:
            values[i] = None if values[i] is None else json.loads(values[i])
        out.append(tuple(values))
    return out


@pytest.mark.usefixtures("prefect_harness")
def test_the_scripts_land_harvests_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (kind,) = catalog.get(PATH).kinds
    json_columns = {f.name for f in kind.columns if f.json}
    names = [n for n, _ in _declared()]
    options = [
        "--api-key",
        KEY,
        "--credits",
        "100000",
        "--pages",
        "3",
        "3",
        "--page-size",
        "20",
        "--no-quirks",
    ]
    with harvest_sandbox(*options, "--cache-pages") as base:
        spec = job_spec(
            base,
            tmp_path / "harvest",
            [
                {
                    "id": "videos",
                    "endpoint": PATH,
                    "params": {"sort_by": "latest"},
                    "for_each": {"handle": HANDLES},
                }
            ],
            credits=1000,
        )
        monkeypatch.setenv("HARVEST_API_KEY", KEY)
        run_flow(write_spec(tmp_path, spec))
        landed = _comparable(_table(tmp_path / "harvest" / "harvest.duckdb", names), names, json_columns)
        assert len(landed) > 2 * 3 * 20 // 2  # distinct keys (the sandbox repeats some)
        for script in ("plain_script.py", "plain_json_script.py"):
            out = tmp_path / script
            done = subprocess.run(
                [sys.executable, str(BENCH / script), base, KEY, str(out), *HANDLES],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr[-2000:]
            assert _comparable(_table(out / "plain.duckdb", names), names, json_columns) == landed, script
