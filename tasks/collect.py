"""The connector task: page through one query, making each paid page durable before asking for the next.

Order per page: raw page (compressed, flushed: survives `kill -9`) -> Parquet row groups -> dependents and
progress. Parquet is derived data and can be rebuilt from the raw pages; the raw page is the receipt.
Page retries live in the client; the task itself is never retried by Prefect, which would pay for pages again.
"""

from __future__ import annotations

from contextlib import aclosing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from connectors.pager import QueryPager, QuerySpec
from connectors.records import PageMeta, to_arrow
from tasks.parquet_sink import MultiTableSink
from tasks.rawstore import RawPageWriter
from tasks.run_context import lookup

ROW_GROUP_ROWS = 10_000
ROW_GROUP_BYTES = 4 * 1024 * 1024
"""Every running query buffers at most one row group per table, so memory is bounded by these times the
number of queries in flight, whatever the number of pages; 10k rows still read efficiently."""


@dataclass
class QuerySummary:
    """What a connector task returns: small, plain, and enough to load and report the run."""

    query_id: str
    endpoint: str
    status: str
    pages: int
    records: int
    credits: int
    next_cursor: dict[str, str] | None
    error: str | None
    files: list[tuple[str, str, int]] = field(default_factory=list)
    raw_file: str = ""
    requests_file: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@task(name="collect_query", retries=0, cache_policy=NO_CACHE, log_prints=False)
async def collect_query(run_id: str, query: dict[str, Any], part: int) -> dict[str, Any]:
    ctx = lookup(run_id)
    spec = QuerySpec(**query)
    endpoint = ctx.endpoints[spec.endpoint]
    pager = QueryPager(spec, endpoint, ctx.client, ctx.ledger)
    raw_path = ctx.layout.raw_file(run_id, spec.query_id)
    requests_path = ctx.layout.requests_file(run_id, spec.query_id)
    files: list[tuple[str, Path, int]] = []
    ctx.attempts.open(spec.query_id, requests_path)
    sink = MultiTableSink(
        ctx.layout,
        run_id,
        ctx.started,
        ctx.layout.part_id(part, spec.query_id),
        row_group_rows=ROW_GROUP_ROWS,
        row_group_bytes=ROW_GROUP_BYTES,
    )
    try:
        with RawPageWriter(raw_path, fsync=ctx.fsync) as raw:
            async with aclosing(pager.pages()) as pages:
                async for page in pages:
                    raw.append(
                        query_id=spec.query_id,
                        page=page.index,
                        endpoint=page.endpoint,
                        params=page.params,
                        cursor_in=page.cursor_in,
                        cursor_out=page.cursor_out,
                        fetched_at=page.fetched_at,
                        status_code=page.status_code,
                        credits=page.credits,
                        body=page.raw,
                    )
                    meta = PageMeta(endpoint.path, spec.query_id, run_id, page.fetched_at)
                    sink.write_page(
                        (kind, to_arrow(kind, page.records.get(kind.table, []), spec.params, meta))
                        for kind in endpoint.kinds
                    )
                    ctx.on_page(spec, page)
    finally:
        files = sink.close()  # publish what landed even on failure: those rows came from paid, kept pages
        ctx.attempts.close(spec.query_id)
    out = pager.outcome
    return QuerySummary(
        query_id=out.query_id,
        endpoint=out.endpoint,
        status=out.status,
        pages=out.pages,
        records=out.records,
        credits=out.credits,
        next_cursor=out.next_cursor,
        error=out.error,
        files=[(table, str(path), rows) for table, path, rows in files],
        raw_file=str(raw_path),
        requests_file=str(requests_path),
    ).as_dict()
