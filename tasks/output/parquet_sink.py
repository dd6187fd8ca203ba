"""Streams converted pages into Parquet, one file per (writer, table, run date).

Memory is bounded by one row group per table, not by the number of pages: pages are buffered only until a
row-group target (rows or bytes) is reached, then written out.

Crash safety: a file is written as ``.<name>.parquet.tmp`` and only renamed to its final ``.parquet`` name
after the footer is written and the bytes are synced, so a footer-less file never appears where DuckDB or
``pyarrow.dataset`` would read it. A run that crashes before `close` leaves only a hidden ``.tmp`` file; its
data is not lost, because every page was written to the raw store first and Parquet is rebuilt from there.

Partitioning: files go to ``date=<YYYY-MM-DD>``, the UTC date of the run's *start*, not each row's fetch
time, so all files of one run share one partition and a run that crosses midnight is still found in one place.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Self

import pyarrow as pa
import pyarrow.parquet as pq

from harvest.tasks.output.layout import KindLike, OutputLayout
from harvest.tasks.output.machine_fault import as_machine_fault

log = logging.getLogger(__name__)

ROW_GROUP_ROWS = 10_000
ROW_GROUP_BYTES = 2 * 1024 * 1024
"""The Parquet row group every landed file is written in. Every running query buffers at most one row group per
table, so memory is bounded by these times the number of queries in flight, whatever the number of pages; 10k
rows still read efficiently. (DuckDB's own row groups are a setting of the load: `tasks.database.load_settings`.)"""
ROLL_BYTES = 256 * 1024 * 1024
"""A run's part of a table is closed and a new one begun past this size on disk: files large enough that a
warehouse reads them well, small enough to copy, and a run of 10,000 queries leaves a few files per table."""
DEFAULT_COMPRESSION = "zstd"
"""Without dictionary encoding: Arrow hashed every value (the `raw` JSON included) to try a dictionary and gave
it up for wide text anyway; plain pages under zstd wrote a 20k-row group in ~60% of the time, and smaller."""


_background: tuple[int, ThreadPoolExecutor] | None = None
"""(process id, executor): a forked process (Dask workers) must start its own thread, not use its parent's."""
_background_lock = threading.Lock()


class UnreadableParquet(Exception):
    """A landed Parquet file cut short or damaged (a disk's fault, a copy stopped, a hand's edit): `load` and
    `export` cannot use it, and `harvest rebuild` lands it again from the run's raw pages (`then`: the command
    the error line goes on with, `flows.cli_errors.handled`)."""

    def __init__(self, path: Path, root: Path, detail: str) -> None:
        super().__init__(f"{path}: a landed Parquet file that cannot be read ({detail.splitlines()[0]})")
        self.then = (("rebuild", root), "lands it again from its raw pages")


def _writer_thread() -> ThreadPoolExecutor:
    """The one thread that encodes, compresses and writes row groups for every writer of the process.

    Arrow releases the GIL while it encodes and compresses, so a row group is written on the core the event
    loop does not use while the loop goes on paging; one thread keeps harvest within one extra core."""
    global _background
    with _background_lock:
        if _background is None or _background[0] != os.getpid():
            _background = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="harvest-parquet"))
        return _background[1]


def stop_writer_thread() -> None:
    """End the writer thread once no writer is open (the next writer starts a new one): its allocator caches
    go with it, before the load step needs the memory."""
    global _background
    with _background_lock:
        background, _background = _background, None
    if background is not None and background[0] == os.getpid():
        background[1].shutdown(wait=True)


def run_date(run_started: dt.datetime) -> dt.date:
    """Partition date of a run: its start in UTC (naive datetimes are refused rather than guessed)."""
    if run_started.tzinfo is None:
        raise ValueError("run_started must be timezone-aware")
    return run_started.astimezone(dt.UTC).date()


