"""`<table>_history` views: every run's observation of every record, for analysts charting a metric over time.

The merged record tables keep only the newest fetch of each key; the Parquet tree keeps every run's. A view per
table reads that tree (one row per key per run: the run's last fetch of it, pages repeat items) so history costs
no second copy. Views name the Parquet files by absolute path (DuckDB resolves a relative one against the
reader's working directory, not the database), so `harvest load` and `harvest rebuild` write them again every
time: after moving an output directory, `harvest load` points them at the new place.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from connectors.catalog import all_kinds
from tasks.database import quote_ident

HISTORY_SUFFIX = "_history"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def history_view_sql(table: str, primary_key: tuple[str, ...], table_dir: Path) -> str:
    files = _literal(str(table_dir / "*" / "*.parquet"))
    keys = ", ".join(quote_ident(c) for c in (*primary_key, "_run_id"))
    return (
        f"CREATE OR REPLACE VIEW {quote_ident(table + HISTORY_SUFFIX)} AS "
        f"SELECT * FROM read_parquet({files}, hive_partitioning = true, union_by_name = true) "
        f"QUALIFY row_number() OVER (PARTITION BY {keys} ORDER BY _fetched_at DESC) = 1"
    )


def refresh_history_views(con: duckdb.DuckDBPyConnection, parquet_root: Path) -> list[str]:
    """(Re)create the history view of every table with Parquet files; drop those whose files are gone."""
    made = []
    for table, kind in sorted(all_kinds().items()):
        table_dir = parquet_root.resolve() / table
        view = quote_ident(table + HISTORY_SUFFIX)
        if any(table_dir.glob("*/*.parquet")):
            con.execute(history_view_sql(table, kind.primary_key, table_dir))
            made.append(table + HISTORY_SUFFIX)
        else:
            con.execute(f"DROP VIEW IF EXISTS {view}")
    return made
