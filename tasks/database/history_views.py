"""`<table>_history` views: every run's observation of every record, for analysts charting a metric over time.

The merged record tables keep only the newest fetch of each key; the Parquet tree keeps every run's. A view per
table reads that tree (one row per key per run: the run's last fetch of it, pages repeat items) so history costs
no second copy. Views name the Parquet files by absolute path (DuckDB resolves a relative one against the
reader's working directory, not the database), so `harvest load` and `harvest rebuild` write them again every
time: after moving an output directory, `harvest load` points them at the new place. Until then `harvest sql`
(read-only, it cannot rewrite them) shadows a view that points elsewhere with a temporary one over the Parquet
where the database is now (`follow_moved_views`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import duckdb

from harvest.connectors.catalog.child_kinds import ChildKind, TableKind
from harvest.tasks.database.catalog_snapshot import CatalogSnapshot
from harvest.tasks.database.column_comments import column_comment, describe_table
from harvest.tasks.database.connection import quote_ident, quote_literal

HISTORY_SUFFIX = "_history"
DATE_COMMENT = "The day the run's Parquet file landed (its `date=YYYY-MM-DD` folder)."


def _describe(con: duckdb.DuckDBPyConnection, table: str, kind: TableKind, catalog: CatalogSnapshot) -> None:
    """The view's comment and its columns' (the table's words, the key aside: a key repeats here, once per run)."""
    if isinstance(kind, ChildKind):
        about = (
            f"Every run's items of each {kind.parent} row's list, from the runs' Parquet: the items of each "
            f"parent's ({', '.join(kind.parent_columns)}) newest fetch per run, one row per position."
        )
    else:
        about = (
            f"Every run's fetch of each {table} row, from the runs' Parquet: one row per key "
            f"({', '.join(kind.primary_key)}) per run, that run's newest fetch."
        )
    columns = {f.name: column_comment(f, ()) for f in kind.schema} | {"date": DATE_COMMENT}
    describe_table(con, table + HISTORY_SUFFIX, about, columns, view=True, catalog=catalog)


def _files(table_dir: Path) -> str:
    return quote_literal(str(table_dir / "*" / "*.parquet"))


def history_view_sql(
    table: str, kind: TableKind, table_dir: Path, *, temporary: bool = False, name: str = ""
) -> str:
    """A record table's view: each key's last fetch per run. A child table's: the items of each parent's last
    fetch per run (that had items), so a list that shrank within a run shows its end."""
    files = _files(table_dir)
    if isinstance(kind, ChildKind):
        parents = ", ".join(quote_ident(c) for c in (*kind.parent_columns, "_run_id"))
        newest = f"_fetched_at = max(_fetched_at) OVER (PARTITION BY {parents})"
    else:
        keys = ", ".join(quote_ident(c) for c in (*kind.primary_key, "_run_id"))
        newest = f"row_number() OVER (PARTITION BY {keys} ORDER BY _fetched_at DESC) = 1"
    return (
        f"CREATE OR REPLACE {'TEMPORARY ' if temporary else ''}VIEW {quote_ident(name or table + HISTORY_SUFFIX)} AS "
        f"SELECT * FROM read_parquet({files}, hive_partitioning = true, union_by_name = true) QUALIFY {newest}"
    )


PROBE = "_harvest_view_probe"

Shape = tuple[str, list[tuple[str, str]]]
"""A view's definition (what follows its name, as DuckDB stores it) and its columns (name, type)."""


def _probe(probes: duckdb.DuckDBPyConnection, table: str, kind: TableKind, table_dir: Path) -> Shape:
    """The view harvest would make now, made in `probes` (an empty in-memory database: its catalog lookups cost
    nothing, where the output's grow with its tables) and read back as DuckDB stored it."""
    probes.execute(history_view_sql(table, kind, table_dir, name=PROBE))
    try:
        ((sql,),) = probes.execute("SELECT sql FROM duckdb_views() WHERE view_name = ?", [PROBE]).fetchall()
        columns = probes.execute(
            "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ? ORDER BY column_index",
            [PROBE],
        ).fetchall()
    finally:
        probes.execute(f"DROP VIEW {PROBE}")
    return str(sql).partition(" AS ")[2], [(str(n), str(t)) for n, t in columns]


def _stored(catalog: CatalogSnapshot, view: str) -> Shape:
    found = catalog.get(view)
    if found is None:
        return "", []
    return str(found.sql or "").partition(" AS ")[2], [(n, t) for n, t, _ in found.columns]


def refresh_history_views(
    con: duckdb.DuckDBPyConnection, parquet_root: Path, kinds: Mapping[str, TableKind]
) -> list[str]:
    """(Re)create the history view of every table with Parquet files; drop those whose files are gone. `kinds`:
    the output directory's (`tasks.output.manifest.output_kinds`: built-in and declared)."""
    made = []
    catalog = CatalogSnapshot(con)
    probes = duckdb.connect()
    try:
        for table, kind in sorted(kinds.items()):
            table_dir = parquet_root.resolve() / table
            view = table + HISTORY_SUFFIX
            if any(table_dir.glob("*/*.parquet")):
                # A view the same as harvest would make it now (over the same files, with the same columns) is
                # kept, and its comments with it: replacing a view drops them, and commenting a view's columns
                # binds it again each time (1.6 s for the demo's 30 views on every load).
                wanted = _probe(probes, table, kind, table_dir)
                if wanted != _stored(catalog, view):
                    con.execute(history_view_sql(table, kind, table_dir))
                    catalog.made(view, wanted[1], sql=f"CREATE VIEW {view} AS {wanted[0]}")
                _describe(con, table, kind, catalog)
                made.append(view)
            elif catalog.get(view) is not None:
                con.execute(f"DROP VIEW IF EXISTS {quote_ident(view)}")
                catalog.dropped(view)
    finally:
        probes.close()
    return made


def follow_moved_views(
    con: duckdb.DuckDBPyConnection, parquet_root: Path, read_kinds: Callable[[], Mapping[str, TableKind]]
) -> list[str]:
    """On a read-only connection: shadow each stored history view that reads another directory's Parquet (the
    output directory was moved or copied) by a temporary view over the Parquet here; returns their names.

    The table kinds are read only once a view has moved: reading them imports the catalog, which would make
    every `harvest sql` on a directory that never moved a second slower."""
    stored = con.execute(
        "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal AND NOT temporary "
        "AND database_name = current_database() AND schema_name = 'main'"
    ).fetchall()
    followed = []
    kinds: Mapping[str, TableKind] | None = None
    for name, sql in stored:
        table = str(name).removesuffix(HISTORY_SUFFIX)
        table_dir = parquet_root.resolve() / table
        if not str(name).endswith(HISTORY_SUFFIX) or _files(table_dir) in str(sql):
            continue
        kinds = read_kinds() if kinds is None else kinds
        if table not in kinds or not any(table_dir.glob("*/*.parquet")):
            continue
        con.execute(history_view_sql(table, kinds[table], table_dir, temporary=True))
        followed.append(str(name))
    return followed
