"""The `<table>_history` views after the ways a night ends badly: killed with -9 while its Parquet writer had a
row group on disk (a torn `.tmp` file), resumed; a budget stop, `--continue` whose load met a held DuckDB file,
`harvest load`; `harvest rebuild` after each. Real `harvest run` processes against the sandbox over HTTP; each
view is read as an analyst reads it (a GROUP BY over `_run_id` and the key) and held against the runs' raw
pages, the receipts: every fetch once, none lost, none twice.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from harvest.flows.cli import app
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import running
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import all_manifests
from tests.crawl_helpers import data_entries
from tests.endpoints import PINS
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, held_duckdb, job_spec, rows, scalar, write_spec
from tests.history_helpers import assert_history_once, history
from tests.process_helpers import finish, start_run, wait_until
from tests.test_resume_kill import CONFIG, job, kill_hard

runner = CliRunner()
LONG = SandboxConfig(
    api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (40, 40)}, page_size=100, latency=0.01
)
"""Pages of 100 pins: the run's writer puts a row group on disk (2 MB) well before the night ends."""


def torn(output: Path) -> list[Path]:
    """The unfinished Parquet files on disk with row groups in them (no footer yet)."""
    return [p for p in output.rglob("*.parquet.tmp") if p.stat().st_size > 0]


def history_runs(output: Path, table: str) -> dict[str, int]:
    """Rows per run in a history view, read by `harvest sql` (the analyst's way in)."""
    query = f"SELECT _run_id, count(*) FROM {table}_history GROUP BY 1 ORDER BY 1"
    said = runner.invoke(app, ["sql", str(output), query, "--format", "csv"])
    assert said.exit_code == 0, said.output
    return {line.split(",")[0]: int(line.split(",")[1]) for line in said.stdout.splitlines()[1:]}


@pytest.mark.scenario  # a second kill -9 proof (~30 s): make scenarios
def test_a_night_killed_with_a_torn_parquet_file_then_resumed_and_rebuilt_is_in_its_history_once(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """Night 2 is killed with a row group of its pins on disk in a `.tmp` file: the history view still opens
    and shows night 1 alone (the torn file is not read). The same command resumes the night under its run id,
    landing its stored pages again: each fetch of both nights is in the view once, the resumed night's rows are
    its query_state pages' records, and `harvest rebuild` (which writes every run's Parquet again) leaves the
    view as it was."""
    output = tmp_path / "out"
    with running(LONG) as sb:
        spec = write_spec(
            tmp_path,
            job_spec(
                sb.base_url, output, [{"id": "pins", "endpoint": PINS, "params": {"query": "oak desk"}}]
            ),
        )
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
        assert code == 0, out + err
        (night1,) = all_manifests(OutputLayout(output))
        proc = start_run(spec, tmp_path, prefect_api_url)
        wait_until(lambda: torn(output), proc, "a row group of night 2 was on disk")
        kill_hard(proc, sb)
        (half,) = torn(output)
        while_killed = history_runs(output, "pinboard_pins")
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
    assert code == 0, out + err
    assert while_killed == {
        night1.run_id: scalar(output / "harvest.duckdb", "SELECT count(*) FROM pinboard_pins")
    }
    night2 = next(m for m in all_manifests(OutputLayout(output)) if m.run_id != night1.run_id)
    assert night2.status == "complete" and night2.resumes == 1
    assert half.name.startswith(f".{night2.run_id}-") and not half.exists(), (
        "the resume removed the torn file"
    )
    ids = [night1.run_id, night2.run_id]
    assert_history_once(output, ids)
    db = output / "harvest.duckdb"
    per_run = dict(rows(db, "SELECT _run_id, count(*) FROM pinboard_pins_history GROUP BY 1"))
    assert per_run == {r: scalar(db, "SELECT count(*) FROM pinboard_pins") for r in ids}, "each night whole"
    stated = rows(db, "SELECT run_id, pages FROM query_state ORDER BY run_id")
    assert stated == [(r, night1.queries[0]["pages"]) for r in sorted(ids)], "every page of each night, once"
    before = history(db, ["pinboard_pins"])
    rebuilt = runner.invoke(app, ["rebuild", str(output)])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert history(db, ["pinboard_pins"]) == before
    assert_history_once(output, ids)


@pytest.mark.scenario  # ~25 s: make scenarios
def test_a_continue_whose_load_met_a_held_database_is_in_the_history_once_before_and_after_its_load(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """A night stops at its budget; its `--continue` lands its Parquet but cannot load (a notebook holds the
    file, HARVEST_DUCKDB_LOCK_WAIT_SECONDS=0). Its fetches are in the history views at once, each once (they
    read the Parquet; docs/output.md), while `runs` and the current tables wait for `harvest load`; after it,
    and after `harvest rebuild`, the views hold each night's fetches once, the budget night's pages not again."""
    output = tmp_path / "out"
    with running(CONFIG) as sb:
        spec = write_spec(tmp_path, job(sb.base_url, output, credits=80))
        code, out, err = finish(start_run(spec, tmp_path, prefect_api_url))
        assert code == 0 and "--continue` picks them up" in err, out + err
        (stopped,) = all_manifests(OutputLayout(output))
        db = output / "harvest.duckdb"
        with held_duckdb(db):
            code, out, err = finish(
                start_run(spec, tmp_path, prefect_api_url, "--continue", "--budget", "500")
            )
        entries = data_entries(sb)
    assert "not loaded into DuckDB yet" in err, out + err
    continued = next(m for m in all_manifests(OutputLayout(output)) if m.run_id != stopped.run_id)
    ids = [stopped.run_id, continued.run_id]
    assert continued.continues == stopped.run_id and continued.status == "complete"
    assert len(entries) == sum(q["pages"] for m in (stopped, continued) for q in m.queries), (
        "no page paid twice"
    )
    assert rows(db, "SELECT run_id FROM runs") == [(stopped.run_id,)]
    assert set(history_runs(output, "pinboard_pins")) == set(ids), "the continued night's Parquet is history"
    assert_history_once(output, ids)
    loaded = runner.invoke(app, ["load", str(output)])
    assert loaded.exit_code == 0, loaded.output
    assert sorted(rows(db, "SELECT run_id FROM runs")) == sorted((r,) for r in ids)
    assert_history_once(output, ids)
    current = scalar(db, "SELECT count(*) FROM pinboard_pins")
    keys = "SELECT count(DISTINCT (search_query, id)) FROM pinboard_pins_history"
    assert scalar(db, keys) == current, "every current row is in the history, and no other key"
    before = history(db, ["pinboard_pins", "creative_materials", "creative_material_details"])
    rebuilt = runner.invoke(app, ["rebuild", str(output)])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert history(db, ["pinboard_pins", "creative_materials", "creative_material_details"]) == before
    assert_history_once(output, ids)
