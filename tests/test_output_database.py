"""An existing `harvest.duckdb` is checked against the tables the load step writes before any request: one whose
tables harvest did not make is refused (exit 2, naming the file, the table and what harvest expects); one an
older harvest made, which only lacks newer columns, is accepted and the load brings it up to date."""

from __future__ import annotations

import hashlib
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

# Prefect binds its log handlers to sys.stderr on first import: import it now, not inside a CliRunner
# invocation whose streams are closed afterwards (later Prefect logs would then fail to print).
import harvest.flows.collect  # noqa: F401
from harvest.connectors.catalog.endpoints import all_kinds
from harvest.flows.cli import app
from harvest.flows.run.preflight import check_output_dir
from harvest.flows.spec import UsageError
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.wire.serving import running
from harvest.tasks.database.bookkeeping import ADDED_COLUMNS, BOOKKEEPING_DDL, ensure_bookkeeping
from harvest.tasks.database.record_tables import duckdb_types, ensure_table
from tests.endpoints import PINS
from tests.flow_helpers import BIG_BALANCE, SECRET_KEY, rows, scalar, write_spec

runner = CliRunner()


def make_db(output: Path, *statements: str) -> Path:
    output.mkdir(parents=True, exist_ok=True)
    db = output / "harvest.duckdb"
    con = duckdb.connect(str(db))
    for sql in statements:
        con.execute(sql)
    con.close()
    return db


def refusal(output: Path) -> str:
    with pytest.raises(UsageError) as caught:
        check_output_dir(output)
    return str(caught.value)


def harvest_database(output: Path) -> Path:
    """A database as today's load step leaves it: every bookkeeping table and a record table."""
    db = make_db(output)
    con = duckdb.connect(str(db))
    ensure_bookkeeping(con)
    ensure_table(con, all_kinds()["pinboard_pins"])
    con.close()
    return db


DROPPED = ("description", "link_url")
"""Columns of pinboard_pins an older harvest did not have yet."""


def older_harvest_database(output: Path) -> Path:
    """A database as an older harvest left it: bookkeeping tables without the columns added since, a record
    table keyed by a constraint (before keys moved to the table comment) without some columns, and a run."""
    db = make_db(output)
    con = duckdb.connect(str(db))
    for table, ddl in BOOKKEEPING_DDL.items():
        con.execute(ddl)
        for name, _ in ADDED_COLUMNS[table]:
            con.execute(f"ALTER TABLE {table} DROP COLUMN IF EXISTS {name}")
    columns = [
        f"{n} {t}" for n, t in duckdb_types(con, all_kinds()["pinboard_pins"].schema) if n not in DROPPED
    ]
    con.execute(f"CREATE TABLE pinboard_pins ({', '.join(columns)}, PRIMARY KEY (search_query, id))")
    con.execute("INSERT INTO pinboard_pins (search_query, id, title) VALUES ('x', 'old-pin', 'kept')")
    con.execute("INSERT INTO runs (run_id, job, status) VALUES ('20250101T000000Z-old', 'pins', 'complete')")
    con.close()
    return db


# ------------------------------------------------------------------------------------------------ refused
FOREIGN = {
    "a record table of another key": (
        ["CREATE TABLE pinboard_pins (id INT)"],  # its INTEGER ids would convert to text: no problem of type
        ["pinboard_pins: primary key none, harvest's is (search_query, id)"],
    ),
    "harvest's record table of another key (another version)": (
        [
            "CREATE TABLE pinboard_pins (pin_id VARCHAR)",
            "COMMENT ON TABLE pinboard_pins IS 'primary key: pin_id'",
        ],
        ["pinboard_pins: primary key (pin_id), harvest's is (search_query, id)"],
    ),
    "a record table with harvest's key and a column of another type": (
        [
            "CREATE TABLE pinboard_pins (search_query VARCHAR, id VARCHAR, _fetched_at BOOLEAN, image_width HUGEINT,"
            " PRIMARY KEY (search_query, id))",
            "INSERT INTO pinboard_pins VALUES ('q', 'p1', true, 7)",
        ],
        [
            "pinboard_pins._fetched_at: BOOLEAN, harvest writes TIMESTAMP WITH TIME ZONE (1 of its values do not"
        ],
    ),
    "a runs table of another program": (
        ["CREATE TABLE runs (run_id VARCHAR, note VARCHAR NOT NULL)"],
        [
            "runs: primary key none, harvest's is (run_id)",
            "runs: lacks the column(s) job, spec_hash, service, started, finished, status, credits_spent, records",
            "runs.note: NOT NULL without a default, and harvest does not write it",
        ],
    ),
    "a view where harvest writes a table": (
        ["CREATE VIEW query_state AS SELECT 1 AS run_id"],
        ["query_state: a view, harvest writes a table of this name"],
    ),
    "a table where harvest makes a view": (
        ["CREATE TABLE pinboard_pins_history (id VARCHAR)"],
        ["pinboard_pins_history: a table, harvest makes a view of this name"],
    ),
}


@pytest.mark.parametrize("case", list(FOREIGN))
def test_a_database_with_tables_harvest_did_not_make_is_refused(tmp_path: Path, case: str) -> None:
    statements, problems = FOREIGN[case]
    db = make_db(tmp_path / "out", *statements)
    message = refusal(tmp_path / "out")
    assert message.startswith(f"output: {db} has tables harvest cannot load into (")
    for problem in problems:
        assert problem in message
    assert "image_width" not in message  # HUGEINT where harvest writes BIGINT: a wider type takes its values
    assert message.endswith(
        "; nothing was sent. Give this job an output directory of its own (--output or `output:` in the spec)"
    )


