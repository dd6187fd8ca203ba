"""The machine's own faults: a write of the run that failed for a local reason (no space, a quota, a read-only
filesystem, a permission).

Such a fault is not the service's and not the query's, and it is over once space is freed. So it stops the run
like an interrupt (`RunContext.machine_fault`: nothing more is paid, what is in flight lands if it can), says so
in one line, and the next `harvest run` resumes the run: each query from its last stored page, a load the fault
cut off is finished before anything is paid. The exit code is 75 (`EX_TEMPFAIL`: try again later) and the Prefect
state Crashed (the infrastructure failed, not the code).

Writers raise what their library raises: `OSError` with an errno from Python's own files, `OSError` with only a
message from pyarrow, `duckdb.IOException` with a message. `as_machine_fault` tells them apart from real errors.
"""

from __future__ import annotations

import errno
import logging
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from harvest.connectors.credits.ledger import CreditLedger

log = logging.getLogger("harvest.machine")

T = TypeVar("T")

EXIT_CODE = 75
"""sysexits' EX_TEMPFAIL: a temporary failure, the user is invited to retry."""

PAGE_ROOM = 64 * 2**10
"""What an answer is taken to need on the disk until a larger one was kept: a page of this service is a few KB
to a few hundred (its raw frame, compressed, is smaller still). Small enough that only a disk as good as full
stops a run before a write fails."""

_ERRNOS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EROFS: "the filesystem is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EFBIG: "the file is larger than this machine allows",
}
_TEXTS = (
    (re.compile(r"no space left on device", re.IGNORECASE), errno.ENOSPC),
    (re.compile(r"disk quota exceeded", re.IGNORECASE), errno.EDQUOT),
    (re.compile(r"read-only file ?system", re.IGNORECASE), errno.EROFS),
    (re.compile(r"permission denied", re.IGNORECASE), errno.EACCES),
    (re.compile(r"operation not permitted", re.IGNORECASE), errno.EPERM),
    (re.compile(r"database or disk is full", re.IGNORECASE), errno.ENOSPC),  # SQLite's (an Iceberg catalog)
)
_TEXT_ONLY = ("duckdb", "_duckdb", "pyarrow", "deltalake", "sqlite3", "sqlalchemy")
"""Libraries whose errors say a machine's fault only in their message (a lakehouse export's: Delta, SQLite)."""
_PATH_IN_TEXT = re.compile(r"""(?:file|path)\s+["']([^"']+)["']""", re.IGNORECASE)
"""Where DuckDB's and pyarrow's messages name the file they could not write."""


class MachineFault(Exception):
    """A write of the run failed for a reason of this machine; `path` is what could not be written."""

    def __init__(self, path: str, cause: str, code: int) -> None:
        super().__init__(f"cannot write {path}: {cause}")
        self.path, self.cause, self.code = path, cause, code

    @property
    def full(self) -> bool:
        return self.code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)

    def advice(self) -> str:
        return "free space there" if self.full else "make it writable"

    def __reduce__(self) -> tuple[object, ...]:
        return (MachineFault, (self.path, self.cause, self.code))


def as_machine_fault(exc: BaseException, path: Path | str | None = None) -> MachineFault | None:
    """The machine fault `exc` is (or was raised from), or None for any other error. `path`: what was being
    written, when the exception does not name it."""
    seen = exc
    for _ in range(4):  # the fault itself, or what a wrapper raised it from
        if isinstance(seen, MachineFault):
            return seen
        code = _code(seen)
        if code is not None:
            named = getattr(seen, "filename", None) or _named(str(seen))
            return MachineFault(str(named or path or "a file of the run"), _ERRNOS[code], code)
        if seen.__cause__ is None and seen.__context__ is None:
            return None
        seen = seen.__cause__ or seen.__context__  # type: ignore[assignment]
    return None


def _is_delta(kind: type) -> bool:
    """deltalake's errors come from its Rust module (`_internal`): told by their class, `DeltaError`."""
    return any(k.__name__ == "DeltaError" for k in kind.__mro__)


