"""`harvest sql`: one read statement, nothing written anywhere, text printed as it is, cut rows said out loud."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import subprocess
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from harvest.flows.cli import app
from harvest.flows.commands import sql as sql_command
from tests.process_helpers import harvest_importing

ROOT = Path(__file__).parent.parent
runner = CliRunner()
ROWS = 1234
MARKUP = "[quote]nice[/quote] I [b]really[/b] [/i] :smile:"


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """An output directory whose harvest.duckdb holds 1,234 forum posts; row 0 carries markup and an ESC."""
    output = tmp_path / "job"
    output.mkdir()
    con = duckdb.connect(str(output / "harvest.duckdb"))
    con.execute(
        "CREATE TABLE forum_posts AS SELECT range AS id, "
        "CASE WHEN range = 0 THEN ? || chr(27) || '[31mred' ELSE 'post ' || range END AS body, "
        "CASE WHEN range % 2 = 0 THEN NULL ELSE range * 10 END AS score, "
        "json_object('id', range, 'tags', ['a', 'b']) AS raw FROM range(?)",
        [MARKUP, ROWS],
    )
    con.close()
    return output


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sql(output: Path, query: str, *options: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["sql", str(output), query, *options], env={"COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


def post_count(db: Path) -> int:
    con = duckdb.connect(str(db), read_only=True)
    try:
        row = con.execute("SELECT count(*) FROM forum_posts").fetchone()
    finally:
        con.close()
    assert row is not None
    return int(row[0])


# ------------------------------------------------------------------------------------------ read-only
def test_copy_onto_the_jobs_own_database_is_refused_and_the_database_is_untouched(job: Path) -> None:
    db = job / "harvest.duckdb"
    before = sha(db)
    code, stdout, stderr = sql(job, f"COPY forum_posts TO '{db}' (FORMAT csv)")
    assert code == 2
    assert stdout == ""
    assert "refused COPY (reads and writes files)" in stderr
    assert "allowed: one read-only statement: SELECT" in stderr
    assert len(stderr.strip().splitlines()) == 1
    assert sha(db) == before
    assert post_count(db) == ROWS


@pytest.mark.scenario
@pytest.mark.parametrize(
    ("statement", "refused"),
    [
        ("COPY forum_posts TO '{dir}/out.csv'", "COPY"),
        ("COPY forum_posts FROM '{dir}/in.csv'", "COPY"),
        ("EXPORT DATABASE '{dir}/export'", "EXPORT"),
        ("ATTACH '{dir}/other.duckdb' (READ_WRITE)", "ATTACH"),
        ("DETACH other", "DETACH"),
        ("INSTALL httpfs", "LOAD"),
        ("LOAD httpfs", "LOAD"),
        ("SET threads = 1", "SET"),
        ("RESET threads", "SET"),
        ("SET enable_external_access = true", "SET"),
        ("PRAGMA version", "PRAGMA"),
        ("CALL checkpoint()", "CALL"),
        ("CHECKPOINT", "CALL"),
        ("CREATE TABLE t AS SELECT 1", "CREATE"),
        ("INSERT INTO forum_posts (id) VALUES (-1)", "INSERT"),
        ("DELETE FROM forum_posts", "DELETE"),
        ("DROP TABLE forum_posts", "DROP"),
        ("PIVOT forum_posts ON score USING count(*)", "MULTI"),
        (
            "EXPLAIN ANALYZE COPY forum_posts TO '{dir}/explained.csv'",
            "EXPLAIN of a statement that is not a SELECT",
        ),
        ("SELECT 1; SELECT 2", "2 statements"),
        ("SELECT 1; COPY forum_posts TO '{dir}/second.csv'", "2 statements"),
        ("  -- nothing\n", "an empty query"),
    ],
)
def test_every_statement_but_a_read_is_refused(
    job: Path, tmp_path: Path, statement: str, refused: str
) -> None:
    other = tmp_path / "other.duckdb"
    duckdb.connect(str(other)).execute("CREATE TABLE o AS SELECT 1 AS a").close()
    before = {p.name: sha(p) for p in (job / "harvest.duckdb", other)}
    code, stdout, stderr = sql(job, statement.format(dir=tmp_path))
    assert code == 2, stderr
    assert f"harvest sql refused {refused}" in stderr
    assert "allowed: one read-only statement" in stderr and stdout == ""
    assert {p.name: sha(p) for p in (job / "harvest.duckdb", other)} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job", "other.duckdb"]  # nothing written
    assert post_count(job / "harvest.duckdb") == ROWS


def test_the_connection_itself_cannot_write_files_or_unlock_its_settings(job: Path, tmp_path: Path) -> None:
    """The second fence, for a statement the parser check would let through: no file system, locked config."""
    con = sql_command.open_read_only(job / "harvest.duckdb")
    try:
        with pytest.raises(duckdb.PermissionException):
            con.execute(f"COPY forum_posts TO '{tmp_path}/leak.csv'")
        with pytest.raises(duckdb.PermissionException):
            con.execute(f"ATTACH '{tmp_path}/new.duckdb'")
        with pytest.raises(duckdb.Error, match="locked"):
            con.execute("SET enable_external_access = true")
        with pytest.raises(duckdb.Error, match="read-only"):
            con.execute("CREATE TABLE t (a INTEGER)")
    finally:
        con.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job"]


def test_reading_a_file_from_sql_is_refused_without_showing_it(job: Path) -> None:
    code, stdout, stderr = sql(job, "SELECT * FROM read_csv('/etc/passwd')")
    assert code == 2
    assert "refused a file, URL or database outside the job" in stderr and "root:" not in stdout + stderr


@pytest.mark.parametrize(
    "source",
    [
        "'{other}/harvest.duckdb'",
        "read_parquet('{other}/parquet/forum_posts/*/*.parquet')",
        "read_csv('/etc/passwd')",
        "read_csv('https://example.com/posts.csv')",
    ],
)
def test_every_read_outside_the_job_is_refused_with_exit_2_naming_what_may_be_read(
    job: Path, tmp_path: Path, source: str
) -> None:
    """As ATTACH is (README: refused, exit 2): another job's database or Parquet, a file, a URL. The refusal
    names the job's own Parquet, which the query printed at the end of every run reads."""
    other = tmp_path / "other-job"
    parquet = other / "parquet" / "forum_posts" / "date=2024-01-01"
    parquet.mkdir(parents=True)
    con = duckdb.connect(str(other / "harvest.duckdb"))
    con.execute("CREATE TABLE forum_posts AS SELECT 1 AS id")
    con.execute(f"COPY forum_posts TO '{parquet}/part-0.parquet' (FORMAT parquet)")
    con.close()
    code, stdout, stderr = sql(job, f"SELECT count(*) FROM {source.format(other=other)}")
    assert (code, stdout) == (2, ""), stderr
    assert "error: harvest sql refused a file, URL or database outside the job" in stderr
    assert (
        f"allowed: the tables in {job / 'harvest.duckdb'} and the job's own Parquet under {job}/parquet/"
        in stderr
    )


