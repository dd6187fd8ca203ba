"""How a merge step reads its Parquet files: matching columns by name across files only where the files differ.

DuckDB's `union_by_name` binds every file before the scan and keeps each file's reader (its parsed footer, ~75 KB
for a table of 40 columns) until the statement ends. A run in this process writes a file or two per table, but a
Dask night writes one per query round: counting the rows of 4,500 one-page files took +354 MB with it and +31 MB
without, and a load of 1,500 such files held +87 MB for its first statement alone (`docs/performance.md`). Files
that all have the first one's columns and types read the same without it (DuckDB reads every file by the first
one's names and types); a step whose files differ (files of an older harvest, or of a spec since edited) still
reads them by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def one_schema(paths: Sequence[str | Path]) -> bool:
    """Whether every file has the first one's columns, in its order, with its Parquet types: the schema DuckDB
    reads, not the Arrow one pyarrow restores from a file's metadata (a timestamp a format-1.0 writer stored in
    other units reads back as the same Arrow type). Footers are read one at a time and let go (kept, each file's
    parsed footer costs as much as DuckDB's reader of it)."""
    import pyarrow.parquet as pq  # here: `harvest run` checks its tables (`table_check`) before Prefect starts

    first = None
    for path in paths:
        schema = pq.read_metadata(path).schema
        if first is None:
            first = schema
        elif not schema.equals(first):
            return False
    return True


def union_by_name(paths: Sequence[str | Path]) -> str:
    """`read_parquet`'s `union_by_name` for these files: `true` only where they differ."""
    return "false" if one_schema(paths) else "true"


def step_source(paths: Sequence[str]) -> str:
    """The `read_parquet` a merge step reads its files with (its one parameter: the list of paths), each row named
    by its file's place in the list and its own in the file (`file_index`, `file_row_number`)."""
    return (
        f"read_parquet(?, hive_partitioning = false, union_by_name = {union_by_name(paths)}, "
        "file_row_number = true)"
    )
