"""`harvest export` after `harvest rebuild`, as a warehouse user meets it: a night exported, the output rebuilt
from its raw pages, the next night exported, a snapshot taken, the `exports` table lost: every export works, the
lake holds every table DuckDB has, and no row twice.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from harvest.connectors.catalog.endpoints import all_kinds
from harvest.flows.cli import app
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import all_manifests
from tests.flow_helpers import rows
from tests.nightly_helpers import night, parquet_rows

runner = CliRunner()


def committed(lake: Path) -> list[dict[str, Any]]:
    """The increment exports a loader would take (`_SUCCESS` present), oldest first."""
    folders = sorted(p for p in (lake / "_exports").iterdir() if (p / "_SUCCESS").exists())
    return [json.loads((p / "_manifest.json").read_text()) for p in folders]


def record_tables(db: Path) -> set[str]:
    names = {r[0] for r in rows(db, "SELECT table_name FROM duckdb_tables()")}
    return names & set(all_kinds())


def as_parquet_reads(schema: pa.Schema) -> pa.Schema:
    """The catalog's schema as a Parquet file written with it reads back (a list's item is `element` there)."""
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink)
    return pq.read_schema(pa.BufferReader(sink.getvalue()))


def export(output: Path, to: Path, *extra: str) -> str:
    result = runner.invoke(app, ["export", str(output), "--to", str(to), *extra])
    assert result.exit_code == 0, result.output
    return result.output


def assert_no_row_twice(lake: Path, output: Path) -> None:
    """Read as a lake (every file under each table's folder): exactly the files and rows landed here."""
    local = parquet_rows(output / "parquet")
    assert parquet_rows(lake) == local, "same keys, same rows: nothing stale, nothing twice"
    for table in record_tables(output / "harvest.duckdb"):
        data = ds.dataset(lake / table, format="parquet", partitioning="hive").to_table()
        assert data.num_rows == sum(n for key, n in local.items() if key.startswith(f"{table}/")), table


def test_export_after_rebuild_increment_and_snapshot(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output, lake, snap = tmp_path / "out", tmp_path / "lake", tmp_path / "snap"
    db, layout = output / "harvest.duckdb", OutputLayout(output)
    first = night(tmp_path, output, 0, monkeypatch)
    assert rows(db, "SELECT count(*) FROM exports") == [(0,)], "a monitoring query works before any export"
    export(output, lake)
    names = parquet_rows(layout.parquet_root)

    rebuilt = runner.invoke(app, ["rebuild", str(output)])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert parquet_rows(layout.parquet_root) == names, "rebuilt parts keep their names (and rows)"
    keys = rows(db, "SELECT constraint_type FROM duckdb_constraints() WHERE table_name = 'exports'")
    assert ("PRIMARY KEY",) in keys, "the exports table keeps its key through a rebuild"
    assert "nothing new" in export(output, lake), "an unchanged rebuild sends nothing again"

    second = night(tmp_path, output, 1, monkeypatch)
    export(output, lake)
    one, two = committed(lake)
    assert one["runs"] == [first] and two["runs"] == [second]
    assert one["resent"] is False and two["resent"] is False, "each run sent once"
    sent = set(one["tables"]) | set(two["tables"])
    assert sent == record_tables(db), "every table DuckDB has reached the lake"
    for manifest in (one, two):
        assert manifest["partitioning"] == [{"name": "date", "type": "date32", "source": "hive"}]
        for table, entry in manifest["tables"].items():
            assert entry["schema"] == [
                {"name": f.name, "type": str(f.type)} for f in as_parquet_reads(all_kinds()[table].schema)
            ]
    assert_no_row_twice(lake, output)

    assert runner.invoke(app, ["rebuild", str(output)]).exit_code == 0
    export(output, snap, "--snapshot")
    snapshot = json.loads((snap / "_manifest.json").read_text())
    assert (snap / "_SUCCESS").exists() and set(snapshot["tables"]) == record_tables(db)
    assert snapshot["runs"] == [m.run_id for m in all_manifests(layout)]
    for table, entry in snapshot["tables"].items():
        assert entry["rows"] == rows(db, f'SELECT count(*) FROM "{table}"')[0][0], table
    of_runs: dict[str, tuple[int, int]] = {}  # each run's tables and rows in the merged tables
    for table in snapshot["tables"]:
        for run_id, n in rows(db, f'SELECT _run_id, count(*) FROM "{table}" GROUP BY 1'):
            files, before = of_runs.get(run_id, (0, 0))
            of_runs[run_id] = (files + 1, before + n)
    recorded = rows(db, "SELECT run_id, files, rows FROM exports WHERE kind = 'snapshot' ORDER BY 1")
    assert recorded == sorted((r, *of_runs.get(r, (0, 0))) for r in snapshot["runs"])
    assert sum(n for *_, n in recorded) == sum(e["rows"] for e in snapshot["tables"].values()) > 0

    # the exports table lost (an unreadable database rebuilt): the destination says what it has
    with __import__("duckdb").connect(str(db)) as con:
        con.execute("DELETE FROM exports")
    again = export(output, lake)
    assert "2 runs found committed" in again and "nothing new" in again, again
    assert len(committed(lake)) == 2
    assert rows(db, "SELECT DISTINCT run_id FROM exports WHERE kind = 'increment' ORDER BY 1") == sorted(
        [(first,), (second,)]
    )
    assert_no_row_twice(lake, output)


def test_rows_landed_in_another_order_are_not_sent_again(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live run lands concurrent queries' pages as they arrive; a rebuild lands them query by query. Under
    load the two orders differ (a CI run met it): the rows are the same, so an export sends nothing again."""
    output, lake = tmp_path / "out", tmp_path / "lake"
    layout = OutputLayout(output)
    run_id = night(tmp_path, output, 0, monkeypatch)
    export(output, lake)
    (manifest,) = all_manifests(layout)
    for _, path, _ in manifest.all_files():  # as if the pages had arrived in the other order
        file = layout.resolve(path)
        data = pq.read_table(file, partitioning=None)
        pq.write_table(data.take(list(reversed(range(data.num_rows)))), file)

    assert runner.invoke(app, ["rebuild", str(output)]).exit_code == 0
    (rebuilt,) = all_manifests(layout)
    assert rebuilt.rebuilt is None, "same rows, another order: not a change"
    assert "nothing new" in export(output, lake)
    assert rows(db := output / "harvest.duckdb", "SELECT run_id FROM exports") == [(run_id,)], db

    # a value the rebuild changes is a change: the run goes again where it went with other rows, and only there
    (_, path, _), *_ = manifest.all_files()
    file = layout.resolve(path)
    data = pq.read_table(file, partitioning=None)
    pq.write_table(data.slice(1), file)
    other = tmp_path / "other-lake"
    export(output, other)  # the run with a row fewer
    assert runner.invoke(app, ["rebuild", str(output)]).exit_code == 0
    (rebuilt,) = all_manifests(layout)
    assert rebuilt.rebuilt is not None
    assert "exported 1 run," in export(output, other)
    before, again = committed(other)
    assert before["runs"] == again["runs"] == [run_id]
    assert before["resent"] is False and again["resent"] is True, "a loader appending history is told"
    assert "nothing new" in export(output, lake), "it holds the rows the rebuild wrote back"


def test_a_table_s_files_deleted_and_rebuilt_as_they_were_are_not_sent_again(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exported run's Parquet of one table deleted, then `harvest rebuild`: the file comes back with the rows
    it had, so the next export sends nothing. The rebuild could not compare with a file that was gone and
    marked the run rebuilt, and the export sent the whole run again (`"resent": true`)."""
    output, lake = tmp_path / "out", tmp_path / "lake"
    layout = OutputLayout(output)
    night(tmp_path, output, 0, monkeypatch)
    export(output, lake)
    (manifest,) = all_manifests(layout)
    table, path, _ = manifest.all_files()[0]
    file = layout.resolve(path)
    held = pq.read_table(file, partitioning=None)
    file.unlink()

    assert runner.invoke(app, ["rebuild", str(output)]).exit_code == 0
    back = pq.read_table(file, partitioning=None)
    # The same rows and schema; their order is the landing's (a run interleaves its queries' pages, a rebuild
    # lands them query by query), and the export's digest of a file does not depend on it.
    assert back.schema.equals(held.schema, check_metadata=True)
    assert sorted(map(repr, back.to_pylist())) == sorted(map(repr, held.to_pylist())), "the same rows back"
    assert "nothing new" in export(output, lake)
    assert len(committed(lake)) == 1, f"{table} was not changed: no second export"


def test_an_output_that_lost_its_database_and_parquet_and_was_rebuilt_sends_nothing_again(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """harvest.duckdb and parquet/ lost, `harvest rebuild` makes them again from the raw pages: the export said
    "1 run found committed: not sent again" and then sent it again (`"resent": true`), as the `exports` table
    that knew what the run held was gone. The export's `_manifest.json` now says what each run held: the same
    rows back, nothing sent."""
    output, lake = tmp_path / "out", tmp_path / "lake"
    night(tmp_path, output, 0, monkeypatch)
    export(output, lake)
    (output / "harvest.duckdb").unlink()
    shutil.rmtree(output / "parquet")
    assert runner.invoke(app, ["rebuild", str(output)]).exit_code == 0
    said = export(output, lake)
    assert "found committed" in said and "nothing new" in said, said
    assert len(committed(lake)) == 1
    assert_no_row_twice(lake, output)


def test_a_destination_deleted_since_its_exports_is_sent_every_run_again(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lake deleted (a bucket made anew, a directory cleaned) after two nights were exported: the export
    said "nothing new: every loaded run is there" for ever, from the `exports` table alone. The destination is
    the truth: every run is sent again, said once, and the next export has nothing new."""
    output, lake = tmp_path / "out", tmp_path / "lake"
    night(tmp_path, output, 0, monkeypatch)
    export(output, lake)
    night(tmp_path, output, 1, monkeypatch)
    export(output, lake)
    shutil.rmtree(lake)
    said = " ".join(export(output, lake).split())
    assert "2 runs recorded as sent to" in said and "no longer there" in said and "exported 2 runs" in said, (
        said
    )
    assert_no_row_twice(lake, output)
    again = export(output, lake)
    assert "nothing new" in again and "no longer there" not in again, again
    sent = rows(output / "harvest.duckdb", "SELECT count(DISTINCT export_id) FROM exports")
    assert sent == [(1,)], sent  # the two gone exports are no longer recorded


def test_a_run_whose_raw_pages_were_deleted_keeps_its_rows_through_a_rebuild(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator frees space by deleting an old night's raw pages (its manifest stays): the rebuild that
    follows must not replace that night's Parquet with nothing, drop its rows from DuckDB, or have the next
    export delete its files at the destination."""
    output, lake = tmp_path / "out", tmp_path / "lake"
    layout, db = OutputLayout(output), output / "harvest.duckdb"
    first = night(tmp_path, output, 0, monkeypatch)
    night(tmp_path, output, 1, monkeypatch)
    export(output, lake)
    landed, sent = parquet_rows(layout.parquet_root), parquet_rows(lake)
    first_files = {k: n for k, n in landed.items() if first in k}
    assert first_files and sum(first_files.values()) > 0
    before = rows(db, "SELECT _run_id, count(*) FROM short_video_videos_history GROUP BY ALL ORDER BY 1")
    assert (
        first in {run for run, _ in before} and len(before) == 2
    )  # ids of one second do not sort in run order
    pages = list(layout.run_dir(first).glob("session-*.pages"))
    assert pages
    for path in pages:
        path.unlink()

    result = runner.invoke(app, ["rebuild", str(output)], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert parquet_rows(layout.parquet_root) == landed, "the night's files are kept, rows and all"
    after = rows(db, "SELECT _run_id, count(*) FROM short_video_videos_history GROUP BY ALL ORDER BY 1")
    assert after == before
    assert "nothing new" in export(output, lake)
    assert parquet_rows(lake) == sent, "nothing deleted at the destination"
    said = " ".join(result.output.split())
    assert f"{first}: " in said and f"pages are not in {layout.run_dir(first)}" in said, said
    assert "its Parquet files are kept as landed and loaded, not derived again" in said