def test_the_jobs_own_parquet_is_readable_by_the_path_the_refusal_names(job: Path) -> None:
    parquet = job / "parquet" / "forum_posts" / "date=2024-01-01"
    parquet.mkdir(parents=True)
    con = duckdb.connect(str(job / "harvest.duckdb"))
    con.execute(f"COPY forum_posts TO '{parquet}/part-0.parquet' (FORMAT parquet)")
    con.close()
    code, stdout, stderr = sql(
        job,
        f"SELECT count(*) AS n FROM read_parquet('{job}/parquet/forum_posts/*/*.parquet', hive_partitioning = true)",
    )
    assert code == 0, stderr
    assert f"{ROWS}" in stdout


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("SELECT count(*) AS n FROM forum_posts", "1234"),
        ("WITH s AS (SELECT score FROM forum_posts) SELECT max(score) FROM s", "12330"),
        ("FROM forum_posts SELECT id WHERE id = 7", "7"),
        ("SELECT raw->>'$.tags[1]' AS tag FROM forum_posts WHERE id = 3", "b"),
        ("DESCRIBE forum_posts", "VARCHAR"),
        ("SHOW TABLES", "forum_posts"),
        ("SUMMARIZE forum_posts", "score"),
        ("VALUES (42)", "42"),
        ("EXPLAIN SELECT * FROM forum_posts", "physical_plan"),
        ("EXPLAIN ANALYZE SELECT count(*) FROM forum_posts", "analyzed_plan"),
    ],
)
def test_reads_of_the_jobs_tables_work(job: Path, query: str, expected: str) -> None:
    code, stdout, stderr = sql(job, query)
    assert code == 0, stderr
    assert expected in stdout


def test_a_query_duckdb_cannot_run_exits_1_with_its_message(job: Path) -> None:
    code, _, stderr = sql(job, "SELEC 1")
    assert code == 1 and 'syntax error at or near "SELEC"' in stderr
    code, _, stderr = sql(job, "SELECT * FROM nope")
    assert code == 1 and "nope does not exist" in stderr


def test_a_directory_without_a_landed_run_exits_2(tmp_path: Path) -> None:
    code, _, stderr = sql(tmp_path, "SELECT 1")
    assert code == 2 and "not a harvest output directory (no raw/)" in stderr


