"""Parquet sink: bounded row groups, hive-partitioned files readable by pyarrow and DuckDB, no torn files."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.machine_fault import MachineFault
from harvest.tasks.output.parquet_sink import MultiTableSink, TableWriter, run_date
from tests.landing_helpers import META, TS, Kind

ROOT = Path(__file__).resolve().parents[1]
STARTED = dt.datetime(2026, 11, 1, 23, 59, tzinfo=dt.UTC)


VIDEOS = Kind(
    "short_video_videos",
    ("aweme_id",),
    pa.schema([("aweme_id", pa.string()), ("play_count", pa.int64()), *META]),
)
AUTHORS = Kind("short_video_authors", ("uid",), pa.schema([("uid", pa.string()), *META]))


def page(kind: Kind, start: int, n: int, fetched: dt.datetime, run_id: str = "r1") -> pa.Table:
    key = kind.primary_key[0]
    cols: dict[str, list[object]] = {key: [f"id{i}" for i in range(start, start + n)]}
    if "play_count" in kind.schema.names:
        cols["play_count"] = list(range(start, start + n))
    cols |= {
        "raw": ["{}"] * n,
        "_endpoint": ["/e"] * n,
        "_query_id": ["q"] * n,
        "_run_id": [run_id] * n,
        "_fetched_at": [fetched] * n,
    }
    return pa.table(cols, schema=kind.schema)


def test_partition_is_the_runs_start_date_in_utc() -> None:
    cet = dt.timezone(dt.timedelta(hours=1))
    assert run_date(dt.datetime(2026, 11, 2, 0, 30, tzinfo=cet)) == dt.date(2026, 11, 1)
    with pytest.raises(ValueError):
        run_date(dt.datetime(2026, 11, 2))


def test_ten_thousand_pages_stream_into_bounded_row_groups(tmp_path: Path) -> None:
    layout = OutputLayout(tmp_path)
    w = TableWriter(layout, VIDEOS.table, VIDEOS.schema, "r1", STARTED, "0000", row_group_rows=4096)
    peak = 0
    for i in range(10_000):
        # fetch times cross midnight: still one partition (the run's start date)
        w.write(page(VIDEOS, i * 3, 3, STARTED + dt.timedelta(seconds=i)))
        peak = max(peak, w.buffered_rows)
    assert peak < 4096  # memory: never more than one row group buffered
    path = w.close()
    assert path == tmp_path / "parquet" / VIDEOS.table / "date=2026-11-01" / "r1-0000.parquet"
    meta = pq.ParquetFile(path).metadata
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert sum(sizes) == w.rows == 30_000
    assert sizes == [4096] * 7 + [30_000 - 7 * 4096]
    assert meta.row_group(0).column(0).compression == "ZSTD"

    dataset = ds.dataset(tmp_path / "parquet" / VIDEOS.table, format="parquet", partitioning="hive")
    table = dataset.to_table()
    assert table.num_rows == 30_000
    assert set(table.column("date").to_pylist()) == {"2026-11-01"} or set(
        table.column("date").to_pylist()
    ) == {dt.date(2026, 11, 1)}
    con = duckdb.connect()
    glob = str(tmp_path / "parquet" / VIDEOS.table / "**" / "*.parquet")
    row = con.execute(
        "SELECT count(*), count(DISTINCT aweme_id), min(date), max(date) "
        "FROM read_parquet(?, hive_partitioning = true)",
        [glob],
    ).fetchall()[0]
    assert row[:2] == (30_000, 30_000)
    assert str(row[2]) == str(row[3]) == "2026-11-01"


def test_byte_target_cuts_row_groups_early(tmp_path: Path) -> None:
    w = TableWriter(
        OutputLayout(tmp_path),
        VIDEOS.table,
        VIDEOS.schema,
        "r1",
        STARTED,
        "0000",
        row_group_rows=1_000_000,
        row_group_bytes=20_000,
    )
    for i in range(200):
        w.write(page(VIDEOS, i * 10, 10, STARTED))
    path = w.close()
    assert path is not None
    meta = pq.ParquetFile(path).metadata
    assert meta.num_row_groups >= 3 and meta.num_rows == 2000


def test_multi_table_sink_returns_files_and_skips_empty_tables(tmp_path: Path) -> None:
    layout = OutputLayout(tmp_path)
    empty = Kind("never_seen", ("id",), pa.schema([("id", pa.string()), *META]))
    with MultiTableSink(layout, "r1", STARTED, layout.part_id(0, "q")) as sink:
        for i in range(5):
            sink.write_page(
                [
                    (VIDEOS, page(VIDEOS, i * 2, 2, STARTED)),
                    (AUTHORS, page(AUTHORS, i, 1, STARTED)),
                    (empty, page(empty, 0, 0, STARTED)),
                ]
            )
    out = sink.close()  # idempotent after the context manager closed it
    assert sorted((t, rows) for t, _, rows in out) == [(AUTHORS.table, 5), (VIDEOS.table, 10)]
    for table, path, rows in out:
        assert path.name.startswith("r1-0000-") and path.suffix == ".parquet"
        assert pq.read_table(path).num_rows == rows
        assert table in str(path)
    assert not (tmp_path / "parquet" / "never_seen").exists()


def test_column_order_is_tolerated_but_a_wrong_schema_is_refused(tmp_path: Path) -> None:
    w = TableWriter(OutputLayout(tmp_path), VIDEOS.table, VIDEOS.schema, "r1", STARTED, "0000")
    data = page(VIDEOS, 0, 2, STARTED)
    w.write(data.select(list(reversed(data.schema.names))))
    with pytest.raises(ValueError, match="schema"):
        w.write(data.drop_columns(["play_count"]))
    path = w.close()
    assert path is not None and pq.read_table(path).schema.equals(VIDEOS.schema, check_metadata=False)


def test_a_part_id_is_never_reused_over_landed_data(tmp_path: Path) -> None:
    layout = OutputLayout(tmp_path)
    first = TableWriter(layout, VIDEOS.table, VIDEOS.schema, "r1", STARTED, "0000")
    first.write(page(VIDEOS, 0, 1, STARTED))
    landed = first.close()
    assert landed is not None
    with pytest.raises(FileExistsError):
        TableWriter(layout, VIDEOS.table, VIDEOS.schema, "r1", STARTED, "0000")
    assert pq.read_table(landed).num_rows == 1


def test_abort_leaves_nothing(tmp_path: Path) -> None:
    w = TableWriter(
        OutputLayout(tmp_path), VIDEOS.table, VIDEOS.schema, "r1", STARTED, "0000", row_group_rows=10
    )
    w.write(page(VIDEOS, 0, 25, STARTED))
    w.abort()
    assert list(tmp_path.rglob("*")) == [p for p in tmp_path.rglob("*") if p.is_dir()]


CRASH_SCRIPT = """
import datetime as dt, os, sys
import pyarrow as pa
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.parquet_sink import TableWriter
ts = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
schema = pa.schema([("id", pa.string()), ("_fetched_at", pa.timestamp("us", tz="UTC"))])
w = TableWriter(OutputLayout(sys.argv[1]), "t", schema, "r2", ts, "0000", row_group_rows=100)
for i in range(50):
    ids = [str(j) for j in range(i * 10, i * 10 + 10)]
    w.write(pa.table({"id": ids, "_fetched_at": [ts] * 10}, schema=schema))
