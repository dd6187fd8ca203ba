"""`harvest schema --tables` and docs/tables.md: every record table, written from the catalog, never by hand.

A test compares docs/tables.md with this rendering, so a catalog change that is not regenerated fails
(`harvest schema --tables > docs/tables.md`).
"""

from __future__ import annotations

import duckdb

from connectors.catalog.job_catalog import Catalog, builtin
from tasks.database.record_tables import duckdb_types

META_SOURCES = {
    "raw": "the item as the service sent it (JSON text)",
    "_endpoint": "the endpoint that returned it",
    "_query_id": "the spec's query id",
    "_run_id": "the run that fetched it",
    "_fetched_at": "when its page was fetched",
}
HEADER = """# Tables

Generated from the catalog by `harvest schema --tables > docs/tables.md`; a test fails when it is stale.
Each record table keeps the newest fetch of each primary key; `<table>_history` keeps one row per key per run
(the Parquet under `parquet/<table>/date=YYYY-MM-DD/`). Types are DuckDB's; a source starting `param:` is a
request parameter, not a field of the answer.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_tables(catalog: Catalog | None = None) -> str:
    """The Markdown of every record table: columns, types, sources, primary key, endpoints, example queries;
    with a job's catalog, the tables of the endpoints it declares too (`harvest schema --tables --spec SPEC`)."""
    catalog = catalog or builtin()
    sources: dict[str, list[str]] = {}
    for endpoint in catalog.endpoints.values():
        for kind in endpoint.kinds:
            sources.setdefault(kind.table, []).append(endpoint.path)
    lines = [HEADER]
    con = duckdb.connect()
    try:
        for table, kind in sorted(catalog.kinds().items()):
            paths = {f.name: f.path for f in kind.columns} | META_SOURCES
            key = ", ".join(kind.primary_key)
            lines += [
                f"## {table}\n",
                f"Primary key: `{key}`. From: {', '.join(f'`{p}`' for p in sources.get(table, []))}.\n",
                "| column | type | source |",
                "|---|---|---|",
            ]
            lines += [
                f"| `{n}` | {_cell(t)} | {_cell(paths.get(n, ''))} |"
                for n, t in duckdb_types(con, kind.schema)
            ]
            lines += [
                "",
                "```sql",
                f"SELECT * FROM {table} ORDER BY _fetched_at DESC LIMIT 10;",
                f"SELECT _run_id, count(*) FROM {table}_history GROUP BY 1 ORDER BY 1;",
                "```",
                "",
            ]
    finally:
        con.close()
    return "\n".join(lines)
