"""The job's DuckDB file, opened only for a short write (open, load, close).

DuckDB allows one writing process per file, and users keep the database open in a notebook or the CLI. A lock
conflict becomes `DatabaseBusy` with instructions: nothing is lost, because a run's data is already durable in
raw pages and Parquet, and loading is idempotent, so rerunning the load later gives the same tables.
"""

from __future__ import annotations

import glob
import logging
import random
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import orjson

from harvest.tasks.database.load_settings import memory_limit, row_group_rows, storage_version
from harvest.tasks.database.storage_format import attach


class DamagedDatabase(RuntimeError):
    """The database file is not one DuckDB can open (empty, cut short, another file in its place): everything
    in it comes from the landed Parquet, so `harvest rebuild` makes it again (`then`, `flows.cli_errors`)."""

    def __init__(self, db_path: Path) -> None:
        super().__init__(f"{db_path} is not a DuckDB database file (empty, cut short or overwritten)")
        self.then = (("rebuild", db_path.parent), "makes it again from the landed pages")


class DatabaseBusy(RuntimeError):
    """The database file is locked by another process; the landed data is safe and the load can be rerun."""

    def __init__(
        self,
        db_path: Path,
        data_dir: Path,
        rerun: str = "harvest load ...",
        waited: float = 0,
        holder: str = "",
    ) -> None:
        self.db_path = db_path
        self.data_dir = data_dir
        self.waited = waited
        """Seconds the load waited for the file before giving up (0: it tried once)."""
        still = f" still, after waiting {waited:g} s," if waited else ""
        held = f"{holder}; " if holder else ""
        super().__init__(
            f"{db_path} is{still} open in another process ({held}close your DuckDB session); "
            f"the data is safe in Parquet at {data_dir}; rerun `{rerun}`"
        )


class LoadOutOfMemory(DatabaseBusy):
    """The load needed more than DuckDB's memory limit: like a busy file, the data is safe and the load can be
    rerun (with a higher limit); the run is not lost for it."""

    def __init__(self, db_path: Path, data_dir: Path, rerun: str, detail: str, limit: str) -> None:
        RuntimeError.__init__(
            self,
            f"loading {db_path} needed more memory than DuckDB's limit of {limit} ({detail}); "
            f"the data is safe in Parquet at {data_dir}; rerun `HARVEST_DUCKDB_MEMORY_LIMIT=512MB {rerun}`",
        )
        self.db_path, self.data_dir = db_path, data_dir


ALIAS = "harvest"
"""The name the database file is attached under in a write connection (`current_database()` there)."""


log = logging.getLogger(__name__)

FIRST_PAUSE = 0.02
"""Seconds before the second try at a held file; each pause doubles up to `LONGEST_PAUSE`."""
LONGEST_PAUSE = 0.1
"""The longest pause between tries: a poller that queries back to back frees the file for a few milliseconds
between its queries, and a try costs ~1 ms (~600 in a minute's wait). Each pause is drawn between half and all
of it, so the tries do not fall into step with a poller's period."""


def is_lock_error(exc: BaseException) -> bool:
    return "lock" in str(exc).lower()


DAMAGE = ("not a valid DuckDB database file", "Could not read enough bytes from file")
"""What DuckDB says opening a file that is no database (empty, another file's bytes) or one cut short (a copy
or a disk that stopped): the header's magic is checked first, the blocks it names are read next."""


def is_damage(exc: BaseException) -> bool:
    return any(said in str(exc) for said in DAMAGE)


def database_damage(path: Path) -> DamagedDatabase | None:
    """Why the database file cannot be read, or None when it opens (or another process holds it, which a
    read-only open cannot tell from a sound file): what says a run is loaded must not trust a manifest then.
    Opened read-only, so nothing is written, not even a log."""
    try:
        duckdb.connect(str(path), read_only=True).close()
    except duckdb.Error as exc:
        return DamagedDatabase(path) if is_damage(exc) else None
    return None


def lock_holder(exc: BaseException) -> str:
    """Who holds the file, as DuckDB names it ("Conflicting lock is held in /usr/bin/python3 (PID 123)"), or ""."""
    found = re.search(r"lock is held in (.+?) \(PID (\d+)\)", str(exc))
    return f"{found[1]}, PID {found[2]}" if found else ""


def _attach_waiting(con: duckdb.DuckDBPyConnection, path: Path, rows: int, wait: float) -> None:
    """ATTACH the file, trying again while another process holds its lock, for up to `wait` seconds; said once.
    A signal's interrupt (a second Ctrl-C: `LoadInterrupted`) ends a pause at once."""
    deadline = time.monotonic() + wait
    pause = FIRST_PAUSE
    said = False
    while True:
        try:
            attach(con, path, ALIAS, rows, storage_version())
            return
        except duckdb.IOException as exc:
            left = deadline - time.monotonic()
            if not is_lock_error(exc) or left <= 0:
                raise
            if not said:
                holder = lock_holder(exc)
                log.warning(
                    "%s is open in another process%s; waiting up to %g s for it to close it "
                    "(HARVEST_DUCKDB_LOCK_WAIT_SECONDS)",
                    path, f" ({holder})" if holder else "", wait,
                )  # fmt: skip
                said = True
            time.sleep(min(left, pause * random.uniform(0.5, 1)))
            pause = min(pause * 2, LONGEST_PAUSE)


