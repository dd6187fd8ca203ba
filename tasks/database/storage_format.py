"""The storage format of `harvest.duckdb`: the one of the configured DuckDB release, so that the DuckDB an analyst
has (the CLI, a DBeaver driver, often 1.x) opens the file; a file in a newer format is converted at its next load.

DuckDB 2.0 writes storage version 69 unless told otherwise, and DuckDB 1.x refuses it ("can only read versions
between 64 and 68"). The format is an ATTACH option (`STORAGE_VERSION`, `tasks.database.load_settings.storage_version`);
an existing file keeps its own format whoever writes to it later, and DuckDB refuses to lower it in place. So a
file an earlier harvest wrote in 2.0's format is copied into a new file of the configured format (`COPY FROM
DATABASE`: tables, keys, comments, views and the columns' compression come along), its rows counted on both
sides, and moved over the old one while the old one is still held, so no other writer slips in between.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import duckdb

from harvest.tasks.output.append_file import fsync_dir, fsync_path

log = logging.getLogger(__name__)

ZSTD_SINCE = (1, 2, 0)
"""The first storage format in which a column may be stored with zstd (`USING COMPRESSION zstd`)."""

_LOWERED = "cannot be lowered"
_FROM, _TO = "harvest_convert_from", "harvest_convert_to"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def attach(con: duckdb.DuckDBPyConnection, path: Path, alias: str, rows: int, version: str) -> None:
    """ATTACH the job's file as `alias`, new files in `version`'s format; a file in a newer one is converted
    first (once: the converted file keeps the format). A lock conflict raises as DuckDB raises it."""
    sql = f"ATTACH {_literal(str(path))} AS {alias} (ROW_GROUP_SIZE {rows}, STORAGE_VERSION {_literal(version)})"
    try:
        con.execute(sql)
    except duckdb.InvalidInputException as exc:
        if _LOWERED not in str(exc):
            raise
        convert(con, path, rows, version)
        con.execute(sql)


def file_format(con: duckdb.DuckDBPyConnection, alias: str) -> str:
    """The attached file's storage format as DuckDB names it: the first release that writes it (`v1.2.0+`)."""
    rows = con.execute(
        "SELECT tags['storage_version'] FROM duckdb_databases() WHERE database_name = ?", [alias]
    ).fetchall()
    return str(rows[0][0] or "") if rows else ""


def release(tag: str) -> tuple[int, ...]:
    """`v1.2.0+` -> (1, 2, 0); () when it names no release."""
    found = re.match(r"v(\d+)\.(\d+)\.(\d+)", tag)
    return tuple(int(n) for n in found.groups()) if found else ()


def zstd_allowed(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the current database's format stores a column with zstd (v1.0.0's does not)."""
    found = release(file_format(con, str(con.execute("SELECT current_database()").fetchall()[0][0])))
    return not found or found >= ZSTD_SINCE


def convert(con: duckdb.DuckDBPyConnection, path: Path, rows: int, version: str) -> None:
    """Copy the file into `version`'s format and move the copy over it; the old file is held (attached for
    writing) until the copy is in place, and left as it was if anything fails."""
    fresh = path.with_name(f".{path.name}.convert")
    for leftover in (fresh, Path(f"{fresh}.wal")):
        leftover.unlink(missing_ok=True)
    con.execute(f"ATTACH {_literal(str(path))} AS {_FROM}")  # writable: its lock keeps other writers out
    try:
        con.execute(f"CHECKPOINT {_FROM}")  # its log folded in: no `.wal` is left to replay onto the copy
        before = file_format(con, _FROM)
        con.execute(
            f"ATTACH {_literal(str(fresh))} AS {_TO} (ROW_GROUP_SIZE {rows}, STORAGE_VERSION {_literal(version)})"
        )
        try:
            con.execute(f"COPY FROM DATABASE {_FROM} TO {_TO}")
            _same_rows(con)
        finally:
            con.execute(f"DETACH {_TO}")
        fsync_path(fresh)
        os.replace(fresh, path)
        fsync_dir(path.parent)
    except BaseException:
        fresh.unlink(missing_ok=True)
        raise
    finally:
        con.execute(f"DETACH {_FROM}")
    log.warning(
        "%s was in DuckDB's %s storage format, which DuckDB 1.x cannot open: converted to %s's "
        "(HARVEST_DUCKDB_STORAGE_VERSION; every table, view and row kept)",
        path,
        before,
        version,
    )


def _same_rows(con: duckdb.DuckDBPyConnection) -> None:
    """Every table of the copy holds as many rows as the original's, or the conversion stops."""
    tables = con.execute(
        "SELECT schema_name, table_name FROM duckdb_tables() WHERE database_name = ?", [_FROM]
    ).fetchall()
    for schema, table in tables:
        name = f"{_ident(schema)}.{_ident(table)}"
        counts = [con.execute(f"SELECT count(*) FROM {db}.{name}").fetchall()[0][0] for db in (_FROM, _TO)]
        if counts[0] != counts[1]:
            raise RuntimeError(
                f"converting the DuckDB file: table {schema}.{table} has {counts[0]} rows, its copy {counts[1]}; "
                "the file was left as it was"
            )