print("written", flush=True)
os.kill(os.getpid(), 9)
"""


def test_crash_before_close_leaves_no_footerless_parquet(tmp_path: Path) -> None:
    layout = OutputLayout(tmp_path)
    done = TableWriter(
        layout, "t", pa.schema([("id", pa.string()), ("_fetched_at", TS)]), "r1", STARTED, "0000"
    )
    done.write(pa.table({"id": ["a"], "_fetched_at": [STARTED]}, schema=done.schema))
    done.close()
    proc = subprocess.run(
        [sys.executable, "-c", CRASH_SCRIPT, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "written" in proc.stdout
    finals = sorted(p.name for p in tmp_path.rglob("*.parquet"))
    assert finals == ["r1-0000.parquet"]
    leftovers = [p for p in tmp_path.rglob("*.tmp")]
    assert [p.name for p in leftovers] == [".r2-0000.parquet.tmp"]
    assert leftovers[0].stat().st_size > 0  # row groups were written, but it has no footer
    # readers only ever see the complete file
    assert (
        ds.dataset(tmp_path / "parquet" / "t", format="parquet", partitioning="hive").to_table().num_rows == 1
    )
    glob = str(tmp_path / "parquet" / "t" / "**" / "*.parquet")
    row = (
        duckdb.connect()
        .execute("SELECT count(*) FROM read_parquet(?, hive_partitioning = true)", [glob])
        .fetchall()
    )
    assert row == [(1,)]


def test_context_manager_publishes_rows_written_before_a_failure(tmp_path: Path) -> None:
    layout = OutputLayout(tmp_path)
    with pytest.raises(RuntimeError), MultiTableSink(layout, "r1", STARTED, "0000") as sink:
        sink.write(VIDEOS, page(VIDEOS, 0, 3, STARTED))
        raise RuntimeError("service failed")
    assert [p.name for p in tmp_path.rglob("*.parquet")] == ["r1-0000.parquet"]
    assert not list(tmp_path.rglob("*.tmp"))
    assert os.path.getsize(next(tmp_path.rglob("*.parquet"))) > 0


def test_a_row_group_that_fails_to_write_is_never_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Row groups are written by a background thread: its failure must reach the caller, and the file must
    not be published as if complete (the raw pages still hold the rows)."""

    def disk_full(self: pq.ParquetWriter, table: pa.Table, row_group_size: int | None = None) -> None:
        raise OSError("No space left on device")

    w = TableWriter(
        OutputLayout(tmp_path), VIDEOS.table, VIDEOS.schema, "r1", STARTED, "0000", row_group_rows=10
    )
    monkeypatch.setattr(pq.ParquetWriter, "write_table", disk_full)
    with pytest.raises(MachineFault) as caught:  # the machine's fault, naming the file it could not write
        w.write(page(VIDEOS, 0, 25, STARTED))
        w.close()
    assert caught.value.path == str(w.tmp_path) and caught.value.full
    w.abort()
    assert not list(tmp_path.rglob("*.parquet"))


