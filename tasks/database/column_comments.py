"""Column comments: every column of a record table says what it holds, where in a record it is read, and whether
it is (part of) the primary key, where analysts look (DuckDB's `duckdb_columns().comment`, DBeaver's column list,
`harvest schema --tables`).

The words come from the catalog: each column's `description` (`connectors.catalog.fields.Field.arrow_field` puts it
and the column's path in the Arrow field's metadata, so Parquet files carry them too), and harvest's own for the
columns it adds (`connectors.catalog.records.META_COLUMNS`). The load writes a comment when a table is made, and
again whenever the catalog's words changed: comments on harvest's columns are harvest's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import duckdb
import pyarrow as pa

from harvest.connectors.catalog.declaration_checks import PLACEHOLDER
from harvest.connectors.catalog.fields import (
    DESCRIPTION,
    HOLDER_PREFIX,
    JOINS,
    PARAM_PREFIX,
    SOURCE,
    TEMPLATE,
    request_params,
)
from harvest.tasks.database.catalog_snapshot import CatalogSnapshot
from harvest.tasks.database.connection import quote_ident, quote_literal


def source_words(source: str) -> str:
    """Where a column is read, in words: `a` or `b` (the first present), a request's parameter, or harvest's."""
    if names := request_params(source):
        if len(names) > 1:
            return (
                "the request's " + " or ".join(f"`{name}`" for name in names) + " parameter (the one it gave)"
            )
        return f"the request's `{names[0]}` parameter"
    if source.startswith(HOLDER_PREFIX):
        return f"the `{source[len(HOLDER_PREFIX) :]}` of the item that holds it"
    if not source or " " in source or source == "harvest":
        return source or "not recorded"
    return " or ".join(f"`{path}`" for path in source.split("|"))


def request_columns(schema: pa.Schema) -> list[tuple[str, str]]:
    """(column, request parameter) of each column holding the value its row was fetched for (`$params.NAME`):
    the column a dependent or fanned-out query's rows join their parent on."""
    found = []
    for fld in schema:
        source = (fld.metadata or {}).get(SOURCE, b"").decode()
        if names := request_params(source):
            found.append((fld.name, " or ".join(names)))
    return found


FETCHED_FOR = "; fetched for: "


def table_comment(key_statement: str, schema: pa.Schema) -> str:
    """A record table's comment: the statement of its key, then the columns that say what each row was fetched
    for (`primary key: id; fetched for: video_url (the request's url)`)."""
    fetched = request_columns(schema)
    if not fetched:
        return key_statement
    return key_statement + FETCHED_FOR + ", ".join(f"{c} (the request's {p})" for c, p in fetched)


def template_sql(template: str) -> str:
    """A template as the DuckDB expression that makes it of the record's columns (`'t3_' || id`); a request's
    parameter stays a name (`$params.id`)."""
    parts: list[str] = []
    last = 0
    for found in PLACEHOLDER.finditer(template):
        if found.start() > last:
            parts.append("'" + template[last : found.start()].replace("'", "''") + "'")
        parts.append(found.group(1))
        last = found.end()
    if last < len(template):
        parts.append("'" + template[last:].replace("'", "''") + "'")
    return " || ".join(parts)


def _made_as(template: str) -> str:
    """A template's sentence. One that is a request's parameter alone (a profile's handle) is the service's own
    spelling of what was asked, not the request's text: `AbsoluteUnits` asked as `absoluteunits`, so "Made as"
    would send an analyst to join the job's list on it (the column of the request's text is the join)."""
    whole = PLACEHOLDER.fullmatch(template)
    if whole and whole.group(1).startswith(PARAM_PREFIX):
        name = whole.group(1).removeprefix(PARAM_PREFIX)
        return f" The request's `{name}` as the service spells it (its case may differ from the request's)."
    return f" Made as `{template_sql(template)}`."


def link_words(fld: pa.Field) -> str:
    """What the catalog says a column is made of (`template`) and joins (`joins`), as a sentence each ("" when
    it says neither)."""
    meta = fld.metadata or {}
    words = ""
    if TEMPLATE in meta:
        words += _made_as(meta[TEMPLATE].decode())
    if JOINS in meta:
        said = " or ".join(f"`{target}`" for target in meta[JOINS].decode().split(","))
        words += f" Joins {said}."
    return words


def column_comment(fld: pa.Field, key: Sequence[str]) -> str:
    """The comment of one column: its description, what it is made of and joins, its source, and its part in
    the key."""
    meta = fld.metadata or {}
    description = meta.get(DESCRIPTION, b"").decode() or f"The {fld.name} column."
    text = f"{description}{link_words(fld)} Source: {source_words(meta.get(SOURCE, b'').decode())}."
    if fld.name in key:
        text += " Primary key." if len(key) == 1 else f" Part of the primary key ({', '.join(key)})."
    return text


def write_comments(
    con: duckdb.DuckDBPyConnection,
    table: str,
    schema: pa.Schema,
    key: Sequence[str],
    catalog: CatalogSnapshot,
) -> int:
    """Comment every column of `schema` whose comment is not the catalog's yet; returns how many were written.
    `catalog`: the load's snapshot of the database's catalog, the table's columns and comments now."""
    return comment_columns(con, table, {fld.name: column_comment(fld, key) for fld in schema}, catalog)


def comment_columns(
    con: duckdb.DuckDBPyConnection, table: str, wanted: Mapping[str, str], catalog: CatalogSnapshot
) -> int:
    """Write each column's wanted comment where the stored one differs; returns how many were written. A
    column the table lacks is skipped (an older database); names match as DuckDB's do, whatever their case."""
    current = {n.lower(): (n, c) for n, _, c in catalog.columns(table)}
    written = 0
    for name, words in wanted.items():
        stored = current.get(name.lower())
        if stored is None or stored[1] == words:
            continue
        con.execute(
            f"COMMENT ON COLUMN {quote_ident(table)}.{quote_ident(stored[0])} IS {quote_literal(words)}"
        )
        catalog.column_commented(table, stored[0], words)
        written += 1
    return written


def describe_table(
    con: duckdb.DuckDBPyConnection,
    table: str,
    about: str,
    columns: Mapping[str, str],
    *,
    view: bool = False,
    catalog: CatalogSnapshot | None = None,
) -> int:
    """Give a table (or view) of harvest's own its comment and each listed column its words, where they differ;
    returns how many comments were written. A column the table lacks is skipped (an older database). `catalog`:
    the load's snapshot of the database's catalog (one is read when none is given)."""
    catalog = catalog or CatalogSnapshot(con)
    found = catalog.get(table)
    if found is None:
        return 0
    written = 0
    if found.comment != about:
        con.execute(
            f"COMMENT ON {'VIEW' if view else 'TABLE'} {quote_ident(table)} IS {quote_literal(about)}"
        )
        catalog.commented(table, about)
        written += 1
    return written + comment_columns(con, table, columns, catalog)
