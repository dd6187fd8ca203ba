"""What a user made in a job's `harvest.duckdb` (an analyst's notes table, a saved view, a macro, the sequence
numbering their notes, an index), carried into the database `harvest rebuild` makes anew.

Raw pages can make harvest's own tables again, not someone's: a rebuild that swapped in a database without
them lost that work without a word. harvest comments every table and view it makes (their descriptions,
`tasks/database`) and makes no type, sequence, macro or index, so a table or view without a comment that the
new database lacks is a user's, and so is every type, sequence, macro and index. A commented one the new
database lacks is harvest's from a run no longer there, or a user's they commented: not carried, but named,
so neither goes silently.

The definitions go through DuckDB's own `COPY FROM DATABASE ... (SCHEMA)`, by way of an empty in-memory
database holding only the user's: written out again by hand, a macro lost its default arguments, and a table
numbered by a sequence or typed by an enum could not be made before them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

from harvest.tasks.database.connection import quote_ident

HARVEST_SCHEMA = "harvest_state"
SCRATCH = "users_scratch"
KINDS = ("tables", "views", "types", "sequences", "macros", "indexes")

Named = tuple[str, str]
"""(schema, name)"""


@dataclass
class Carried:
    kept: dict[str, list[str]] = field(default_factory=lambda: {kind: [] for kind in KINDS})
    """The user's objects by kind, in the new database as they were."""
    lost: list[str] = field(default_factory=list)
    """What the new database lacks, each with why (a view whose tables are gone; a commented table)."""

    def said(self) -> str:
        """One line: `tables notes, zz; macros scaled` (empty when nothing was the user's)."""
        return _by_kind(self.kept)


def _by_kind(names: dict[str, list[str]]) -> str:
    """`tables notes, zz; macros scaled`: the kinds that name something, each's names sorted."""
    return "; ".join(f"{kind} {', '.join(sorted(named))}" for kind, named in names.items() if named)


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


def _qualified(database: str, schema: str, name: str) -> str:
    return ".".join(map(quote_ident, (database, schema, name)))


def carry_users_objects(con: duckdb.DuckDBPyConnection) -> Carried:
    """Into `con`'s database, from the database attached as `old`: the user's definitions (types, sequences,
    tables, macros and the indexes on their tables), the rows of their tables, their views (each retried while
    another lets it bind), and the indexes they put on harvest's tables."""
    catalog = con.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
    carried = Carried()
    tables: dict[Named, str] = {}
    for schema, name, ddl, commented in _absent(con, catalog, "tables"):
        if commented:
            carried.lost.append(f"table {_shown(schema, name)}: commented as harvest's own, not made again")
        else:
            tables[(schema, name)] = ddl
    views = _absent(con, catalog, "views")
    carried.lost.extend(
        f"view {_shown(s, n)}: commented as harvest's own, not made again" for s, n, _, c in views if c
    )
    _copy_definitions(con, catalog, tables, carried)
    for schema, name in tables:
        if _shown(schema, name) in carried.kept["tables"]:
            _copy_rows(con, catalog, schema, name, carried)
    _make_views(con, [(s, n, ddl) for s, n, ddl, c in views if not c], carried)
    _index_harvest_tables(con, catalog, tables, carried)
    return carried


def _copy_rows(
    con: duckdb.DuckDBPyConnection, catalog: str, schema: str, name: str, carried: Carried
) -> None:
    """By name, the generated columns left for the new table to compute (DuckDB refuses them a value)."""
    generated = [
        quote_ident(r[0])
        for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_catalog = 'old' "
            "AND table_schema = ? AND table_name = ? AND is_generated = 'ALWAYS'",
            [schema, name],
        ).fetchall()
    ]
    but = f" EXCLUDE ({', '.join(generated)})" if generated else ""
    try:
        con.execute(
            f"INSERT INTO {_qualified(catalog, schema, name)} BY NAME "
            f"SELECT *{but} FROM {_qualified('old', schema, name)}"
        )
    except duckdb.Error as exc:
        carried.kept["tables"].remove(_shown(schema, name))
        carried.lost.append(
            f"table {_shown(schema, name)}: made again empty, its rows could not be copied ({exc})"
        )


