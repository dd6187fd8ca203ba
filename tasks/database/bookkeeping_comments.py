"""The words on harvest's bookkeeping tables (`runs`, `requests`, `query_state`): a comment on each table and each
column, as on the record tables (`tasks.database.column_comments`), so an analyst who opens the file in DBeaver or
reads `duckdb_columns().comment` learns what a run, an attempt and a query's state hold without the docs."""

from __future__ import annotations

from collections.abc import Mapping

_EXTRACTION = {
    "items_seen": "Items the pages held (before reading them into records).",
    "records_without_key": "Items without a primary key: kept in the raw pages, not in the tables.",
    "values_misfit": "Values that did not fit their column's type: NULL in the table, kept in `raw`.",
    "values_repaired": "Values harvest read after repairing them (e.g. a number sent as text).",
    "lists_missing": "Pages whose record list was missing from the answer.",
    "new_fields": "Fields the service sent that the catalog does not read yet (JSON list; kept in `raw`).",
    "columns_empty": "Columns no record filled although records were read (a renamed field?).",
    "items_dropped": "Items the pages held that a record kind's `where` left out: not records of it, not landed.",
}

RUNS = (
    "One row per run of a job: when, how it ended, what it spent and read. Primary key: run_id.",
    {
        "run_id": "The run's id (`_run_id` in the record tables). Primary key.",
        "job": "The job spec's name.",
        "spec_hash": "Hash of the job spec the run used: runs of an edited spec differ.",
        "service": "The service the run asked (its URL without credentials, or the sandbox).",
        "started": "When the run started (UTC).",
        "finished": "When the run ended (UTC); NULL while it runs.",
        "status": "How the run ended (`complete` when every query did); `running` while it runs.",
        "credits_spent": "Credits harvest counted the run spending.",
        "records": "Records the run landed.",
        "budget": "The credit budget the run was allowed (a hard cap); a resume's `--budget` replaces it.",
        "resumes": "How often the run was resumed after an interruption.",
        "continues": "The run this one continues, if any.",
        "error": "Why the run failed, if it did.",
        "balance_before": "The service's credit balance at the run's first reading.",
        "balance_after": "The service's credit balance at the run's last reading.",
        "service_billed": "What the service billed the run (the balance's fall), beside harvest's count.",
        "budget_before": "The earlier budget that capped the run's spending, when a resume gave it a `budget` below "
        "what it had spent (it then paid nothing more); NULL otherwise.",
        **_EXTRACTION,
    },
)
REQUESTS = (
    "One row per HTTP attempt at a page, paid or not: what was asked and what it cost.",
    {
        "run_id": "The run that made the attempt: `runs.run_id`.",
        "query_id": "The job spec's query (with its fan-out value): `query_state.query_id`.",
        "endpoint": "The endpoint asked (its documented path).",
        "params": "The request's parameters (JSON; the API key is never stored).",
        "page": "The page of the query (1 is the first).",
        "attempt": "The attempt at that page (1 is the first; more after a retry).",
        "status_code": "The HTTP status the service answered; NULL when no answer came.",
        "credits": "Credits counted for the attempt: what the service charged, 0 for an unbilled refusal.",
        "duration_ms": "How long the attempt took, in milliseconds.",
        "error": "What went wrong, if anything.",
        "started_at": "When the attempt started (UTC).",
    },
)
QUERY_STATE = (
    "One row per query of a run: its status, pages, credits and where to continue. Primary key: run_id, query_id.",
    {
        "run_id": "The run: `runs.run_id`. Part of the primary key (run_id, query_id).",
        "query_id": "The job spec's query, with its fan-out value (`videos[handle=nasa]`): `_query_id` in the record "
        "tables. Part of the primary key (run_id, query_id).",
        "endpoint": "The endpoint the query asks (its documented path).",
        "status": "How the query ended: `complete`, `caught_up`, `budget_exhausted`, `not_found`, `failed`, ...",
        "pages": "Pages the query fetched.",
        "records": "Records the query landed.",
        "next_cursor": "Where the query continues (JSON), when it stopped before its last page.",
        "credits": "Credits the query spent.",
        "error": "Why the query failed or stopped; for `not_found`, what the service said (a private page, say).",
        **_EXTRACTION,
        "extraction": "What the query's pages held vs what was kept, per table (JSON).",
        "history": "An incremental query's history after the run (JSON): what it has collected.",
        "backfill_cursor": "Where an incremental query's backfill of older items continues (JSON).",
        "cursor_unread": "Paging ended where the answer had no cursor at the declared `paging.next` but held "
        "this field, which looks like one: the `next` to declare, if it is. NULL otherwise.",
        "follow_ups": "Follow-up requests the query paid (a thread's more replies; counted in `pages` too); NULL "
        "for endpoints whose records carry no follow-up cursor.",
    },
)
EXPORTS = (
    "Which runs went to which destination (`harvest export`), recorded once the destination committed them; "
    "empty until the output's first export.",
    {
        "destination": "Where the export went (a directory, s3://..., gs://...). Part of the primary key.",
        "run_id": "The run exported: `runs.run_id`. Part of the primary key.",
        "export_id": "The export, part of the primary key: a Parquet increment's `_exports/<export_id>/` folder "
        "at the destination; a snapshot's `_manifest.json` at the destination's root names it; a Delta or "
        "Iceberg export's is the time it started (UTC).",
        "kind": "What was exported: `increment` (the run's Parquet), `snapshot` (the merged tables), `iceberg` or `delta`.",
        "exported_at": "When the destination committed the export (UTC).",
        "files": "Files of the run the export sent: an increment's copies of the run's Parquet, the run's Parquet "
        "files a Delta or Iceberg export merged, or a snapshot's table files holding rows the run fetched.",
        "rows": "Rows of the run the export sent: for a snapshot, the rows of the merged tables this run fetched "
        "(a row fetched again by a later run counts for the later one).",
        "content": "A digest of what the run's Parquet files held when sent (their schemas, rows and row "
        "hashes): a rebuild since then sends the run again only where it differs. NULL for a snapshot, or an "
        "export recorded before harvest kept it.",
    },
)
"""The `exports` table's words (`flows.handoff.export_ledger` writes it; the load makes it, empty, so a query of
it works before the first export)."""

BOOKKEEPING_COMMENTS: Mapping[str, tuple[str, Mapping[str, str]]] = {
    "runs": RUNS,
    "requests": REQUESTS,
    "query_state": QUERY_STATE,
}
"""Table -> (its comment, column -> its comment)."""
