"""DuckDB load: newest fetch wins, reruns are idempotent, schema growth, lock conflicts, bookkeeping."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from harvest.connectors.paging.page_request import Attempt
from harvest.tasks.database.bookkeeping import public_service_url
from harvest.tasks.database.connection import DatabaseBusy
from harvest.tasks.output.attempt_log import AttemptLogWriter
from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.parquet_sink import MultiTableSink
from tests.flow_helpers import HoldDuckDB
from tests.landing_helpers import (
    META,
    Kind,
    load_requests,
    load_tables,
    record_run_end,
    record_run_start,
    save_query_states,
)

T0 = dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.UTC)


STATS = pa.struct([("play_count", pa.int64()), ("digg_count", pa.int64())])
VIDEOS = Kind(
    "short_video_videos",
    ("aweme_id",),
    pa.schema(
        [
            ("aweme_id", pa.string()),
            ("desc", pa.string()),
            ("statistics", STATS),
            ("tags", pa.list_(pa.string())),
            *META,
        ]
    ),
)
VIDEOS_V2 = Kind(VIDEOS.table, VIDEOS.primary_key, pa.schema([*VIDEOS.schema, ("share_count", pa.int64())]))
SHELVES = Kind(
    "video_platform_shelves",
    ("type", "title"),
    pa.schema([("type", pa.string()), ("title", pa.string()), ("n", pa.int64()), *META]),
)


def rows(kind: Kind, records: list[dict[str, object]], fetched: dt.datetime, run_id: str) -> pa.Table:
    full = [
        {"raw": "{}", "_endpoint": "/e", "_query_id": "q", "_run_id": run_id, "_fetched_at": fetched, **r}
        for r in records
    ]
    return pa.Table.from_pylist(full, schema=kind.schema)


def land(
    root: Path, run_id: str, pages: list[tuple[Kind, pa.Table]], part: str = "0000"
) -> dict[str, list[Path]]:
    """Write pages through the real sink, as a run would, and return the files per table."""
    with MultiTableSink(OutputLayout(root), run_id, T0, part) as sink:
        sink.write_page(pages)
    out: dict[str, list[Path]] = {}
    for table, path, _ in sink.close():
        out.setdefault(table, []).append(path)
    return out


def video(i: int, desc: str, plays: int = 0) -> dict[str, object]:
    return {
        "aweme_id": f"v{i}",
        "desc": desc,
        "statistics": {"play_count": plays, "digg_count": 1},
        "tags": ["a"],
    }


def table_rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_load_creates_typed_table_with_its_key_stated(tmp_path: Path) -> None:
    files = land(tmp_path, "r1", [(VIDEOS, rows(VIDEOS, [video(1, "a", 5), video(2, "b")], T0, "r1"))])
    db = OutputLayout(tmp_path).db
    assert load_tables(db, [(VIDEOS, files[VIDEOS.table])]) == {VIDEOS.table: 2}
    types = dict(
        table_rows(
            db, "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = 'short_video_videos'"
        )
    )
    assert types["statistics"].startswith("STRUCT") and types["tags"] == "VARCHAR[]"
    assert types["_fetched_at"] == "TIMESTAMP WITH TIME ZONE"
    # the key is stated in the table's comment (a key constraint's index would have to fit DuckDB's memory limit)
    comment = table_rows(db, "SELECT comment FROM duckdb_tables() WHERE table_name = 'short_video_videos'")
    assert comment == [("primary key: aweme_id",)]
    assert table_rows(db, "SELECT statistics.play_count FROM short_video_videos WHERE aweme_id = 'v1'") == [
        (5,)
    ]


def test_rerun_adds_no_duplicates_and_newer_fetch_replaces(tmp_path: Path) -> None:
    db = OutputLayout(tmp_path).db
    first = land(tmp_path, "r1", [(VIDEOS, rows(VIDEOS, [video(1, "old"), video(2, "old")], T0, "r1"))])
    load_tables(db, [(VIDEOS, first[VIDEOS.table])])
    assert load_tables(db, [(VIDEOS, first[VIDEOS.table])]) == {VIDEOS.table: 2}  # same run loaded twice
    later = T0 + dt.timedelta(hours=1)
    second = land(tmp_path, "r2", [(VIDEOS, rows(VIDEOS, [video(2, "new"), video(3, "new")], later, "r2"))])
    assert load_tables(db, [(VIDEOS, second[VIDEOS.table])]) == {VIDEOS.table: 3}
    got = table_rows(db, 'SELECT aweme_id, "desc", _run_id FROM short_video_videos ORDER BY 1')
    assert got == [("v1", "old", "r1"), ("v2", "new", "r2"), ("v3", "new", "r2")]


def test_duplicates_within_a_batch_collapse_to_the_newest(tmp_path: Path) -> None:
    db = OutputLayout(tmp_path).db
    pages = [
        (VIDEOS, rows(VIDEOS, [video(1, "p0")], T0, "r1")),
        (VIDEOS, rows(VIDEOS, [video(1, "p2")], T0 + dt.timedelta(minutes=2), "r1")),
        (VIDEOS, rows(VIDEOS, [video(1, "p1")], T0 + dt.timedelta(minutes=1), "r1")),
    ]
    files = land(tmp_path, "r1", pages[:2], part="0000")[VIDEOS.table]
    files += land(tmp_path, "r1", pages[2:], part="0001")[VIDEOS.table]
    assert load_tables(db, [(VIDEOS, files)]) == {VIDEOS.table: 1}
    assert table_rows(db, 'SELECT "desc" FROM short_video_videos') == [("p2",)]


def test_an_older_fetch_never_overwrites_a_newer_row(tmp_path: Path) -> None:
    db = OutputLayout(tmp_path).db
    newer = land(
        tmp_path, "r2", [(VIDEOS, rows(VIDEOS, [video(1, "newer")], T0 + dt.timedelta(days=1), "r2"))]
    )
    older = land(tmp_path, "r1", [(VIDEOS, rows(VIDEOS, [video(1, "older"), video(9, "only")], T0, "r1"))])
    load_tables(db, [(VIDEOS, newer[VIDEOS.table])])
    load_tables(db, [(VIDEOS, older[VIDEOS.table])])  # e.g. an old run loaded late
    got = table_rows(db, 'SELECT aweme_id, "desc" FROM short_video_videos ORDER BY 1')
    assert got == [("v1", "newer"), ("v9", "only")]


def test_schema_gains_a_column(tmp_path: Path) -> None:
    db = OutputLayout(tmp_path).db
    v1 = land(tmp_path, "r1", [(VIDEOS, rows(VIDEOS, [video(1, "a"), video(2, "b")], T0, "r1"))])
    load_tables(db, [(VIDEOS, v1[VIDEOS.table])])
    later = T0 + dt.timedelta(hours=1)
    v2 = land(
        tmp_path, "r2", [(VIDEOS_V2, rows(VIDEOS_V2, [{**video(2, "b2"), "share_count": 7}], later, "r2"))]
    )
    assert load_tables(db, [(VIDEOS_V2, v2[VIDEOS.table])]) == {VIDEOS.table: 2}
    got = table_rows(db, 'SELECT aweme_id, "desc", share_count FROM short_video_videos ORDER BY 1')
    assert got == [("v1", "a", None), ("v2", "b2", 7)]
    # a newer fetch under the old schema replaces the whole row: the column it lacks becomes NULL
    v1b = land(
        tmp_path, "r3", [(VIDEOS, rows(VIDEOS, [video(2, "b3")], later + dt.timedelta(hours=1), "r3"))]
    )
    load_tables(db, [(VIDEOS, v1b[VIDEOS.table])])
    assert table_rows(db, "SELECT share_count FROM short_video_videos WHERE aweme_id = 'v2'") == [(None,)]


def test_null_keys_are_skipped_and_counted_and_composite_keys_merge(tmp_path: Path) -> None:
    db = OutputLayout(tmp_path).db
    shelf: list[dict[str, object]] = [
        {"type": "t", "title": "x", "n": 1},
        {"type": "t", "title": None, "n": 2},
        {"type": "t", "title": "y", "n": 3},
        {"type": "u", "title": "x", "n": 4},
    ]
    files = land(tmp_path, "r1", [(SHELVES, rows(SHELVES, shelf, T0, "r1"))])[SHELVES.table]
    result = load_tables(db, [(SHELVES, files), (VIDEOS, [])])
    assert result == {SHELVES.table: 3, VIDEOS.table: 0}
    assert result.skipped_null_pk == {SHELVES.table: 1, VIDEOS.table: 0}


def test_a_failed_load_is_finished_by_loading_again(tmp_path: Path) -> None:
    """Steps commit one by one (memory stays bounded); a load that failed half-way is rerun to the same tables."""
    db = OutputLayout(tmp_path).db
    good = land(tmp_path, "r1", [(VIDEOS, rows(VIDEOS, [video(1, "a"), video(2, "b")], T0, "r1"))])[
        VIDEOS.table
    ]
    with pytest.raises((duckdb.Error, OSError)):
        load_tables(db, [(VIDEOS, good), (SHELVES, [tmp_path / "missing.parquet"])])
    assert load_tables(db, [(VIDEOS, good)]) == {VIDEOS.table: 2}
    assert table_rows(db, "SELECT aweme_id, count(*) FROM short_video_videos GROUP BY 1 ORDER BY 1") == [
        ("v1", 1),
        ("v2", 1),
    ]


def test_lock_held_by_another_process_raises_database_busy(tmp_path: Path, duckdb_holder: HoldDuckDB) -> None:
    layout = OutputLayout(tmp_path)
    files = land(tmp_path, "r1", [(VIDEOS, rows(VIDEOS, [video(1, "a")], T0, "r1"))])[VIDEOS.table]
    load_tables(layout.db, [(VIDEOS, files)])
    with duckdb_holder(layout.db, mark=False):
        with pytest.raises(DatabaseBusy) as err:
            load_tables(layout.db, [(VIDEOS, files)], rerun="harvest load r1")
        assert str(err.value) == (
            f"{layout.db} is open in another process (close your DuckDB session); "
            f"the data is safe in Parquet at {layout.parquet_root}; rerun `harvest load r1`"
        )
        assert isinstance(err.value.__cause__, duckdb.IOException)
        with pytest.raises(DatabaseBusy):
            record_run_start(layout.db, run_id="r9", job="j")
    assert load_tables(layout.db, [(VIDEOS, files)]) == {VIDEOS.table: 1}  # rerun after the lock is gone


@dataclass
class RunInfo:
    run_id: str
    job: str
    spec_hash: str
    service: str
    started: dt.datetime
    extra: str = "ignored"


def test_run_bookkeeping_round_trip(tmp_path: Path) -> None:
    db = tmp_path / "harvest.duckdb"
    record_run_start(db, RunInfo("r1", "job", "abc", "https://user:pw@api.example.com/v1?key=SECRET", T0))
    assert table_rows(db, "SELECT status, finished, service FROM runs") == [
        ("running", None, "https://api.example.com/v1")
    ]
    record_run_end(
        db,
        {
            "run_id": "r1",
            "finished": T0 + dt.timedelta(minutes=5),
            "status": "complete",
            "credits_spent": 42,
            "records": 1000,
        },
    )
    record_run_end(db, run_id="r1", status="complete", credits_spent=42, records=1000)  # repeat: no change
    got = table_rows(
        db,
        "SELECT run_id, job, spec_hash, epoch(finished - started), status, credits_spent, records FROM runs",
    )
    assert got == [("r1", "job", "abc", 300.0, "complete", 42, 1000)]
    assert public_service_url("http://127.0.0.1:8000/") == "http://127.0.0.1:8000/"


def test_requests_load_is_idempotent_and_keeps_no_secrets(tmp_path: Path) -> None:
    layout = OutputLayout(tmp_path)
    paths = []
    for q in ("q/1", "q/2"):
        path = layout.requests_file("r1", q)
        with AttemptLogWriter(path) as log:
            log.append(
                Attempt(
                    q, "/e", {"cursor": None, "api_key": "S"}, 0, 1, 503, 0, 10.0, "HTTP 503", T0.isoformat()
                )
            )
            log.append(Attempt(q, "/e", {"cursor": None}, 0, 2, 200, 1, 20.0, None, T0.isoformat()))
        paths.append(path)
    with open(paths[1], "ab") as f:
        f.write(b'{"query_id": "q/2", "att')  # torn line from a kill
    assert load_requests(layout.db, "r1", paths) == 4
    assert load_requests(layout.db, "r1", paths) == 4
    assert load_requests(layout.db, "r1", paths[:1]) == 2  # reloading one query leaves the other alone
    got = table_rows(
        layout.db,
        "SELECT query_id, attempt, status_code, credits, params, error, started_at "
        "FROM requests ORDER BY 1, 2",
    )
    assert len(got) == 4
    assert got[0][:6] == ("q/1", 1, 503, 0, '{"cursor":null}', "HTTP 503")
    assert got[0][6] == T0


def test_query_states_round_trip(tmp_path: Path) -> None:
    db = tmp_path / "harvest.duckdb"

    @dataclass
    class State:
        query_id: str
        endpoint: str
        status: str
        pages: int
        records: int
        next_cursor: dict[str, str] | None
        credits: int
        error: str | None

    save_query_states(
        db,
        "r1",
        [
            State("q1", "/e", "partial", 3, 30, {"cursor": "c3"}, 3, "budget"),
            {"query_id": "q2", "endpoint": "/e", "status": "complete", "pages": 1},
        ],
    )
    save_query_states(
        db,
        "r1",
        [
            {
                "query_id": "q1",
                "endpoint": "/e",
                "status": "complete",
                "pages": 4,
                "records": 35,
                "next_cursor": None,
                "credits": 4,
                "error": None,
            }
        ],
    )
    got = table_rows(
        db, "SELECT query_id, status, pages, records, next_cursor, credits, error FROM query_state ORDER BY 1"
    )
    assert got == [("q1", "complete", 4, 35, None, 4, None), ("q2", "complete", 1, None, None, None, None)]
    save_query_states(db, "r2", [State("q1", "/e", "partial", 1, 10, {"cursor": "c1"}, 1, None)])
    assert table_rows(db, "SELECT next_cursor FROM query_state WHERE run_id = 'r2'") == [('{"cursor":"c1"}',)]


def test_a_query_listed_twice_far_apart_keeps_its_later_state_and_every_other_query_its_own(
    tmp_path: Path,
) -> None:
    """A run's query states are written a few hundred queries a statement, in one transaction; a query whose
    state comes twice, a statement apart, keeps the later one, and no other query's row is lost (replacing a row
    an earlier statement of the same transaction wrote dropped the statement's other rows on DuckDB 1.2)."""
    db = tmp_path / "harvest.duckdb"
    states = [
        {"query_id": f"q{n:04d}", "endpoint": "/e", "status": "complete", "pages": 1} for n in range(1200)
    ]
    states.append({"query_id": "q0003", "endpoint": "/e", "status": "budget_exhausted", "pages": 2})
    assert save_query_states(db, "r1", states) == 1200
    assert table_rows(db, "SELECT count(*), count(DISTINCT query_id) FROM query_state") == [(1200, 1200)]
    assert table_rows(db, "SELECT status, pages FROM query_state WHERE query_id = 'q0003'") == [
        ("budget_exhausted", 2)
    ]
