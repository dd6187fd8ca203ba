"""`harvest schema --tables` and docs/tables.md: every record table, written from the catalog, never by hand.

A test compares docs/tables.md with this rendering, so a catalog change that is not regenerated fails
(`harvest schema --tables > docs/tables.md`).
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from harvest.connectors.catalog.child_kinds import ChildKind
from harvest.connectors.catalog.fields import DESCRIPTION, JOINS, SOURCE
from harvest.connectors.catalog.job_catalog import Catalog, builtin
from harvest.tasks.database.column_comments import link_words, request_columns
from harvest.tasks.database.record_tables import duckdb_types

HEADER = """# Tables

Generated from the catalog by `harvest schema --tables > docs/tables.md`; a test fails when it is stale.
Each record table keeps the newest fetch of each primary key; `<table>_history` keeps one row per key per run
(the Parquet under `parquet/<table>/date=YYYY-MM-DD/`). Types are DuckDB's; a source is the record path a
column is read from (`a|b`: `b` when `a` is absent or null; `$params.NAME`: the request's parameter). Each column's
description is its comment in DuckDB (`SELECT column_name, comment FROM duckdb_columns() WHERE table_name = ...`),
followed there by its source and its part in the primary key. A child table ("Child of ...") holds a list
inside each record of its parent, one row per item: the parent's key (`parent_<key>`), the item's `position`
(0 for the first) and its columns; it holds the items of the parent's newest fetch, so a list that shrank
leaves no rows behind. "Joins" names the columns of other tables holding the same values, what a column is
joined on (the catalog's `joins`, with a query joining the first); "Made as" says how the service makes a value
of its record's columns (the catalog's `template`; `$params.NAME`: the request's parameter).
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def field_meta(fld: pa.Field, key: bytes) -> str:
    return (fld.metadata or {}).get(key, b"").decode()


def render_tables(catalog: Catalog | None = None) -> str:
    """The Markdown of every record table: columns, types, sources, primary key, endpoints, example queries;
    with a job's catalog, the tables of the endpoints it declares too (`harvest schema --tables --spec SPEC`)."""
    catalog = catalog or builtin()
    sources: dict[str, list[str]] = {}
    for endpoint in catalog.endpoints.values():
        for kind in endpoint.landed_kinds:
            sources.setdefault(kind.table, []).append(endpoint.path)
    lines = [HEADER]
    con = duckdb.connect()
    try:
        for table, kind in sorted(catalog.kinds().items()):
            key = ", ".join(kind.primary_key)
            lines += [
                f"## {table}\n",
                *([child_line(kind)] if isinstance(kind, ChildKind) else []),
                f"Primary key: `{key}`. From: {', '.join(f'`{p}`' for p in sources.get(table, []))}.\n",
                *fetched_for_line(kind.schema),
                *joins_line(kind.schema),
                "| column | type | source | description |",
                "|---|---|---|---|",
            ]
            lines += [
                f"| `{n}` | {_cell(t)} | {_cell(field_meta(kind.schema.field(n), SOURCE))} "
                f"| {_cell(field_meta(kind.schema.field(n), DESCRIPTION) + link_words(kind.schema.field(n)))} |"
                for n, t in duckdb_types(con, kind.schema)
            ]
            lines += [
                "",
                "```sql",
                *(child_queries(kind) if isinstance(kind, ChildKind) else [
                    f"SELECT * FROM {table} ORDER BY _fetched_at DESC LIMIT 10;",
                    f"SELECT _run_id, count(*) FROM {table}_history GROUP BY 1 ORDER BY 1;",
                ]),
                *join_queries(table, kind.schema),
                "```",
                "",
            ]  # fmt: skip
    finally:
        con.close()
    return "\n".join(lines)


def fetched_for_line(schema: pa.Schema) -> list[str]:
    """The columns holding what each row was fetched for: a dependent or fanned-out query's rows join their
    parent's on them."""
    fetched = request_columns(schema)
    if not fetched:
        return []
    said = ", ".join(f"`{column}` (the request's `{param}`)" for column, param in fetched)
    return [
        f"Fetched for: {said}: the value each row was fetched for, so a query that fans out over its parent's "
        "records joins them on it.\n"
    ]


def _joins(schema: pa.Schema) -> list[tuple[str, list[str]]]:
    return [(f.name, field_meta(f, JOINS).split(",")) for f in schema if field_meta(f, JOINS)]


def joins_line(schema: pa.Schema) -> list[str]:
    """The columns the catalog says join other tables' (`joins`), each with the columns it joins."""
    joins = _joins(schema)
    if not joins:
        return []
    said = "; ".join(f"`{c}` = " + " or ".join(f"`{t}`" for t in targets) for c, targets in joins)
    return [f"Joins: {said}.\n"]


def join_queries(table: str, schema: pa.Schema) -> list[str]:
    """A join of the table to the first table each of its `joins` columns names."""
    queries = []
    for column, targets in _joins(schema):
        other, on = targets[0].split(".")
        alias = "o" if other != table else "p"
        queries.append(
            f"SELECT t.{column}, {alias}.* FROM {table} AS t JOIN {other} AS {alias} "
            f"ON t.{column} = {alias}.{on} LIMIT 10;"
        )
    return queries


def child_line(child: ChildKind) -> str:
    at = " or ".join(f"`{where}`" for where in child.at)
    what = f"field of the object {at}" if child.entries else f"item of {at}"
    return (
        f"Child of `{child.parent}`: one row per {what} in each of its records, with the record's key "
        "and the item's `position` (0 for the first). A newer fetch of the record replaces all its rows: a "
        "list that shrank leaves none behind.\n"
    )


def child_queries(child: ChildKind) -> list[str]:
    on = " AND ".join(
        f"c.{c} = p.{f.name}" for c, f in zip(child.parent_columns, child.parent_key, strict=True)
    )
    item = ", ".join(f"c.{f.name}" for f in child.fields[:3])
    return [
        f"SELECT p.{child.parent_key[0].name}, c.position, {item} FROM {child.parent} AS p "
        f"JOIN {child.table} AS c ON {on} ORDER BY p.{child.parent_key[0].name}, c.position LIMIT 10;",
        f"SELECT {', '.join(child.parent_columns)}, count(*) AS items FROM {child.table} GROUP BY ALL;",
        f"SELECT _run_id, count(*) FROM {child.table}_history GROUP BY 1 ORDER BY 1;",
    ]
