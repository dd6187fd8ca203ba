"""Paging one query (in its spec query's task run), making each paid page durable before asking for the next.

Order per page: raw page (compressed, flushed: survives `kill -9`, written before the page is even parsed) ->
Parquet row groups -> dependents and progress. Parquet is derived data and can be rebuilt from the raw pages; the
raw page is the receipt. Whatever raises after a page was kept ends the query with that page kept, its attempts
in `requests` and its next cursor saved (`QueryPager.broke`): a query never loses a page it paid for. A resumed
query first lands its raw pages again (its partial Parquet files from before the crash are replaced), then pages
on from the last one. Page retries live in the client; Prefect never retries a query, which would pay for pages
again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import aclosing, nullcontext
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from harvest.connectors.catalog.endpoints import Endpoint
from harvest.connectors.paging.known_items import backfill_after_head
from harvest.connectors.paging.pager import Page, PagerStart, QueryPager, QuerySpec, query_failed
from harvest.connectors.reading.extraction import PageMeta, with_meta
from harvest.tasks.database.known_keys import query_known_keys
from harvest.tasks.output.append_file import fsync_path
from harvest.tasks.output.layout import PARQUET_SUFFIX, RUN_PART, OutputLayout
from harvest.tasks.output.machine_fault import DiskRoom
from harvest.tasks.output.parquet_sink import MultiTableSink, run_date
from harvest.tasks.output.query_summary import QuerySummary, history_fields
from harvest.tasks.output.raw_store import RawIndex, RawPage, RawPageReader, RawPageWriter
from harvest.tasks.output.replay import ResumePoint, collected_page, replay_pages
from harvest.tasks.run_context import OnRecords, RunContext

if TYPE_CHECKING:  # Prefect is imported where a task needs it: `harvest rebuild` lands pages without it
    from prefect.states import State

log = logging.getLogger(__name__)


def open_sink(
    layout: OutputLayout, run_id: str, started: datetime, part: int | str, query_id: str
) -> MultiTableSink:
    """A query's Parquet writer; `part` is a counter (a new part id) or a part id the query's files carry
    already (`harvest rebuild` keeps file names, so an export sends a rebuilt run to the same keys)."""
    return MultiTableSink(
        layout,
        run_id,
        started,
        part if isinstance(part, str) else layout.part_id(part, query_id),
    )


def land_tables(
    sink: MultiTableSink,
    endpoint: Endpoint,
    spec: QuerySpec,
    run_id: str,
    tables: Mapping[str, pa.Table],
    fetched_at: datetime,
    whole: bool = True,
) -> None:
    """A page's tables into the writer, with the run's columns; `whole=False`: a slice of a large answer's,
    landed while it is read (the page's end, `MultiTableSink.end_page`, comes once it is read)."""
    meta = PageMeta(endpoint.path, spec.query_id, run_id, fetched_at)
    landed = ((kind, with_meta(kind, tables[kind.table], meta)) for kind in endpoint.landed_kinds)
    if whole:
        sink.write_page(landed)
    else:
        sink.write_slice(landed)


def land_raw_pages(
    layout: OutputLayout,
    run_id: str,
    started: datetime,
    spec: QuerySpec,
    endpoint: Endpoint,
    sink: MultiTableSink,
    on_records: OnRecords | None = None,
    replace_parts: bool = True,
    index: RawIndex | None = None,
) -> PagerStart:
    """Land a query's stored pages again and say where paging continues.

    Parquet files the query wrote before a crash (published or `.tmp`) are removed first: the raw pages hold
    every one of their rows, so landing them again replaces the parts and never duplicates a row. Into a run's
    own writer (`replace_parts=False`) the run's files were all removed before anything landed (`fresh_parts`).
    """
    if replace_parts:
        for stale in layout.query_parts(run_id, run_date(started), spec.query_id):
            stale.unlink(missing_ok=True)
    backfill = backfill_after_head(spec.history, spec.backfill, spec.start_cursor)
    point = ResumePoint(endpoint, backfill, spec.start_cursor, spec.follow_state)
    for page in replay_pages(query_pages(layout, run_id, spec.query_id, index), endpoint):
        land_tables(sink, endpoint, spec, run_id, page.converted.tables, page.fetched_at)
        if on_records is not None:
            on_records(spec, page.records, page.kept, page.raw.credits, True, int(collected_page(page)))
        point.add(page)
    return point.finish()


def reland_query(
    layout: OutputLayout,
    run_id: str,
    started: datetime,
    spec: QuerySpec,
    endpoint: Endpoint,
    part: int,
    on_records: OnRecords,
) -> tuple[PagerStart, list[tuple[str, str, int]]]:
    """A Dask round's query landed again from its raw pages in the output directory, into a new part (its
    earlier parts of the run removed), and where its paging stands: what the flow does when a round's result
    was lost (its worker died) or its files failed their check."""
    sink = open_sink(layout, run_id, started, part, spec.query_id)
    try:
        point = land_raw_pages(layout, run_id, started, spec, endpoint, sink, on_records)
    except BaseException:
        sink.abort()
        raise
    return point, layout.listed(sink.close())


def query_pages(
    layout: OutputLayout, run_id: str, query_id: str, index: RawIndex | None
) -> Iterator[RawPage]:
    """A query's stored pages: found by the run's index, or in the query's own file (a Dask round's)."""
    return (
        index.pages(query_id) if index is not None else iter(RawPageReader(layout.raw_file(run_id, query_id)))
    )


def open_run_sink(
    layout: OutputLayout, run_id: str, started: datetime, part: str = RUN_PART
) -> MultiTableSink:
    """The run's one Parquet writer in the flow's process: its queries' rows go to a few files per table.
    `part`: a merged Dask run's own (`flows.run.dask.round_files.own_part`), which a rebuild keeps."""
    return MultiTableSink(layout, run_id, started, part)


def fresh_parts(layout: OutputLayout, run_id: str, started: datetime) -> list[str]:
    """Remove every Parquet file a run wrote before (a crash, a stop, a full disk), before its raw pages land
    again into one writer: those pages hold every row the files held, so nothing is lost and no row is there
    twice. Returns the published ones that went, as a manifest names them (`RunManifest.files_rewritten`)."""
    stale = layout.run_parts(run_id, run_date(started))
    for path in stale:
        path.unlink(missing_ok=True)
    return [layout.relative(path) for path in stale if path.suffix == PARQUET_SUFFIX]


def _keep(raw: RawPageWriter, room: DiskRoom, page: Page) -> None:
    """The paid answer into the raw store, as received, before anything parses it."""
    room.kept(len(page.raw))
    raw.append(
        query_id=page.query_id,
        page=page.index,
        endpoint=page.endpoint,
        params=page.params,
        cursor_in=page.cursor_in,
        cursor_out=page.cursor_out,
        fetched_at=page.fetched_at,
        status_code=page.status_code,
        credits=page.credits,
        body=page.raw,
        unread=page.unread,
    )


def _known(ctx: RunContext, spec: QuerySpec, endpoint: Endpoint) -> Any:
    """What the flow staged for a round that cannot read the job's DuckDB, else the query's keys in it."""
    if ctx.known is not None:
        return ctx.known
    return query_known_keys(ctx.layout.db, spec, endpoint.kinds, ctx.incremental)


@dataclass
class Paged:
    """What paging a query (or one Dask round of it) left: its outcome and where it stands."""

    summary: QuerySummary
    state: PagerStart


async def page_query(
    ctx: RunContext, spec: QuerySpec, part: int = 0, start: PagerStart | None = None
) -> Paged:
    """Page through a query: each paid page raw first, then Parquet, then dependents and progress.

    `start` goes on from an earlier round (Dask); a resumed query (`spec.resume`) lands its raw pages first.
    `part`: the part id of the query's own Parquet files, when it writes its own (a Dask round).
    """
    endpoint = ctx.endpoints[spec.endpoint]
    layout, run_id = ctx.layout, ctx.run_id
    raw_path, requests_path = ctx.raw_path(spec.query_id), ctx.requests_path(spec.query_id)
    shared = ctx.sink is not None
    sink = ctx.sink or open_sink(layout, run_id, ctx.started, part, spec.query_id)
    sent = ctx.attempts.sent[spec.query_id]  # before: a Dask worker's context may have paged it in a round
    try:
        try:
            ctx.attempts.open(spec.query_id, requests_path)
            if spec.resume:
                start = _land_paid(ctx, spec, endpoint, sink)
        except OSError as exc:  # the machine could not write before anything was paid: stop, resumable
            if not ctx.faults.caught(exc, requests_path):
                raise
            if not shared:
                sink.abort()
            summary = QuerySummary.not_started(
                spec, "interrupted", ctx.ledger.per_query_spent.get(spec.query_id, 0)
            )
            return Paged(replace(summary, error=str(ctx.faults.fault)), start or PagerStart())
        known = _known(ctx, spec, endpoint)  # keep: into `raw`, opened in the `try` that reports its failure
        room = ctx.disk_room()  # looked at before each request: a full disk pays nothing it cannot keep
        pager = QueryPager(
            spec, endpoint, ctx.client, ctx.ledger, start, known,
            keep=lambda p: _keep(raw, room, p), can_keep=room.check,
            land=lambda p, tables: land_tables(sink, endpoint, spec, run_id, tables, p.fetched_at, False),
        )  # fmt: skip
        try:
            with nullcontext(ctx.raw) if ctx.raw else RawPageWriter(raw_path, fsync=ctx.fsync) as raw:
                async with aclosing(pager.pages()) as pages:
                    async for page in pages:
                        if page.landed:
                            sink.end_page()
                        else:
                            land_tables(sink, endpoint, spec, run_id, page.tables, page.fetched_at)
                        ctx.on_records(
                            spec, page.records, page.report.kept, page.credits, False, int(page.collected)
                        )
        except Exception as exc:
            if ctx.faults.caught(exc, raw_path):  # the machine's: stop the run, resumable
                pager.stopped(str(ctx.faults.fault))
            else:  # no rule foresaw it: end this query, keep what it paid for, go on
                log.debug("query %s broke", spec.query_id, exc_info=True)
                pager.broke(exc)
    finally:  # a query's own files: what landed, even on failure (those rows came from paid, kept pages)
        published = [] if shared else publish(ctx, sink, [raw_path])
        ctx.attempts.close(spec.query_id)
    if published is None:  # its pages are kept but not landed: the resume lands them again
        pager.stopped(str(ctx.faults.fault))
    pager.start.sent += ctx.attempts.sent[spec.query_id] - sent  # carried to its next round (Dask)
    summary = _summary(layout, spec, pager, published or [], raw_path, requests_path)
    return Paged(summary, pager.start)


def _land_paid(ctx: RunContext, spec: QuerySpec, endpoint: Endpoint, sink: MultiTableSink) -> PagerStart:
    """A resumed query's pages paid before the crash, landed again; into the run's writer, found by its index."""
    own = ctx.sink is None
    return land_raw_pages(
        ctx.layout, ctx.run_id, ctx.started, spec, endpoint, sink, ctx.on_records, own, ctx.raw_index
    )


def _summary(
    layout: OutputLayout,
    spec: QuerySpec,
    pager: QueryPager,
    files: list[tuple[str, Path, int]],
    raw_path: Path,
    requests_path: Path,
) -> QuerySummary:
    out = pager.outcome
    return QuerySummary(
        query_id=out.query_id, endpoint=out.endpoint, status=out.status, pages=out.pages, records=out.records,
        credits=out.credits, next_cursor=out.next_cursor, error=out.error, cap_below_price=out.cap_below_price,
        refused_for_good=out.refused_for_good, capped=out.capped, asks=spec.asks, earlier=spec.earlier,
        pages_before=spec.pages_before,
        sent=pager.start.sent,
        files=layout.listed(files),
        extraction=out.extraction.as_dict(),
        raw_file=layout.relative(raw_path), requests_file=layout.relative(requests_path),
        **history_fields(spec, pager.start, out.status, out.next_cursor),
        **follow_fields(pager),
    )  # fmt: skip


def follow_fields(pager: QueryPager) -> dict[str, Any]:
    """A query's follow-up requests in its summary: how many were paid, and those a later run asks."""
    if pager.endpoint.paging.follow is None:
        return {}
    follow = pager.start.follow
    return {"follow_ups": follow.asked, "follow_state": follow.plain() if follow.left else None}


def publish(ctx: RunContext, sink: MultiTableSink, raws: list[Path]) -> list[tuple[str, Path, int]] | None:
    """A writer's Parquet parts (a query's or the run's), published; None when the machine could not write them
    (the run stops, and its resume lands the raw pages again).

    The raw files the rows came from (`raws`, a resume's earlier sessions' too) are synced first: a published
    file's rows are then always in raw pages on the disk, so a resume that removes the run's files to land its
    pages again (`fresh_parts`) loses nothing, even after a power cut (Parquet itself is synced when published).
    A file synced before costs next to nothing."""
    try:
        for raw in raws:
            if raw.exists():
                fsync_path(raw)
        return sink.close()
    except Exception as exc:
        if not ctx.faults.caught(exc, ctx.layout.parquet_root):
            raise
        return None


def task_end(summary: dict[str, Any], data: Any) -> Any:
    """What a connector task returns: `data`, as a Failed state when the query failed (drift, a loop, an
    error), so the task run tells the truth in Prefect (retries stay 0: a retry would pay again). The data
    reaches the flow either way (`task_result`)."""
    from prefect.states import Failed

    if not query_failed(summary["status"]):
        return data
    return Failed(message=f"{summary['status']}: {summary.get('error') or 'no error text'}", data=data)


async def task_result(state: State[Any]) -> Any:
    """A finished connector task's data, from its state whether Completed or Failed; raises what it raised."""
    result = await state.aresult(raise_on_failure=False)
    if isinstance(result, BaseException):
        raise result
    return result
