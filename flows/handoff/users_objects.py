"""The tables and views a user made in a job's `harvest.duckdb` (an analyst's notes, a saved query), carried
into the database `harvest rebuild` makes anew.

Raw pages can make harvest's own tables again, not someone's: a rebuild that swapped in a database without
them lost that work without a word. harvest comments every table and view it makes (their descriptions,
`tasks/database`), so one without a comment that the new database lacks is a user's. One with a comment that
the new database lacks is harvest's from a run no longer there, or a user's they commented: not carried, but
named, so neither goes silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import duckdb

from harvest.tasks.database.connection import quote_ident

if TYPE_CHECKING:
    from collections.abc import Iterable

HARVEST_SCHEMA = "harvest_state"


@dataclass
class Carried:
    kept: list[str] = field(default_factory=list)
    """The user's tables and views, in the new database as they were."""
    lost: list[str] = field(default_factory=list)
    """What the new database lacks, each with why (a view whose tables are gone; a commented table)."""


def _absent(con: duckdb.DuckDBPyConnection, catalog: str, kind: str) -> list[tuple[str, str, str, bool]]:
    """(schema, name, definition, commented) of the old database's tables or views the new one lacks."""
    name = "table_name" if kind == "tables" else "view_name"
    internal = "" if kind == "tables" else "AND NOT internal"
    return [
        (r[0], r[1], r[2], r[3] is not None)
        for r in con.execute(
            f"SELECT schema_name, {name}, sql, comment FROM duckdb_{kind}() o "
            f"WHERE database_name = 'old' AND schema_name <> ? {internal} AND NOT EXISTS ("
            f"  SELECT 1 FROM duckdb_{kind}() n WHERE n.database_name = ? "
            f"  AND n.schema_name = o.schema_name AND n.{name} = o.{name}) ORDER BY 1, 2",
            [HARVEST_SCHEMA, catalog],
        ).fetchall()
    ]


def _shown(schema: str, name: str) -> str:
    return name if schema == "main" else f"{schema}.{name}"


def carry_users_objects(con: duckdb.DuckDBPyConnection) -> Carried:
    """Into `con`'s database, from the database attached as `old`: the user's tables (definition, then rows)
    and views (after every table, each retried while another lets it bind)."""
    catalog = con.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
    carried = Carried()
    for schema, name, ddl, commented in _absent(con, catalog, "tables"):
        if commented:
            carried.lost.append(f"table {_shown(schema, name)}: commented as harvest's own, not made again")
            continue
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(schema)}")
        con.execute(ddl)
        con.execute(
            f"INSERT INTO {quote_ident(schema)}.{quote_ident(name)} "
            f"SELECT * FROM old.{quote_ident(schema)}.{quote_ident(name)}"
        )
        carried.kept.append(_shown(schema, name))
    views = _absent(con, catalog, "views")
    carried.lost.extend(
        f"view {_shown(s, n)}: commented as harvest's own, not made again" for s, n, _, c in views if c
    )
    _make_views(con, [(s, n, ddl) for s, n, ddl, c in views if not c], carried)
    return carried


def _make_views(
    con: duckdb.DuckDBPyConnection, views: Iterable[tuple[str, str, str]], carried: Carried
) -> None:
    waiting = list(views)
    errors: dict[tuple[str, str], str] = {}
    while waiting:
        still = []
        for schema, name, ddl in waiting:
            try:
                con.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(schema)}")
                con.execute(ddl)
                carried.kept.append(_shown(schema, name))
            except duckdb.Error as exc:  # it reads a view made later in this loop, or a table gone
                errors[(schema, name)] = str(exc).splitlines()[0]
                still.append((schema, name, ddl))
        if len(still) == len(waiting):
            carried.lost.extend(
                f"view {_shown(s, n)} could not be made again ({errors[(s, n)]}); it was: {ddl}"
                for s, n, ddl in still
            )
            return
        waiting = still