def test_an_output_where_nothing_landed_yet_exits_1(tmp_path: Path) -> None:
    (tmp_path / "raw").mkdir()
    code, _, stderr = sql(tmp_path, "SELECT 1")
    assert code == 1 and "no run of the job has landed here yet; run the job first" in stderr


# -------------------------------------------------------------------------------------- what is shown
def test_text_is_printed_literally(job: Path) -> None:
    code, stdout, stderr = sql(job, "SELECT body FROM forum_posts WHERE id = 0")
    assert code == 0, stderr
    assert MARKUP in stdout  # brackets and emoji codes as they are; `[/i]` does not crash
    assert "\\x1b[31mred" in stdout and "\x1b" not in stdout  # the ESC is shown, never sent to the terminal


def test_rows_past_the_limit_are_counted_and_said(job: Path) -> None:
    code, stdout, stderr = sql(job, "SELECT id FROM forum_posts ORDER BY id")
    assert code == 0
    assert "│ 199 " in stdout and "│ 200 " not in stdout
    assert stderr == "showing 200 of 1,234 rows; --limit N shows more, --limit 0 all\n"
    code, stdout, stderr = sql(job, "SELECT id FROM forum_posts ORDER BY id", "--limit", "0")
    assert code == 0 and "│ 1233 " in stdout and stderr == ""
    code, _, stderr = sql(job, "SELECT id FROM forum_posts LIMIT 200")
    assert code == 0 and stderr == ""  # exactly the limit: nothing was cut


def test_a_huge_result_is_counted_up_to_a_cap(job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sql_command, "COUNT_CAP", 500)
    code, _, stderr = sql(job, "SELECT id FROM forum_posts", "--limit", "10")
    assert code == 0
    assert stderr == "showing 10 of more than 510 rows; --limit N shows more, --limit 0 all\n"


def test_csv_for_scripts(job: Path) -> None:
    code, stdout, stderr = sql(job, "SELECT id, body, score FROM forum_posts ORDER BY id", "--format", "csv")
    assert code == 0
    rows = list(csv.reader(io.StringIO(stdout)))
    assert rows[0] == ["id", "body", "score"]
    assert len(rows) == 201
    assert rows[1] == ["0", MARKUP + "\x1b[31mred", ""]  # the data exactly; NULL is empty
    assert rows[2] == ["1", "post 1", "10"]
    assert "showing 200 of 1,234 rows" in stderr  # the note is on stderr, the data alone on stdout


def test_json_for_scripts(job: Path) -> None:
    code, stdout, stderr = sql(
        job,
        "SELECT id, score, raw, [1, 2] AS list, {'a': 1} AS struct, DATE '2026-01-02' AS day, 1.50::DECIMAL(4, 2) "
        "AS price, id AS id FROM forum_posts ORDER BY id",
        "--format",
        "json",
        "--limit",
        "0",
    )
    assert code == 0 and stderr == ""
    rows = json.loads(stdout)
    assert len(rows) == ROWS
    assert rows[1] == {
        "id": 1,
        "score": 10,
        "raw": '{"id":1,"tags":["a","b"]}',
        "list": [1, 2],
        "struct": {"a": 1},
        "day": "2026-01-02",
        "price": 1.5,
        "id_1": 1,
    }
    assert rows[0]["score"] is None
    code, stdout, _ = sql(job, "SELECT * FROM forum_posts WHERE id < 0", "--format", "json")
    assert code == 0 and json.loads(stdout) == []


def test_an_unknown_format_or_a_negative_limit_is_refused(job: Path) -> None:
    code, _, stderr = sql(job, "SELECT 1", "--format", "xml")
    assert code == 2 and "allowed: table, csv, json" in stderr
    code, _, _ = sql(job, "SELECT 1", "--limit", "-1")
    assert code == 2


def test_a_limit_past_duckdbs_range_or_a_directory_for_the_database_is_one_line(
    job: Path, tmp_path: Path
) -> None:
    code, _, err = sql(job, "SELECT 1", "--limit", str(2**64))
    assert code == 2 and err.startswith("error: --limit: 18446744073709551616 is out of range"), err
    assert sql(job, "SELECT 1", "--limit", str(2**63 - 1))[0] == 0
    (tmp_path / "other" / "harvest.duckdb").mkdir(parents=True)
    code, _, err = sql(tmp_path / "other", "SELECT 1")
    assert code == 1 and len(err.splitlines()) == 1, err
    assert err.startswith(f"error: {tmp_path / 'other' / 'harvest.duckdb'} is not a file"), err


def test_a_refused_copy_in_a_real_process(job: Path) -> None:
    db = job / "harvest.duckdb"
    before = sha(db)
    proc = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "harvest"), "sql", str(job), f"COPY forum_posts TO '{db}'"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: harvest sql refused COPY") and "Traceback" not in proc.stderr
    assert sha(db) == before and post_count(db) == ROWS