def test_the_writer_thread_ends_before_the_load_and_comes_back_for_the_next_writer(tmp_path: Path) -> None:
    import threading

    from harvest.tasks.output.parquet_sink import stop_writer_thread

    def writers() -> list[str]:
        return [t.name for t in threading.enumerate() if t.name.startswith("harvest-parquet")]

    layout = OutputLayout(tmp_path)
    for part in ("0000", "0001"):
        w = TableWriter(layout, VIDEOS.table, VIDEOS.schema, "r1", STARTED, part, row_group_rows=10)
        w.write(page(VIDEOS, 0, 25, STARTED))
        path = w.close()
        assert path is not None and pq.read_table(path).num_rows == 25
        assert writers()
        stop_writer_thread()
        assert not writers()  # its allocator caches went with it


def test_a_runs_file_rolls_over_past_its_size_and_every_row_is_in_one_part(tmp_path: Path) -> None:
    """A run's one writer takes every query's rows; past `roll_bytes` on disk a table's file is published and a
    new part begun, so a long run leaves files a warehouse can load, never one file per query."""
    layout = OutputLayout(tmp_path)
    sink = MultiTableSink(layout, "r1", STARTED, "run", roll_bytes=1)
    for i in range(6):  # each page is more than a row group: written out at once
        sink.write(VIDEOS, page(VIDEOS, i * 12_000, 12_000, STARTED))
    sink.write(AUTHORS, page(AUTHORS, 0, 3, STARTED))
    out = sink.close()
    videos = [(path, rows) for table, path, rows in out if table == VIDEOS.table]
    assert len(videos) >= 2, "the file rolled over"
    names = [path.name for path, _ in videos]
    assert names[0] == "r1-run.parquet" and len(set(names)) == len(names)
    assert all(name.startswith("r1-run") for name in names)
    assert sum(rows for _, rows in videos) == 72_000
    keys = pa.concat_tables(pq.read_table(path) for path, _ in videos).column("aweme_id").to_pylist()
    assert sorted(keys) == sorted(f"id{i}" for i in range(72_000)), "every row once, none lost at a roll"
    assert [rows for t, _, rows in out if t == AUTHORS.table] == [3]
    assert not list(tmp_path.rglob("*.tmp"))


def test_a_file_rolls_over_only_at_a_pages_end_never_inside_a_large_answers_slices(tmp_path: Path) -> None:
    """A large answer's slices are written as they are converted: its table's file, past `roll_bytes`, rolls
    over at the page's end, so no published file holds part of a page."""
    sink = MultiTableSink(OutputLayout(tmp_path), "r1", STARTED, "run", roll_bytes=1)
    for i in range(4):  # each slice is more than a row group: written out at once
        sink.write_slice([(VIDEOS, page(VIDEOS, i * 12_000, 12_000, STARTED))])
    assert not sink.rolled and len(sink.writers) == 1, "a file rolled over inside a page"
    sink.end_page()
    assert [rows for _, _, rows in sink.rolled] == [48_000]
    sink.write_page([(VIDEOS, page(VIDEOS, 48_000, 3, STARTED))])
    assert [rows for table, _, rows in sink.close() if table == VIDEOS.table] == [48_000, 3]
