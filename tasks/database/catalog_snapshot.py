"""What DuckDB's catalog says of the main schema's tables and views, read once per load and kept current by the
load's own changes.

DuckDB's catalog functions (`duckdb_columns()`, `duckdb_tables()`, `duckdb_views()`, `duckdb_constraints()`) walk
the whole catalog whatever their WHERE clause says, so asking them table by table costs tables times tables: on
the demo's 161 tables and 158 history views a load that changed nothing spent ~17 s of its 34 s in such lookups,
and a first load ~12 s. One read of each function serves the load; what the load changes itself (a table made,
a comment written) is noted here as it is done, and a relation altered in a way this module does not follow
(a column added, renamed or retyped) is forgotten and read again alone when next asked for.

A snapshot lives as long as one connection's load: a transaction rolled back leaves it wrong, and the load's
callers let the error end the connection (`tasks.database.connection.write_connection`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

WHERE_MAIN = "database_name = current_database() AND schema_name = 'main'"


@dataclass
class Relation:
    """A table or view: its columns (name, type, comment) in order, its comment, a view's stored SQL and a
    table's PRIMARY KEY constraint, if it has one."""

    columns: list[tuple[str, str, str | None]] = field(default_factory=list)
    comment: str | None = None
    sql: str | None = None
    constraint_key: tuple[str, ...] = ()


class CatalogSnapshot:
    """The main schema's tables and views by name, as `Relation`s (exact names, as the catalog spells them)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con = con
        self._relations = self._read()
        self._stale: set[str] = set()
        self._zstd: bool | None = None

    def _read(self, name: str | None = None) -> dict[str, Relation]:
        where, args = (WHERE_MAIN + " AND {col} = ?", [name]) if name else (WHERE_MAIN, [])
        found: dict[str, Relation] = {}
        for table, comment in self._con.execute(
            f"SELECT table_name, comment FROM duckdb_tables() WHERE {where.format(col='table_name')}", args
        ).fetchall():
            found[str(table)] = Relation(comment=comment)
        for view, comment, sql in self._con.execute(
            "SELECT view_name, comment, sql FROM duckdb_views() WHERE NOT internal AND "
            + where.format(col="view_name"),
            args,
        ).fetchall():
            found[str(view)] = Relation(comment=comment, sql=str(sql))
        for table, column, typ, comment in self._con.execute(
            "SELECT table_name, column_name, data_type, comment FROM duckdb_columns() WHERE "
            + where.format(col="table_name")
            + " ORDER BY table_name, column_index",
            args,
        ).fetchall():
            if str(table) in found:
                found[str(table)].columns.append((str(column), str(typ), comment))
        for table, columns in self._con.execute(
            "SELECT table_name, constraint_column_names FROM duckdb_constraints() WHERE "
            + where.format(col="table_name")
            + " AND constraint_type = 'PRIMARY KEY'",
            args,
        ).fetchall():
            if str(table) in found:
                found[str(table)].constraint_key = tuple(columns)
        return found

    def get(self, name: str) -> Relation | None:
        """The relation `name`, or None when the schema has none of that name."""
        if name in self._stale:
            self._stale.discard(name)
            self._relations.pop(name, None)
            self._relations.update(self._read(name))
        return self._relations.get(name)

    def columns(self, name: str) -> list[tuple[str, str, str | None]]:
        """(name, type, comment) of each column, in order; [] when there is no such relation."""
        found = self.get(name)
        return list(found.columns) if found else []

    def forget(self, name: str) -> None:
        """`name` was changed in a way not noted here: read it again when next asked for."""
        self._stale.add(name)

    def made(self, name: str, columns: list[tuple[str, str]], sql: str | None = None) -> None:
        """A relation was just created (or replaced) with these columns, uncommented."""
        self._stale.discard(name)
        self._relations[name] = Relation(columns=[(n, t, None) for n, t in columns], sql=sql)

    def dropped(self, name: str) -> None:
        self._stale.discard(name)
        self._relations.pop(name, None)

    def commented(self, name: str, comment: str) -> None:
        """The relation's own comment was just written."""
        found = self.get(name)
        if found is not None:
            found.comment = comment

    def column_commented(self, name: str, column: str, comment: str) -> None:
        """A column's comment was just written."""
        found = self.get(name)
        if found is not None:
            found.columns = [(n, t, comment if n == column else c) for n, t, c in found.columns]

    def zstd_allowed(self) -> bool:
        """Whether the file's storage format has zstd (`tasks.database.storage_format.zstd_allowed`), once."""
        if self._zstd is None:
            from harvest.tasks.database.storage_format import zstd_allowed

            self._zstd = zstd_allowed(self._con)
        return self._zstd
