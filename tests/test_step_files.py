"""A load reads a step's many small files without holding a reader per file, and files that differ still land.

A Dask night writes a Parquet file per query round, so a night of 1,500 dependent queries is a load of 1,500
files. DuckDB's `union_by_name` keeps every file's reader for the statement (~75 KB each for 40 columns); the
load binds by name only where a step's files differ (`tasks.database.step_files`).
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from harvest.tasks.database.connection import write_connection
from harvest.tasks.database.history_views import refresh_history_views
from tests.landing_helpers import META, Kind, load_tables

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
COLUMNS = [f"c{i:02d}" for i in range(36)]
WIDE = Kind("wide", ("k",), pa.schema([("k", pa.string()), *[(c, pa.string()) for c in COLUMNS], *META]))
"""A record table as wide as the platforms' video tables (40 columns with harvest's own)."""

IN_A_PROCESS = textwrap.dedent(
    """
    import sys, threading, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[3])
    from harvest.tasks.database.connection import write_connection
    from harvest.tasks.database.history_views import refresh_history_views
    from harvest.tasks.database.record_tables import merge_batches
    from tests.test_step_files import WIDE

    what, root = sys.argv[1], Path(sys.argv[2])
    def rss():
        return int(open("/proc/self/statm").read().split()[1]) * 4096
    peak = [0]
    def sample():
        while True:
            peak[0] = max(peak[0], rss())
            time.sleep(0.002)
    with write_connection(root / "h.duckdb") as con:
        con.execute("SELECT 1")
        before = rss()
        threading.Thread(target=sample, daemon=True).start()
        if what == "merge":
            merge_batches(con, [(WIDE, sorted(root.glob("*.parquet")))])
        else:
            refresh_history_views(con, root, {"wide": WIDE})
        time.sleep(0.01)
        grew = peak[0] - before
        rows = con.execute(f"SELECT count(*) FROM {'wide' if what == 'merge' else 'wide_history'}").fetchone()[0]
    print(rows, grew)
    """
)


def _one_page_files(root: Path, files: int, first: int = 0) -> None:
    for f in range(first, first + files):
        rows = [
            {"k": f"{f}-{j}", **{c: f"value {f} {j} {c}" for c in COLUMNS}, "raw": "{}", "_endpoint": "/e",
             "_query_id": f"q{f}", "_run_id": "r", "_fetched_at": T0}
            for j in range(10)
        ]  # fmt: skip
        pq.write_table(pa.Table.from_pylist(rows, schema=WIDE.schema), root / f"part-{f:05d}.parquet")


def _growth(what: str, root: Path) -> tuple[int, int]:
    """Rows there after and the peak RSS that `what` (the merge, the history view's refresh) added, in a process
    of its own (RSS is the process's, and a process that wrote the files or ran other tests holds its own)."""
    project = str(Path(__file__).resolve().parents[1])
    done = subprocess.run(
        [sys.executable, "-c", IN_A_PROCESS, what, str(root), project],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    rows, grew = done.stdout.split()
    return int(rows), int(grew)


def test_a_load_of_many_one_page_files_does_not_hold_a_reader_per_file(tmp_path: Path) -> None:
    """Measured (2026-12-04): 200 files +41 MB, 1,200 files +58 MB, ~16 KB a file; reading them by name, as every
    step did before, +54 and +167 MB, ~113 KB a file."""
    few, many = _folder(tmp_path / "few"), _folder(tmp_path / "many")
    _one_page_files(few, 200)
    _one_page_files(many, 1200)
    rows_few, grew_few = _growth("merge", few)
    rows_many, grew_many = _growth("merge", many)
    assert (rows_few, rows_many) == (2_000, 12_000)
    per_file = (grew_many - grew_few) / 1000
    assert per_file < 40_000, f"{per_file / 1000:.0f} KB a file ({grew_few >> 20} -> {grew_many >> 20} MB)"


def test_a_night_of_many_files_is_checked_against_its_history_view_by_one_footer(tmp_path: Path) -> None:
    """A load checks each history view against the files added since (`tasks.database.view_checks`); a Dask
    night's files of one schema are described by the first. Measured (2026-12-04): 200 and 1,200 new files +11 and
    +10 MB; described together, as before, +23 and +107 MB. The view still reads every file."""
    grown = []
    for files in (200, 1200):
        root = tmp_path / f"n{files}"
        _one_page_files(_folder(root / "wide" / "date=2026-11-01"), 20)
        assert _growth("views", root)[0] == 200  # the view made over the first night's files
        _one_page_files(_folder(root / "wide" / "date=2026-11-02"), files, first=20)
        rows, grew = _growth("views", root)
        assert rows == (20 + files) * 10
        grown.append(grew)
    per_file = (grown[1] - grown[0]) / 1000
    assert per_file < 30_000, f"{per_file / 1000:.0f} KB a file ({grown[0] >> 20} -> {grown[1] >> 20} MB)"


def _folder(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def test_files_whose_columns_differ_land_by_name_in_one_step(tmp_path: Path) -> None:
    """An older harvest's file (without a column, its columns in another order) and a new one, in one step:
    each value lands in its own column, the missing one NULL."""
    new = {"k": "a", **{c: f"new {c}" for c in COLUMNS}, "raw": "{}", "_endpoint": "/e", "_query_id": "q",
           "_run_id": "r2", "_fetched_at": T0 + dt.timedelta(minutes=1)}  # fmt: skip
    pq.write_table(pa.Table.from_pylist([new], schema=WIDE.schema), tmp_path / "2.parquet")
    older_fields = [f for f in reversed(WIDE.schema) if f.name != "c05"]
    old = {**{k: v.replace("new", "old") for k, v in new.items() if isinstance(v, str)}, "k": "b"}
    old |= {"_fetched_at": T0, "_run_id": "r1"}
    older = pa.Table.from_pylist(
        [{f.name: old[f.name] for f in older_fields}], schema=pa.schema(older_fields)
    )
    pq.write_table(older, tmp_path / "1.parquet")
    db = tmp_path / "h.duckdb"
    load_tables(db, [(WIDE, [tmp_path / "1.parquet", tmp_path / "2.parquet"])])
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT k, c04, c05, c06, _run_id FROM wide ORDER BY k").fetchall()
    assert rows == [("a", "new c04", "new c05", "new c06", "r2"), ("b", "old c04", None, "old c06", "r1")]


def test_a_later_file_with_a_column_more_makes_the_history_view_again(tmp_path: Path) -> None:
    """The check reads one footer only where the night's new files share a schema: a file with a column the
    view lacks, anywhere among them (here the last of two date folders), still makes the view again, so the
    database lists the column (DuckDB's `*` would read it anyway; its catalog and comments would not say it)."""
    _one_page_files(_folder(tmp_path / "wide" / "date=2026-11-01"), 3)
    db = tmp_path / "h.duckdb"
    with write_connection(db) as con:
        refresh_history_views(con, tmp_path, {"wide": WIDE})
    _one_page_files(_folder(tmp_path / "wide" / "date=2026-11-02"), 3, first=3)
    later = _folder(tmp_path / "wide" / "date=2026-11-03")
    _one_page_files(later, 2, first=6)
    wider = pq.read_table(later / "part-00007.parquet")
    wider = wider.append_column("shares", pa.array([f"s{j}" for j in range(wider.num_rows)]))
    pq.write_table(wider, later / "part-00007.parquet")
    with write_connection(db) as con:
        refresh_history_views(con, tmp_path, {"wide": WIDE})
    with duckdb.connect(str(db), read_only=True) as con:
        listed = con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = 'wide_history' ORDER BY column_index"
        ).fetchall()  # what an analyst's client lists, and what the column comments cover
        shares = con.execute("SELECT count(shares), count(*) FROM wide_history").fetchone()
    assert ("shares",) in listed
    assert shares == (10, 80)
