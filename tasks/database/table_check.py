"""Whether an existing DuckDB file can take what the load step writes, found before any request is paid for.

A `harvest.duckdb` may hold tables harvest did not make: a file copied in, a user's own database, a table made by
hand. When one has the name of a table harvest writes, the load fails after the run paid for its pages (the
pages stay safe in `raw/` and Parquet, but every rerun pays again and fails again). The rules here are the load
step's own, read from the definitions it uses:

- a record table (`connectors.catalog.endpoints`) needs the kind's primary key, as `record_tables.ensure_table` checks;
  columns it lacks are added by the load, so a database from an older harvest is fine;
- `runs`, `requests` and `query_state` need the columns of their first version (`tasks.database.bookkeeping`'s DDL) and
  the key their upserts rely on; the columns added since are added by the load (`ensure_bookkeeping`);
- a column both have must take harvest's values: the same type, or one DuckDB casts to implicitly (INTEGER to
  BIGINT); in a record table also one whose every value converts to harvest's type exactly, which the load
  retypes (`tasks.database.column_types`: a published time an older catalog typed VARCHAR); a column harvest does
  not write must allow NULL or have a default, or no row could be inserted;
- `<table>_history` is harvest's view of a record table: the load cannot replace a table of that name.

Tables and views of other names are the user's and left alone.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import duckdb

from harvest.connectors.catalog.child_kinds import TableKind
from harvest.connectors.catalog.job_catalog import builtin
from harvest.tasks.database.bookkeeping import ADDED_COLUMNS, BOOKKEEPING_DDL
from harvest.tasks.database.column_types import misfits
from harvest.tasks.database.history_views import HISTORY_SUFFIX
from harvest.tasks.database.record_tables import duckdb_types, primary_keys, same_columns


@dataclass(frozen=True)
class TableShape:
    """What the load writes into one table: its columns (lower-case name -> DuckDB type), the columns it does not
    add to an existing table, and the key it merges or upserts on."""

    columns: dict[str, str]
    required: tuple[str, ...]
    key: tuple[str, ...]


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    optional: bool
    """NULL allowed, or a default: an insert that leaves it out still works."""


def _columns(con: duckdb.DuckDBPyConnection) -> dict[str, list[Column]]:
    rows = con.execute(
        "SELECT table_name, column_name, data_type, is_nullable OR column_default IS NOT NULL "
        "FROM duckdb_columns() WHERE database_name = current_database() AND schema_name = 'main' "
        "ORDER BY table_name, column_index"
    ).fetchall()
    found: dict[str, list[Column]] = {}
    for table, name, type_, optional in rows:
        found.setdefault(str(table).lower(), []).append(Column(str(name), str(type_), bool(optional)))
    return found


def _objects(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[str, bool]]:
    """Lower-case name -> (name, is a view) of the main schema's tables and views."""
    rows = con.execute(
        "SELECT table_name, false FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = 'main' UNION ALL SELECT view_name, true FROM duckdb_views() "
        "WHERE database_name = current_database() AND schema_name = 'main' AND NOT internal"
    ).fetchall()
    return {str(name).lower(): (str(name), bool(view)) for name, view in rows}


class Expected:
    """The shapes harvest writes, made in an in-memory database from the load step's own definitions."""

    def __init__(self, kinds: Mapping[str, TableKind]) -> None:
        self.con = duckdb.connect()
        self.kinds = dict(kinds)
        for ddl in BOOKKEEPING_DDL.values():
            self.con.execute(ddl)
        keys = primary_keys(self.con)
        self.bookkeeping = {}
        for table, cols in _columns(self.con).items():
            added = {name.lower(): sql_type for name, sql_type in ADDED_COLUMNS[table]}
            required = tuple(c.name.lower() for c in cols if c.name.lower() not in added)
            types = added | {c.name.lower(): c.type for c in cols}
            self.bookkeeping[table] = TableShape(types, required, keys.get(table, ()))

    def names(self) -> set[str]:
        return set(self.kinds) | set(self.bookkeeping)

    def shape(self, table: str) -> TableShape:
        kind = self.kinds.get(table)
        if kind is None:
            return self.bookkeeping[table]
        types = {n.lower(): t for n, t in duckdb_types(self.con, kind.schema)}
        return TableShape(types, kind.primary_key, kind.primary_key)

    def close(self) -> None:
        self.con.close()


def _castable(con: duckdb.DuckDBPyConnection, source: str, target: str) -> bool:
    if source == target:
        return True
    try:
        row = con.execute(f"SELECT can_cast_implicitly(NULL::{source}, NULL::{target})").fetchall()
    except duckdb.Error:
        return False
    return bool(row and row[0][0])


def _key_problem(name: str, key: tuple[str, ...], wanted: tuple[str, ...]) -> list[str]:
    if same_columns(key, wanted):
        return []
    has = f"({', '.join(key)})" if key else "none"
    return [f"{name}: primary key {has}, harvest's is ({', '.join(wanted)})"]


def _table_problems(
    con: duckdb.DuckDBPyConnection,
    name: str,
    key: tuple[str, ...],
    shape: TableShape,
    columns: list[Column],
    retyped: bool = False,
) -> Iterator[str]:
    """`retyped`: a record table, whose columns the load retypes when every value converts."""
    yield from _key_problem(name, key, shape.key)
    have = {c.name.lower(): c for c in columns}
    missing = [c for c in shape.required if c not in have]
    if missing:
        yield f"{name}: lacks the column(s) {', '.join(missing)}"
    for column in columns:
        wanted = shape.columns.get(column.name.lower())
        if wanted is not None and not _castable(con, wanted, column.type):
            bad = misfits(con, name, column.name, column.type, wanted) if retyped else -1
            if bad:
                values = f" ({bad} of its values do not convert)" if bad > 0 else ""
                yield f"{name}.{column.name}: {column.type}, harvest writes {wanted}{values}"
        elif wanted is None and not column.optional:
            yield f"{name}.{column.name}: NOT NULL without a default, and harvest does not write it"


def table_problems(con: duckdb.DuckDBPyConnection, kinds: Mapping[str, TableKind] | None = None) -> list[str]:
    """Why the load step could not write into this database's tables, one line per problem; [] when it can.

    A record table whose comment states its key was made by harvest's load (only it writes that comment), with
    the catalog's types of its day: only its key is checked, so a database from another version is not refused
    over a column type the load retypes anyway (`tasks.database.column_types`), and the check stays a few catalog queries for harvest's
    own databases. That matters: it runs before Prefect's temporary server is started. `kinds`: the record
    tables the load writes (a job's catalog, with the tables its output's runs declared); default: the
    built-in ones."""
    objects = _objects(con)
    expected = Expected(builtin().kinds() if kinds is None else kinds)
    try:
        names = expected.names()
        columns = _columns(con)
        keys, constraints = primary_keys(con), primary_keys(con, comments=False)
        problems: list[str] = []
        for lower, (name, is_view) in sorted(objects.items()):
            if lower in names and is_view:
                problems.append(f"{name}: a view, harvest writes a table of this name")
            elif lower in expected.kinds and name in keys and name not in constraints:
                problems += _key_problem(name, keys[name], expected.kinds[lower].primary_key)
            elif lower in names:
                key = keys.get(name, ()) if lower in expected.kinds else constraints.get(name, ())
                shape, record = expected.shape(lower), lower in expected.kinds
                problems += _table_problems(con, name, key, shape, columns.get(lower, []), record)
            elif not is_view and lower.removesuffix(HISTORY_SUFFIX) in expected.kinds:
                problems.append(f"{name}: a table, harvest makes a view of this name")
        return problems
    finally:
        expected.close()
