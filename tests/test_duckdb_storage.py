"""The job's DuckDB file opens in the DuckDB analysts have: the newest 1.x (1.5.6, installed in a venv of its own from
the wheel `make test` fetched) reads a file landed by real runs, after the first run and after a merge; a file an
earlier harvest wrote in DuckDB 2.0's format is converted at its next load, and the user is told.

The same read-only script runs under this DuckDB (2.x) and under 1.5.6 over the same file: both must print the same
rows, types, comments and views.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from typer.testing import CliRunner

from harvest.flows.cli import app
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import RunningSandbox, running
from harvest.tasks.database.load_settings import DEFAULT_STORAGE_VERSION
from tests.endpoints import PROFILE, SHOP, VIDEO_SEARCH
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, job_spec, run_flow, write_spec
from tests.spec_texts import VALID

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "tests" / "duckdb-1x-requirements.txt"
WHEELS = ROOT / ".venv" / "duckdb-1x"
UV = ROOT / ".venv" / "bin" / "uv"
CONFIG = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages=(2, 3))
runner = CliRunner()

READ = """
import json, sys
import duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
def q(sql):
    return [[str(v) for v in row] for row in con.execute(sql).fetchall()]
print(json.dumps({
    "videos": q("SELECT aweme_id, epoch_ms(created_at), play_count, _run_id, length(raw) FROM short_video_videos ORDER BY ALL"),
    "shelves": q("SELECT type, title FROM video_platform_shelves ORDER BY ALL"),
    "runs": q("SELECT run_id, status, credits_spent, records FROM runs ORDER BY ALL"),
    "query_state": q("SELECT run_id, query_id, status, pages, records FROM query_state ORDER BY ALL"),
    "history": q("SELECT count(*), count(DISTINCT _run_id) FROM short_video_videos_history"),
    "comments": q("SELECT table_name, comment FROM duckdb_tables() WHERE comment IS NOT NULL ORDER BY ALL"),
    "types": q("SELECT table_name, column_name, data_type FROM duckdb_columns() "
               "WHERE table_name IN ('short_video_videos', 'runs', 'query_state', 'short_video_products', "
               "'video_platform_videos') ORDER BY ALL"),
    "prices": q("SELECT id, price_amount, price_currency FROM short_video_products ORDER BY ALL"),
    "published": q("SELECT id, epoch_ms(created_at) FROM video_platform_videos ORDER BY ALL"),
    "column_comments": q("SELECT table_name, column_name, comment FROM duckdb_columns() "
                         "WHERE table_name IN ('short_video_products', 'video_platform_videos') ORDER BY ALL"),
}))
"""


@pytest.fixture(scope="session")
def duckdb1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a venv holding DuckDB 1.5.6 alone, installed offline from the wheel `make test` fetched."""
    if not any(WHEELS.glob("duckdb-*.whl")):
        pytest.skip(f"no DuckDB 1.x wheel in {WHEELS}: `make test` fetches it (it needs the package index)")
    venv = tmp_path_factory.mktemp("duckdb1") / "venv"
    subprocess.run([str(UV), "venv", "-q", "--python", sys.executable, str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    installed = subprocess.run(
        [str(UV), "pip", "install", "-q", "--offline", "--no-index", "--find-links", str(WHEELS),
         "--require-hashes", "-r", str(REQUIREMENTS), "--python", str(python)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if installed.returncode != 0:
        pytest.skip(f"the DuckDB 1.x wheel in {WHEELS} does not install here: {installed.stderr.strip()}")
    return python


def read_with(python: Path | str, db: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [str(python), "-c", READ, str(db)], capture_output=True, text=True, timeout=120, env=_no_pythonpath()
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _no_pythonpath() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def version_of(python: Path) -> str:
    code = "import duckdb; print(duckdb.__version__)"
    return subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def job(sb: RunningSandbox, output: Path) -> dict[str, Any]:
    return job_spec(
        sb.base_url,
        output,
        [
            {"id": "videos", "endpoint": PROFILE, "for_each": {"handle": ["nasa", "esa"]}},
            {"id": "search", "endpoint": VIDEO_SEARCH, "params": {"query": "marathon training"}},
            {"id": "shop", "endpoint": SHOP, "params": {"url": "https://short-video.example/shop/acme"}},
        ],
        name="analysts",
        credits=1000,
    )


@pytest.fixture
def sandbox_job(tmp_path: Path, api_key: str) -> Iterator[tuple[Path, Path]]:
    with running(CONFIG) as sb:
        output = tmp_path / "out"
        yield write_spec(tmp_path, job(sb, output)), output / "harvest.duckdb"


def test_a_landed_file_opens_in_duckdb_1x_after_a_run_and_after_a_merge(
    prefect_harness: None, duckdb1: Path, sandbox_job: tuple[Path, Path]
) -> None:
    spec, db = sandbox_job
    assert version_of(duckdb1) == "1.5.6"
    run_flow(spec)
    first = read_with(duckdb1, db)
    assert first == read_with(sys.executable, db)  # what DuckDB 2 reads, row for row
    assert len(first["runs"]) == 1 and first["videos"] and first["shelves"] and first["query_state"]
    assert [
        "short_video_videos",
        "primary key: aweme_id; fetched for: user_handle (the request's handle)",
    ] in first["comments"]
    assert ["short_video_videos", "created_at", "TIMESTAMP WITH TIME ZONE"] in first["types"]
    # true types and column comments, as DuckDB 1.x reads them: an exact price, a true time, every column said
    assert ["short_video_products", "price_amount", "DECIMAL(18,4)"] in first["types"]
    assert ["video_platform_videos", "created_at", "TIMESTAMP WITH TIME ZONE"] in first["types"]
    assert first["prices"] and all(amount.count(".") == 1 for _, amount, _ in first["prices"])
    assert first["published"] and all(ms != "None" for _, ms in first["published"])
    assert first["column_comments"] and all(c.count("Source: ") == 1 for *_, c in first["column_comments"])
    run_flow(spec)  # the second run merges into the same file
    second = read_with(duckdb1, db)
    assert second == read_with(sys.executable, db)
    assert len(second["runs"]) == 2 and second["history"][0][1] == "2"
    assert {row[0] for row in second["videos"]} == {row[0] for row in first["videos"]}  # merged, not doubled
    assert _format(db) == f"{DEFAULT_STORAGE_VERSION}+"


def _format(db: Path) -> str:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return str(con.execute("SELECT tags['storage_version'] FROM duckdb_databases() "
                               "WHERE database_name = current_database()").fetchall()[0][0])  # fmt: skip
    finally:
        con.close()


def _raw_codecs(db: Path) -> set[str]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute(
            "SELECT DISTINCT compression FROM pragma_storage_info('short_video_videos') WHERE column_name = 'raw'"
        ).fetchall()
        return {str(r[0]) for r in rows} - {"Constant"}
    finally:
        con.close()


@pytest.mark.scenario
def test_a_file_in_duckdb_2_format_is_converted_at_the_next_load_and_the_user_told(
    prefect_harness: None,
    duckdb1: Path,
    sandbox_job: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As an earlier harvest left it: written in DuckDB 2.0's format, which 1.x refuses."""
    spec, db = sandbox_job
    monkeypatch.setenv("HARVEST_DUCKDB_STORAGE_VERSION", "latest")
    run_flow(spec)
    assert _format(db) == "v2.0.0+"
    refused = subprocess.run([str(duckdb1), "-c", READ, str(db)], capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "can only read versions between 64 and 68" in refused.stderr
    before = read_with(sys.executable, db)

    monkeypatch.delenv("HARVEST_DUCKDB_STORAGE_VERSION")
    with caplog.at_level(logging.WARNING, logger="harvest.tasks.database.storage_format"):
        run_flow(spec)  # its load converts the file, then merges into it
    told = [r.getMessage() for r in caplog.records if r.name == "harvest.tasks.database.storage_format"]
    assert len(told) == 1 and "v2.0.0+ storage format, which DuckDB 1.x cannot open" in told[0]
    assert f"converted to {DEFAULT_STORAGE_VERSION}'s" in told[0]
    assert _format(db) == f"{DEFAULT_STORAGE_VERSION}+"
    after = read_with(duckdb1, db)
    assert after == read_with(sys.executable, db)
    assert after["comments"] == before["comments"] and after["types"] == before["types"]
    assert after["videos"] and {r[0] for r in after["videos"]} == {r[0] for r in before["videos"]}
    assert len(after["runs"]) == 2
    assert _raw_codecs(db) == {"ZSTD"}  # the raw column's compression came along
    assert not list(db.parent.glob(".harvest.duckdb.convert*"))


def test_storage_version_v1_0_0_writes_a_file_every_duckdb_1x_opens(
    prefect_harness: None,
    duckdb1: Path,
    sandbox_job: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """v1.0.0's format has no zstd for a column: the raw column is stored as DuckDB chooses, the load still works."""
    spec, db = sandbox_job
    monkeypatch.setenv("HARVEST_DUCKDB_STORAGE_VERSION", "v1.0.0")
    run_flow(spec)
    assert _format(db) == "v1.0.0+"
    assert "ZSTD" not in _raw_codecs(db)
    assert read_with(duckdb1, db) == read_with(sys.executable, db)


def test_an_unknown_storage_version_is_refused_before_anything_is_paid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(VALID)
    monkeypatch.setenv("HARVEST_DUCKDB_STORAGE_VERSION", "v9.9.9")
    output = tmp_path / "out"
    result = runner.invoke(app, ["run", str(spec), "--base-url", "sandbox", "--output", str(output)])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: HARVEST_DUCKDB_STORAGE_VERSION='v9.9.9': ")
    assert "allowed: a release such as v1.2.0 (the default" in line and "v1.0.0 (every DuckDB 1.x)" in line
    assert not output.exists()
