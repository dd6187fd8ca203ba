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
are, named by their queries, as before the merge existed. A Prefect flow retry resumes a run that ended: its
kept queries land again from their raw pages first (`land_kept_again`), as a local resume's do.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.paging.pager import QuerySpec
from harvest.tasks.landing import fresh_parts, land_raw_pages
from harvest.tasks.output.layout import RUN_PART, TMP_SUFFIX, OutputLayout
from harvest.tasks.output.manifest import RunManifest, read_manifest, write_manifest
from harvest.tasks.output.packed_summaries import PackedSummaries
from harvest.tasks.output.parquet_sink import MultiTableSink, run_date
from harvest.tasks.output.raw_store import RawIndex

log = logging.getLogger(__name__)

MERGED_PART = "rounds"
"""The part id of a run's merged round files: a manifest naming one is a merged run (`drop_merged`)."""


@dataclass(frozen=True)
class _FileKind:
    """A round file's table and schema, as the run's writer takes a record kind's."""

    table: str
    schema: pa.Schema
    primary_key: tuple[str, ...] = ()


def merge_rounds(layout: OutputLayout, manifest: RunManifest) -> list[Path]:
    """Merge an ended run's round files and name the merged ones in `manifest` (not yet written); returns the
    merged files (none when it did not merge). Merged files no manifest names (a first try a kill cut short) go
    first, ended or not. A run with files of its own that are not merged ones (a local session's), or a file a
    table or less, is left as it is. A flow retry of a merged run (`land_kept_again`) merges its new round files
    into a part of their own."""
    rounds = [f for q in manifest.queries for f in q.get("files", [])]
    if not rounds:
        return []
    started = dt.datetime.fromisoformat(manifest.started)
    _remove_unnamed(layout, manifest, run_date(started))
    own_merged = all(_is_merged(path, manifest.run_id) for _, path, _ in manifest.files)
    if manifest.unfinished or not own_merged or len(rounds) <= len({table for table, _, _ in rounds}):
        return []
    part = f"{MERGED_PART}-s{manifest.resumes}" if manifest.files else MERGED_PART
    sink = MultiTableSink(layout, manifest.run_id, started, part)
    try:
        for table, path, _ in rounds:
            _copy(sink, table, layout.resolve(path))
        merged = sink.close()
    except Exception as exc:  # a full disk (a MachineFault), files of two schemas: the round files stay
        sink.abort()
        _remove_unnamed(layout, manifest, run_date(started))
        log.warning(
            "the run's %d round files stay as they are (they could not be merged: %s)", len(rounds), exc
        )
        return []
    if sum(n for _, _, n in merged) != sum(int(n) for _, _, n in rounds):
        _remove_unnamed(layout, manifest, run_date(started))
        log.warning("the run's %d round files stay as they are (the merge lost rows)", len(rounds))
        return []
    manifest.files = [*manifest.files, *layout.listed(merged)]
    manifest.queries = PackedSummaries({**q, "files": []} for q in manifest.queries)
    if manifest.resumes:  # an interrupted session was loaded, and maybe exported, with its round files
        manifest.files_rewritten([path for _, path, _ in rounds])
    return [path for _, path, _ in merged]


def land_kept_again(
    layout: OutputLayout,
    manifest: RunManifest,
    kept: Mapping[str, dict[str, Any]],
    started_queries: Mapping[str, dict[str, Any]],
    endpoints: Mapping[str, Endpoint],
) -> None:
    """A resume of a merged run (a Prefect flow retry resumes a run that ended): its kept queries' round files
    are gone into the merged ones, which also hold the rows of the queries it goes on with (landed again from
    their raw pages by the rounds). So the run's files go, as a local resume's do, and the kept queries' raw
    pages land again into one merged part; their summaries name none. The resumed manifest (`running`) is
    written first: a kill meanwhile leaves a run the next `harvest run` resumes, which lands them again. So is a
    run whose kept queries' rows are in no round file of theirs: named files no longer on disk (a retry whose
    kept queries landed no row left no merged file to say the run was merged, and a kill then left the failed
    query's summary naming merged-away files), or none named for rows they landed (a session of the local
    runner, whose own files a kill may have left torn, resumed with `runner: dask`)."""
    if not _merged(manifest) and not _rows_elsewhere(layout, kept.values()):
        return
    write_manifest(layout, manifest)
    started = dt.datetime.fromisoformat(manifest.started)
    removed = fresh_parts(layout, manifest.run_id, started)
    index = RawIndex(layout.raw_files(manifest.run_id))
    sink = MultiTableSink(layout, manifest.run_id, started, MERGED_PART)
    try:
        for query_id, summary in kept.items():
            spec = QuerySpec(**started_queries[query_id])
            endpoint = endpoints[spec.endpoint]
            land_raw_pages(layout, manifest.run_id, started, spec, endpoint, sink, None, False, index)
            summary["files"] = []
    except BaseException:
        sink.abort()
        raise
    manifest.files = layout.listed(sink.close())
    manifest.files_rewritten(removed)


