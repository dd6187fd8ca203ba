"""The load step's DuckDB settings, from the environment, and their check before a run pays.

Apart from `tasks.database.connection` so that `harvest run`'s preflight checks them without importing DuckDB (~50 ms that
would delay Prefect's temporary server).
"""

from __future__ import annotations

import os

DEFAULT_MEMORY_LIMIT = "64MB"
"""DuckDB's memory cap for the load step of a run of a few tables; beyond it DuckDB spills to disk, so loading a
run's rows does not make the process grow with the size of the run. Raise it (HARVEST_DUCKDB_MEMORY_LIMIT) for
faster loads of huge runs."""

MEMORY_PER_TABLE_KB = 512
"""Added to the default cap for each table a run loads beyond `TABLES_IN_DEFAULT`. A table's primary-key index
stays in DuckDB's buffer pool once the load has touched it, and an index cannot spill: the demo's 161 tables,
loaded a second time into the same file, needed more than 64 MB (the load refused, the night unloaded) and loaded
at 80 MB. Half a megabyte a table keeps a margin; a run of a few tables loads under the 64 MB default."""
TABLES_IN_DEFAULT = 32
"""Tables the default cap is meant for: a run of up to 32 tables loads under 64 MB, the cap docs/output.md names."""

DEFAULT_ROW_GROUP_ROWS = 16_384
"""Rows per row group of what the load writes (DuckDB's default: 122,880). DuckDB builds a row group in memory
before compressing it, and 122,880 rows of ~1 KB of `raw` JSON each are ~115 MB: under the 64 MB cap every group
spilled to disk and was read back. The bench job's 200k rows inserted in 1.47 s with the default and in 0.65 s
with 16,384-row groups, in less memory; records five times as wide in 3.3 s and 1.9 s. The file grew ~15%
(smaller groups compress a little less); 8,192 and 4,096 were no faster. Raise it with the memory cap
(HARVEST_DUCKDB_ROW_GROUP_ROWS)."""

VECTOR_ROWS = 2048
"""DuckDB's vector size: a row-group size must be a multiple of it."""


DEFAULT_STORAGE_VERSION = "v1.2.0"
"""The DuckDB release whose storage format `harvest.duckdb` is written in (HARVEST_DUCKDB_STORAGE_VERSION). DuckDB 2.0
writes storage version 69 by default, which no DuckDB 1.x opens ("can only read versions between 64 and 68"), and
analysts' CLIs and DBeaver drivers are often 1.x. v1.2.0's format (65) opens in DuckDB 1.2.0 and every later 1.x and
2.x, and it is the oldest that stores the `raw` column with zstd: in v1.0.0's (64, every 1.x) the same 200k-row load
took 1.7x the space and needed more than the 64 MB memory cap. `v1.0.0` reaches DuckDB 1.0 and 1.1 at that cost;
`latest` writes the newest format of the DuckDB harvest runs."""


DEFAULT_LOCK_WAIT_SECONDS = 60.0
"""How long a load waits for another process to let go of `harvest.duckdb` (HARVEST_DUCKDB_LOCK_WAIT_SECONDS)
before leaving the run in Parquet. A dashboard or a BI tool that polls the file (opens it, queries, closes it,
every few seconds) holds it for a moment at a time, and a load that tried once met it often enough that a nightly
job stayed unloaded night after night; a minute outlasts any such query and costs a night nothing (its pages are
paid and landed). 0 tries once, as harvest did before."""


class LoadSettingError(ValueError):
    """An environment variable for the load has a value DuckDB cannot use: said before a run pays."""


def row_group_rows() -> int:
    text = os.environ.get("HARVEST_DUCKDB_ROW_GROUP_ROWS", str(DEFAULT_ROW_GROUP_ROWS))
    rows = int(text) if text.strip().isdigit() else 0
    if rows <= 0 or rows % VECTOR_ROWS:
        raise LoadSettingError(
            f"HARVEST_DUCKDB_ROW_GROUP_ROWS={text!r}: allowed: a whole number of rows that is a positive multiple "
            f"of {VECTOR_ROWS} (DuckDB's vector size), e.g. {DEFAULT_ROW_GROUP_ROWS} (the default) or 122880"
        )
    return rows


def memory_limit(tables: int = 0) -> str:
    """The cap for a load of `tables` tables: the user's (HARVEST_DUCKDB_MEMORY_LIMIT) as given, else the
    default grown by `MEMORY_PER_TABLE_KB` a table."""
    if "HARVEST_DUCKDB_MEMORY_LIMIT" in os.environ:
        return os.environ["HARVEST_DUCKDB_MEMORY_LIMIT"]
    beyond = tables - TABLES_IN_DEFAULT
    if beyond <= 0:
        return DEFAULT_MEMORY_LIMIT
    return f"{int(DEFAULT_MEMORY_LIMIT.removesuffix('MB')) * 1000 + beyond * MEMORY_PER_TABLE_KB}KB"  # DuckDB: 1 KB = 1000 B


def storage_version() -> str:
    """The storage version `harvest.duckdb` is written in: a DuckDB release (`v1.2.0`) or `latest`."""
    return os.environ.get("HARVEST_DUCKDB_STORAGE_VERSION", DEFAULT_STORAGE_VERSION).strip()


def lock_wait_seconds() -> float:
    """Seconds a load waits for the file's lock; a value that is not a finite number of seconds >= 0 is refused
    (a typo made 0 would be today's give-up-at-once behaviour without a word)."""
    text = os.environ.get("HARVEST_DUCKDB_LOCK_WAIT_SECONDS", "").strip()
    if not text:
        return DEFAULT_LOCK_WAIT_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise LoadSettingError(
            f"HARVEST_DUCKDB_LOCK_WAIT_SECONDS={text!r}: allowed: a number of seconds >= 0, e.g. "
            f"{DEFAULT_LOCK_WAIT_SECONDS:g} (the default) or 0 (try once, do not wait)"
        )
    return seconds


def check_load_settings() -> None:
    """Raise LoadSettingError if the load's DuckDB settings from the environment are unusable: found at the
    load step, that would be after the run paid for its pages."""
    row_group_rows()
    lock_wait_seconds()
    if "HARVEST_DUCKDB_STORAGE_VERSION" in os.environ:
        check_storage_version(storage_version())
    if "HARVEST_DUCKDB_MEMORY_LIMIT" not in os.environ:
        return  # the default is good, and DuckDB's import (~50 ms) would delay Prefect's temporary server
    limit = memory_limit()
    import duckdb

    try:
        duckdb.connect(config={"memory_limit": limit}).close()
    except duckdb.Error as exc:
        detail = str(exc).splitlines()[0]
        raise LoadSettingError(
            f"HARVEST_DUCKDB_MEMORY_LIMIT={limit!r}: {detail}; allowed: a size such as 64MB (the "
            "default), 512MB or 2GB"
        ) from None


def check_storage_version(version: str) -> None:
    """A storage version this DuckDB can write, or LoadSettingError naming what is allowed."""
    import duckdb

    con = duckdb.connect()
    try:
        con.execute(f"ATTACH ':memory:' AS probe (STORAGE_VERSION '{version.replace(chr(39), '')}')")
    except duckdb.Error:
        raise LoadSettingError(
            f"HARVEST_DUCKDB_STORAGE_VERSION={version!r}: not a DuckDB release this DuckDB "
            f"({duckdb.__version__}) can write the storage format of; allowed: a release such as "
            f"{DEFAULT_STORAGE_VERSION} (the default: DuckDB 1.2 and later open the file), v1.0.0 (every DuckDB "
            "1.x), or latest"
        ) from None
    finally:
        con.close()
