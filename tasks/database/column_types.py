"""A record table's columns brought to the catalog's types, without losing a value.

The catalog types a column more truly over time (a published time that was text becomes TIMESTAMPTZ, a price that
was a DOUBLE becomes DECIMAL(18,4)), and a database an older harvest made keeps its old types until the load meets
it. A column is then retyped in place when every value in it converts exactly (text that parses; a number cast and
cast back unchanged); otherwise the old column is kept whole under `<column>_was_<old type>` beside the new typed
one, which holds what converted. Nothing is dropped or rounded either way, and each change is said in one warning
line. Every row's `raw` JSON holds its values too, and `harvest rebuild` types the Parquet of earlier runs anew.

The same rule reads Parquet an older harvest wrote (a run loaded after an upgrade, a database built again from
the Parquet): a column whose files' type is not the table's is cast value by value, and what does not convert is
NULL in the table, counted and said (the files and `raw` keep it); a column the catalog gained since is NULL.

A column the catalog renamed (`renamed_from` in its declaration: one name for one thing across tables) keeps its
values: the table's column of the earlier name is renamed, and older Parquet is read under the new name.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence

import duckdb
import pyarrow as pa

from harvest.connectors.catalog.fields import RENAMED_FROM
from harvest.tasks.database.connection import count_rows, quote_ident, quote_literal

log = logging.getLogger(__name__)


def misfit_filter(column: str, old: str, new: str) -> str:
    """SQL true for a value of `column` (of type `old`) that does not become `new` exactly: text that does not
    parse, a number that changes when cast (a DOUBLE with more decimals than a DECIMAL keeps)."""
    col = quote_ident(column)
    cast = f"TRY_CAST({col} AS {new})"
    lossy = "" if old.upper() == "VARCHAR" else f" OR TRY_CAST({cast} AS {old}) IS DISTINCT FROM {col}"
    return f"({col} IS NOT NULL AND ({cast} IS NULL{lossy}))"


def misfits(con: duckdb.DuckDBPyConnection, table: str, column: str, old: str, new: str) -> int:
    """How many values of `table.column` do not convert exactly to `new` (0 when none, or the cast is unknown: -1)."""
    try:
        return count_rows(
            con, f"SELECT count(*) FROM {quote_ident(table)} WHERE {misfit_filter(column, old, new)}"
        )
    except duckdb.Error:  # no cast between the two types at all
        return -1


def _kept_name(column: str, old: str, taken: set[str]) -> str:
    base = f"{column}_was_{re.sub(r'[^a-z0-9]+', '_', old.lower()).strip('_')}"
    name, n = base, 2
    while name.lower() in taken:
        name, n = f"{base}_{n}", n + 1
    return name


def earlier_names(schema: pa.Schema) -> dict[str, tuple[str, ...]]:
    """Column -> the names the catalog gave it before (`renamed_from`), for the columns it renamed."""
    out = {}
    for fld in schema:
        named = (fld.metadata or {}).get(RENAMED_FROM)
        if named:
            out[fld.name] = tuple(named.decode().split(","))
    return out


def rename(con: duckdb.DuckDBPyConnection, table: str, schema: pa.Schema, have: dict[str, str]) -> bool:
    """Columns the catalog renamed: an existing column under an earlier name becomes today's column, every value
    kept, when the table has none of today's name yet (said in one warning line); `have` (lower-case name ->
    type) follows; whether any was. Rows loaded later fill today's name; older Parquet is read under it
    (`cast_older_files`)."""
    renamed = False
    for name, earlier in earlier_names(schema).items():
        old = next((o for o in earlier if o.lower() in have), None)
        if name.lower() in have or old is None:
            continue
        con.execute(
            f"ALTER TABLE {quote_ident(table)} RENAME COLUMN {quote_ident(old)} TO {quote_ident(name)}"
        )
        have[name.lower()] = have.pop(old.lower())
        log.warning("table %s: column %s is now named %s (its values kept)", table, old, name)
        renamed = True
    return renamed


def retype(
    con: duckdb.DuckDBPyConnection, table: str, wanted: Sequence[tuple[str, str]], have: Mapping[str, str]
) -> list[str]:
    """Give each column of `wanted` (name, type) that `have` (lower-case name -> type) types otherwise its
    wanted type; returns the columns kept beside under their old type."""
    kept: list[str] = []
    taken = set(have)
    for name, new in wanted:
        old = have.get(name.lower())
        if old is None or old.upper() == new.upper():
            continue
        bad = misfits(con, table, name, old, new)
        t, col = quote_ident(table), quote_ident(name)
        if bad == 0:
            con.execute(
                f"ALTER TABLE {t} ALTER COLUMN {col} SET DATA TYPE {new} USING TRY_CAST({col} AS {new})"
            )
            log.warning(
                "table %s: column %s is now %s (was %s; every value converted)", table, name, new, old
            )
            continue
        aside = _kept_name(name, old, taken)
        taken.add(aside.lower())
        con.execute(f"ALTER TABLE {t} RENAME COLUMN {col} TO {quote_ident(aside)}")
        con.execute(f"ALTER TABLE {t} ADD COLUMN {col} {new}")
        if bad > 0:
            fits = misfit_filter(aside, old, new)
            con.execute(f"UPDATE {t} SET {col} = TRY_CAST({quote_ident(aside)} AS {new}) WHERE NOT {fits}")
        note = (
            f"{name} as an older harvest typed it ({old}), kept because {max(bad, 0) or 'its'} values did not "
            f"convert to {new} exactly; rows loaded since leave it NULL."
        )
        con.execute(f"COMMENT ON COLUMN {t}.{quote_ident(aside)} IS {quote_literal(note)}")
        log.warning(
            "table %s: column %s is now %s; %s of its %s values did not convert exactly and are kept in %s "
            "(and in each row's raw)",
            table, name, new, bad if bad > 0 else "all", old, aside,
        )  # fmt: skip
        kept.append(aside)
    return kept


def parquet_types(con: duckdb.DuckDBPyConnection, source: str, paths: list[str]) -> dict[str, str]:
    """Lower-case column name -> type of the files `source` reads (their footers only)."""
    rows = con.execute(f"DESCRIBE SELECT * FROM {source}", [paths]).fetchall()
    return {str(r[0]).lower(): str(r[1]) for r in rows}


def cast_older_files(
    con: duckdb.DuckDBPyConnection,
    table: str,
    schema: pa.Schema,
    table_types: Mapping[str, str],
    source: str,
    paths: list[str],
) -> list[str]:
    """The select list that reads the schema's columns from `source` into the table's types: a column the files
    type otherwise (written by an older harvest) is cast value by value, its misfits NULL, counted and said; a
    column the files hold under an earlier name (`renamed_from`) is read from it; a column no file has (the
    catalog gained it since) is NULL."""
    found = parquet_types(con, source, paths)
    earlier = earlier_names(schema)
    exprs = []
    for name in schema.names:
        was = next(
            (o for o in earlier.get(name, ()) if o.lower() in found and name.lower() not in found), None
        )
        old, new = found.get((was or name).lower()), table_types.get(name.lower())
        col = quote_ident(name)
        if old is None:
            exprs.append(f"NULL AS {col}")
            continue
        if was is not None:
            exprs.append(f"TRY_CAST({quote_ident(was)} AS {new or old}) AS {col}")
            continue
        if new is None or old.upper() == new.upper():
            exprs.append(col)
            continue
        bad = count_rows(con, f"SELECT count(*) FROM {source} WHERE {misfit_filter(name, old, new)}", [paths])
        if bad:
            log.warning(
                "table %s: %d value(s) of %s in Parquet an older harvest wrote (%s) do not convert to %s: NULL in "
                "the table, kept in the files and in each row's raw (`harvest rebuild` types them anew)",
                table, bad, name, old, new,
            )  # fmt: skip
        exprs.append(f"TRY_CAST({col} AS {new}) AS {col}")
    return exprs