def test_a_harvest_output_with_a_foreign_table_also_names_rebuild(tmp_path: Path) -> None:
    output = tmp_path / "out"
    (output / "raw" / "20260101T000000Z-abc123").mkdir(parents=True)
    (output / "raw" / "20260101T000000Z-abc123" / "manifest.json").write_text("{}")
    make_db(output, "CREATE TABLE pinboard_pins (id INT)")
    assert refusal(output).endswith(
        ", or, if it is harvest's database from another version, build it anew from the raw pages: "
        f"`harvest rebuild {output}`"
    )


def test_the_run_is_refused_before_any_request_and_the_file_is_left_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused before any credit is spent: without the check the run spends 3 credits and fails at the load with
    a traceback."""
    db = make_db(
        tmp_path / "out", "CREATE TABLE pinboard_pins (id INT)", "INSERT INTO pinboard_pins VALUES (7)"
    )
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    with running(SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE})) as sb:
        spec = write_spec(
            tmp_path,
            {
                "name": "pins",
                "budget": {"credits": 10},
                "queries": [{"endpoint": PINS, "params": {"query": "x"}}],
            },
        )
        result = runner.invoke(app, ["run", str(spec), "--base-url", sb.base_url, "--output", str(db.parent)])
        assert list(sb.ledger) == [] and sb.billed_total() == 0  # not even the free balance request
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        f"error: output: {db} has tables harvest cannot load into (pinboard_pins: primary key"
    )
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in db.parent.iterdir()) == ["harvest.duckdb"]


# ----------------------------------------------------------------------------------------------- accepted
def test_harvests_own_database_and_the_users_own_tables_are_accepted(tmp_path: Path) -> None:
    harvest_database(tmp_path / "out")
    con = duckdb.connect(str(tmp_path / "out" / "harvest.duckdb"))
    con.execute("CREATE TABLE my_notes (note VARCHAR NOT NULL)")  # a name harvest does not write
    con.execute("CREATE VIEW top_pins AS SELECT id FROM pinboard_pins")
    con.close()
    check_output_dir(tmp_path / "out")
    older_harvest_database(tmp_path / "older")
    check_output_dir(tmp_path / "older")


def test_an_older_harvest_database_is_accepted_and_the_load_adds_what_it_lacks(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = older_harvest_database(tmp_path / "out")
    monkeypatch.setenv("HARVEST_API_KEY", SECRET_KEY)
    with running(SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (1, 1)})) as sb:
        spec = write_spec(
            tmp_path,
            {
                "name": "pins",
                "budget": {"credits": 10},
                "output": str(db.parent),
                "queries": [{"id": "pins", "endpoint": PINS, "params": {"query": "x"}}],
            },
        )
        result = runner.invoke(app, ["run", str(spec), "--base-url", sb.base_url])
    assert result.exit_code == 0, result.output + result.stderr
    assert scalar(db, "SELECT count(*) FROM pinboard_pins WHERE description IS NOT NULL") > 0
    assert rows(db, "SELECT title FROM pinboard_pins WHERE id = 'old-pin'") == [("kept",)]
    assert rows(db, "SELECT status FROM runs ORDER BY run_id") == [("complete",), ("complete",)]
    assert scalar(db, "SELECT count(*) FROM requests WHERE credits IS NOT NULL") >= 1
    columns = {
        r[0] for r in rows(db, "SELECT column_name FROM duckdb_columns() WHERE table_name = 'query_state'")
    }
    assert {name for name, _ in ADDED_COLUMNS["query_state"]} <= columns


# ----------------------------------------------------------------------------------------- the load's defaults
def test_a_run_loads_duckdb_capped_at_64_mb_by_default(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, api_key: str
) -> None:
    """docs/output.md: DuckDB is opened for writing only during the load step, capped at 64 MB of memory
    (HARVEST_DUCKDB_MEMORY_LIMIT unset). Read from the connection the run's own load step merges on."""
    import harvest.flows.run.load_step

    monkeypatch.delenv("HARVEST_DUCKDB_MEMORY_LIMIT", raising=False)
    seen: list[str] = []
    merge = harvest.flows.run.load_step.merge_batches

    def spy(con: duckdb.DuckDBPyConnection, *args: object, **kwargs: object) -> object:
        seen.append(con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0])
        return merge(con, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(harvest.flows.run.load_step, "merge_batches", spy)
    with running(SandboxConfig(api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (2, 2)})) as sb:
        spec = write_spec(
            tmp_path,
            {
                "name": "pins",
                "budget": {"credits": 10},
                "output": str(tmp_path / "out"),
                "queries": [{"id": "pins", "endpoint": PINS, "params": {"query": "x"}}],
            },
        )
        result = runner.invoke(app, ["run", str(spec), "--base-url", sb.base_url])
    assert result.exit_code == 0, result.output + result.stderr
    reference = duckdb.connect(config={"memory_limit": "64MB"})
    try:
        cap = reference.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
    finally:
        reference.close()
    number, unit = cap.split()
    assert unit == "MiB" and abs(float(number) * 2**20 - 64 * 10**6) < 0.1 * 2**20, cap  # 64 MB = 61.0 MiB
    assert seen == [cap], "the run's load step merged once, on a connection capped at 64 MB"
    assert scalar(tmp_path / "out" / "harvest.duckdb", "SELECT count(*) FROM pinboard_pins") > 0
