"""A merge step's Parquet files: which files a step takes, and how it reads them (by column name only where the
files differ).

DuckDB's `union_by_name` binds every file before the scan and keeps each file's reader (its parsed footer, ~75 KB
for a table of 40 columns) until the statement ends. A run in this process writes a file or two per table, but a
Dask night writes one per query round: counting the rows of 4,500 one-page files took +354 MB with it and +31 MB
without, and a load of 1,500 such files held +87 MB for its first statement alone (`docs/performance.md`). Files
that all have the first one's columns and types read the same without it (DuckDB reads every file by the first
one's names and types); a step whose files differ (files of an older harvest, or of a spec since edited) still
reads them by name. Whether they differ is read from the footers the step's cut reads anyway (`chunks`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow.parquet as pq

CHUNK_ROWS = 250_000
"""Rows merged in one step: the sort, the join and DuckDB's memory stay the size of a step, not of the run.

Why this many, measured on the bench job's 200k rows (0.93 KB each) under the 64 MB limit: with DuckDB's default
122,880-row groups, steps of 50k took 2.45 s (3.35 s over the same keys again) and one 200k step 1.66 s; with the
load's 16,384-row groups (`tasks.database.load_settings`), 50k steps still take 1.65 s and one step 0.95 s. 3.2M distinct
rows took 65 s in 50k steps and 29 s in 250k steps with default groups, 21-31 s and 15-16 s with 16,384-row
groups, and ran out of 64 MB in 1M steps (the insert's join, which grows with rows, not with width). Records five
times as wide (5 KB of `raw`) loaded in one 200k step in 3.8 s; in steps capped at 256 MB of data (40k rows)
they took 8.7 s, so steps are not capped by bytes."""


class SameSchema:
    """Whether every footer seen so far has the first one's columns, in its order, with its Parquet types: the
    schema DuckDB reads, not the Arrow one pyarrow restores from a file's metadata (a timestamp a format-1.0
    writer stored in other units reads back as the same Arrow type). Fed by loops that read the footers for
    something else; keeps the first footer only (kept, each parsed footer costs as much as DuckDB's reader)."""

    def __init__(self) -> None:
        self._first: pq.ParquetSchema | None = None
        self.holds = True

    def see(self, footer: pq.FileMetaData) -> None:
        if self._first is None:
            self._first = footer.schema
        elif self.holds and not footer.schema.equals(self._first):
            self.holds = False


def one_schema(paths: Sequence[str | Path]) -> bool:
    """Whether the files share one schema (`SameSchema`), their footers read one at a time."""
    import pyarrow.parquet as pq  # here: `harvest run` checks its tables (`table_check`) before Prefect starts

    same = SameSchema()
    for path in paths:
        same.see(pq.read_metadata(path))
        if not same.holds:
            return False
    return True


@dataclass(frozen=True)
class Step:
    """A merge step's files, in name order, and whether they share one schema."""

    files: list[Path]
    same_schema: bool

    def __iter__(self) -> Iterator[Path]:
        return iter(self.files)

    def __len__(self) -> int:
        return len(self.files)


def chunks(files: Sequence[Path], rows: int = CHUNK_ROWS) -> Iterator[Step]:
    """Files in name order, grouped into steps of at most `rows` rows (a file is never split).

    Merging step by step gives the same table as one merge: each step replaces only rows at least as old,
    and files are taken in the order one merge breaks ties by (the later file name wins)."""
    import pyarrow.parquet as pq  # here: `harvest run` checks tables (tasks.database.table_check) before Prefect starts

    chunk: list[Path] = []
    same = SameSchema()
    counted = 0
    for path in sorted(files, key=str):
        footer = pq.read_metadata(path)
        if chunk and counted + footer.num_rows > rows:
            yield Step(chunk, same.holds)
            chunk, counted, same = [], 0, SameSchema()
        chunk.append(path)
        same.see(footer)
        counted += footer.num_rows
    if chunk:
        yield Step(chunk, same.holds)


def union_by_name(same_schema: bool) -> str:
    """`read_parquet`'s `union_by_name` for files that do (`false`) or do not share one schema."""
    return "false" if same_schema else "true"


def step_source(files: Sequence[Path] | Step, paths: Sequence[str]) -> str:
    """The `read_parquet` a merge step reads `paths` (its files, as the statement's one parameter) with, each row
    named by its file's place in the list and its own in the file (`file_index`, `file_row_number`). `files`: a
    `Step` knows whether they share a schema; plain files (a merge called alone) have their footers read."""
    same = files.same_schema if isinstance(files, Step) else one_schema(paths)
    return (
        f"read_parquet(?, hive_partitioning = false, union_by_name = {union_by_name(same)}, "
        "file_row_number = true)"
    )
