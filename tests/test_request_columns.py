"""Every row says what fetched it: a column declared `path: $params.NAME` holds the request value of its row,
typed as declared, described as such (its comment, its table's comment, `harvest schema --tables`), and an
output landed before the column existed gets it at its next load (the rows it loads), then for every row at
`harvest rebuild` (from the raw pages, no request). Real flow runs against a sandbox serving the declaration."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import harvest.flows.collect  # noqa: F401  (Prefect binds its log handlers on first import: not inside a CliRunner)
from harvest.flows.cli import app
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import RunningSandbox
from tests.declared_helpers import declaration
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, job_spec, rows, run_flow, write_spec

THINGS = "/v1/x/things"
runner = CliRunner()


def _declarations() -> tuple[dict[str, Any], dict[str, Any]]:
    """The endpoint as first declared (no request columns), and as declared later: the query `q` and a page
    number `n` (sent as text, an integer column) as columns."""
    later = declaration("cursor")
    later["params"]["n"] = {"type": "string"}
    columns = later["records"]["things"]["columns"]
    columns["asked"] = {"type": "text", "path": "$params.q"}  # no description: harvest words it
    columns["asked_n"] = {
        "type": "integer",
        "path": "$params.n",
        "description": "The n the request asked for.",
    }
    first = copy.deepcopy(later)
    for name in ("asked", "asked_n"):
        del first["records"]["things"]["columns"][name]
    return first, later


def _spec(tmp_path: Path, sb: RunningSandbox, decl: dict[str, Any], values: list[str]) -> Path:
    queries = [{"id": "things", "endpoint": THINGS, "params": {"n": "7"}, "for_each": {"q": values}}]
    job = job_spec(
        sb.base_url, tmp_path / "out", queries, name="asked", credits=200, endpoints={THINGS: decl}
    )
    return write_spec(tmp_path, job)


def test_an_output_landed_before_a_request_column_gets_it_at_the_next_load_and_whole_at_rebuild(
    prefect_harness: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sandbox_factory: Callable[..., RunningSandbox],
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    first, later = _declarations()
    sb = sandbox_factory(
        SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages=(2, 2), declared={THINGS: later})
    )
    db = tmp_path / "out" / "harvest.duckdb"
    assert run_flow(_spec(tmp_path, sb, first, ["oak"])).status == "complete"
    before = {item for (item,) in rows(db, "SELECT item_id FROM things")}
    assert before and "asked" not in {c for (c,) in rows(db, "SELECT column_name FROM duckdb_columns()")}

    spec = _spec(tmp_path, sb, later, ["elm"])  # the declaration gained the columns; a night of new items
    with caplog.at_level(logging.WARNING):
        assert run_flow(spec).status == "complete"
    said = [r.getMessage() for r in caplog.records if "gained column asked " in r.getMessage()]
    assert said and "rows landed before hold NULL there until `harvest rebuild`" in said[0]
    landed = rows(db, "SELECT item_id, asked, asked_n FROM things ORDER BY ALL")
    assert {(asked, n) for item, asked, n in landed if item not in before} == {("elm", 7)}
    assert {(asked, n) for item, asked, n in landed if item in before} == {(None, None)}
    types = dict(rows(db, "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = 'things'"))
    assert (types["asked"], types["asked_n"]) == ("VARCHAR", "BIGINT")
    comments = dict(rows(db, "SELECT column_name, comment FROM duckdb_columns() WHERE table_name = 'things'"))
    assert comments["asked"] == (
        "The request's `q`: the value this row was fetched for. Source: the request's `q` parameter."
    )
    (table_comment,) = rows(db, "SELECT comment FROM duckdb_tables() WHERE table_name = 'things'")
    assert table_comment == (
        "primary key: item_id; fetched for: asked (the request's q), asked_n (the request's n)",
    )

    rebuilt = runner.invoke(app, ["rebuild", str(tmp_path / "out"), "--spec", str(spec)])
    assert rebuilt.exit_code == 0, rebuilt.output
    whole = rows(db, "SELECT item_id, asked, asked_n FROM things ORDER BY ALL")
    assert {item: (asked, n) for item, asked, n in whole} == {
        **{item: ("oak", 7) for item in before},
        **{item: ("elm", 7) for item, _, _ in landed if item not in before},
    }
    tables = runner.invoke(app, ["schema", "--tables", "--spec", str(spec)]).stdout
    assert (
        "Fetched for: `asked` (the request's `q`), `asked_n` (the request's `n`): the value each row"
        in tables
    )