@contextmanager
def write_connection(
    db_path: Path | str,
    *,
    data_dir: Path | None = None,
    rerun: str = "harvest load ...",
    tables: int = 0,
    wait: float = 0,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open the database for a short write and always close it, turning a lock conflict into DatabaseBusy;
    `tables`: how many tables the write loads (DuckDB's memory cap grows with them, `load_settings.memory_limit`);
    `wait`: seconds to keep trying while another process holds the file (a load's: `load_settings.lock_wait_seconds`).

    DuckDB 2.0 reports a conflict as ``duckdb.IOException`` ("Could not set lock on file ...").
    """
    path = Path(db_path)
    rows = row_group_rows()
    path.parent.mkdir(parents=True, exist_ok=True)
    created = not path.exists()
    limit = memory_limit(tables)
    con = duckdb.connect(
        config={
            "memory_limit": limit,
            "preserve_insertion_order": False,
            "temp_directory": f"{path}.tmp",  # where DuckDB spills for a database file (the in-memory default: ./.tmp)
        },
    )
    try:
        # Attached, not opened: the row-group size and the storage format are ATTACH options (see
        # tasks.database.load_settings). The file stays an ordinary DuckDB file that DuckDB 1.2 and later open
        # (`tasks.database.storage_format`); writes made elsewhere use their own row-group size.
        _attach_waiting(con, path, rows, wait)
        con.execute(f"USE {ALIAS}")
    except duckdb.IOException as exc:
        con.close()
        if created:
            _drop_if_unreadable(path)
        if is_lock_error(exc):
            holder = lock_holder(exc) if wait else ""
            raise DatabaseBusy(path, data_dir or path.parent / "parquet", rerun, wait, holder) from exc
        if is_damage(exc):
            raise DamagedDatabase(path) from exc
        raise
    except BaseException:
        con.close()
        if created:
            _drop_if_unreadable(path)
        raise
    try:
        con.execute("SET enable_progress_bar = false")  # no bar drawn on the user's terminal mid-run
        yield con
    except duckdb.OutOfMemoryException as exc:
        detail = str(exc).splitlines()[0]
        raise LoadOutOfMemory(path, data_dir or path.parent / "parquet", rerun, detail, limit) from exc
    except BaseException:
        con.close()
        if created:
            _drop_if_unreadable(path)
        raise
    finally:
        con.close()


def _drop_if_unreadable(path: Path) -> None:
    """A database file this connection created, cut short by a full disk before DuckDB wrote its first blocks
    (the header fits, the rest does not): no DuckDB opens it, and the next run would refuse it as another
    program's file. It holds nothing (whatever it was to hold is in Parquet, loaded again by the next run), so
    it goes, with its log. A file that opens is kept as it is."""
    try:
        duckdb.connect(str(path), read_only=True).close()
    except duckdb.Error:
        for stale in (path, path.with_name(path.name + ".wal")):
            stale.unlink(missing_ok=True)


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """All-or-nothing: a load that fails half-way leaves the database as it was, so it can be rerun."""
    con.begin()
    try:
        yield
    except BaseException:
        con.rollback()
        raise
    con.commit()


def count_rows(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> int:
    """Scalar count via fetchall: DuckDB 2.0 treats a result read with fetchone() as unfinished and refuses
    further work (register, ...) on the connection until it is drained."""
    rows = con.execute(sql, params).fetchall()
    return int(rows[0][0]) if rows else 0


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


ROW_NUMBER = "file_row_number"
"""A row's place in its Parquet file, as DuckDB's reader gives it (`read_parquet(..., file_row_number = true)`)."""
NEWEST_ORDER = f"_fetched_at DESC, {ROW_NUMBER} DESC"
"""Which row of a key is its newest, everywhere a row is chosen from the Parquet (the DuckDB load, the
`_history` views, the current-rows query the end of a run prints, a lakehouse export, the exports' manifests):
the newest fetch, and of one fetch (a page that holds the key more than once) the later row. A page is written
whole to one file in the order it came (`tasks.output.parquet_sink`), so the later row of a fetch is the later
row of its file. Harvest's own reads (the load, a lakehouse export) know each file's place and use
`NEWEST_IN_FILES`, which agrees with it wherever rows of one fetch share a file."""
NEWEST_IN_FILES = f"_fetched_at DESC NULLS LAST, file_index DESC, {ROW_NUMBER} DESC"
"""`NEWEST_ORDER` where each row's file is known (`file_index`: its place in name order): of one fetch time, the
later file, then the later row, as a load in several steps keeps it (a later step replaces a fetch as new)."""


def whole_key(keys: Sequence[str], joiner: str = " AND ") -> str:
    """A SQL condition true where every key column (`keys`: as the statement names them, quoted or not) has a
    value: rows without a whole key cannot be merged, so the DuckDB tables never hold them, and whatever reads
    the current rows or their history from the Parquet leaves them out the same way."""
    return joiner.join(f"{k} IS NOT NULL" for k in keys)


def quote_literal(text: str) -> str:
    """A SQL string literal (for statements that take no parameters: ATTACH, SET, CREATE VIEW)."""
    return "'" + text.replace("'", "''") + "'"


def parquet_glob(table_dir: Path) -> str:
    """Every Parquet file of a table's date folders, as a DuckDB glob: the directory's own `[`, `*` and `?` are
    escaped (`glob.escape`, which DuckDB's glob reads alike), or an output directory named `out[x]` matched
    nothing and its runs could never be loaded."""
    return f"{glob.escape(str(table_dir))}/*/*.parquet"


def json_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def has_table(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    """Whether the database holds `table`: an optional table (e.g. `exports`) may not exist yet."""
    found = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [table]).fetchall()
    return bool(found[0][0])