def _copy_definitions(
    con: duckdb.DuckDBPyConnection, catalog: str, tables: dict[Named, str], carried: Carried
) -> None:
    """The old database's definitions into an empty one, harvest's and the views taken out there (the views
    bind one by one below, so one that cannot is named, not the end of the rest), the rest into the new."""
    con.execute(f"ATTACH ':memory:' AS {SCRATCH}")
    try:
        con.execute(f"COPY FROM DATABASE old TO {SCRATCH} (SCHEMA)")
        con.execute(f"DROP SCHEMA IF EXISTS {SCRATCH}.{HARVEST_SCHEMA} CASCADE")
        for schema, view in _listed(con, "views"):
            con.execute(f"DROP VIEW {_qualified(SCRATCH, schema, view)}")
        for schema, table in _listed(con, "tables"):
            if (schema, table) not in tables:  # harvest's, with its indexes (made again below)
                con.execute(f"DROP TABLE {_qualified(SCRATCH, schema, table)}")
        made = {kind: _listed(con, kind) for kind in KINDS if kind != "views"}
        con.execute(f"COPY FROM DATABASE {SCRATCH} TO {quote_ident(catalog)} (SCHEMA)")
    except duckdb.Error as exc:
        _one_by_one(con, tables, carried, str(exc).splitlines()[0])
        return
    finally:
        con.execute(f"DETACH {SCRATCH}")
    for kind, names in made.items():
        carried.kept[kind].extend(sorted({_shown(*n) for n in names}))


def _one_by_one(con: duckdb.DuckDBPyConnection, tables: dict[Named, str], carried: Carried, why: str) -> None:
    """DuckDB could not copy the definitions as a whole (a table of the user's refers to one of harvest's by a
    foreign key, so harvest's cannot be left out): each table by its own definition, the rest named."""
    for (schema, name), ddl in tables.items():
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(schema)}")
        _made_again(con, ddl, carried, "tables", _shown(schema, name))
    rest = {kind: list({_shown(*n) for n in _listed(con, kind, "old")}) for kind in KINDS[2:]}
    if said := _by_kind(rest):
        carried.lost.append(f"{said}: could not be made again ({why})")


_LISTS = {
    "tables": "SELECT schema_name, table_name FROM duckdb_tables() WHERE database_name = ?",
    "views": "SELECT schema_name, view_name FROM duckdb_views() WHERE database_name = ? AND NOT internal",
    "types": "SELECT schema_name, type_name FROM duckdb_types() WHERE database_name = ? AND NOT internal",
    "sequences": "SELECT schema_name, sequence_name FROM duckdb_sequences() WHERE database_name = ?",
    "macros": "SELECT schema_name, function_name FROM duckdb_functions() WHERE database_name = ? "
    "AND NOT internal AND function_type IN ('macro', 'table_macro')",
    "indexes": "SELECT schema_name, index_name FROM duckdb_indexes() WHERE database_name = ?",
}


def _listed(con: duckdb.DuckDBPyConnection, kind: str, database: str = SCRATCH) -> list[Named]:
    return [(r[0], r[1]) for r in con.execute(_LISTS[kind], [database]).fetchall()]


def _index_harvest_tables(
    con: duckdb.DuckDBPyConnection, catalog: str, tables: dict[Named, str], carried: Carried
) -> None:
    """The user's indexes on harvest's tables, on the new tables of the same name (one whose column is gone
    is named)."""
    have = set(_listed(con, "indexes", catalog))
    for schema, index, table, ddl in con.execute(
        "SELECT schema_name, index_name, table_name, sql FROM duckdb_indexes() WHERE database_name = 'old' "
        "ORDER BY 1, 2"
    ).fetchall():
        if (schema, table) in tables or (schema, index) in have:
            continue
        con.execute(f"USE {quote_ident(catalog)}.{quote_ident(schema)}")  # its definition names no schema
        try:
            _made_again(con, ddl, carried, "indexes", _shown(schema, index))
        finally:
            con.execute(f"USE {quote_ident(catalog)}")


def _made_again(con: duckdb.DuckDBPyConnection, ddl: str, carried: Carried, kind: str, shown: str) -> None:
    """One object by its definition: kept, or named with DuckDB's reason and the definition to make it again."""
    try:
        con.execute(ddl)
        carried.kept[kind].append(shown)
    except duckdb.Error as exc:
        what = {"tables": "table", "indexes": "index"}[kind]
        carried.lost.append(f"{what} {shown} could not be made again ({exc}); it was: {ddl}")


def _make_views(con: duckdb.DuckDBPyConnection, views: list[tuple[str, str, str]], carried: Carried) -> None:
    waiting = views
    errors: dict[Named, str] = {}
    while waiting:
        still = []
        for schema, name, ddl in waiting:
            try:
                con.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(schema)}")
                con.execute(ddl)
                carried.kept["views"].append(_shown(schema, name))
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