def _code(exc: BaseException) -> int | None:
    if isinstance(exc, OSError) and exc.errno in _ERRNOS:
        return exc.errno
    kind = type(exc)
    if isinstance(exc, OSError) or kind.__module__.startswith(_TEXT_ONLY) or _is_delta(kind):
        text = str(exc)
        for pattern, code in _TEXTS:
            if pattern.search(text):
                return code
    return None


def _named(text: str) -> str | None:
    found = _PATH_IN_TEXT.search(text)
    return found.group(1) if found else None


class FaultStop:
    """The run's first machine fault, and the stop it makes: the ledger refuses every later reservation (as at
    a Ctrl-C), so nothing more is paid, and the queries end `interrupted`, which the next `harvest run`
    resumes."""

    def __init__(self, ledger: CreditLedger | None = None) -> None:
        self.fault: MachineFault | None = None
        self.ledger = ledger

    @property
    def ledger(self) -> CreditLedger | None:
        return self._ledger

    @ledger.setter
    def ledger(self, ledger: CreditLedger | None) -> None:
        """A ledger given after the fault (the journal's first line failed before the ledger was made) is
        stopped at once: nothing is paid."""
        self._ledger = ledger
        if self.fault is not None:
            self.stop(self.fault)

    def stop(self, fault: MachineFault) -> None:
        if self.fault is None:
            self.fault = fault
            log.info("stopping: %s", fault)  # said once, at the end of the run
        if self.ledger is not None:
            self.ledger.stop("interrupted", f"{fault}; nothing more is paid")

    def caught(self, exc: BaseException, path: Path | str | None = None) -> bool:
        """Stop the run if `exc` is a machine fault; whether it was."""
        fault = as_machine_fault(exc, path)
        if fault is None:
            return False
        self.stop(fault)
        return True

    def written(self, path: Path | str, write: Callable[..., T], *args: Any) -> T | None:
        """`write(*args)`, a write of the run to `path`; None when this machine could not (the run stops)."""
        try:
            return write(*args)
        except OSError as exc:
            if not self.caught(exc, path):
                raise
            return None

    def reported(self, plain: list[Any] | None) -> None:
        """The stop a worker reported in its result (`[path, cause, code]`), if it did."""
        if plain:
            self.stop(MachineFault(*plain))


class DiskRoom:
    """Room on the output's filesystem for the answers about to be paid for, looked at before each request: a
    query pays only while the disk can keep what it pays for (`QueryPager`'s `can_keep`).

    A write that fails stops the run (`FaultStop`), and only the requests in flight then are paid again; but a
    query that starts after the disk filled would pay for its first page before any write told it so. On Dask
    each round's task has a ledger of its own, so one task's stop does not reach the others: each task still
    queued started on the full disk and paid one page it could not keep (7 at `concurrency: 4` on two workers).
    Needed: the largest answer kept so far (at least `PAGE_ROOM`) for each request that may be in flight, so
    those land when the check stops the run. One statvfs a page (microseconds)."""

    def __init__(self, where: Path, in_flight: int) -> None:
        self.where = where
        self.in_flight = max(1, in_flight)
        self.page = PAGE_ROOM

    def kept(self, size: int) -> None:
        """An answer of `size` bytes was kept: the next ones may be as large."""
        self.page = max(self.page, size)

    def check(self) -> None:
        """Raise `MachineFault` (no space) when the filesystem has less room than the answers in flight need."""
        needed = self.page * self.in_flight
        try:
            free = shutil.disk_usage(self.where).free
        except OSError:  # the filesystem does not say: its writes will
            return
        if free < needed:
            room = f"{free // 1024:,} KB free, less than the {needed // 1024:,} KB the next answers may need"
            raise MachineFault(str(self.where), f"{_ERRNOS[errno.ENOSPC]} ({room})", errno.ENOSPC)
