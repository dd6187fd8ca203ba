"""The merge rule holds however a load is cut into steps and batches: per key, the row with the newest
`_fetched_at` wins, ties going to the later file name, then the later row in the file.

Rows are named inside a step by (`file_index`, `file_row_number`), so the order the files are given in must not
matter; steps of a few rows stand for the 250k-row steps of a real load (`tasks.database.step_files.CHUNK_ROWS`).
"""

from __future__ import annotations

import datetime as dt
import random
import tempfile
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harvest.connectors.catalog.endpoints import all_kinds
from harvest.tasks.database.connection import write_connection
from harvest.tasks.database.load_settings import DEFAULT_ROW_GROUP_ROWS
from harvest.tasks.database.record_tables import ROW_NAMES, merge_batches, merge_files
from tests.landing_helpers import META, Kind

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
PINS = Kind("pins", ("k",), pa.schema([("k", pa.string()), ("label", pa.string()), *META]))

# A file: its rows as (key, minutes after T0). Few keys and few distinct times, so ties are common.
files_strategy = st.lists(
    st.lists(st.tuples(st.integers(0, 4), st.integers(0, 2)), min_size=1, max_size=6), min_size=1, max_size=6
)


def _write(directory: Path, name: str, rows: list[tuple[int, int]]) -> Path:
    records = [
        {
            "k": f"k{key}",
            "label": f"{name}#{n}",
            "raw": "{}",
            "_endpoint": "/e",
            "_query_id": "q",
            "_run_id": "r",
            "_fetched_at": T0 + dt.timedelta(minutes=minute),
        }
        for n, (key, minute) in enumerate(rows)
    ]
    path = directory / f"{name}.parquet"
    pq.write_table(pa.Table.from_pylist(records, schema=PINS.schema), path)
    return path


def _expected(files: list[list[tuple[int, int]]]) -> dict[str, str]:
    """Per key, the label of the winning row: the newest minute, then the later file name, then the later row."""
    best: dict[str, tuple[int, str, int]] = {}
    for i, rows in enumerate(files):
        name = f"f{i:02d}"
        for n, (key, minute) in enumerate(rows):
            rank = (minute, name, n)
            best[f"k{key}"] = max(best.get(f"k{key}", rank), rank)
    return {key: f"{name}#{n}" for key, (_, name, n) in best.items()}


@pytest.mark.scenario
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files=files_strategy, step=st.integers(1, 12), batches=st.integers(1, 3), seed=st.integers(0, 99))
def test_any_steps_and_batches_give_the_table_one_merge_would(
    files: list[list[tuple[int, int]]], step: int, batches: int, seed: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        paths = [_write(root, f"f{i:02d}", rows) for i, rows in enumerate(files)]
        shuffled = paths[:]
        random.Random(seed).shuffle(shuffled)  # the order files are handed over in must not matter
        # consecutive batches in name order, as runs are loaded oldest first; each batch in shuffled order
        cut = sorted(random.Random(seed).sample(range(1, len(paths)), min(batches - 1, len(paths) - 1)))
        groups = [paths[a:b] for a, b in zip([0, *cut], [*cut, len(paths)], strict=True)]
        db = root / "h.duckdb"
        for group in groups:
            in_order = [p for p in shuffled if p in group]
            with write_connection(db) as con:
                merge_batches(con, [(PINS, in_order)], rows=step)
        # one step straight through merge_files, the files as shuffled
        whole = root / "whole.duckdb"
        with write_connection(whole) as con:
            merge_files(con, PINS, shuffled)
        got, got_whole = _labels(db), _labels(whole)
    assert got == got_whole == _expected(files)


def _labels(db: Path) -> dict[str, str]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return dict(con.execute("SELECT k, label FROM pins").fetchall())
    finally:
        con.close()


def test_a_record_column_named_like_the_readers_row_names_is_refused(tmp_path: Path) -> None:
    """Such a column would hide DuckDB's `file_index` and mix up which row wins: refused before anything loads."""
    clash = Kind("clash", ("k",), pa.schema([("k", pa.string()), ("file_index", pa.int64()), *META]))
    with write_connection(tmp_path / "h.duckdb") as con, pytest.raises(ValueError, match="reserved"):
        merge_files(con, clash, [])


def test_no_catalog_table_has_a_column_named_like_the_readers_row_names() -> None:
    assert not any(ROW_NAMES & set(kind.schema.names) for kind in all_kinds().values())


def test_a_load_writes_small_row_groups_and_spills_beside_the_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Row groups of `DEFAULT_ROW_GROUP_ROWS` (a 122,880-row group of wide rows spilled under the 64 MB cap), in a file
    any DuckDB opens as usual; what DuckDB spills goes beside the database, not into the current directory."""
    monkeypatch.chdir(tmp_path)
    rows = [(n, n % 3) for n in range(40_000)]
    source = _write(tmp_path, "f00", rows)
    db = tmp_path / "out" / "h.duckdb"
    with write_connection(db) as con:
        merge_batches(con, [(PINS, [source])])
        spill = con.execute("SELECT current_setting('temp_directory')").fetchall()[0][0]
    assert Path(spill) == Path(f"{db}.tmp")
    assert not (tmp_path / ".tmp").exists()
    con = duckdb.connect(str(db), read_only=True)
    try:
        groups = con.execute(
            "SELECT row_group_id, max(start + count) - min(start) FROM pragma_storage_info('pins') "
            "WHERE column_name = 'k' GROUP BY row_group_id"
        ).fetchall()
        assert con.execute("SELECT count(*), count(DISTINCT k) FROM pins").fetchall() == [(40_000, 40_000)]
    finally:
        con.close()
    assert len(groups) >= 3 and max(n for _, n in groups) <= DEFAULT_ROW_GROUP_ROWS
