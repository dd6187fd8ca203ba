"""`harvest run --fresh` with an unfinished run: land what it paid for, mark it abandoned, load it.

Abandoning never throws paid data away: the queries that were still running land their raw pages (no request
is sent), their partial Parquet files are replaced, and the run is loaded into DuckDB like any other.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime

from connectors.catalog.endpoints import Endpoint
from connectors.paging.pager import QuerySpec
from flows.run.load_step import load_manifest_into_duckdb
from tasks.database.connection import DatabaseBusy
from tasks.landing import land_raw_pages, open_sink
from tasks.output.journal import read_journal
from tasks.output.layout import OutputLayout
from tasks.output.manifest import RunManifest, write_manifest
from tasks.output.query_summary import QuerySummary, history_fields

log = logging.getLogger(__name__)


def abandon_run(layout: OutputLayout, run: RunManifest, endpoints: dict[str, Endpoint]) -> RunManifest:
    journal = read_journal(layout.journal_file(run.run_id))
    started = datetime.fromisoformat(run.started)
    summaries = list(journal.ended.values())
    for n, (query_id, query) in enumerate(journal.started.items(), 1):
        if query_id in journal.ended:
            continue
        spec = QuerySpec(**{**query, "resume": True})
        endpoint = endpoints[spec.endpoint]
        sink = open_sink(layout, run.run_id, started, 9000 + n, query_id)
        try:
            start = land_raw_pages(layout, run.run_id, started, spec, endpoint, sink)
        finally:
            files = sink.close()
        summaries.append(
            QuerySummary(
                query_id=query_id,
                endpoint=spec.endpoint,
                status="abandoned",
                pages=start.pages,
                records=start.records,
                credits=journal.spent.get(query_id, 0),
                next_cursor=None if start.ended else start.cursor,
                error="the run was abandoned (--fresh) while this query was running",
                files=[(table, layout.relative(path), rows) for table, path, rows in files],
                extraction=start.extraction.as_dict(),
                raw_file=layout.relative(layout.raw_file(run.run_id, query_id)),
                requests_file=layout.relative(layout.requests_file(run.run_id, query_id)),
                **history_fields(
                    spec, start, start.ended or "abandoned", None if start.ended else start.cursor
                ),
            ).as_dict()
        )
    done = replace(
        run,
        status="abandoned",
        finished=datetime.now(UTC).isoformat(),
        credits_spent=journal.total_spent,
        queries=summaries,
    )
    write_manifest(layout, done)
    try:
        load_manifest_into_duckdb(layout, done)
    except DatabaseBusy as exc:
        log.warning("%s", exc)
    return done