def unpublish(layout: OutputLayout, run_id: str, merged: list[Path]) -> None:
    """The run's end could not be written after its merge: where the manifest on disk names the round files, the
    merged ones go (their rows would be read twice); where it names the merged ones (the rename was done, the
    directory's sync then failed), they stay, and the round files go at the next load (`drop_merged`)."""
    try:
        on_disk = read_manifest(layout.manifest_file(run_id))
        named = {layout.resolve(path) for _, path, _ in on_disk.files}
    except (OSError, ValueError, TypeError):  # unreadable: it cannot name them
        named = set()
    for path in merged:
        if path not in named:
            path.unlink(missing_ok=True)


def own_part(manifest: RunManifest) -> str:
    """The part id a run's files are landed again under (`harvest rebuild`): a merged run's keep their name,
    so a rebuild that changes no row sends nothing again."""
    return MERGED_PART if _merged(manifest) else RUN_PART


def _copy(sink: MultiTableSink, table: str, path: Path) -> None:
    """One round file into the run's writer, a row group at a time: memory holds a row group, not the file."""
    source = pq.ParquetFile(path)
    kind = _FileKind(table, source.schema_arrow)
    for group in range(source.metadata.num_row_groups):
        sink.write_page([(kind, source.read_row_group(group))])


def drop_merged(layout: OutputLayout, manifest: RunManifest) -> list[Path]:
    """Remove the Parquet files of a merged run that its manifest does not name (its round files, left by a kill
    between the manifest and their removal); returns them. Any other run: nothing is read or removed. A query's
    own files a retry left unmerged (a file a table) are named by its summary, and stay."""
    if manifest.unfinished or not _merged(manifest):
        return []
    named = {layout.resolve(path) for _, path, _ in manifest.all_files()}
    started = dt.datetime.fromisoformat(manifest.started)
    gone = [p for p in layout.run_parts(manifest.run_id, run_date(started)) if p not in named]
    for path in gone:
        path.unlink(missing_ok=True)
    return gone


def _merged(manifest: RunManifest) -> bool:
    """The run's own files include merged ones: its round files went into them."""
    return any(_is_merged(path, manifest.run_id) for _, path, _ in manifest.files)


def _rows_elsewhere(layout: OutputLayout, summaries: Iterable[dict[str, Any]]) -> bool:
    return any(
        (int(q.get("records") or 0) > 0 and not q.get("files"))
        or any(not layout.resolve(path).exists() for _, path, _ in q.get("files", []))
        for q in summaries
    )


def _is_merged(path: str, run_id: str) -> bool:
    part = OutputLayout.part_of(path, run_id)
    return part is not None and (part == MERGED_PART or part.startswith(f"{MERGED_PART}-"))


def _remove_unnamed(layout: OutputLayout, manifest: RunManifest, date: dt.date) -> None:
    """Merged files of the run, published or not, that its manifest does not name."""
    named = {layout.resolve(path) for _, path, _ in manifest.files}
    for path in layout.run_parts(manifest.run_id, date):
        if path not in named and _is_merged(
            path.name.removeprefix(".").removesuffix(TMP_SUFFIX), manifest.run_id
        ):
            path.unlink(missing_ok=True)
