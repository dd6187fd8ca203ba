"""Append-only files written one whole record per unbuffered write: the durability primitive of harvest.

Raw pages, attempt logs and the run journal are all appended this way, so a process killed at any instant
leaves at most one torn record at the end of a file, which every reader skips and every writer repairs.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import orjson

log = logging.getLogger(__name__)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def append_record(fd: int, data: bytes, fsync: bool) -> None:
    """Append all of ``data`` or nothing: a failed write (disk full, an interrupt between partial writes) is
    cut back off, so the next record never lands behind a half-written one where readers would stop."""
    before = os.fstat(fd).st_size
    try:
        write_all(fd, data)
    except BaseException:
        os.ftruncate(fd, before)
        raise
    if fsync:  # a failed fsync leaves the complete record in place: it is still readable, just not synced
        os.fsync(fd)


def fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # not supported on every platform; the file itself is still synced
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_path(path: Path) -> None:
    """Force a file written through another handle (DuckDB's, a closed writer's) to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AppendOnlyFile:
    """An O_APPEND file descriptor written with one unbuffered write per record (see `append_record`)."""

    def __init__(self, path: Path | str, fsync: bool) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def _open(self) -> None:
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class SyncBehind:
    """Syncs a file from a thread of its own whenever it was asked to since its last sync, so the writer (the
    flow's event loop) never waits on the disk. A line asked for is on the disk within about one sync's time
    after it was written (a sync took 0.2 ms on an idle disk here, 9 ms on a busy one), and lines written
    meanwhile share that sync. A sync that fails is kept (`error`) for the writer to raise at its next line."""

    def __init__(self, fd: int, name: str) -> None:
        self.fd = fd
        self.error: OSError | None = None
        self._wanted = threading.Event()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name=f"sync {name}", daemon=True)
        self._thread.start()

    def request(self) -> None:
        self._wanted.set()

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            if self._closing:
                return
            try:
                os.fsync(self.fd)
            except OSError as exc:
                self.error = exc
                return

    def close(self) -> None:
        """Stop the thread, then sync what is left in the caller's thread (its failure raises there)."""
        self._closing = True
        self._wanted.set()
        self._thread.join()
        if self.error is not None:
            raise self.error
        os.fsync(self.fd)


class JsonLinesWriter(AppendOnlyFile):
    """One JSON object per line, each line one write; a torn last line left by a crash is ended first, so
    only that line is lost (`iter_json_lines` skips it) and the next record starts on a line of its own."""

    def __init__(self, path: Path | str, fsync: bool = False) -> None:
        super().__init__(path, fsync)
        self._open()
        self._terminate_torn_line()
        self._behind: SyncBehind | None = None

    def _terminate_torn_line(self) -> None:
        size = self.path.stat().st_size
        if size and self._fd is not None:
            with open(self.path, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    write_all(self._fd, b"\n")

    def append_json(self, obj: Any, sync: bool | str = False) -> None:
        """Append one line. `sync` forces it (and every line before it) to the disk even when the file's own
        setting does not: `True` before returning, `"behind"` from a thread right after (`SyncBehind`: the
        caller does not wait; `RunJournal`'s ended queries)."""
        if self._fd is None:
            raise ValueError(f"{self.path} is closed")
        if self._behind is not None and self._behind.error is not None:
            raise self._behind.error
        append_record(self._fd, orjson.dumps(obj) + b"\n", self.fsync or sync is True)
        if sync == "behind" and not self.fsync:
            if self._behind is None:
                self._behind = SyncBehind(self._fd, self.path.name)
            self._behind.request()

    def close(self) -> None:
        """Close, the lines asked to be synced on the disk first."""
        behind, self._behind = self._behind, None
        try:
            if behind is not None and self._fd is not None:
                behind.close()
        finally:
            super().close()


def iter_json_lines(path: Path | str) -> Iterator[dict[str, Any]]:
    """The JSON objects of a file in order; lines a crash left incomplete are skipped with a warning."""
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError:
                log.warning("%s: skipping unreadable line %d", path, number)
                continue
            if isinstance(row, dict):
                yield row
