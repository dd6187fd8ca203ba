"""An output directory whose name holds a glob's characters (`out[x]`, as a date range or a ticket number in
brackets would): DuckDB reads `[x]` in a path as a character class, so the load's `<table>_history` views and
the printed current-rows query matched no file. The run paid, said `complete`, and could never be loaded: `harvest
load` failed the same way every time."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import harvest.flows.collect  # noqa: F401  (Prefect binds its log handlers on first import: not inside CliRunner)
from harvest.flows.cli import app
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import running
from tests.endpoints import PINS
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, one_query, scalar
from tests.terminal_helpers import pasted_as_csv, printed_command

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("api_key")


def test_an_output_directory_named_with_brackets_loads_and_its_printed_query_reads_it(
    prefect_harness: None, tmp_path: Path
) -> None:
    config = SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages=(2, 2), page_size=5)
    output = tmp_path / "nightly[2026-12]"
    with running(config) as sb:
        spec = one_query(tmp_path, sb.base_url, PINS, {"query": "lamps"})
        result = runner.invoke(app, ["run", str(spec), "--output", str(output)])
    assert result.exit_code == 0, result.output
    db = output / "harvest.duckdb"
    in_table = scalar(db, "SELECT count(*) FROM pinboard_pins")
    assert in_table > 0
    history = runner.invoke(
        app, ["sql", str(output), "SELECT count(*) FROM pinboard_pins_history", "--format", "csv"]
    )
    assert history.exit_code == 0 and history.stdout.split() == ["count_star()", str(in_table)], (
        history.output
    )
    command = printed_command(result.stdout.splitlines(), "Current rows of pinboard_pins")
    pasted = pasted_as_csv(command, tmp_path)
    assert pasted.returncode == 0, pasted.stderr
    assert len(pasted.stdout.splitlines()) == 1 + in_table  # a header, then a row a line
    outside = runner.invoke(app, ["sql", str(output), f"SELECT * FROM read_parquet('{tmp_path}/*.parquet')"])
    assert outside.exit_code == 2, outside.output  # the fence still holds
