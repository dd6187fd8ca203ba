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

from collections.abc import Mapping
from pathlib import Path

import duckdb

from connectors.catalog.child_kinds import ChildKind, TableKind
from tasks.database.connection import quote_ident, quote_literal

HISTORY_SUFFIX = "_history"


def _files(table_dir: Path) -> str:
    return quote_literal(str(table_dir / "*" / "*.parquet"))


def history_view_sql(
    table: str,
    primary_key: tuple[str, ...],
    table_dir: Path,
    *,
    temporary: bool = False,
    kind: TableKind | None = None,
) -> str:
    """A record table's view: each key's last fetch per run. A child table's (`kind` a ChildKind): the items of
    each parent's last fetch per run (that had items), so a list that shrank within a run shows its end."""
    files = _files(table_dir)
    newest = (
        f"row_number() OVER (PARTITION BY {', '.join(quote_ident(c) for c in (*primary_key, '_run_id'))} "
    )
    newest += "ORDER BY _fetched_at DESC) = 1"
    if isinstance(kind, ChildKind):
        parents = ", ".join(quote_ident(c) for c in (*kind.parent_columns, "_run_id"))
        newest = f"_fetched_at = max(_fetched_at) OVER (PARTITION BY {parents})"
    return (
        f"CREATE OR REPLACE {'TEMPORARY ' if temporary else ''}VIEW {quote_ident(table + HISTORY_SUFFIX)} AS "
        f"SELECT * FROM read_parquet({files}, hive_partitioning = true, union_by_name = true) QUALIFY {newest}"
    )


def refresh_history_views(
    con: duckdb.DuckDBPyConnection, parquet_root: Path, kinds: Mapping[str, TableKind]
) -> list[str]:
    """(Re)create the history view of every table with Parquet files; drop those whose files are gone. `kinds`:
    the output directory's (`tasks.output.manifest.output_kinds`: built-in and declared)."""
    made = []
    for table, kind in sorted(kinds.items()):
        table_dir = parquet_root.resolve() / table
        view = quote_ident(table + HISTORY_SUFFIX)
        if any(table_dir.glob("*/*.parquet")):
            con.execute(history_view_sql(table, kind.primary_key, table_dir, kind=kind))
            made.append(table + HISTORY_SUFFIX)
        else:
            con.execute(f"DROP VIEW IF EXISTS {view}")
    return made


def follow_moved_views(
    con: duckdb.DuckDBPyConnection, parquet_root: Path, kinds: Mapping[str, TableKind]
) -> list[str]:
    """On a read-only connection: shadow each stored history view that reads another directory's Parquet (the
    output directory was moved or copied) by a temporary view over the Parquet here; returns their names."""
    stored = con.execute(
        "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal AND NOT temporary "
        "AND database_name = current_database() AND schema_name = 'main'"
    ).fetchall()
    followed = []
    for name, sql in stored:
        table = str(name).removesuffix(HISTORY_SUFFIX)
        if not str(name).endswith(HISTORY_SUFFIX) or table not in kinds:
            continue
        table_dir = parquet_root.resolve() / table
        if _files(table_dir) in str(sql) or not any(table_dir.glob("*/*.parquet")):
            continue
        con.execute(
            history_view_sql(table, kinds[table].primary_key, table_dir, temporary=True, kind=kinds[table])
        )
        followed.append(str(name))
    return followed
