"""Rows the load skipped for a NULL key stay out of what reads the Parquet for current rows or history.

A real run against a sandbox that drops the primary key of some list records (`--drift missing-keys`): the load
skips those rows (they cannot be merged), so the query printed at the end of the run and the `<table>_history`
view must leave them out too, or a user pasting the query gets more rows than the table holds.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import harvest.flows.collect  # noqa: F401  (Prefect binds its log handlers on first import: not inside CliRunner)
from harvest.connectors.catalog.job_catalog import builtin
from harvest.flows.cli import app
from harvest.sandbox.config import Drift, SandboxConfig
from harvest.sandbox.wire.serving import running
from harvest.tasks.database.history_views import refresh_history_views
from tests.endpoints import PINS
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, one_query, rows, scalar
from tests.terminal_helpers import pasted_as_csv, printed_command

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("api_key")

PARQUET_COUNTS = (
    "SELECT count(*), count(*) FILTER (WHERE id IS NULL), count(DISTINCT id), "
    "count(DISTINCT (id, _run_id)) FILTER (WHERE id IS NOT NULL) FROM read_parquet(?, hive_partitioning = true)"
)
"""Rows of the Parquet, those without a key, keys, keys per run."""


def keyless_run(tmp_path: Path) -> tuple[Path, str]:
    """One run whose sandbox answers 3 in 10 list records without their key: the output and what it printed."""
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages=(3, 3), page_size=10, drift=Drift(missing_keys=0.3)
    )
    with running(config) as sb:
        result = runner.invoke(app, ["run", str(one_query(tmp_path, sb.base_url, PINS, {"query": "lamps"}))])
    assert result.exit_code == 1, result.output  # drift: the query ends as such, its rows are loaded
    assert "skipped" in result.stderr and "NULL primary key" in result.stderr, result.stderr
    return tmp_path / "out", result.stdout


def test_the_printed_current_rows_query_gives_exactly_the_table_s_rows(
    prefect_harness: None, tmp_path: Path
) -> None:
    output, said = keyless_run(tmp_path)
    files = str(output / "parquet" / "pinboard_pins" / "*" / "*.parquet")
    parquet, keyless, keys, _ = duckdb.execute(PARQUET_COUNTS, [files]).fetchone()  # type: ignore[misc]
    in_table = scalar(output / "harvest.duckdb", "SELECT count(*) FROM pinboard_pins")
    command = printed_command(said.splitlines(), "Current rows of pinboard_pins")
    assert "child table's is in docs/output.md" in said, said
    pasted = pasted_as_csv(command, tmp_path)
    assert pasted.returncode == 0, pasted.stderr
    got = pasted.stdout.splitlines()[1:]  # CSV: a header, then a row a line (no value holds a line break)
    assert keyless > 0 and parquet == in_table + keyless and keys == in_table  # what the filter is for
    assert len(got) == in_table, f"{len(got)} rows: {[row[:40] for row in got]}"


def test_the_history_view_has_one_row_per_key_per_run_and_an_older_view_is_replaced_by_the_next_load(
    prefect_harness: None, tmp_path: Path
) -> None:
    output, _ = keyless_run(tmp_path)
    db = output / "harvest.duckdb"
    files = str(output / "parquet" / "pinboard_pins" / "*" / "*.parquet")
    _, keyless, _, per_run = duckdb.execute(PARQUET_COUNTS, [files]).fetchone()  # type: ignore[misc]
    history = "SELECT count(*), count(*) FILTER (WHERE id IS NULL) FROM pinboard_pins_history"
    assert keyless > 0 and rows(db, history) == [(per_run, 0)]
    older = (  # the view as a harvest that kept keyless rows made it, and its record of having checked it
        "CREATE OR REPLACE VIEW pinboard_pins_history AS SELECT * FROM read_parquet("
        f"'{files}', hive_partitioning = true, union_by_name = true) "
        'QUALIFY row_number() OVER (PARTITION BY "id", "_run_id" ORDER BY _fetched_at DESC) = 1'
    )
    with duckdb.connect(str(db)) as con:
        con.execute(older)
        ((definition,),) = con.execute(
            "SELECT sql FROM duckdb_views() WHERE view_name = 'pinboard_pins_history'"
        ).fetchall()
        con.execute(
            "UPDATE harvest_state.history_view_files SET statement = ?, definition = ? WHERE view_name = ?",
            [older, str(definition).partition(" AS ")[2], "pinboard_pins_history"],
        )
    assert rows(db, history) == [(per_run + 1, 1)]  # every keyless row of the one run folded into one
    loaded = runner.invoke(app, ["load", str(output)])
    assert loaded.exit_code == 0, loaded.output
    assert rows(db, history) == [(per_run, 0)]


def test_a_child_table_s_history_view_leaves_out_items_without_their_parent_s_key(tmp_path: Path) -> None:
    """harvest writes no items for a record without its key, and the child table (joined on its parent's rows)
    could not hold one; items another writer left in the Parquet without a parent key stay out of the view too,
    rather than fold every keyless parent of a run into one list."""
    kind = builtin().kinds()["streaming_clip_qualities"]
    at = datetime(2026, 11, 30, tzinfo=UTC)
    items = [("clip-1", 0), ("clip-1", 1), (None, 0), (None, 1), (None, 0)]  # two keyless parents' lists
    columns = {"parent_id": [p for p, _ in items], "position": [i for _, i in items], "_run_id": ["r1"] * 5,
               "_fetched_at": [at] * 5}  # fmt: skip
    landed = pa.table(
        {f.name: columns.get(f.name, [None] * len(items)) for f in kind.schema}, schema=kind.schema
    )
    (tmp_path / "parquet" / kind.table / "date=2026-11-30").mkdir(parents=True)
    pq.write_table(landed, tmp_path / "parquet" / kind.table / "date=2026-11-30" / "r1-0.parquet")
    with duckdb.connect(str(tmp_path / "harvest.duckdb")) as con:
        refresh_history_views(con, tmp_path / "parquet", {kind.table: kind})
        shown = con.execute(f"SELECT parent_id, position FROM {kind.table}_history ORDER BY ALL").fetchall()
    assert shown == [("clip-1", 0), ("clip-1", 1)]