def test_a_read_in_a_real_process_imports_neither_prefect_nor_the_catalog(job: Path) -> None:
    """An analyst's `harvest sql` imports DuckDB, not Prefect, the HTTP client or the endpoint catalog: those
    cost ~2 s of CPU, more than the query."""
    proc, imported = harvest_importing("sql", str(job), "SELECT count(*) FROM forum_posts")
    assert str(ROWS) in proc.stdout
    heavy = {"prefect", "httpx", "harvest.connectors.catalog.job_catalog", "harvest.connectors.paging.pager"}
    assert not {m for m in imported if m in heavy or m.split(".")[0] in heavy}


def test_harvest_load_in_a_real_process_does_not_import_prefect(job: Path) -> None:
    """`harvest load` (a run DuckDB was busy for, after a Ctrl-C) loads without Prefect: it cost ~2.5 s of CPU
    on every call, more than a small load."""
    proc, imported = harvest_importing("load", str(job))
    assert "nothing to load" in proc.stdout + proc.stderr
    assert "harvest.flows.run.load_step" in imported, "the load's own module is what a load imports"
    assert not {m for m in imported if m.split(".")[0] == "prefect"}


def test_a_result_wider_than_the_terminal_is_laid_out_a_row_a_block_every_value_whole(tmp_path: Path) -> None:
    """`SELECT *` of a table of 31 columns (the run's printed current-rows query is one) on an 80-column
    terminal: rich squeezed every column to ~3 characters, each row over ~100 lines. Each row is a block of its
    own, a column a line, its values whole; a result that fits stays a table."""
    from tests.flow_helpers import HARVEST, subprocess_env
    from tests.terminal_helpers import Terminal

    output = tmp_path / "wide"
    output.mkdir()
    con = duckdb.connect(str(output / "harvest.duckdb"))
    columns = ", ".join(f"'value {n} of row ' || range AS column_{n:02d}" for n in range(31))
    con.execute(f"CREATE TABLE forum_posts AS SELECT {columns} FROM range(2)")
    con.close()
    env = subprocess_env(tmp_path)
    wide = Terminal([str(HARVEST), "sql", str(output), "SELECT * FROM forum_posts ORDER BY column_00"], env)
    assert wide.finish() == 0
    screen = [line.rstrip() for line in wide.everything() if line.strip()]
    assert len(screen) < 2 * (31 + 6), screen  # two blocks of 31 lines and their frames, not ~200 lines
    for row in range(2):
        assert any(line.strip() == f"row {row + 1}" for line in screen), screen
        for n in (0, 15, 30):
            assert any(f"column_{n:02d}" in line and f"value {n} of row {row}" in line for line in screen), (
                screen
            )
    narrow = Terminal([str(HARVEST), "sql", str(output), "SELECT column_00, column_01 FROM forum_posts"], env)
    assert narrow.finish() == 0
    assert not any(line.strip() == "row 1" for line in narrow.everything()), narrow.everything()


def test_csv_to_a_terminal_shows_the_service_s_control_characters_as_escapes_and_to_a_pipe_as_they_are(
    tmp_path: Path,
) -> None:
    """A signature holding `ESC[2J` (clear the screen) and an OSC 8 link: `--format csv` wrote the raw bytes to a
    terminal, which ran them (the table and json formats escape them). To a terminal now as `\\x1b`, as the
    table does; to a pipe or a file the value as stored, for whatever reads the CSV."""
    import os
    import pty
    import subprocess

    from tests.flow_helpers import HARVEST, subprocess_env

    output = tmp_path / "out"
    output.mkdir()
    value = "hi\x1b[2J\x1b]8;;https://x.example\x07link\x1b]8;;\x07"
    con = duckdb.connect(str(output / "harvest.duckdb"))
    con.execute("CREATE TABLE short_video_profiles AS SELECT ? AS signature", [value])
    con.close()
    command = [
        str(HARVEST),
        "sql",
        str(output),
        "SELECT signature FROM short_video_profiles",
        "--format",
        "csv",
    ]
    env = subprocess_env(tmp_path)
    master, slave = pty.openpty()
    proc = subprocess.Popen(command, env=env, stdout=slave, stderr=subprocess.DEVNULL)
    os.close(slave)
    shown = b""
    while True:
        try:
            chunk = os.read(master, 65_536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    assert proc.wait(timeout=60) == 0
    assert b"\x1b" not in shown and b"\x07" not in shown, shown
    assert b"hi\\x1b[2J\\x1b]8;;https://x.example\\x07link" in shown, shown
    piped = subprocess.run(command, env=env, capture_output=True, timeout=60)
    assert piped.returncode == 0 and value in piped.stdout.decode(), piped