def _fsync_path(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # directories cannot be opened on every platform
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class TableWriter:
    """Writes one table's rows of one writer into a single Parquet file, a row group at a time.

    The file is opened lazily at the first non-empty write, so a writer that never sees a row leaves no file.
    """

    def __init__(
        self,
        layout: OutputLayout,
        table: str,
        schema: pa.Schema,
        run_id: str,
        run_started: dt.datetime,
        part: str,
        *,
        row_group_rows: int = ROW_GROUP_ROWS,
        row_group_bytes: int = ROW_GROUP_BYTES,
        compression: str = DEFAULT_COMPRESSION,
    ) -> None:
        if row_group_rows < 1 or row_group_bytes < 1:
            raise ValueError("row-group targets must be positive")
        self.table = table
        self.schema = schema
        self.path = layout.parquet_file(table, run_date(run_started), run_id, part)
        self.tmp_path = OutputLayout.parquet_tmp(self.path)
        self._refuse_existing()
        self.row_group_rows = row_group_rows
        self.row_group_bytes = row_group_bytes
        self.compression = compression
        self.rows = 0
        self.row_groups = 0
        self._writer: pq.ParquetWriter | None = None
        self._pending: Future[None] | None = None
        """The row group being written in the background: at most one per writer, so memory stays bounded."""
        self._buffer: list[pa.Table] = []
        self.buffered_rows = 0
        """Rows held in memory for the next row group: below `row_group_rows`, however many pages come."""
        self._buffered_bytes = 0
        self._disk_bytes = 0
        """The unfinished file's size after its last row group, as the writer thread saw it."""
        self._closed = False

    def _conform(self, data: pa.Table) -> pa.Table:
        """Pages must match the kind's schema; column order is tolerated, anything else is a converter bug."""
        if data.schema.equals(self.schema, check_metadata=True):
            return data
        try:
            return data.select(self.schema.names).cast(self.schema)
        except (KeyError, ValueError, pa.ArrowInvalid) as exc:
            msg = f"table {self.table}: page schema does not match the kind's schema: {exc}"
            raise ValueError(msg) from exc

    def write(self, data: pa.Table) -> None:
        if self._closed:
            raise ValueError(f"writer for {self.path} is closed")
        if data.num_rows == 0:
            return
        self._buffer.append(self._conform(data))
        self.buffered_rows += data.num_rows
        self._buffered_bytes += data.nbytes
        while self.buffered_rows >= self.row_group_rows or self._buffered_bytes >= self.row_group_bytes:
            self._flush_group()

    def _refuse_existing(self) -> None:
        """Never overwrite landed data: part ids must be unique within a run."""
        if self.path.exists():
            raise FileExistsError(f"{self.path} already exists; use a new part id")

    def _open(self) -> pq.ParquetWriter:
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(
                self.tmp_path, self.schema, compression=self.compression, use_dictionary=False
            )
        return self._writer

    def _flush_group(self) -> None:
        """Hand one row group of at most `row_group_rows` rows to the writer thread; the remainder stays
        buffered. The previous group of this writer must be written first (its error surfaces here)."""
        if not self.buffered_rows:
            return
        data = pa.concat_tables(self._buffer)
        n = min(self.row_group_rows, data.num_rows)
        self._wait()
        self._pending = _writer_thread().submit(self._write_group, data.slice(0, n))
        self.rows += n
        self.row_groups += 1
        rest = data.slice(n)
        self._buffer = [rest] if rest.num_rows else []
        self.buffered_rows = rest.num_rows
        self._buffered_bytes = rest.nbytes if rest.num_rows else 0

    def _write_group(self, group: pa.Table) -> None:
        try:
            self._open().write_table(group, row_group_size=group.num_rows)
            self._disk_bytes = self.tmp_path.stat().st_size
        except OSError as exc:  # pyarrow's errors do not name the file: say which one
            fault = as_machine_fault(exc, self.tmp_path)
            if fault is None:
                raise
            raise fault from None

    def _wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def on_disk(self) -> int:
        """Bytes of the unfinished file so far (the row groups already written out); read once a row group by
        the thread that wrote it, not once a page (a stat a page was 4% of a wide fan-out's paging)."""
        return self._disk_bytes if self._writer is not None else 0

    def close(self) -> Path | None:
        """Finish the file and publish it under its final name; returns it, or None if no row was written."""
        if self._closed:
            return self.path if self._writer is not None else None
        while self.buffered_rows:
            self._flush_group()
        self._wait()
        self._closed = True
        if self._writer is None:
            return None
        self._writer.close()
        _fsync_path(self.tmp_path)
        self._refuse_existing()
        os.replace(self.tmp_path, self.path)
        _fsync_path(self.path.parent)
        return self.path

    def abort(self) -> None:
        """Discard the unfinished file (the raw pages still hold the data)."""
        self._closed = True
        self._buffer, self.buffered_rows, self._buffered_bytes = [], 0, 0
        try:
            self._wait()
        except Exception as exc:  # the file is discarded anyway
            log.debug("discarding %s after a failed write: %s", self.tmp_path, exc)
        if self._writer is not None:
            try:
                self._writer.close()
            finally:
                self.tmp_path.unlink(missing_ok=True)
            self._writer = None


class MultiTableSink:
    """One `TableWriter` per table, created on first use, for one writer (a run, a query or a Dask round) of a run.

    A table's file past `roll_bytes` on disk is published and a new one begun (`<part>-<k>`): a run's one
    writer leaves a few files per table however many queries wrote into it."""

    def __init__(
        self,
        layout: OutputLayout,
        run_id: str,
        run_started: dt.datetime,
        part: str,
        *,
        compression: str = DEFAULT_COMPRESSION,
        roll_bytes: int = ROLL_BYTES,
    ) -> None:
        run_date(run_started)  # validate early, not at the first page
        self.layout = layout
        self.run_id = run_id
        self.run_started = run_started
        self.part = part
        self.compression = compression
        self.roll_bytes = roll_bytes
        self.writers: dict[str, TableWriter] = {}
        self.rolled: list[tuple[str, Path, int]] = []
        """Files published when their table rolled over to a new part."""
        self._parts: dict[str, int] = {}

    def writer(self, kind: KindLike) -> TableWriter:
        w = self.writers.get(kind.table)
        if w is None:
            n = self._parts.get(kind.table, 0)
            w = TableWriter(
                self.layout,
                kind.table,
                kind.schema,
                self.run_id,
                self.run_started,
                self.part if n == 0 else f"{self.part}-{n}",
                compression=self.compression,
            )
            self.writers[kind.table] = w
        elif not w.schema.equals(kind.schema, check_metadata=False):
            raise ValueError(f"table {kind.table}: two different schemas in one run")
        return w

    def _roll(self, table: str) -> None:
        w = self.writers.pop(table)
        path = w.close()
        self._parts[table] = self._parts.get(table, 0) + 1
        if path is not None:
            self.rolled.append((table, path, w.rows))

    def write(self, kind: KindLike, data: pa.Table) -> None:
        """Write one table's rows of a whole page."""
        self.write_page([(kind, data)])

    def write_page(self, tables: Iterable[tuple[KindLike, pa.Table]]) -> None:
        """Write all tables converted from one page."""
        self.write_slice(tables)
        self.end_page()

    def write_slice(self, tables: Iterable[tuple[KindLike, pa.Table]]) -> None:
        """Write tables converted from part of a page (a large answer's slice); `end_page` follows its last."""
        for kind, data in tables:
            self.writer(kind).write(data)

    def end_page(self) -> None:
        """A page is written whole: a table's file past `roll_bytes` rolls over only here, so no published file
        holds part of a page (a resume that lands the page again then never finds half of it landed)."""
        for table, w in list(self.writers.items()):
            if w.row_groups and w.on_disk() >= self.roll_bytes:
                self._roll(table)

    def close(self) -> list[tuple[str, Path, int]]:
        """Publish every file; returns ``(table, path, rows)`` for each table that received rows.

        Every writer is closed even if one fails, so one bad table does not cost the others their files.
        """
        out: list[tuple[str, Path, int]] = list(self.rolled)
        errors: list[BaseException] = []
        for table, w in self.writers.items():
            try:
                path = w.close()
            except Exception as exc:
                if as_machine_fault(exc, w.tmp_path) is None:  # a full disk is said once, by the run
                    log.error("closing Parquet writer for %s failed: %s", table, exc)
                errors.append(exc)
                continue
            if path is not None:
                out.append((table, path, w.rows))
        if errors:
            raise errors[0]
        return out

    def abort(self) -> None:
        for w in self.writers.values():
            w.abort()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Publish what was written even when the run failed: those rows came from valid, landed pages."""
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except Exception as close_exc:  # keep the original error; the raw pages still hold these rows
            log.error("could not publish Parquet files after a failure: %s", close_exc)
