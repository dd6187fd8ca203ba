"""What each `<table>_history` view was last checked against, so a load reads the footers of new Parquet files only.

A history view reads every run's Parquet of its table (`union_by_name`). Binding it again, the one way to learn
from DuckDB whether the stored view still says what harvest would make now, reads the footer of every file: 2.8,
11 and 110 ms a table over 1, 30 and 365 files, ~18 s of every load for a year of nightly runs of the demo's 161
tables, spent on footers that cannot have changed (harvest never rewrites or deletes a Parquet file). This
table remembers, per view, the statement harvest made it with, the definition DuckDB stored, and which files it
covered (how many, the last, a digest of their names), in DuckDB's (sorted) order.

It lives in a schema of its own (`harvest_state`), apart from the record and bookkeeping tables in `main`: it is
harvest's memory, not data, and its name can clash with no table a user or a declaration makes. Losing it costs
one load the full check, nothing else.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

import duckdb

from harvest.tasks.database.connection import quote_literal

SCHEMA = "harvest_state"
TABLE = f"{SCHEMA}.history_view_files"
DDL = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    view_name VARCHAR PRIMARY KEY,
    statement VARCHAR NOT NULL,
    definition VARCHAR NOT NULL,
    files BIGINT NOT NULL,
    last_file VARCHAR NOT NULL,
    listing VARCHAR NOT NULL
)"""
COMMENTS = (
    "What each <table>_history view was last checked against: a load reads the footers of newer Parquet files "
    "only. harvest's own memory; deleting it costs one slower load.",
    {
        "view_name": "The history view (in schema main). Primary key.",
        "statement": "The CREATE VIEW statement harvest made the view with.",
        "definition": "The view's query as DuckDB stored it (duckdb_views().sql after AS).",
        "files": "How many Parquet files of the table the view was checked against.",
        "last_file": "The last of them in DuckDB's order (date=YYYY-MM-DD/<file>.parquet, under the table's folder).",
        "listing": "SHA-256 of their names in that order, one per line: the same files, not only as many.",
    },
)


@dataclass(frozen=True)
class Checked:
    """One view's row: `files` files up to `last_file` (named by `listing`) fitted the view whose stored
    `definition` this is."""

    statement: str
    definition: str
    files: int
    last_file: str
    listing: str

    @classmethod
    def of(cls, statement: str, definition: str, files: list[str]) -> Checked:
        return cls(statement, definition, len(files), files[-1], listing(files))


def listing(files: list[str]) -> str:
    return hashlib.sha256("\n".join(files).encode()).hexdigest()


def make_state_table(
    con: duckdb.DuckDBPyConnection, table: str, ddl: str, comments: tuple[str, dict[str, str]]
) -> None:
    """Make one of harvest's own tables in `SCHEMA`, with its comments: analysts reading the schema see what
    each holds and that deleting it is harvest's business."""
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    con.execute(ddl)
    about, columns = comments
    con.execute(f"COMMENT ON TABLE {table} IS {quote_literal(about)}")
    for column, words in columns.items():
        con.execute(f"COMMENT ON COLUMN {table}.{column} IS {quote_literal(words)}")


def read_checked(con: duckdb.DuckDBPyConnection) -> dict[str, Checked]:
    """Every view's row; the schema and table are made (with their comments) the first time."""
    made = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() AND schema_name = ? "
        "AND table_name = ?",
        [SCHEMA, TABLE.split(".")[1]],
    ).fetchall()[0][0]
    if not made:  # the schema may be there already, made for another of harvest's tables
        make_state_table(con, TABLE, DDL, COMMENTS)
    rows = con.execute(
        f"SELECT view_name, statement, definition, files, last_file, listing FROM {TABLE}"
    ).fetchall()
    return {str(view): Checked(str(s), str(d), int(n), str(last), str(h)) for view, s, d, n, last, h in rows}


def write_checked(
    con: duckdb.DuckDBPyConnection, changed: Iterable[tuple[str, Checked]], gone: Iterable[str]
) -> None:
    rows = {view: (view, c.statement, c.definition, c.files, c.last_file, c.listing) for view, c in changed}
    if rows:  # one statement: one each took ~6 ms, a second of a first load of the demo's 160 views
        values = ", ".join(["(?, ?, ?, ?, ?, ?)"] * len(rows))
        con.execute(
            f"INSERT OR REPLACE INTO {TABLE} VALUES {values}", [v for row in rows.values() for v in row]
        )
    for view in gone:
        con.execute(f"DELETE FROM {TABLE} WHERE view_name = ?", [view])
