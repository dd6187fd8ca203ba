"""A finished Dask run's round files merged into a few files per table, as the local runner leaves.

A Dask round writes its own Parquet file per table (`tasks.round_task`), so a night of 1,500 one-page queries
left 1,500 files a table: every query of a `<table>_history` view binds each of them by column name (~75 KB a
file of 40 columns, for as long as the query runs), night after night, and a warehouse reads 1,500 small files.
Once the run has ended (no resume will land a query into its round files again), its round files are copied,
row group by row group, into the run's own files of each table (`<run>-rounds[-k].parquet`, rolled by size as
the local runner's are); the manifest names those and its queries name none, and the round files go.

Kept safe by the order of the steps: the merged files are published before the manifest names them, and the
round files go only once it does. Killed before the manifest: the run is still `running` on disk, so its resume
merges again from the round files (the merged files of the first try go first). Killed after: `drop_merged`
removes the round files a finished manifest no longer names before the run is loaded, so no history view reads
a row twice. Anything the merge cannot do (a full disk, files of two schemas) leaves the round files as they
are, named by their queries, as before the merge existed.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from harvest.tasks.output.layout import OutputLayout
from harvest.tasks.output.manifest import RunManifest
from harvest.tasks.output.packed_summaries import PackedSummaries
from harvest.tasks.output.parquet_sink import MultiTableSink, run_date

log = logging.getLogger(__name__)

MERGED_PART = "rounds"
"""The part id of a run's merged round files: a manifest naming one is a merged run (`drop_merged`)."""


@dataclass(frozen=True)
class _FileKind:
    """A round file's table and schema, as the run's writer takes a record kind's."""

    table: str
    schema: pa.Schema
    primary_key: tuple[str, ...] = ()


def merge_rounds(layout: OutputLayout, manifest: RunManifest) -> bool:
    """Merge an ended run's round files and name the merged ones in `manifest` (not yet written); whether it
    did. Runs that wrote their own files, and those that left a file a table or less, are left as they are."""
    rounds = [f for q in manifest.queries for f in q.get("files", [])]
    tables = {table for table, _, _ in rounds}
    if manifest.unfinished or manifest.files or len(rounds) <= len(tables):
        return False
    started = dt.datetime.fromisoformat(manifest.started)
    _remove_merged(layout, manifest.run_id, run_date(started))  # a first try a kill cut short
    sink = MultiTableSink(layout, manifest.run_id, started, MERGED_PART)
    try:
        for table, path, _ in rounds:
            _copy(sink, table, layout.resolve(path))
        merged = sink.close()
    except (OSError, ValueError) as exc:  # a full disk, or files of two schemas: the round files stay
        sink.abort()
        _remove_merged(layout, manifest.run_id, run_date(started))
        log.warning(
            "the run's %d round files stay as they are (they could not be merged: %s)", len(rounds), exc
        )
        return False
    if sum(n for _, _, n in merged) != sum(int(n) for _, _, n in rounds):
        _remove_merged(layout, manifest.run_id, run_date(started))
        log.warning("the run's %d round files stay as they are (the merge lost rows)", len(rounds))
        return False
    manifest.files = layout.listed(merged)
    manifest.queries = PackedSummaries({**q, "files": []} for q in manifest.queries)
    return True


def _copy(sink: MultiTableSink, table: str, path: Path) -> None:
    """One round file into the run's writer, a row group at a time: memory holds a row group, not the file."""
    source = pq.ParquetFile(path)
    kind = _FileKind(table, source.schema_arrow)
    for group in range(source.metadata.num_row_groups):
        sink.write_page([(kind, source.read_row_group(group))])


def drop_merged(layout: OutputLayout, manifest: RunManifest) -> list[Path]:
    """Remove the Parquet files of a merged run that its manifest does not name (its round files, left by a kill
    between the manifest and their removal); returns them. Any other run: nothing is read or removed."""
    if manifest.unfinished or not any(_is_merged(path, manifest.run_id) for _, path, _ in manifest.files):
        return []
    named = {layout.resolve(path) for _, path, _ in manifest.files}
    started = dt.datetime.fromisoformat(manifest.started)
    gone = [p for p in layout.run_parts(manifest.run_id, run_date(started)) if p not in named]
    for path in gone:
        path.unlink(missing_ok=True)
    return gone


def _is_merged(path: str, run_id: str) -> bool:
    part = OutputLayout.part_of(path, run_id)
    return part is not None and (part == MERGED_PART or part.startswith(f"{MERGED_PART}-"))


def _remove_merged(layout: OutputLayout, run_id: str, date: dt.date) -> None:
    for path in layout.run_parts(run_id, date):
        if _is_merged(path.name.removeprefix(".").removesuffix(".tmp"), run_id):
            path.unlink(missing_ok=True)
