"""`harvest rebuild`, history views and a moved output directory, as a warehouse user meets them: two nightly
runs against the sandbox over HTTP (the second night the counters grew), the sandbox gone, then the database and
the Parquet tree deleted and derived again from the raw pages alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from harvest.flows.cli import app
from harvest.sandbox.config import SandboxConfig
from harvest.sandbox.expected import crawl
from harvest.sandbox.wire.serving import running
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import all_manifests
from harvest.tasks.output.raw_store import RawPageReader
from tests.crawl_helpers import data_entries
from tests.endpoints import PINS
from tests.flow_helpers import (
    BIG_BALANCE,
    HARVEST,
    SECRET_KEY,
    HoldDuckDB,
    job_spec,
    rows,
    subprocess_env,
    write_spec,
)
from tests.nightly_helpers import night, parquet_rows
from tests.process_helpers import harvest_importing
from tests.test_kill_after_damaged import killed_then_resumed

runner = CliRunner()


def two_nights(tmp_path: Path, output: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for observation in (0, 1):
        night(tmp_path, output, observation, monkeypatch)


def database(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every table and view, all columns, rows sorted: what an analyst could see."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        names = con.execute(
            "SELECT schema_name, table_name FROM duckdb_tables() UNION ALL "
            "SELECT schema_name, view_name FROM duckdb_views() WHERE NOT internal ORDER BY ALL"
        ).fetchall()
        return {
            n if s == "main" else f"{s}.{n}": sorted(con.execute(f'FROM "{s}"."{n}"').fetchall(), key=repr)
            for s, n in names
        }
    finally:
        con.close()


@pytest.mark.scenario
def test_rebuild_derives_identical_tables_from_raw_pages_alone(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = tmp_path / "out"
    two_nights(tmp_path, output, monkeypatch)
    db = output / "harvest.duckdb"
    before, files_before = database(db), parquet_rows(output / "parquet")
    assert len(before["runs"]) == 2 and before["short_video_videos"] and before["creative_materials"]

    shutil.rmtree(output / "parquet")
    db.unlink()
    result = runner.invoke(app, ["rebuild", str(output)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "no request sent" in result.output
    assert database(db) == before
    assert sum(parquet_rows(output / "parquet").values()) == sum(files_before.values())

    again = runner.invoke(app, ["rebuild", str(output)])
    assert again.exit_code == 0, again.output
    assert database(db) == before, "rebuilding twice gives identical tables"
    listed = {path for m in all_manifests(OutputLayout(output)) for _, path, _ in m.all_files()}
    assert {str(Path("parquet") / p) for p in parquet_rows(output / "parquet")} == listed


@pytest.mark.scenario
def test_rebuild_one_run_and_unknown_runs(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = tmp_path / "out"
    two_nights(tmp_path, output, monkeypatch)
    first, second = all_manifests(OutputLayout(output))
    others = {p: p.stat().st_mtime_ns for p in (output / "parquet").rglob(f"{second.run_id}-*.parquet")}
    before = database(output / "harvest.duckdb")

    result = runner.invoke(app, ["rebuild", str(output), "--run", first.run_id])
    assert result.exit_code == 0, result.output
    assert {p: p.stat().st_mtime_ns for p in others} == others, "the other run's Parquet is left alone"
    assert database(output / "harvest.duckdb") == before

    unknown = runner.invoke(app, ["rebuild", str(output), "--run", "20990101T000000Z-nope"])
    assert unknown.exit_code == 2 and first.run_id in unknown.output and second.run_id in unknown.output

    _, imported = harvest_importing("rebuild", str(output), "--run", first.run_id)  # as a user runs it
    assert "harvest.tasks.landing" in imported and not {m for m in imported if m.split(".")[0] == "prefect"}
    assert database(output / "harvest.duckdb") == before, "a rebuild lands pages without Prefect (~2.5 s)"


def checked(db: Path, view: str) -> tuple[int, str]:
    """How many Parquet files the view was last checked against, and the run of the last one."""
    ((files, last),) = rows(
        db, "SELECT files, last_file FROM harvest_state.history_view_files WHERE view_name = ?", [view]
    )
    return files, Path(last).name.removesuffix("-run.parquet")


def view_columns(db: Path) -> list[str]:
    query = "SELECT column_name FROM duckdb_columns() WHERE table_name = 'short_video_videos_history'"
    return [c for (c,) in rows(db, query + " ORDER BY column_index")]


@pytest.mark.scenario
def test_history_views_keep_every_night_and_follow_a_moved_directory(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = tmp_path / "out"
    two_nights(tmp_path, output, monkeypatch)
    db = output / "harvest.duckdb"
    (first, second) = [m.run_id for m in all_manifests(OutputLayout(output))]
    video_id, plays_now = rows(
        db, "SELECT aweme_id, play_count FROM short_video_videos ORDER BY aweme_id LIMIT 1"
    )[0]
    history = rows(
        db,
        "SELECT _run_id, play_count FROM short_video_videos_history WHERE aweme_id = ? ORDER BY _fetched_at",
        [video_id],
    )
    assert [run for run, _ in history] == [first, second]
    assert history[0][1] < history[1][1] == plays_now, "the merged table keeps the newest night"
    per_run = rows(
        db, "SELECT _run_id, count(*), count(DISTINCT aweme_id) FROM short_video_videos_history GROUP BY 1"
    )
    assert all(n == distinct for _, n, distinct in per_run), "one row per key per run"
    assert checked(db, "short_video_videos_history") == (2, second), "the view checked against both nights"

    # a night whose file has a column the view lacks (a newer harvest's, a declared field added): the next load
    # reads only its footer, and the view gains the column; one more like it keeps the view as it is
    videos_dir = output / "parquet" / "short_video_videos"
    (night_two,) = videos_dir.glob(f"*/{second}-*.parquet")
    added: list[tuple[object, ...]] = []
    for day, run in (("2099-01-01", "20990101T000000Z-aaaaaa"), ("2099-01-02", "20990102T000000Z-bbbbbb")):
        wider = pq.read_table(night_two)
        wider = wider.set_column(
            wider.schema.get_field_index("_run_id"), "_run_id", pa.array([run] * len(wider))
        )
        (videos_dir / f"date={day}").mkdir()
        wider = wider.append_column("saves", pa.array([7] * len(wider)))
        pq.write_table(wider, videos_dir / f"date={day}" / f"{run}-run.parquet")
        loaded = runner.invoke(app, ["load", str(output)])
        assert loaded.exit_code == 0, loaded.output
        added.append((run, 7, 7))
        assert rows(
            db, "SELECT _run_id, min(saves), max(saves) FROM short_video_videos_history GROUP BY 1 ORDER BY 1"
        ) == sorted([(first, None, None), (second, None, None), *added])  # by id, as ORDER BY 1
        assert checked(db, "short_video_videos_history") == (2 + len(added), run)
        assert view_columns(db)[-2:] == ["saves", "date"], (
            "the view's columns, as DBeaver and DuckDB 1.x see them"
        )
    shutil.rmtree(videos_dir / "date=2099-01-01")
    shutil.rmtree(videos_dir / "date=2099-01-02")
    assert runner.invoke(app, ["load", str(output)]).exit_code == 0
    columns = view_columns(db)
    assert "saves" not in columns and "play_count" in columns, "files gone: the view checked over all again"
    assert checked(db, "short_video_videos_history") == (2, second)
    with duckdb.connect(str(db)) as con:  # harvest's memory deleted (by hand, or a tool that copies `main`)
        con.execute("DROP SCHEMA harvest_state CASCADE")
    assert runner.invoke(app, ["load", str(output)]).exit_code == 0
    assert checked(db, "short_video_videos_history") == (2, second), (
        "checked over every file, remembered again"
    )
    assert view_columns(db) == columns

    moved = tmp_path / "elsewhere" / "nightly"
    moved.parent.mkdir()
    shutil.move(output, moved)
    videos = rows(moved / "harvest.duckdb", "SELECT count(*) FROM short_video_videos")[0][0]
    query = "SELECT count(*) AS n FROM short_video_videos_history"
    before_load = runner.invoke(app, ["sql", str(moved), query, "--format", "csv"])
    assert before_load.exit_code == 0, before_load.output
    assert before_load.stdout.splitlines()[1] == str(2 * videos), (
        "history read from the Parquet where it is now"
    )
    assert f"harvest load {moved}" in before_load.output

    pins = moved / "parquet" / "pinboard_pins"
    shutil.move(pins, tmp_path / "pins-aside")  # this view's Parquet is not here: no view can answer
    lost = runner.invoke(app, ["sql", str(moved), "SELECT count(*) FROM pinboard_pins_history"])
    assert lost.exit_code == 1 and f"harvest load {moved}" in lost.output, lost.output
    shutil.move(tmp_path / "pins-aside", pins)

    loaded = runner.invoke(app, ["load", str(moved)])
    assert loaded.exit_code == 0, loaded.output
    sql = runner.invoke(app, ["sql", str(moved), query, "--format", "csv"])
    assert sql.exit_code == 0 and sql.output.splitlines()[1] == str(2 * videos), sql.output
    rebuilt = runner.invoke(app, ["rebuild", str(moved)])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert rows(moved / "harvest.duckdb", "SELECT count(*) FROM runs") == [(2,)]


@pytest.mark.scenario
@pytest.mark.parametrize("parquet_gone", [False, True], ids=["parquet-kept", "parquet-gone"])
def test_a_page_lost_from_the_raw_store_beside_a_kept_damaged_answer_is_said(
    prefect_api_url: str, tmp_path: Path, parquet_gone: bool
) -> None:
    """One topic's pins, `max_pages: 3`, the second answer cut short twice (billed, kept, no page), the run killed
    once it was kept, then resumed: its raw pages are 4 answers for the query's 3 pages. The disk then loses page
    3. The rebuild counted 3 answers for 3 pages and landed the run again from page 1, the damaged answer and page
    2: four pins fewer in its Parquet and DuckDB, and not a word. Answers are now counted as `pages` counts them:
    with its Parquet there, the run is kept as landed, all 12 pins; with its Parquet gone too, it is landed from
    what is left and harvest warns that a page's records are in no table."""
    params = {"query": "oak desk"}
    config = SandboxConfig(
        api_keys={SECRET_KEY: BIG_BALANCE}, pages_by_path={PINS: (6, 6)}, page_size=4,
        fault_plan_by_path={PINS: [None, "truncated", "truncated"]},
    )  # fmt: skip
    pages = [{pin["id"] for pin in page.records["pins"]} for page in list(crawl(PINS, params, config))[:3]]
    output, layout = tmp_path / "out", OutputLayout(tmp_path / "out")
    query = {"id": "pins", "endpoint": PINS, "params": params, "max_pages": 3}
    with running(config) as sb:
        spec = write_spec(tmp_path, job_spec(sb.base_url, output, [query], name="nightly", credits=1000))
        killed_then_resumed(spec, tmp_path, prefect_api_url)
        assert [e.fault for e in data_entries(sb)] == [None, "truncated", "truncated", None, None]
    (run,) = all_manifests(layout)
    assert run.status == "complete" and [q["pages"] for q in run.queries] == [3]
    db = output / "harvest.duckdb"
    assert {pin for (pin,) in rows(db, "SELECT id FROM pinboard_pins")} == set().union(*pages)
    files = layout.raw_files(run.run_id)  # page 1 and the damaged answer; pages 2 and 3
    assert [[page.counted for page in RawPageReader(f)] for f in files] == [[True, False], [True, True]]
    reader = RawPageReader(files[-1])
    next(iter(reader))
    os.truncate(files[-1], reader.valid_bytes)  # the disk lost page 3
    if parquet_gone:
        shutil.rmtree(output / "parquet")

    done = subprocess.run(
        [str(HARVEST), "rebuild", str(output)], env=subprocess_env(tmp_path, COLUMNS="400"),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    where = layout.run_dir(run.run_id)
    pins = {pin for (pin,) in rows(db, "SELECT id FROM pinboard_pins")}
    if parquet_gone:
        assert pins == pages[0] | pages[1]
        assert f"warning: {run.run_id}: rebuilt without 1 page of its 3, not in {where}" in said, said
        assert "the records of the pages lost are in no table now" in said
    else:
        assert pins == set().union(*pages), "page 3's pins are kept as landed"
        assert f"warning: {run.run_id}: not rebuilt: 1 of its 3 pages are not in {where}" in said, said
        assert "its Parquet files are kept as landed and loaded, not derived again" in said


def test_a_rebuild_cut_short_leaves_the_old_database_and_the_runs_waiting_for_a_load_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while `harvest rebuild` loads the last of four runs: the database is the one it found, no half-built
    file is left, and a run that was waiting for `harvest load` still waits (it was marked loaded as the new
    file took it, and the next run's load skipped it for good)."""
    import harvest.flows.handoff.rebuild as rebuild_module
    from harvest.flows.handoff.rebuild import rebuild
    from harvest.flows.run.load_step import load_manifest_into_duckdb
    from harvest.tasks.output.manifest import pending_manifests
    from tests.test_output_kinds_memory import _nights

    layout, _ = _nights(tmp_path, 4)
    for m in all_manifests(layout)[:2]:  # two nights loaded, two waiting (DuckDB was busy)
        load_manifest_into_duckdb(layout, m)
    waiting = [m.run_id for m in pending_manifests(layout, "nightly")]
    assert len(waiting) == 2
    before = rows(layout.db, "SELECT run_id, count(*) FROM query_state GROUP BY ALL ORDER BY ALL")

    loaded: list[str] = []

    def load_then_ctrl_c(layout: OutputLayout, manifest: Any, db: Path | None = None) -> dict[str, int]:
        if len(loaded) == 3:
            raise KeyboardInterrupt
        loaded.append(manifest.run_id)
        return load_manifest_into_duckdb(layout, manifest, db=db)

    monkeypatch.setattr(rebuild_module, "load_manifest_into_duckdb", load_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        rebuild(layout)
    assert waiting[0] in loaded  # the new file had taken it
    assert [m.run_id for m in pending_manifests(layout, "nightly")] == waiting
    assert rows(layout.db, "SELECT run_id, count(*) FROM query_state GROUP BY ALL ORDER BY ALL") == before
    assert sorted(p.name for p in layout.root.iterdir() if "duckdb" in p.name) == ["harvest.duckdb"]

    monkeypatch.undo()
    report = rebuild(layout)  # again, whole: every run loaded, none waiting
    assert len(report.loaded) == 4 and not list(pending_manifests(layout, "nightly"))
    assert rows(layout.db, "SELECT count(DISTINCT run_id), count(*) FROM query_state") == [(4, 4 * 3000)]


@pytest.mark.parametrize("damage", ['{"oops": ', "[1, 2]"])
def test_a_rebuild_over_a_damaged_manifest_keeps_the_database_that_holds_the_run(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    """A run's `manifest.json` damaged (garbage, cut short) is made again from its journal as unfinished and not
    loaded: a rebuild skipped it and swapped in a database without it, exit 0, its rows gone. Now the rebuild
    refuses while the database holds such a run, says how to resume it, and changes nothing."""
    output = tmp_path / "out"
    two_nights(tmp_path, output, monkeypatch)
    before = database(output / "harvest.duckdb")
    damaged = sorted((output / "raw").glob("*/manifest.json"))[-1]
    damaged.write_text(damage)  # cut short, or JSON but no object (a traceback in every command)
    listed = runner.invoke(app, ["runs", str(output)], env={"COLUMNS": "300"})
    assert listed.exit_code == 0 and damaged.parent.name in listed.output, listed.output
    result = runner.invoke(app, ["rebuild", str(output)])
    assert result.exit_code == 2, result.output
    assert damaged.parent.name in result.output and "would drop its rows" in result.output, result.output
    assert database(output / "harvest.duckdb") == before


def test_a_rebuild_while_another_process_holds_the_database_changes_nothing(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, duckdb_holder: HoldDuckDB
) -> None:
    """A notebook holding `harvest.duckdb`: the rebuild took the old file for unreadable, carried nothing over
    (the `exports` record of what was sent), moved its new file in under the holder and exited 0. It now
    exits 1 naming the file and the holder, and the file is the one the holder has open, as it was."""
    output = tmp_path / "out"
    two_nights(tmp_path, output, monkeypatch)
    db = output / "harvest.duckdb"
    before, inode = database(db), db.stat().st_ino
    with duckdb_holder(db, mark=False):
        result = runner.invoke(app, ["rebuild", str(output)])
    assert result.exit_code == 1, result.output
    assert "open in another process" in result.output and "harvest rebuild" in result.output, result.output
    assert db.stat().st_ino == inode and database(db) == before


def rebuilt_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, made: str
) -> tuple[Path, dict[str, list[tuple[Any, ...]]], str]:
    """One night landed, `made` run in its database as an analyst would, then `harvest rebuild` as typed: the
    database, what it held before the rebuild, and what the rebuild printed (it exited 0)."""
    output = tmp_path / "out"
    night(tmp_path, output, 0, monkeypatch)
    db = output / "harvest.duckdb"
    con = duckdb.connect(str(db))
    con.execute(made)
    con.close()
    before = database(db)
    result = runner.invoke(app, ["rebuild", str(output)], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    return db, before, result.output


def test_a_rebuild_keeps_the_tables_and_views_an_analyst_made_and_names_what_it_does_not_keep(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An analyst's own table of notes, a schema of theirs, a saved view over harvest's table and one over
    that: a rebuild swapped in a database without them, exit 0, not a word. They are carried over as they
    were (definition, key, default, rows); a table the new database lacks that carries a comment (harvest's
    mark on what it makes) is not, and is named."""
    db, before, said = rebuilt_over(
        tmp_path,
        monkeypatch,
        "CREATE TABLE notes (id INTEGER PRIMARY KEY, note VARCHAR DEFAULT 'to check');"
        "INSERT INTO notes (id) SELECT range FROM range(3);"
        "CREATE SCHEMA mine; CREATE TABLE mine.picks AS SELECT aweme_id FROM short_video_videos LIMIT 5;"
        "CREATE VIEW top_videos AS SELECT aweme_id FROM short_video_videos ORDER BY aweme_id LIMIT 3;"
        "CREATE VIEW top_two AS SELECT * FROM top_videos LIMIT 2;"
        "CREATE TABLE old_kind (id INTEGER); COMMENT ON TABLE old_kind IS 'primary key: id';",
    )
    assert "kept what you made in the database: tables mine.picks, notes; views top_two, top_videos" in said
    assert "not in the rebuilt database: table old_kind" in said, said
    del before["old_kind"]
    assert database(db) == before
    with pytest.raises(duckdb.ConstraintException):  # the key came with the table
        duckdb.connect(str(db)).execute("INSERT INTO notes (id) VALUES (1)")


def test_a_rebuild_keeps_an_analyst_s_sequences_types_macros_and_indexes_with_the_tables_that_use_them(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table numbered by the analyst's sequence (or typed by their enum) could not be made again without
    it: DuckDB's error was taken for an unreadable old database, and the rebuild exited 0 having dropped it and
    every table after it without a word. Their macros (a default argument too) and indexes were dropped
    always. Now each comes back as it was, the sequence counting on from where it stood."""
    db, before, said = rebuilt_over(
        tmp_path,
        monkeypatch,
        "CREATE TYPE verdict AS ENUM ('keep', 'drop'); CREATE SEQUENCE note_ids START 100;"
        "CREATE TABLE notes (id INTEGER DEFAULT nextval('note_ids'), aweme_id VARCHAR, verdict verdict);"
        "INSERT INTO notes (aweme_id, verdict) SELECT aweme_id, 'keep' FROM short_video_videos LIMIT 2;"
        "CREATE INDEX notes_by_video ON notes (aweme_id);"
        "CREATE INDEX videos_by_author ON short_video_videos (author_uid);"
        "CREATE MACRO scaled(x, factor := 10) AS x * factor;"
        "CREATE MACRO kept_notes() AS TABLE SELECT * FROM notes WHERE verdict = 'keep';"
        "CREATE TABLE zz_last (n INTEGER); INSERT INTO zz_last VALUES (1);",
    )
    kept = "kept what you made in the database: tables notes, zz_last; types verdict; sequences note_ids; "
    assert kept + "macros kept_notes, scaled; indexes notes_by_video, videos_by_author" in said
    assert "not in the rebuilt database" not in said, said
    assert database(db) == before
    con = duckdb.connect(str(db))
    con.execute("INSERT INTO notes (aweme_id, verdict) VALUES ('x', 'drop')")
    assert con.execute("SELECT max(id), scaled(2), count(*) FROM notes").fetchone() == (102, 20, 3)
    assert con.execute("SELECT count(*) FROM kept_notes()").fetchone() == (2,)
    indexes = "SELECT index_name FROM duckdb_indexes() ORDER BY 1"
    assert con.execute(indexes).fetchall() == [("notes_by_video",), ("videos_by_author",)]
    with pytest.raises(duckdb.ConversionException):  # the enum came with the table
        con.execute("INSERT INTO notes (verdict) VALUES ('maybe')")


def test_a_rebuild_keeps_an_analyst_s_tables_when_one_refers_to_harvest_s_and_names_what_it_cannot_carry(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table of the analyst's with a foreign key to harvest's `runs` keeps DuckDB from copying the user's
    definitions apart from harvest's: the tables still come, one by one with their rows (a generated column
    made again, not copied), and the macro that could not is named in a warning, not dropped without a word."""
    db, before, said = rebuilt_over(
        tmp_path,
        monkeypatch,
        "CREATE TABLE run_notes (run_id VARCHAR REFERENCES runs (run_id), note VARCHAR);"
        "INSERT INTO run_notes SELECT run_id, 'checked' FROM runs;"
        "CREATE MACRO scaled(x) AS x * 10;"
        "CREATE TABLE doubled (n INTEGER, twice INTEGER GENERATED ALWAYS AS (n * 2));"
        "INSERT INTO doubled (n) VALUES (1), (2);",
    )
    assert "kept what you made in the database: tables doubled, run_notes" in said, said
    assert "not in the rebuilt database: macros scaled: could not be made again" in said
    assert database(db) == before


def test_a_landed_parquet_file_cut_short_is_said_by_load_and_export_and_landed_again_by_rebuild(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A landed file cut to half (a copy stopped, a disk's fault): `load` and `export` ended with DuckDB's or
    pyarrow's traceback, and `rebuild`, the command that can mend it, too. Now the first two say which file in
    one line with the command that mends it, and that command lands it again from the raw pages."""
    landed = tmp_path / "out"
    night(tmp_path, landed, 0, monkeypatch)
    videos = "SELECT * FROM short_video_videos ORDER BY ALL"
    before = rows(landed / "harvest.duckdb", videos)
    output = tmp_path / "moved"  # the history views then read every file again
    shutil.move(landed, output)
    cut = sorted((output / "parquet" / "short_video_videos").rglob("*.parquet"))[0]
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    mend = f"harvest rebuild {output}` lands it again from its raw pages"

    load = runner.invoke(app, ["load", str(output)], env={"COLUMNS": "400"})
    assert load.exit_code == 1, load.output
    assert load.output.startswith(f"error: {cut}: a landed Parquet file that cannot be read"), load.output
    assert mend in load.output and len(load.output.splitlines()) == 1, load.output
    export = runner.invoke(
        app, ["export", str(output), "--to", str(tmp_path / "lake")], env={"COLUMNS": "400"}
    )
    assert export.exit_code == 1 and f"{cut}: a landed Parquet file" in export.output, export.output
    assert mend in export.output and not list((tmp_path / "lake").rglob("_SUCCESS"))

    rebuilt = runner.invoke(app, ["rebuild", str(output)])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert pq.read_metadata(cut).num_rows > 0 and rows(output / "harvest.duckdb", videos) == before
    assert runner.invoke(app, ["load", str(output)]).exit_code == 0
    again = runner.invoke(app, ["export", str(output), "--to", str(tmp_path / "lake")])
    assert again.exit_code == 0, again.output


@pytest.mark.parametrize("command", [["rebuild"], ["load"], ["export", "--to", "lake"]])
def test_a_directory_where_the_database_belongs_is_said_in_one_line_and_left_alone(
    tmp_path: Path, command: list[str]
) -> None:
    output = tmp_path / "out"
    (output / "raw").mkdir(parents=True)
    (output / "harvest.duckdb").mkdir()
    (output / "harvest.duckdb" / "mine.txt").write_text("a user's")
    result = runner.invoke(app, [command[0], str(output), *command[1:]], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: {output / 'harvest.duckdb'} is not a file"), result.output
    assert f"harvest rebuild {output}` makes the database again" in result.output
    assert (
        len(result.output.splitlines()) == 1
        and (output / "harvest.duckdb" / "mine.txt").read_text() == "a user's"
    )


def test_a_night_after_a_landed_file_was_cut_short_lands_and_names_the_rebuild_that_loads_it(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A night in a moved output reads the tables' earlier files again (their history views follow the move):
    it failed on the cut one with the error's class name and no way on. The night's pages are landed and
    paid; the line names the file and the rebuild that lands it again and loads both nights."""
    from dataclasses import replace

    from tests.nightly_helpers import CONFIG, job

    night(tmp_path, tmp_path / "out", 0, monkeypatch)
    output = tmp_path / "moved"
    shutil.move(tmp_path / "out", output)
    cut = sorted((output / "parquet" / "short_video_videos").rglob("*.parquet"))[0]
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    spec = write_spec(tmp_path, job(output))
    with running(replace(CONFIG, observation=1)) as sb:
        result = runner.invoke(app, ["run", str(spec), "--base-url", sb.base_url], env={"COLUMNS": "400"})
    assert result.exit_code == 1, result.output
    said = result.output.splitlines()[-1]
    assert said.startswith(f"error: the run failed: {cut}: a landed Parquet file that cannot be read"), said
    assert said.endswith(f"harvest rebuild {output}` lands it again from its raw pages"), said

    rebuilt = runner.invoke(app, ["rebuild", str(output)])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert rows(output / "harvest.duckdb", "SELECT status FROM runs") == [("complete",), ("complete",)]


def test_a_database_file_that_is_empty_or_garbage_is_said_by_load_and_made_again_by_rebuild(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`harvest load` over a zero-byte or overwritten `harvest.duckdb` ended with DuckDB's traceback."""
    output = tmp_path / "out"
    night(tmp_path, output, 0, monkeypatch)
    db = output / "harvest.duckdb"
    videos = "SELECT * FROM short_video_videos ORDER BY ALL"
    before = rows(db, videos)
    for damage in (b"", os.urandom(5000)):
        db.write_bytes(damage)
        load = runner.invoke(app, ["load", str(output)], env={"COLUMNS": "400"})
        assert load.exit_code == 1, load.output
        assert load.output == (
            f"error: {db} is not a DuckDB database file (empty, cut short or overwritten); "
            f"`harvest rebuild {output}` makes it again from the landed pages\n"
        )
        assert db.read_bytes() == damage, "left as it was"
    rebuilt = runner.invoke(app, ["rebuild", str(output)], env={"COLUMNS": "400"})
    assert rebuilt.exit_code == 0, rebuilt.output
    assert rows(db, videos) == before
    said = "not in the rebuilt database: nothing carried from the old harvest.duckdb (IO Error: "
    assert said in rebuilt.output and "any table, view or macro you made in it" in rebuilt.output
