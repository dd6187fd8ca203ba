"""What keeping nights costs a load: the `<table>_history` views' check, over 1, 30 and 365 nights of one
table, the way a nightly job's loads meet it.

Each night is one Parquet file of the demo's widest record table (`short_video_videos`, its catalog schema, 100
rows), in its own `date=` folder, as a run leaves it. For each count of nights, a database whose views were made
over all but the last night loads once more with the last night new (a night's load: the view is checked against
the new file only), and the same load with harvest's memory of what the view was checked against deleted (every
file's footer read). Three repetitions after a warm-up, the median counts. In this process: no server, no
network.

    python bench/history_views.py [--nights 1,30,365] [--times 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harvest.connectors.catalog import endpoints as catalog  # noqa: E402
from harvest.tasks.database.history_views import refresh_history_views  # noqa: E402
from harvest.tasks.database.view_checks import SCHEMA  # noqa: E402

TABLE = "short_video_videos"
ROWS = 100


def night_file(schema: pa.Schema, run_id: str) -> pa.Table:
    columns = {f.name: pa.nulls(ROWS, f.type) for f in schema}
    columns["_run_id"] = pa.array([run_id] * ROWS)
    columns["aweme_id"] = pa.array([str(i) for i in range(ROWS)])
    return pa.table(columns, schema=schema)


def nights(root: Path, count: int) -> Path:
    """`count` nights of the table under `root/parquet`; returns the last night's file (the new one)."""
    schema = catalog.all_kinds()[TABLE].schema
    first = dt.date(2026, 1, 1)
    last = root
    for n in range(count):
        day = first + dt.timedelta(days=n)
        run_id = f"{day:%Y%m%d}T010000Z-{n:06x}"
        folder = root / "parquet" / TABLE / f"date={day.isoformat()}"
        folder.mkdir(parents=True)
        last = folder / f"{run_id}-run.parquet"
        pq.write_table(night_file(schema, run_id), last)
    return last


def one_load(root: Path, new: Path, forget: bool) -> float:
    """A night's load of the views, `new` the last night's file; `forget`: without what the views were checked
    against."""
    kinds = {TABLE: catalog.all_kinds()[TABLE]}
    db = root / "harvest.duckdb"
    db.unlink(missing_ok=True)
    aside = root / "aside.parquet"
    shutil.move(new, aside)
    con = duckdb.connect(str(db))
    try:
        refresh_history_views(con, root / "parquet", kinds)  # the nights before, as the last load left them
        shutil.move(aside, new)
        if forget:
            con.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
        start = time.perf_counter()
        refresh_history_views(con, root / "parquet", kinds)
        return time.perf_counter() - start
    finally:
        con.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", default="1,30,365")
    parser.add_argument("--times", type=int, default=3)
    args = parser.parse_args()
    print(f"{'nights':>7} {'new file only':>14} {'every file':>11} {'ratio':>6}")
    for count in (int(n) for n in args.nights.split(",")):
        with tempfile.TemporaryDirectory(prefix="harvest-history-bench-") as tmp:
            root = Path(tmp)
            new = nights(root, count)
            one_load(
                root, new, forget=True
            )  # warm: the first DuckDB calls of a process cost more than a load's
            checked = statistics.median(one_load(root, new, forget=False) for _ in range(args.times))
            every = statistics.median(one_load(root, new, forget=True) for _ in range(args.times))
        print(f"{count:>7} {checked * 1000:>11.1f} ms {every * 1000:>8.1f} ms {checked / every:>6.2f}")


if __name__ == "__main__":
    main()
