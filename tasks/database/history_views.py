"""`<table>_history` views: every run's observation of every record, for analysts charting a metric over time.

The merged record tables keep only the newest fetch of each key; the Parquet tree keeps every run's. A view per
table reads that tree (one row per key per run: the run's last fetch of it, pages repeat items) so history costs
no second copy. Views name the Parquet files by absolute path (DuckDB resolves a relative one against the
reader's working directory, not the database), so `harvest load` and `harvest rebuild` write them again every
time: after moving an output directory, `harvest load` points them at the new place. Until then `harvest sql`
(read-only, it cannot rewrite them) shadows a view that points elsewhere with a temporary one over the Parquet
where the database is now (`follow_moved_views`). Whether a stored view still says what harvest would make now
is read from the footers of the files added since its last check (`tasks.database.view_checks`), not from every
night's again.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path

import duckdb

from harvest.connectors.catalog.child_kinds import ChildKind, TableKind
from harvest.tasks.database.catalog_snapshot import CatalogSnapshot, Relation
from harvest.tasks.database.column_comments import column_comment, describe_table
from harvest.tasks.database.connection import (
    NEWEST_ORDER,
    ROW_NUMBER,
    parquet_glob,
    quote_ident,
    quote_literal,
    whole_key,
)
from harvest.tasks.database.step_files import one_schema
from harvest.tasks.database.view_checks import Checked, listing, read_checked, write_checked
from harvest.tasks.output.parquet_sink import UnreadableParquet

HISTORY_SUFFIX = "_history"
_DATE_FOLDER = re.compile(r"date=\d{4}-\d{2}-\d{2}")
"""The folder each run's Parquet lands in (`OutputLayout`): where every new file's folder is one, the footers
alone tell whether the files read alike (a folder named otherwise makes the `date` column another type)."""
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
    return quote_literal(parquet_glob(table_dir))


def _has_parquet(table_dir: Path) -> bool:
    """Whether the table has a Parquet file yet (the first one found ends the look)."""
    try:
        folders = [e.path for e in os.scandir(table_dir) if e.is_dir()]
    except FileNotFoundError:
        return False
    return any(f.endswith(".parquet") for folder in folders for f in os.listdir(folder))


def _reading(table_dir: Path, alias: str = "") -> str:
    return f"read_parquet({_files(table_dir)}, hive_partitioning = true, union_by_name = true)" + (
        f" AS {alias}" if alias else ""
    )


def _children_of_newest_fetch(kind: ChildKind, table_dir: Path) -> str:
    """The items of each parent's newest fetch per run, that fetch read from the parent's Parquet, as the child
    table keeps the items of the fetch its parent row holds (`record_tables.merge_children`): a run that fetched
    a parent twice, its list emptied the second time (a feed's post its thread fetched again), has no item of
    it, where the child's files alone would show the first fetch's."""
    parent = [quote_ident(f.name) for f in kind.parent_key]
    on = " AND ".join(f"c.{quote_ident(c)} = p.{k}" for c, k in zip(kind.parent_columns, parent, strict=True))
    fetches = (
        f"SELECT {', '.join(parent)}, _run_id, max(_fetched_at) AS _newest "
        f"FROM {_reading(table_dir.parent / kind.parent)} WHERE {whole_key(parent)} GROUP BY ALL"
    )
    keys = [f"c.{quote_ident(c)}" for c in kind.parent_columns]
    return (
        f"SELECT c.* FROM {_reading(table_dir, 'c')} SEMI JOIN ({fetches}) AS p "
        f"ON {on} AND c._run_id = p._run_id AND c._fetched_at = p._newest WHERE {whole_key(keys)}"
    )


def history_view_sql(
    table: str, kind: TableKind, table_dir: Path, *, temporary: bool = False, name: str = ""
) -> str:
    """A record table's view: each key's last fetch per run, the last of a page that holds it more than once
    (`connection.NEWEST_ORDER`, as the table keeps it; the row number is read with the `file_row_number`
    option, which DuckDB 1.2 has too, not as 1.3's virtual column). A child table's: the items of each parent's last
    fetch per run (`_children_of_newest_fetch`; while the parent has no Parquet, which a harvest run never
    leaves, the items of the last fetch that had some). Rows without a whole key (a child's: its parent's) are
    left out, as the tables leave them out: they cannot be told apart."""
    create = f"CREATE OR REPLACE {'TEMPORARY ' if temporary else ''}VIEW {quote_ident(name or table + HISTORY_SUFFIX)} AS "
    if isinstance(kind, ChildKind) and _has_parquet(table_dir.parent / kind.parent):
        return create + _children_of_newest_fetch(kind, table_dir)
    key = kind.parent_columns if isinstance(kind, ChildKind) else kind.primary_key
    keys = [quote_ident(c) for c in key]
    per_run = ", ".join([*keys, "_run_id"])
    if isinstance(kind, ChildKind):
        newest = f"_fetched_at = max(_fetched_at) OVER (PARTITION BY {per_run})"
        return create + f"SELECT * FROM {_reading(table_dir)} WHERE {whole_key(keys)} QUALIFY {newest}"
    newest = f"row_number() OVER (PARTITION BY {per_run} ORDER BY {NEWEST_ORDER}) = 1"
    reading = _reading(table_dir).removesuffix(")") + f", {ROW_NUMBER} = true)"
    return create + (
        f"SELECT * EXCLUDE ({ROW_NUMBER}) FROM {reading} WHERE {whole_key(keys)} QUALIFY {newest}"
    )


def empty_history_view_sql(table: str, columns: list[tuple[str, str]]) -> str:
    """The view of a record table no run has Parquet of yet (a child table whose parents' lists were all empty):
    its table's columns and `date`, as the view over Parquet would have them, and no row. No FROM: it reads no
    file and no table, so a moved directory or a retyped column leaves it answering."""
    selected = ", ".join(f"CAST(NULL AS {t}) AS {quote_ident(n)}" for n, t in [*columns, ("date", "DATE")])
    return f"CREATE OR REPLACE VIEW {quote_ident(table + HISTORY_SUFFIX)} AS SELECT {selected} WHERE false"


def _empty_fits(stored: Relation | None, columns: list[tuple[str, str]]) -> bool:
    """Whether the stored view is the empty one harvest makes for a table with these columns."""
    return (
        stored is not None
        and "read_parquet(" not in (stored.sql or "read_parquet(")
        and [(n, t) for n, t, _ in stored.columns] == [*columns, ("date", "DATE")]
    )


PROBE = "_harvest_view_probe"

Shape = tuple[str, list[tuple[str, str]]]
"""A view's definition (what follows its name, as DuckDB stores it) and its columns (name, type)."""


class _Probes:
    """An empty in-memory database, opened when first needed: opening one costs ~30 ms, and a load that finds
    no new file needs none."""

    def __init__(self) -> None:
        self._con: duckdb.DuckDBPyConnection | None = None

    def execute(self, sql: str, params: list[str] | None = None) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            self._con = duckdb.connect()
        return self._con.execute(sql, params)

    def close(self) -> None:
        if self._con is not None:
            self._con.close()


def _probe(probes: _Probes, table: str, kind: TableKind, table_dir: Path) -> Shape:
    """The view harvest would make now, made in `probes` (an empty in-memory database: its catalog lookups cost
    nothing, where the output's grow with its tables) and read back as DuckDB stored it."""
    try:
        probes.execute(history_view_sql(table, kind, table_dir, name=PROBE))
    except duckdb.InvalidInputException as exc:  # a file of the table cut short: DuckDB names it
        found = re.search(r"at end of file '([^']+)'", str(exc))
        if found is None:
            raise
        raise UnreadableParquet(
            Path(found.group(1)), table_dir.parent.parent, "no footer at its end"
        ) from None
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


def _parquet_files(table_dir: Path) -> list[str]:
    """The table's Parquet files under its folder (`date=YYYY-MM-DD/<file>.parquet`), in DuckDB's glob order.
    `os.scandir`: a year of nights is 365 folders, which `Path.glob` lists at ~0.1 ms each."""
    found = []
    try:
        folders = [e for e in os.scandir(table_dir) if e.is_dir()]
    except FileNotFoundError:
        return []
    for folder in folders:
        with os.scandir(folder.path) as entries:
            found += [
                f"{folder.name}/{e.name}" for e in entries if e.name.endswith(".parquet") and e.is_file()
            ]
    return sorted(found)


def _still_fits(
    probes: _Probes,
    table_dir: Path,
    files: list[str],
    checked: Checked | None,
    statement: str,
    stored: Shape,
) -> bool:
    """Whether the stored view is what harvest would make now, read from the new files' footers only.

    It is when harvest made it with this statement, it is still stored as it was, the files it was checked
    against are all there and first in order (the first file sets the columns' order), and every file since
    holds only columns the view has, with their types: `union_by_name` over all of them then gives the same
    columns. Anything else (a moved directory, a file removed or slipped in before, a new column) is checked by
    binding the view over every file."""
    if checked is None or checked.statement != statement or checked.definition != stored[0]:
        return False  # a view gone or replaced is stored as "" or another definition
    if listing(files[: checked.files]) != checked.listing:  # the same files, first: none gone or slipped in
        return False
    new = files[checked.files :]
    if not new:
        return True
    paths = [table_dir / f for f in new]
    if all(_DATE_FOLDER.fullmatch(f.partition("/")[0]) for f in new) and one_schema(paths):
        paths = paths[:1]  # a Dask night's file per round: one footer says them all (`step_files`)
    listed = ", ".join(quote_literal(str(p)) for p in paths)
    described = probes.execute(
        f"DESCRIBE SELECT * FROM read_parquet([{listed}], hive_partitioning = true, union_by_name = true)"
    ).fetchall()
    columns = dict(stored[1])
    return all(columns.get(str(name)) == str(type_) for name, type_, *_ in described)


def refresh_history_views(
    con: duckdb.DuckDBPyConnection, parquet_root: Path, kinds: Mapping[str, TableKind]
) -> list[str]:
    """(Re)create the history view of every record table: over its Parquet files, or with no row while it has
    none (an empty table has its view too); drop those of tables neither here nor in Parquet. `kinds`: the output
    directory's (`tasks.output.manifest.output_kinds`: built-in and declared)."""
    made = []
    catalog = CatalogSnapshot(con)
    known = read_checked(con)
    changed: list[tuple[str, Checked]] = []
    gone: list[str] = []
    probes = _Probes()
    try:
        for table, kind in sorted(kinds.items()):
            table_dir = parquet_root.resolve() / table
            view = table + HISTORY_SUFFIX
            files = _parquet_files(table_dir)
            if files:
                # A view the same as harvest would make it now (over the same files, with the same columns) is
                # kept, and its comments with it: replacing a view drops them, and commenting a view's columns
                # binds it again each time (1.6 s for the demo's 30 views on every load).
                statement = history_view_sql(table, kind, table_dir)
                stored = _stored(catalog, view)
                if not _still_fits(probes, table_dir, files, known.get(view), statement, stored):
                    wanted = _probe(probes, table, kind, table_dir)
                    if wanted != stored:
                        con.execute(statement)
                        catalog.made(view, wanted[1], sql=f"CREATE VIEW {view} AS {wanted[0]}")
                    stored = wanted
                now = Checked.of(statement, stored[0], files)
                if known.get(view) != now:
                    changed.append((view, now))
                _describe(con, table, kind, catalog)
                made.append(view)
            else:
                if view in known:
                    gone.append(view)
                record = catalog.get(table)
                if record is not None and record.sql is None:  # a table, still empty: a view with no row
                    columns = [(n, t) for n, t, _ in record.columns]
                    if not _empty_fits(catalog.get(view), columns):
                        empty = empty_history_view_sql(table, columns)
                        con.execute(empty)
                        catalog.made(view, [*columns, ("date", "DATE")], sql=empty)
                    _describe(con, table, kind, catalog)
                    made.append(view)
                elif catalog.get(view) is not None:
                    con.execute(f"DROP VIEW IF EXISTS {quote_ident(view)}")
                    catalog.dropped(view)
        write_checked(con, changed, gone)
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
        if "read_parquet(" not in str(sql):  # an empty table's view reads no file: nothing to follow
            continue
        kinds = read_kinds() if kinds is None else kinds
        if table not in kinds or not _has_parquet(table_dir):
            continue
        con.execute(history_view_sql(table, kinds[table], table_dir, temporary=True))
        followed.append(str(name))
    return followed
